"""Late rows and ``allowed_lateness``: which rows are late, and the order of the others.

The semantics (``[source] allowed_lateness = L``, ``late = "error" | "drop"``), over the
source's rows in source order, before the filter, for the whole source (not per key
partition):

* row *i* is **late** when its time is more than ``L`` behind the largest time of the
  rows before it (``ts_i < max(ts_0..ts_i-1) - L``: a watermark that trails the largest
  time seen by ``L``, advanced by every row);
* ``late = "error"`` stops at the first late row (naming file, line or row, field);
  ``late = "drop"`` leaves it out of the stream and counts it in its key partition
  (after the filter: a row the filter drops is not counted);
* the stream is every other row in ``(ts, source row)`` order. With ``L = 0`` no row
  moves (a row is either in order or late).

This is exactly what a reorder buffer that releases a row once the watermark has passed
it gives, and it does not depend on how the source is cut into chunks. It is made
exact under crashes by doing all of it in the planner and the reader, which see the
same bytes every time: the planner (:class:`OrderState`) computes, per chunk, the
largest time before it (``max_before``), the rows it releases and the sequence numbers
they take; a row the watermark has not passed at the end of its chunk is **held** and
released by a later chunk, which re-reads the chunks holding it (``carry``) and finds
the same rows again (:func:`reorder`). After the last chunk a **flush** chunk (no rows
of its own) releases what is still held; a ``stream-dir`` source flushes when ``_END``
appears (held rows wait for it, or for the rows that pass them).

Sequence numbers: chunk ``c`` emits its late rows (flagged, never appended: the writer
counts them, see :mod:`cec_spark.ingest.writer`) and then its released rows in ``(ts,
row)`` order, numbered densely from ``seq_base`` to ``seq_end`` (exclusive), where
``seq_base(c)`` is the number of rows emitted before it; they increase along the stream
as the logs require, and a re-read of a chunk gives every row the same number. Without
lateness settings nothing of this runs and ``seq`` is the source row number.

Watermark: each chunk carries the W the ingest commits after it (``Chunk.wm``,
:func:`watermark`): ``max_ts - L`` over the rows through it, the threshold of its
release; the flush's is the largest time (:mod:`cec_spark.ingest.watermark`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from cec.errors import CecError
from cec_spark.source.types import SEQ, Chunk, TimeSpec

LATE = "__cec_late"  # the column that flags a late row through Spark to the writer
_NONE = np.iinfo(np.int64).min // 2  # the largest time before the first row


def late_mask(ts: np.ndarray, max_before: int | None, lateness: int) -> np.ndarray:
    """Which rows are late: more than ``lateness`` behind the largest time before them."""
    if not len(ts):
        return np.zeros(0, bool)
    start = _NONE if max_before is None else max_before
    prev = np.maximum.accumulate(np.concatenate([[start], ts[:-1]]))
    return ts < prev - lateness


def watermark(max_ts: int | None, lateness: int) -> int | None:
    """The watermark after a chunk whose rows and the rows before it reach ``max_ts``
    (None: no row yet): ``max_ts - lateness``, the threshold of its release.

    Every row released so far has a time at most the threshold; a row held has a time
    above it; a later row is late below ``max_ts - lateness`` (dropped or an error), so
    every row any log receives later has a time >= it, and a later row may have exactly
    that time: no larger value is a watermark. After the flush (nothing follows) it is
    ``max_ts``.
    """
    return None if max_ts is None else max_ts - lateness


def _max_end(ts: np.ndarray, max_before: int | None) -> int | None:
    if not len(ts):
        return max_before
    top = int(ts.max())
    return top if max_before is None else max(max_before, top)


@dataclass
class OrderState:
    """The planner's running state (a pass over the chunks of one source, in order)."""

    lateness: int
    drop: bool
    max_ts: int | None = None  # the largest time of the rows planned so far
    emitted: int = 0  # rows emitted (late rows included) by the chunks planned so far
    late: int = 0  # late rows so far
    held_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    held_chunk: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def copy(self) -> OrderState:
        return replace(self, held_ts=self.held_ts.copy(), held_chunk=self.held_chunk.copy())

    def held_min(self) -> int | None:
        """The smallest time of a row held (not released yet; None: none): a watermark
        advanced by the wall clock (``idle_close``) must not pass it."""
        return int(self.held_ts.min()) if len(self.held_ts) else None

    def first_late(self, ts: np.ndarray) -> tuple[int, int] | None:
        """The first late row of the next chunk and the largest time before it (error)."""
        late = late_mask(ts, self.max_ts, self.lateness)
        if not late.any():
            return None
        i = int(np.argmax(late))
        before = _max_end(ts[:i], self.max_ts)
        assert before is not None
        return i, before

    def plan(self, chunk: Chunk, ts: np.ndarray, chunks: list[Chunk]) -> Chunk:
        """``chunk`` (rows ``ts``, after any cut) with its ordering fields; advances."""
        late = late_mask(ts, self.max_ts, self.lateness)
        end = _max_end(ts, self.max_ts)
        threshold = _NONE if end is None else end - self.lateness
        carry = tuple(replace(chunks[int(k)], carry=())
                      for k in np.unique(self.held_chunk))
        old = self.held_ts <= threshold
        own_held = ~late & (ts > threshold)
        n = int(late.sum()) + int(old.sum()) + int((~late & ~own_held).sum())
        out = replace(chunk, max_before=self.max_ts, seq_base=self.emitted,
                      seq_end=self.emitted + n, carry=carry, wm=watermark(end, self.lateness))
        self.held_ts = np.concatenate([self.held_ts[~old], ts[own_held]])
        self.held_chunk = np.concatenate([self.held_chunk[~old],
                                          np.full(int(own_held.sum()), chunk.index)])
        self.max_ts, self.emitted = end, self.emitted + n
        self.late += int(late.sum())
        return out

    def flush(self, last: Chunk, chunks: list[Chunk]) -> Chunk | None:
        """The flush chunk that releases every held row after ``last`` (None: none held)."""
        if not len(self.held_ts):
            return None
        carry = tuple(replace(chunks[int(k)], carry=())
                      for k in np.unique(self.held_chunk))
        n = len(self.held_ts)
        out = Chunk(last.index + 1, last.fmt, last.file, last.stop, last.stop, last.next_seq,
                    0, last.first_line, last.columns, max_before=self.max_ts,
                    seq_base=self.emitted, seq_end=self.emitted + n, carry=carry, final=True,
                    wm=self.max_ts)
        self.held_ts = np.zeros(0, np.int64)
        self.held_chunk = np.zeros(0, np.int64)
        self.emitted += n
        return out


