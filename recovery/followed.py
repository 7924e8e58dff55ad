"""The eventual checkpoint kept up to date as an output log is read forward (a hot
standby's task follows its partition's log with it): pure, no I/O.

:func:`recovery.ec.reconstruct` finds the EC by a backward scan after a crash. The same
rule read forward: the EC is, for every window id ``(key, win_start)``, the id's
*newest* row, kept when that row is a footprint (``G_open``/``G_check``) and dropped
when it is a close (``R``, ``G_open+R``). :class:`FollowedEC` applies it record by
record as they are committed: it keeps the rows it was given, and every so often
(when they outgrow twice the windows open) compacts them to each id's newest row,
footprints only; the cost is amortised O(rows read), the memory O(open windows + the
rows since the last compaction). ``N_c``, ``t_c``, ``t_c_ts`` and the last output
seq come from the last row read, as the backward scan takes them from the first.

:meth:`FollowedEC.checkpoint` gives the same :class:`~recovery.checkpoint.Reconstruction`
as the backward scan over the same records (``tests/recovery/test_followed.py`` holds
it against :func:`~recovery.ec.reconstruct` on the reference operator's logs, every
window kind, at every record boundary), but for the extent's ``batches``, ``bytes``
and ``closed_skipped``, which count what was read, here the records read since the
last :meth:`~FollowedEC.mark_read` (a takeover reports its catch-up). The windows
found must be exactly ``N_c``, else :class:`~recovery.errors.InconsistentLogError`.

:meth:`FollowedEC.seed` starts from a backward scan's checkpoint (a standby that
begins to follow a long log does not read it from its start).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recovery.checkpoint import (
    OLDEST_LISTED,
    TYPE_G_CHECK,
    TYPE_G_OPEN,
    EventualCheckpoint,
    ExtentMetrics,
    NothingToRecover,
    Reconstruction,
)
from recovery.ec import REQUIRED_COLUMNS, duplicated, footprints_of
from recovery.errors import InconsistentLogError

__all__ = ["FollowedEC"]

#: rows kept before a compaction is considered (then: when over twice the open windows)
COMPACT_ROWS = 1 << 16


def _newest_per_id(key: np.ndarray[Any, Any], ws: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """True for the last occurrence of each ``(key, win_start)`` (exact)."""
    return np.asarray(~duplicated(key, ws, keep="last").to_numpy(), dtype=np.bool_)


class FollowedEC:
    """An output log's eventual checkpoint, as of the last record given to :meth:`see`."""

    def __init__(self, compact_rows: int = COMPACT_ROWS) -> None:
        self.compact_rows = compact_rows
        self.schema: pa.Schema | None = None
        self._parts: list[pa.Table] = []  # rows, oldest first; ``_parts[0]`` compacted
        self._rows = 0
        self._open = 0  # rows of ``_parts[0]`` after the last compaction (footprints)
        #: the last row read: N_c, t_c, t_c_ts, its output seq (None: no row yet)
        self.n_c: int | None = None
        self.t_c = self.t_c_ts = self.last_seq = -1
        self.batches = self.bytes = 0  # read since :meth:`mark_read`

    def seed(self, rec: Reconstruction) -> None:
        """Start from a backward scan's checkpoint of the log's records up to
        ``rec.last_out_seq`` (then :meth:`see` the records after it)."""
        if isinstance(rec, NothingToRecover):
            self.schema = rec.schema
            return
        table = rec.table.select(list(rec.table.schema.names))
        self.schema = table.schema
        self._parts, self._rows, self._open = [table], table.num_rows, table.num_rows
        self.n_c, self.t_c, self.t_c_ts = rec.n_c, rec.t_c, rec.t_c_ts
        self.last_seq = rec.last_out_seq

    def see(self, batch: pa.RecordBatch) -> None:
        """The next committed record of the log (rows in ``seq`` order, after every row
        seen so far; else InconsistentLogError)."""
        n = batch.num_rows
        if self.schema is None:
            missing = [c for c in REQUIRED_COLUMNS if c not in batch.schema.names]
            if missing:
                raise InconsistentLogError(f"output records lack the columns {missing}")
            self.schema = batch.schema
        self.batches += 1
        self.bytes += batch.get_total_buffer_size()
        if n == 0:
            return
        seq = batch.column("seq").to_numpy()
        if int(seq[0]) <= self.last_seq or (n > 1 and bool(np.any(np.diff(seq) <= 0))):
            raise InconsistentLogError(
                f"output records are not in seq order: a record spanning seq "
                f"{int(seq[0])}..{int(seq[-1])} follows seq {self.last_seq}")
        self._parts.append(pa.Table.from_batches([batch]))
        self._rows += n
        self.n_c = int(batch.column("n_open")[n - 1].as_py())
        self.t_c = int(batch.column("t_now")[n - 1].as_py())
        self.t_c_ts = int(batch.column("ts")[n - 1].as_py())
        self.last_seq = int(seq[-1])
        if self._rows > max(self.compact_rows, 2 * self._open):
            self._compact()

    def mark_read(self) -> None:
        """Count the records read from here on (the extent's ``batches``/``bytes``)."""
        self.batches = self.bytes = 0

    def _compact(self) -> pa.Table:
        parts = [p.cast(self.schema) if p.schema != self.schema else p for p in self._parts]
        table = pa.concat_tables(parts) if len(parts) != 1 else parts[0]
        if len(self._parts) > 1 or self._rows != self._open:
            key = np.asarray(table.column("key").to_numpy())
            ws = table.column("win_start").to_numpy()
            ty = table.column("type").to_numpy()
            keep = _newest_per_id(key, ws) & ((ty == TYPE_G_OPEN) | (ty == TYPE_G_CHECK))
            table = table.filter(pa.array(keep))
        table = table.combine_chunks()
        self._parts, self._rows, self._open = [table], table.num_rows, table.num_rows
        return table

    def checkpoint(self) -> Reconstruction:
        """The eventual checkpoint as of the last row read (the backward scan's result)."""
        if self.n_c is None:
            return NothingToRecover("the output log holds no output row", self.schema)
        found = self._compact()
        if found.num_rows != self.n_c:
            raise InconsistentLogError(
                f"the output log's last row (seq {self.last_seq}) says N_c={self.n_c} "
                f"windows are open, but its records hold {found.num_rows} windows whose "
                "newest row is a footprint")
        if found.num_rows:
            seqs = found.column("seq").to_numpy()
            replay_after_seq = int(pc.min(found.column("t_now")).as_py())
            records = self.last_seq - int(seqs[0]) + 1
        else:
            replay_after_seq, records = self.t_c, 1
        types = found.column("type").to_numpy()
        extent = ExtentMetrics(
            records=records, batches=self.batches, bytes=self.bytes,
            windows_found=found.num_rows,
            g_open_found=int(np.count_nonzero(types == TYPE_G_OPEN)),
            g_check_found=int(np.count_nonzero(types == TYPE_G_CHECK)),
            closed_skipped=0, replay_length=self.t_c - replay_after_seq,
            oldest=footprints_of(found.slice(0, OLDEST_LISTED), self.t_c))
        return EventualCheckpoint(found, self.n_c, self.t_c, self.t_c_ts, replay_after_seq,
                                  self.last_seq, extent)
