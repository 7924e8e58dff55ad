"""Eventual-checkpoint (EC) reconstruction: a pure backward scan over output records.

The input is the output log of one aggregate operator, read newest record first (as
``StreamLog.read_backward`` yields it; rows inside a record stay in forward order).
The rows have the output schema of docs/ARCHITECTURE.md §3; this module needs only
the columns ``ts seq type t_now n_open key win_start``.

Rules (paper §II.B "Constructing an EC", DESIGN.md §4). The scan starts at the last
row (or at the row given by ``at_seq``/``at_ts``, "time travel"): that row gives
``N_c = n_open``, ``t_c = t_now`` and ``t_c_ts = ts``. Walking backwards, an ``R`` for
window ``w = (key, win_start)`` marks ``w`` closed unless ``w`` was already found; a
``G_open``/``G_check`` adds ``w`` (its whole row) to the EC unless ``w`` was already
found or marked closed. The scan stops as soon as ``N_c`` windows are found;
``T = min t_w`` over the found rows (their ``t_now``), and ``N_c = 0`` gives an empty
EC with ``T = t_c`` (``T`` is the paper's symbol; in code and a run's JSON it is
``replay_after_seq``).

Both rules together say: only the *newest* row of each window id matters; the window
is in the EC exactly when that row is a G row. The vectorized scan uses that: per
chunk of records it reverses the rows, keeps the first occurrence of each id (pandas
``duplicated``; integer ids are packed losslessly into one int64 when their ranges
allow, so the test is exact, never a lossy hash), drops ids already
met in newer chunks, and counts the G rows among the rest until ``N_c`` is reached.
Chunk sizes follow the windows still missing and the ids met so far
(:data:`MIN_CHUNK_ROWS`), so the scan reads little past the extent.
:func:`reconstruct_reference` is the per-row oracle the tests hold it against.

Time travel snaps to input-tuple boundaries only through ``at_ts`` (all the rows an
input tuple produced share its ``ts``). ``at_seq`` starts the scan at exactly that
output row: the caller must pass the last row of an input tuple's output (see
``recovery.partition.boundary_seq``), or the EC describes a half-processed tuple.

The scan does no I/O, takes no clock, and never pickles.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import pandas as pd

from recovery.checkpoint import (
    OLDEST_LISTED,
    TYPE_G_CHECK,
    TYPE_G_OPEN,
    TYPE_G_OPEN_R,
    TYPE_NAMES,
    TYPE_R,
    EventualCheckpoint,
    ExtentMetrics,
    Footprint,
    NothingToRecover,
    Reconstruction,
)
from recovery.errors import ExtentError, InconsistentLogError

__all__ = [
    "EventualCheckpoint",
    "ExtentMetrics",
    "Footprint",
    "NothingToRecover",
    "Reconstruction",
    "reconstruct",
    "reconstruct_reference",
]

REQUIRED_COLUMNS = ("ts", "seq", "type", "t_now", "n_open", "key", "win_start")

#: A chunk holds at least this many rows, at least as many as windows still missing
#: (each needs a row), and at least half the ids met so far (bounds the rehashing of
#: those ids). Decoding a log record costs far more than hashing an id, so chunks
#: stay small enough not to read much past the extent.
MIN_CHUNK_ROWS = 1 << 12


def _check_schema(schema: pa.Schema) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        raise InconsistentLogError(
            f"output records lack the column(s) {', '.join(missing)} that EC "
            f"reconstruction needs (schema: {', '.join(schema.names)})"
        )


def _clip(batch: pa.RecordBatch, at_seq: int | None, at_ts: int | None) -> pa.RecordBatch:
    """Drop the rows newer than the time-travel position (rows are in forward order)."""
    if at_seq is None and at_ts is None:
        return batch
    n = batch.num_rows
    keep = n
    if at_seq is not None:
        seq = batch.column("seq").to_numpy()
        keep = min(keep, int(np.searchsorted(seq, at_seq, side="right")))
    if at_ts is not None:
        ts = batch.column("ts").to_numpy()
        keep = min(keep, int(np.searchsorted(ts, at_ts, side="right")))
    return batch if keep == n else batch.slice(0, keep)


class _OrderCheck:
    """Loud check that batches arrive newest first and rows ascend inside a batch."""

    def __init__(self) -> None:
        self.prev_first: int | None = None
        self.oldest_seq: int | None = None

    def see(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        seq = batch.column("seq").to_numpy()
        first, last = int(seq[0]), int(seq[-1])
        if last < first or (self.prev_first is not None and last >= self.prev_first):
            raise InconsistentLogError(
                f"output records are not newest-first with ascending rows: a record "
                f"spanning seq {first}..{last} follows one starting at seq {self.prev_first}"
            )
        self.prev_first = first
        self.oldest_seq = first


def _start(
    it: Iterator[pa.RecordBatch],
    at_seq: int | None,
    at_ts: int | None,
    order: _OrderCheck,
    counters: list[int],
) -> tuple[pa.RecordBatch | None, pa.Schema | None]:
    """Advance to the first batch with a row at or before the position."""
    schema: pa.Schema | None = None
    for raw in it:
        counters[0] += 1
        counters[1] += raw.get_total_buffer_size()
        if schema is None:
            schema = raw.schema
            _check_schema(schema)
        order.see(raw)
        batch = _clip(raw, at_seq, at_ts)
        if batch.num_rows:
            return batch, schema
    return None, schema


def _nothing(
    schema: pa.Schema | None, order: _OrderCheck, at_seq: int | None, at_ts: int | None
) -> NothingToRecover:
    if order.oldest_seq is not None and order.oldest_seq > 0:
        raise ExtentError(
            f"the output log starts at seq {order.oldest_seq} (trimmed), and holds no row "
            f"at or before the requested position (at_seq={at_seq}, at_ts={at_ts})"
        )
    if order.oldest_seq is None:
        return NothingToRecover("the output log holds no output row", schema)
    return NothingToRecover(
        f"no output row at or before at_seq={at_seq}, at_ts={at_ts}: "
        "the operator had not emitted anything then",
        schema,
    )


def footprints_of(table: pa.Table, t_c: int) -> tuple[Footprint, ...]:
    keys = table.column("key").to_pylist()
    starts = table.column("win_start").to_pylist()
    types = table.column("type").to_pylist()
    t_ws = table.column("t_now").to_pylist()
    seqs = table.column("seq").to_pylist()
    return tuple(
        Footprint(k, s, TYPE_NAMES.get(ty, str(ty)), t, q, t_c - t)
        for k, s, ty, t, q in zip(keys, starts, types, t_ws, seqs, strict=True)
    )


def _finish(
    first: pa.RecordBatch,
    schema: pa.Schema,
    found: pa.Table,
    oldest_seq: int,
    counters: list[int],
    closed: int,
    *,
    sort: bool = True,
) -> EventualCheckpoint:
    last = first.num_rows - 1
    n_c = int(first.column("n_open")[last].as_py())
    t_c = int(first.column("t_now")[last].as_py())
    t_c_ts = int(first.column("ts")[last].as_py())
    last_out_seq = int(first.column("seq")[last].as_py())
    if sort:
        found = found.take(pc.sort_indices(found, [("seq", "ascending")]))
    if found.num_rows:
        replay_after_seq = int(pc.min(found.column("t_now")).as_py())
        records = last_out_seq - oldest_seq + 1
    else:
        replay_after_seq = t_c
        records = 1
    types = found.column("type").to_numpy()
    extent = ExtentMetrics(
        records=records,
        batches=counters[0],
        bytes=counters[1],
        windows_found=found.num_rows,
        g_open_found=int(np.count_nonzero(types == TYPE_G_OPEN)),
        g_check_found=int(np.count_nonzero(types == TYPE_G_CHECK)),
        closed_skipped=closed,
        replay_length=t_c - replay_after_seq,
        oldest=footprints_of(found.slice(0, OLDEST_LISTED), t_c),
    )
    return EventualCheckpoint(found, n_c, t_c, t_c_ts, replay_after_seq, last_out_seq, extent)


def _n_c_of(first: pa.RecordBatch) -> int:
    n_c = first.column("n_open")[first.num_rows - 1].as_py()
    if n_c is None or n_c < 0:
        raise InconsistentLogError(f"the last output row has n_open={n_c}")
    return int(n_c)


def _check_chunk_order(seq: np.ndarray[Any, Any], newer_first_seq: int | None) -> None:
    """Rows ascend inside a chunk, and the chunk is older than the one scanned before."""
    if seq.size > 1 and not bool(np.all(seq[1:] > seq[:-1])):
        row = int(np.flatnonzero(seq[1:] <= seq[:-1])[0])
        raise InconsistentLogError(
            f"output records are not newest-first with ascending rows: seq {int(seq[row + 1])} "
            f"follows seq {int(seq[row])} in the scan"
        )
    if newer_first_seq is not None and seq.size and int(seq[-1]) >= newer_first_seq:
        raise InconsistentLogError(
            f"output records are not newest-first with ascending rows: a record ending at "
            f"seq {int(seq[-1])} follows one starting at seq {newer_first_seq}"
        )


def _check_types(ty_rev: np.ndarray[Any, Any], seq: np.ndarray[Any, Any]) -> None:
    bad = (ty_rev < TYPE_R) | (ty_rev > TYPE_G_OPEN_R)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InconsistentLogError(
            f"output row seq {int(seq[seq.size - 1 - row])} has type {int(ty_rev[row])}; "
            "expected 1 (R), 2 (G_open), 3 (G_check) or 4 (G_open+R)"
        )


def _key_values(column: pa.Array) -> np.ndarray[Any, Any]:
    """Keys as numpy: int64 zero-copy, strings as an object array."""
    return np.asarray(column.to_numpy(zero_copy_only=False))


def duplicated(key: np.ndarray[Any, Any], ws: np.ndarray[Any, Any],
               keep: Literal["first", "last"] = "first") -> pd.Series:
    """True for every (key, win_start) met earlier in the arrays (``keep="last"``:
    later), exact.

    Integer ids whose ranges fit are packed into one int64 (one hash pass instead of
    two factorizations); anything else goes through pandas' multi-column path.
    """
    import pandas as pd  # noqa: PLC0415 - not at import: the driver imports this module
    # (through the reports) before it starts its JVM, and pandas (0.24 s) can load later

    if key.dtype.kind in "iu" and key.size:
        kmin, kmax = int(key.min()), int(key.max())
        wmin, wmax = int(ws.min()), int(ws.max())
        span = wmax - wmin + 1
        if (kmax - kmin + 1) * span < (1 << 62):
            code = (key.astype(np.int64) - kmin) * span + (ws - wmin)
            return pd.Series(code, copy=False).duplicated(keep=keep)
    return pd.DataFrame({"k": key, "w": ws}, copy=False).duplicated(keep=keep)


def _pull(it: Iterator[pa.RecordBatch], pending: list[pa.RecordBatch], rows: int,
          target: int, counters: list[int]) -> tuple[int, bool]:
    """Records from ``it`` onto ``pending`` until it holds ``target`` rows (counting
    every record read in ``counters``); the rows pending and whether ``it`` ended."""
    while rows < target:
        nxt = next(it, None)
        if nxt is None:
            return rows, True
        counters[0] += 1
        counters[1] += nxt.get_total_buffer_size()
        if nxt.num_rows:
            pending.append(nxt)
            rows += nxt.num_rows
    return rows, False


def _newest_of_id(seen_key: np.ndarray[Any, Any] | None, seen_ws: np.ndarray[Any, Any],
                  key_rev: np.ndarray[Any, Any], ws_rev: np.ndarray[Any, Any]
                  ) -> np.ndarray[Any, Any]:
    """Which rows of a chunk (newest row first) are the newest row of their window id:
    not met before in the chunk nor in the newer chunks (``seen_*``)."""
    if seen_key is None:
        all_key, all_ws = key_rev, ws_rev
    else:
        all_key = np.concatenate([seen_key, key_rev])
        all_ws = np.concatenate([seen_ws, ws_rev])
    first: np.ndarray[Any, Any] = ~duplicated(all_key, all_ws).to_numpy()
    return first[all_key.size - key_rev.size :]


def _stop_at(is_new: np.ndarray[Any, Any], is_g: np.ndarray[Any, Any], missing: int
             ) -> tuple[int, np.ndarray[Any, Any]]:
    """The row (newest first) where the ``missing``-th window is found (the chunk's
    length: not in it), and which rows up to it are footprints; rows past it are
    cleared from ``is_new``."""
    new_g = is_new & is_g
    stop = int(np.searchsorted(np.cumsum(new_g), missing, side="left"))
    if stop < is_new.size:
        is_new[stop + 1 :] = False
        new_g[stop + 1 :] = False
    return stop, new_g


def reconstruct(
    batches_newest_first: Iterable[pa.RecordBatch],
    *,
    at_seq: int | None = None,
    at_ts: int | None = None,
) -> Reconstruction:
    """Rebuild the EC from output records, newest record first (vectorized).

    ``at_seq``/``at_ts`` move the start of the scan back to the last row with
    ``seq <= at_seq`` and ``ts <= at_ts`` (time travel). Stops consuming the iterator
    as soon as ``N_c`` windows are found. Raises :class:`ExtentError` if the records
    end first, :class:`InconsistentLogError` on rows that break the log's invariants.
    """
    it = iter(batches_newest_first)
    order = _OrderCheck()
    counters = [0, 0]  # batches, bytes
    first, schema = _start(it, at_seq, at_ts, order, counters)
    if first is None or schema is None:
        return _nothing(schema, order, at_seq, at_ts)
    n_c = _n_c_of(first)
    empty = pa.Table.from_batches([], schema=first.schema)
    if n_c == 0:
        return _finish(first, schema, empty, 0, counters, 0)

    seen_key: np.ndarray[Any, Any] | None = None
    seen_ws = np.empty(0, dtype=np.int64)
    found_parts: list[pa.RecordBatch] = []  # newest chunk first, rows ascending
    n_found = 0
    closed = 0
    pending: list[pa.RecordBatch] = [first]
    pending_rows = first.num_rows
    newer_first_seq: int | None = None  # first seq of the chunk scanned before
    exhausted = False
    while not exhausted:
        target = max(MIN_CHUNK_ROWS, n_c - n_found, seen_ws.size // 2)
        pending_rows, exhausted = _pull(it, pending, pending_rows, target, counters)
        if not pending_rows:
            break
        # The chunk in forward order (oldest record first) as one contiguous batch:
        # zero-copy numpy views, one fast take for the footprint rows.
        chunk = pa.concat_batches(pending[::-1])
        pending, pending_rows = [], 0
        n = chunk.num_rows
        seq = chunk.column("seq").to_numpy()
        _check_chunk_order(seq, newer_first_seq)
        newer_first_seq = int(seq[0])
        order.oldest_seq = newer_first_seq
        key_rev = _key_values(chunk.column("key"))[::-1]
        ws_rev = chunk.column("win_start").to_numpy()[::-1]
        ty_rev = chunk.column("type").to_numpy()[::-1]
        _check_types(ty_rev, seq)
        is_new = _newest_of_id(seen_key, seen_ws, key_rev, ws_rev)
        is_g = (ty_rev == TYPE_G_OPEN) | (ty_rev == TYPE_G_CHECK)  # R, G_open+R: closes
        stop, new_g = _stop_at(is_new, is_g, n_c - n_found)
        rows = np.flatnonzero(new_g)
        closed += int(np.count_nonzero(is_new & ~is_g))
        found_parts.append(chunk.take(pa.array(n - 1 - rows[::-1])))
        n_found += rows.size
        if stop < n:
            found = pa.Table.from_batches(found_parts[::-1], schema=first.schema)
            oldest = int(seq[n - 1 - stop])
            return _finish(first, schema, found, oldest, counters, closed, sort=False)
        new_key = key_rev[is_new]
        seen_key = new_key if seen_key is None else np.concatenate([seen_key, new_key])
        seen_ws = np.concatenate([seen_ws, ws_rev[is_new]])
    raise ExtentError(
        f"the output log ended (oldest row seq {order.oldest_seq}) after finding "
        f"{n_found} of the N_c={n_c} windows open at t_c="
        f"{first.column('t_now')[first.num_rows - 1].as_py()}: the log was trimmed past "
        "the extent, or it does not hold every footprint"
    )


def reconstruct_reference(
    batches_newest_first: Iterable[pa.RecordBatch],
    *,
    at_seq: int | None = None,
    at_ts: int | None = None,
) -> Reconstruction:
    """The same reconstruction, one row at a time: the oracle for :func:`reconstruct`."""
    it = iter(batches_newest_first)
    order = _OrderCheck()
    counters = [0, 0]
    first, schema = _start(it, at_seq, at_ts, order, counters)
    if first is None or schema is None:
        return _nothing(schema, order, at_seq, at_ts)
    n_c = _n_c_of(first)
    found: dict[tuple[Any, int], int] = {}
    closed: set[tuple[Any, int]] = set()
    rows: list[pa.Table] = []
    oldest_seq = 0

    def scan(batch: pa.RecordBatch) -> bool:
        nonlocal oldest_seq
        cols = {c: batch.column(c).to_pylist() for c in ("seq", "type", "key", "win_start")}
        for i in range(batch.num_rows - 1, -1, -1):
            if len(found) == n_c:
                return True
            w = (cols["key"][i], cols["win_start"][i])
            ty = cols["type"][i]
            if ty not in TYPE_NAMES:
                raise InconsistentLogError(f"output row seq {cols['seq'][i]} has type {ty}")
            if ty in (TYPE_R, TYPE_G_OPEN_R):
                if w not in found:
                    closed.add(w)
            elif w not in found and w not in closed:
                found[w] = cols["seq"][i]
                rows.append(pa.Table.from_batches([batch.slice(i, 1)]))
                oldest_seq = cols["seq"][i]
        return len(found) == n_c

    done = scan(first)
    for batch in it:
        if done:
            break
        counters[0] += 1
        counters[1] += batch.get_total_buffer_size()
        order.see(batch)
        done = scan(batch)
    if not done:
        raise ExtentError(f"the output log ended after {len(found)} of N_c={n_c} windows")
    table = pa.concat_tables(rows) if rows else pa.Table.from_batches([], schema=first.schema)
    closed_skipped = len(closed)
    return _finish(first, schema, table, oldest_seq, counters, closed_skipped)
