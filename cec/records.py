"""The record model of a CEC aggregate operator: its input tuples and its output rows.

Input (one ``pyarrow.RecordBatch`` per call of ``process``): int64 ``ts``
(microseconds, non-decreasing), int64 ``seq`` (strictly increasing), a key column
(int64 or string; its name comes from the operator config, default ``key``) and a
numeric value column (default ``value``, cast to float64). The order holds across
batches too; a tuple that breaks it raises :class:`cec.errors.InputOrderError` naming
its position ``(ts, seq)`` and the position before it.

Output (docs/ARCHITECTURE.md §3): one row per output tuple, schema
:func:`output_schema`. ``type`` is :data:`R` (result of a closed window),
:data:`G_OPEN` (footprint written when a window opens, state after the opening tuple)
or :data:`G_CHECK` (background footprint, state as of ``t_now``). ``seq`` is dense
along the output log; ``t_now`` is the input ``seq`` of the last input tuple processed
(for G rows: the footprint position ``tau2``); ``n_open`` is ``N`` right after the row.

A watermark ``W`` (``watermark(w, seq)``, docs/ARCHITECTURE.md "Watermarks") closes
windows without an input tuple: its ``R`` rows carry ``ts = W`` and ``t_now`` = the
upstream log's last seq before it, so along the output log ``(t_now, ts)`` never
decreases (lexicographically), whichever input caused a row. After a watermark ``W``
at seq ``s`` every input tuple has ``ts >= W`` and ``seq > s``
(:func:`check_after_watermark`).

One storage form holds two tuples: :data:`G_OPEN_R`, the ``G_open`` and the ``R`` of a
window that the same input tuple opened and closed (a count window of size 1), whose
``G_open`` is the ``R`` row but for three derived fields; :func:`logical_rows` writes
such rows out as their two tuples.

This module is pure: schemas, constants and input decoding, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import InputOrderError, SpecError, UsageError
from cec.window_state import AGGREGATE, LOGGED, UNTRACKED, StateField, names

#: The ``ts`` of the rows ``finish()`` emits at the end of a bounded stream (the time
#: windows still open close there): the end-of-stream watermark, after every input
#: timestamp, so the eventual checkpoint as of the last input's ``ts`` still has those
#: windows open, and only as of ``END_OF_STREAM_TS`` are they closed.
END_OF_STREAM_TS = (1 << 63) - 1

DATA = 0
"""A plain data tuple of a stateless stream (the paper's special case ``N = 0``); the
upstream logs of this project carry such tuples without a ``type`` column."""
R = 1
G_OPEN = 2
G_CHECK = 3
G_OPEN_R = 4
"""``G_open`` then ``R`` of a window opened and closed by one input tuple, in one row.

The row is the ``R`` (``seq``, ``n_open`` after the close); the ``G_open`` before it has
the same state (one tuple), ``seq - 1`` and ``n_open + 1``. Recovery reads the row as
an ``R``: scanning backwards it finds the close first, so the ``G_open`` is never a
footprint of the EC."""

TYPE_NAMES = {DATA: "data", R: "R", G_OPEN: "G_open", G_CHECK: "G_check",
              G_OPEN_R: "G_open+R"}
RESULT_TYPES = (R, G_OPEN_R)
"""The ``type`` values of rows that carry a result (``R``)."""


class Position(NamedTuple):
    """A tuple's position on its stream: ``ts`` (µs, non-decreasing), ``seq`` (increasing)."""

    ts: int
    seq: int

KeyType = Literal["int64", "string"]

#: the output log's columns: the row's own, ``key``, the window's logged state
#: (:data:`cec.window_state.LOGGED`), the aggregate's ``value``
OUTPUT_COLUMNS = ("ts", "seq", "type", "t_now", "n_open", "key", *names(LOGGED), "value")


def key_arrow_type(key_type: str) -> pa.DataType:
    """The Arrow type of the ``key`` column for a key type name."""
    if key_type == "int64":
        return pa.int64()
    if key_type == "string":
        return pa.string()
    raise SpecError(f"key type must be 'int64' or 'string', got {key_type!r}")


def output_schema(key_type: str | pa.DataType = "int64",
                  logged: tuple[StateField, ...] = LOGGED) -> pa.Schema:
    """The Arrow schema of the operator's output log (ARCHITECTURE §3): record format 1
    with the default ``logged`` (every field of :data:`~cec.window_state.LOGGED`),
    format 2 with :func:`cec.window_state.logged_for` (the function's fields only)."""
    kt = key_type if isinstance(key_type, pa.DataType) else key_arrow_type(key_type)
    i64 = pa.int64()
    return pa.schema(
        [
            pa.field("ts", i64, nullable=False),
            pa.field("seq", i64, nullable=False),
            pa.field("type", pa.int8(), nullable=False),
            pa.field("t_now", i64, nullable=False),
            pa.field("n_open", i64, nullable=False),
            pa.field("key", kt, nullable=False),
            *(pa.field(f.name, pa.from_numpy_dtype(f.dtype), nullable=False)
              for f in logged),
            pa.field("value", pa.float64(), nullable=False),
        ]
    )


def logged_of(schema: pa.Schema) -> tuple[StateField, ...]:
    """The window-state fields an output log's schema keeps in a column of their own
    (all of :data:`~cec.window_state.LOGGED` in record format 1; fewer aggregate fields
    in format 2)."""
    have = set(schema.names)
    return tuple(f for f in LOGGED if f.name in have)


def record_format(schema: pa.Schema) -> int:
    """1 if the output schema logs every aggregate field, else 2 (the function's only)."""
    return 1 if len(logged_of(schema)) == len(LOGGED) else 2


def untracked_columns(rows: pa.RecordBatch | pa.Table, session_gap: int | None = None
                      ) -> dict[str, pa.Array]:
    """The aggregate fields (:data:`~cec.window_state.AGGREGATE`) that rows of record
    format 2 (output rows, or a table of open windows) do not keep, as the columns an
    untracked field reads as (:data:`~cec.window_state.UNTRACKED`), but a session's
    ``first_ts``/``last_ts`` (``session_gap`` given): its ``win_start`` and
    ``win_end - gap``. Empty for rows of format 1."""
    have = rows.schema.names
    n = rows.num_rows
    out: dict[str, pa.Array] = {}
    for f in AGGREGATE:
        if f.name in have:
            continue
        if session_gap is not None and f.name in ("first_ts", "last_ts"):
            start, end = (np.asarray(rows.column(c)) for c in ("win_start", "win_end"))
            out[f.name] = pa.array(start if f.name == "first_ts" else end - session_gap,
                                   pa.int64())
        else:
            out[f.name] = pa.array(np.full(n, UNTRACKED[f.name], dtype=f.dtype))
    return out


def with_every_field(rows: pa.RecordBatch | pa.Table, session_gap: int | None = None
                     ) -> pa.RecordBatch | pa.Table:
    """Output rows of either record format in format 1's columns
    (:func:`output_schema`), the fields they lack filled in by
    :func:`untracked_columns`. Rows of format 1 are returned as they are."""
    add = untracked_columns(rows, session_gap)
    if not add:
        return rows
    schema = output_schema(rows.schema.field("key").type)
    cols = [add[name] if name in add else rows.column(name) for name in schema.names]
    if isinstance(rows, pa.Table):
        return pa.Table.from_arrays(cols, schema=schema)
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def logical_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with every :data:`G_OPEN_R` row written out as its ``G_open`` and ``R``.

    The result has one row per output tuple, types ``R``, ``G_open`` and ``G_check``
    only, and dense ``seq`` where the log's is. A batch without such rows is returned
    as it is.
    """
    types = batch.column("type").to_numpy()
    pair = types == G_OPEN_R
    if not pair.any():
        return batch
    idx = np.repeat(np.arange(batch.num_rows), np.where(pair, 2, 1))
    g = (np.arange(batch.num_rows) + np.cumsum(pair) - 1)[pair]  # each pair's G_open
    typ = types[idx]
    typ[g], typ[g + 1] = G_OPEN, R
    seq = batch.column("seq").to_numpy()[idx]
    seq[g] -= 1
    n_open = batch.column("n_open").to_numpy()[idx]
    n_open[g] += 1
    out = batch.take(pa.array(idx))
    fixed = {"type": pa.array(typ, pa.int8()), "seq": pa.array(seq, pa.int64()),
             "n_open": pa.array(n_open, pa.int64())}
    names = batch.schema.names
    return pa.RecordBatch.from_arrays(
        [fixed.get(name, out.column(i)) for i, name in enumerate(names)], schema=batch.schema)


def tuple_counts(types: npt.NDArray[np.int8]) -> tuple[int, int, int]:
    """Output tuples ``(R, G_open, G_check)`` in rows of these types (G_open+R: one each)."""
    if not len(types):
        return 0, 0, 0
    bins = np.bincount(types, minlength=G_OPEN_R + 1)
    pairs = int(bins[G_OPEN_R])
    return int(bins[R]) + pairs, int(bins[G_OPEN]) + pairs, int(bins[G_CHECK])


def empty_output(key_type: str) -> pa.RecordBatch:
    """An output batch with no rows."""
    schema = output_schema(key_type)
    return pa.RecordBatch.from_arrays(
        [pa.array([], type=f.type) for f in schema], schema=schema
    )


@dataclass(frozen=True)
class InputColumns:
    """One decoded input batch: numpy columns, keys as numpy (int64) or Arrow (string)."""

    ts: npt.NDArray[np.int64]
    seq: npt.NDArray[np.int64]
    keys: pa.Array
    values: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.seq)


def decode_input(
    batch: pa.RecordBatch, *, key_column: str, value_column: str, key_type: str
) -> InputColumns:
    """Check the columns of an input batch and convert them.

    Values are cast to float64 and normalised (``-0.0`` becomes ``0.0``) so that min
    and max are the same in every implementation; NaN and nulls are rejected.
    """
    names = batch.schema.names
    for col in ("ts", "seq", key_column, value_column):
        if col not in names:
            raise UsageError(f"input batch has no column {col!r} (columns: {names})")
    ts_col = batch.column("ts")
    seq_col = batch.column("seq")
    for name, col in (("ts", ts_col), ("seq", seq_col)):
        if not pa.types.is_integer(col.type):
            raise UsageError(f"input column {name!r} must be int64, got {col.type}")
        if col.null_count:
            raise UsageError(f"input column {name!r} has nulls")
    key_col = batch.column(key_column)
    val_col = batch.column(value_column)
    if key_col.null_count or val_col.null_count:
        raise UsageError(f"input columns {key_column!r}/{value_column!r} have nulls")
    try:
        keys = key_col.cast(key_arrow_type(key_type))
        values_arr = val_col.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UsageError(
            f"input key/value columns cannot be cast ({key_col.type}, {val_col.type}): {exc}"
        ) from exc
    ts = np.asarray(ts_col.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    seq = np.asarray(seq_col.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)
    values = np.asarray(values_arr.to_numpy(zero_copy_only=False), dtype=np.float64) + 0.0
    if len(values) and np.isnan(values).any():
        i = int(np.flatnonzero(np.isnan(values))[0])
        raise UsageError(f"input value is NaN at position (ts={ts[i]}, seq={seq[i]})")
    return InputColumns(ts=ts, seq=seq, keys=keys, values=values)


def check_order(
    ts: npt.NDArray[np.int64],
    seq: npt.NDArray[np.int64],
    last_ts: int | None,
    last_seq: int | None,
) -> None:
    """Raise :class:`InputOrderError` unless ``(ts, seq)`` continue the stream in order.

    ``seq`` must strictly increase and ``ts`` must not decrease, within the batch and
    after the previous position ``(last_ts, last_seq)`` (either may be None: unknown).
    """
    n = len(seq)
    if n == 0:
        return
    if last_seq is not None and seq[0] <= last_seq:
        raise InputOrderError(
            f"input tuple at position (ts={ts[0]}, seq={seq[0]}) does not follow "
            f"(ts={last_ts}, seq={last_seq}): seq must strictly increase"
        )
    if last_ts is not None and ts[0] < last_ts:
        raise InputOrderError(
            f"input tuple at position (ts={ts[0]}, seq={seq[0]}) does not follow "
            f"(ts={last_ts}, seq={last_seq}): ts must not decrease"
        )
    if n > 1:
        bad_seq = np.diff(seq) <= 0
        bad_ts = np.diff(ts) < 0
        bad = bad_seq | bad_ts
        if bad.any():
            i = int(np.flatnonzero(bad)[0]) + 1
            what = "seq must strictly increase" if bad_seq[i - 1] else "ts must not decrease"
            raise InputOrderError(
                f"input tuple at position (ts={ts[i]}, seq={seq[i]}) does not follow "
                f"(ts={ts[i - 1]}, seq={seq[i - 1]}): {what}"
            )


def check_after_watermark(
    ts: npt.NDArray[np.int64],
    seq: npt.NDArray[np.int64],
    watermark: Position | None,
) -> None:
    """Raise :class:`InputOrderError` unless the tuples follow the last watermark applied,
    ``watermark = (ts=W, seq=s)``: ``ts >= W`` (every row below ``W`` was released
    before it) and ``seq > s`` (the watermark came after the log's row ``s``)."""
    if watermark is None or len(seq) == 0:
        return
    w, s = watermark
    if ts[0] < w or seq[0] <= s:
        what = "ts below the watermark" if ts[0] < w else "seq not after the watermark's"
        raise InputOrderError(
            f"input tuple at position (ts={ts[0]}, seq={seq[0]}) does not follow the "
            f"watermark W={w} (after seq {s}): {what}"
        )


def check_watermark(w: int, seq: int, last_seq: int | None,
                    watermark: Position | None) -> None:
    """Raise :class:`InputOrderError` unless a watermark ``w`` at seq ``seq`` (the
    upstream log's last seq before it) follows the last input tuple (``last_seq``) and
    the last watermark applied."""
    before = [s for s in (last_seq, None if watermark is None else watermark.seq)
              if s is not None]
    if before and seq < max(before):
        raise InputOrderError(
            f"watermark W={w} after seq {seq} does not follow the input at seq "
            f"{max(before)}: a watermark's seq is the log's last seq before it"
        )


def check_resume(
    ts: npt.NDArray[np.int64],
    seq: npt.NDArray[np.int64],
    t_c: int | None,
    t_c_ts: int | None,
) -> None:
    """After a recovery to ``(t_c_ts, t_c)``: the first tuple after ``t_c`` must not be older.

    Replayed tuples (``seq <= t_c``) are checked by :func:`check_order` among themselves;
    this checks the seam between the replay and the new input.
    """
    if t_c is None or t_c_ts is None or len(seq) == 0:
        return
    i = int(np.searchsorted(seq, t_c, side="right"))
    if i < len(seq) and ts[i] < t_c_ts:
        raise InputOrderError(
            f"input tuple at position (ts={ts[i]}, seq={seq[i]}) does not follow the "
            f"recovered position (ts={t_c_ts}, seq={t_c})"
        )


def keys_to_python(keys: pa.Array) -> list[int] | list[str]:
    """Keys as a Python list (the reference operator works on Python objects)."""
    out: list[int] | list[str] = keys.to_pylist()
    return out


def take_keys(keys: pa.Array, idx: npt.NDArray[np.int64]) -> pa.Array:
    """Keys at the given positions (Arrow take)."""
    return pc.take(keys, pa.array(idx, type=pa.int64()))