def reorder(chunk: Chunk, time: TimeSpec, read: object) -> pa.Table:
    """The rows chunk ``chunk`` emits: its late rows (``LATE`` true) in row order, then
    the rows it releases in ``(ts, row)`` order, numbered ``seq_base`` .. ``seq_end``.

    ``read(chunk) -> pa.Table`` reads one chunk's own rows (times in microseconds).
    """
    lateness = time.allowed_lateness_us
    tf = time.field
    threshold: int | None = None
    own = read(chunk)  # type: ignore[operator]
    ts = own.column(tf).to_numpy()
    late = late_mask(ts, chunk.max_before, lateness)
    end = _max_end(ts, chunk.max_before)
    if not chunk.final and end is not None:
        threshold = end - lateness
    start_held = _NONE if chunk.max_before is None else chunk.max_before - lateness
    parts, rows, times = [], [], []
    for k in chunk.carry:  # rows of earlier chunks still held at this chunk's start
        t = read(k)  # type: ignore[operator]
        kts = t.column(tf).to_numpy()
        keep = ~late_mask(kts, k.max_before, lateness) & (kts > start_held)
        if threshold is not None:
            keep &= kts <= threshold
        idx = np.flatnonzero(keep)
        parts.append(t.take(pa.array(idx)))
        rows.append(idx + k.first_seq)
        times.append(kts[idx])
    keep = ~late if threshold is None else ~late & (ts <= threshold)
    idx = np.flatnonzero(keep)
    parts.append(own.take(pa.array(idx)))
    rows.append(idx + chunk.first_seq)
    times.append(ts[idx])
    released = pa.concat_tables(parts) if parts else own.slice(0, 0)
    order = np.lexsort((np.concatenate(rows), np.concatenate(times)))
    released = released.take(pa.array(order))
    late_rows = own.filter(pa.array(late))
    table = pa.concat_tables([late_rows, released])
    if table.num_rows != chunk.seq_end - chunk.seq_base:
        raise CecError(f"{chunk.file}: chunk {chunk.index} emits {table.num_rows} rows, its "
                       f"plan said {chunk.seq_end - chunk.seq_base}: the source changed "
                       "since it was planned")
    flags = np.zeros(table.num_rows, bool)
    flags[:late_rows.num_rows] = True
    seq = np.arange(chunk.seq_base, chunk.seq_end, dtype=np.int64)
    return table.append_column(SEQ, pa.array(seq)).append_column(LATE, pa.array(flags))
