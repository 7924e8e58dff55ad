"""Output log retention: which whole segments an operator task may delete (issue 17).

An output log grows with every result; like Kafka's retention it may drop its oldest
segments, by size (``[run].output_keep_mb``) or age (``[run].output_keep_s``), but
never what is still needed:

* **recovery**: the eventual checkpoint's extent starts at the oldest footprint of an
  open window (``next_out_seq - q``); it is taken as of ``trim_lag_s`` ago (as for
  the upstream), so that an output tail cut since (a damaged record) can still be
  rebuilt from an older extent;
* **consumers**: a consumer registered with ``cec export --consumer NAME`` acknowledged
  the output up to some seq per partition (``RUN/consumers/NAME.json``); nothing after
  it is dropped.

:func:`retention_before` is pure: the segments as ``(base_seq, bytes, mtime)`` and the
floors in, the seq to trim before out (``StreamLog.trim`` deletes whole segments
whose records all lie before it, never the one holding the committed end).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


def retention_before(segments: Sequence[tuple[int, int, float]], *,
                     keep_bytes: float | None, keep_s: float | None, now: float,
                     floors: Sequence[int | None]) -> int | None:
    """The seq to trim the log before (None: trim nothing).

    ``segments`` are the log's valid segments in order (the last is the active one).
    A floor of None means "unknown": nothing is trimmed.
    """
    if not segments or (keep_bytes is None and keep_s is None) or any(
            f is None for f in floors):
        return None
    bases = [s[0] for s in segments]
    want = bases[0]
    if keep_s is not None:  # drop segments last written before now - keep_s
        horizon = now - keep_s
        young = next((i for i, s in enumerate(segments) if s[2] >= horizon),
                     len(segments) - 1)
        want = max(want, bases[young])
    if keep_bytes is not None:  # keep the newest segments that fit in keep_bytes
        total, first = 0, len(segments) - 1
        for i in range(len(segments) - 1, -1, -1):
            total += segments[i][1]
            if total > keep_bytes and i < len(segments) - 1:
                break
            first = i
        want = max(want, bases[first])
    before = min([want, *(int(f) for f in floors if f is not None)])
    return before if before > bases[0] else None


class Lagged:
    """The newest value noted at least ``lag_s`` ago (``start`` before any is that old)."""

    def __init__(self, lag_s: float, start: int | None = None) -> None:
        self.lag_s = lag_s
        self._notes: deque[tuple[float, int]] = deque()
        self._value = start

    def note(self, now: float, value: int) -> None:
        if not self._notes or self._notes[-1][1] != value:
            self._notes.append((now, value))

    def value(self, now: float) -> int | None:
        while self._notes and self._notes[0][0] <= now - self.lag_s:
            self._value = self._notes.popleft()[1]
        return self._value
