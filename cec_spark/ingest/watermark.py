"""The watermark W the ingest commits on every upstream log (issue 37).

W is the ``wm`` of the logs' commit token (:mod:`cec.ingest_token`): every row with
``ts < W`` has been released to the logs, so no row a log receives after the commit
has a ``ts`` below W. It is non-decreasing along a log, and every log is committed with
it after each chunk, also a log that got no row (a TOKEN frame), so a quiet partition's
windows close as time moves on. Where it comes from, largest first:

* **a chunk's end** (deterministic): the planner's ``Chunk.wm``. Without lateness
  settings the source's times are non-decreasing, so it is the chunk's last time (the
  largest released, filtered rows included); with them it is ``max_ts - allowed_lateness``
  (:func:`cec_spark.source.order.watermark`); the flush after the last chunk is the
  largest time. Every writer of a job commits the same W for the same chunk, so with
  several ingest tasks the minimum over the writers feeding a log is that W: each log
  has exactly one writer (``p % writers``) and W is the plan's, not the writer's.
* **within a chunk** (at least every :data:`WM_EVERY_S` while rows flow): the time of
  the last row the writer received. The released rows reach a writer in ``seq`` order,
  which is time order, so every row before it (of any of its logs) is there, and every
  later one has a time at or above it. The commit re-commits the log's last chunk
  token (its ``chunk``, ``seq_end`` and ``late``: a re-made chunk re-reads the rows
  after it, appends only those above the log's ``last_seq`` and counts its late rows
  again from ``seq_end``) with the new ``wm``: the rows it makes durable are never
  appended again.
* **an idle source** (``[source] idle_close``, wall clock, opt-in): when no new file
  has arrived for ``idle_close``, W advances by the wall time passed since the newest
  row arrived (:class:`IdleClock`). It is committed like any W before an operator can
  see it, so recovery replays it exactly. A row that arrives later below the committed
  W is late: ``late = "drop"`` drops and counts it, ``late = "error"`` stops the run
  (:func:`below`); with ``allowed_lateness`` W never passes a row the planner holds.

Pure: no I/O; the clock is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WM_EVERY_S = 0.1  # a writer commits a new W at least this often while rows flow


def later(a: int | None, b: int | None) -> int | None:
    """The larger of two watermarks, None (no watermark) below every value."""
    if a is None:
        return b
    return a if b is None else max(a, b)


def below(ts: np.ndarray, floor: int | None) -> np.ndarray:
    """Which rows are below a log's committed W (late: only after an idle advance)."""
    if floor is None:
        return np.zeros(len(ts), bool)
    return ts < floor


@dataclass
class IdleClock:
    """When the ingest advances W on an idle stream folder (``[source] idle_close``).

    ``arrived(now, w)`` when a poll found rows (``w``: the W committed with them);
    ``watermark(now)`` is then None until ``idle_close_us`` of wall time has passed
    without rows, and afterwards ``w`` plus all the wall time passed since they
    arrived, capped at ``cap`` (the smallest time of a row the planner still holds with
    ``allowed_lateness``: W never passes a row that is yet to be released). ``now`` in
    seconds of a monotonic clock.
    """

    idle_close_us: int
    arrived_at: float | None = None
    base: int | None = None

    def arrived(self, now: float, w: int | None) -> None:
        self.arrived_at, self.base = now, later(self.base, w)

    def watermark(self, now: float, cap: int | None = None) -> int | None:
        if self.arrived_at is None or self.base is None:
            return None
        idle_us = int((now - self.arrived_at) * 1_000_000)
        if idle_us < self.idle_close_us:
            return None
        w = self.base + idle_us
        return w if cap is None else min(w, cap)
