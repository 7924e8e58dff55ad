"""Rescale on recovery, the pure part: key groups and the handoff of open windows.

A run started with key groups (``RUN/run.toml`` ``[cec] key_groups = G``) sends a key
to key group ``kg = pmod(xxhash64(key), G)`` and partition ``kg * P // G`` (Flink's key
groups: a partition owns a range of groups, so ``P -> P'`` moves whole groups).
:func:`spark_xxhash64` is exactly Spark SQL's ``xxhash64`` (seed 42): an int64 key is
the XXH64 of its 8 little-endian bytes, a string key the XXH64 of its UTF-8 bytes,
the result read as a signed int64; the ingest decides partitions in Spark, the
rescale decides where an open window goes here, and the two must agree.

:func:`handoff` turns the open windows of every old partition, all as of the common
cut ``C`` (every input tuple with ``seq <= C`` applied, none after), into the first
record of each new partition's output log: one ``G_check`` row per window whose key
the new partition owns, ``t_now = C`` (the footprint: the state contains everything
up to ``C``), ``n_open`` the number of windows handed to that partition. EC
reconstruction of that record gives exactly those windows with ``t_c = T = C``: the
new partition resumes with an empty replay. No I/O here.

Record formats (ARCHITECTURE §3): an old partition's open windows come in the columns
its operator or log has (record format 1: every aggregate field; format 2: the
function's only, :func:`cec.window_state.logged_for`), and the old partitions of one
run may differ. The hand-over keeps each table's own columns; :func:`first_record`
reads any mix and writes format 2, the new log's (a new log is written in format 2).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import xxhash

from cec.aggregates import get_reducer
from cec.operator.state import OperatorState
from cec.records import G_CHECK, logged_of, output_schema, untracked_columns
from cec.window_state import AGGREGATE, LOGGED, StateField, logged_for, names

SPARK_SEED = 42
_WINDOW_COLUMNS = ("key", *names(LOGGED))  # a window's logged state (cec.window_state)
#: the columns every table of open windows has, whatever its record format
_REQUIRED = ("key", *(f.name for f in LOGGED if f not in AGGREGATE), "cnt")


def spark_xxhash64(key: int | str) -> int:
    """Spark SQL's ``xxhash64(key)`` (seed 42) of an int64 or string key, signed."""
    if isinstance(key, bool):
        raise TypeError("a key is an int64 or a string, not a bool")
    if isinstance(key, int):
        data = struct.pack("<q", key)
    elif isinstance(key, str):
        data = key.encode("utf-8")
    else:
        raise TypeError(f"a key is an int64 or a string, not {type(key).__name__}")
    h = xxhash.xxh64_intdigest(data, seed=SPARK_SEED)
    return h - (1 << 64) if h >= 1 << 63 else h


def key_group(key: int | str, groups: int) -> int:
    """``pmod(xxhash64(key), groups)``."""
    return spark_xxhash64(key) % groups


def partition_of_group(kg: int, partitions: int, groups: int) -> int:
    """The partition that owns key group ``kg``: ``kg * P // G``."""
    return kg * partitions // groups


def partitions_of(keys: Iterable[int | str], partitions: int, groups: int
                  ) -> np.ndarray:
    """The partition of each key (:func:`key_group`, then :func:`partition_of_group`)."""
    return np.fromiter((key_group(k, groups) * partitions // groups for k in keys),
                       dtype=np.int64)


def windows_table(state: OperatorState, key_type: str) -> pa.Table:
    """An operator's open windows (:meth:`state_at`) as columns of the output schema."""
    schema = output_schema(key_type)
    wins = list(state.windows.values())
    return pa.table({name: pa.array([getattr(w, name) for w in wins],
                                    schema.field(name).type)
                     for name in _WINDOW_COLUMNS})


def handoff(windows: Sequence[pa.Table], *, cut: int, ts: int, partitions: int,
            groups: int, function: str, key_type: str, window_kind: str,
            session_gap: int | None = None, logged: tuple[StateField, ...] | None = None
            ) -> list[pa.RecordBatch]:
    """The first output record of each of ``partitions`` new partitions (0 rows: no
    window goes there, and the new partition starts fresh).

    ``windows``: the open windows of every old partition as of input position ``cut``
    (:func:`windows_table`); ``ts`` the record's ``ts`` (the handoff's ``t_c_ts``: no
    later tuple of the new partition may be older, and every time window handed over
    must end after it). Rows are in ``(tau1, key, win_start)`` order; a window id met
    twice is refused (two old partitions cannot hold one key).

    The same as :func:`split_windows` of each old partition, then :func:`first_record`
    of each new one: a rescale runs the first in the old partitions' tasks and the
    second in the new ones' (:mod:`cec_spark.recover.rescale`). ``window_kind``,
    ``session_gap``, ``logged``: as :func:`first_record` has them.
    """
    if not 1 <= partitions <= groups:
        raise ValueError(f"partitions must be in 1..{groups}, got {partitions}")
    split = [split_windows(w, partitions=partitions, groups=groups, key_type=key_type)
             for w in windows]
    return [first_record([s[p] for s in split], cut=cut, ts=ts, function=function,
                         key_type=key_type, window_kind=window_kind,
                         session_gap=session_gap, logged=logged)
            for p in range(partitions)]


def _window_schema(key_type: str, logged: tuple[StateField, ...] = LOGGED) -> pa.Schema:
    schema = output_schema(key_type, logged)
    return pa.schema([schema.field(n) for n in ("key", *names(logged))])


def _own_columns(windows: pa.Table, key_type: str) -> pa.Table:
    """A table of open windows in the window columns it has (either record format: the
    aggregate fields it lacks stay out), in their order and types. ValueError: it lacks
    one every window has."""
    missing = [c for c in _REQUIRED if c not in windows.column_names]
    if missing:
        raise ValueError(f"open windows without the column(s) {', '.join(missing)} "
                         f"(columns: {', '.join(windows.column_names)})")
    wschema = _window_schema(key_type, logged_of(windows.schema))
    return windows.select(wschema.names).cast(wschema)


def _every_column(windows: pa.Table, session_gap: int | None) -> pa.Table:
    """:func:`_own_columns` output with every window column (the fields it lacks as
    :func:`cec.records.untracked_columns` gives them)."""
    add = untracked_columns(windows, session_gap)
    return pa.table({name: add[name] if name in add else windows.column(name)
                     for name in _WINDOW_COLUMNS})


def split_windows(windows: pa.Table, *, partitions: int, groups: int, key_type: str
                  ) -> list[pa.Table]:
    """One old partition's open windows (:func:`windows_table` columns, or those of
    record format 2) by the new partition that owns each key: ``partitions`` tables of
    the window columns ``windows`` has, in the order they came (one stable sort, then a
    slice each: not a filter per partition)."""
    if not 1 <= partitions <= groups:
        raise ValueError(f"partitions must be in 1..{groups}, got {partitions}")
    table = _own_columns(windows, key_type)
    target = partitions_of(table.column("key").to_pylist(), partitions, groups)
    order = np.argsort(target, kind="stable")
    bounds = np.searchsorted(target[order], np.arange(partitions + 1))
    return [table.take(pa.array(order[bounds[p]:bounds[p + 1]], pa.int64()))
            for p in range(partitions)]


def first_record(windows: Sequence[pa.Table], *, cut: int, ts: int, function: str,
                 key_type: str, window_kind: str, session_gap: int | None = None,
                 logged: tuple[StateField, ...] | None = None) -> pa.RecordBatch:
    """A new partition's first output record from the windows each old partition hands
    it (:func:`split_windows`): one ``G_check`` row per window, ``t_now = cut``, ``ts``,
    ``n_open`` the windows' number, in ``(tau1, key, win_start)`` order. ValueError: a
    window id met twice, or a time window that ends at or before ``ts``.

    The tables may be of either record format, mixed. The record logs the fields
    ``logged``: by default those of record format 2 (the record begins a new log),
    :func:`~cec.window_state.logged_for` the function and ``window_kind`` (count, time
    or session). ``session_gap``: a session's, for a format-1 record (``logged`` every
    field) made of format-2 windows (their ``first_ts``/``last_ts`` derive from the
    bounds)."""
    own = [_own_columns(w, key_type) for w in windows]
    if logged is None:
        logged = logged_for(function, window_kind)
    if window_kind == "session" and session_gap is None and any(
            f.name not in w.column_names for w in own for f in logged):
        raise ValueError("a session's first_ts/last_ts are wanted of windows that do not "
                         "keep them: give the session gap")
    schema = output_schema(key_type, logged)
    parts = [_every_column(w, session_gap) for w in own]
    sel = (pa.concat_tables(parts) if parts else _window_schema(key_type).empty_table())
    ids = list(zip(sel.column("key").to_pylist(), sel.column("win_start").to_pylist(),
                   strict=True))
    if len(set(ids)) != len(ids):
        raise ValueError("a window id is open in two old partitions: the logs do not "
                         "belong to one key-partitioned run")
    if window_kind == "time" and sel.num_rows:
        ends = sel.column("win_end").to_numpy()
        if int(ends.min()) <= ts:
            raise ValueError(f"a time window ending at {int(ends.min())} is still open "
                             f"at ts {ts}: the handoff's ts is too late")
    sel = sel.sort_by([("tau1", "ascending"), ("key", "ascending"),
                       ("win_start", "ascending")])
    n = sel.num_rows
    cnt = sel.column("cnt").to_numpy()
    value = get_reducer(function).result_array(cnt, sel.column("sum").to_numpy(),
                                               sel.column("min").to_numpy(),
                                               sel.column("max").to_numpy())
    cols = {
        "ts": pa.array(np.full(n, ts, np.int64)),
        "seq": pa.array(np.arange(n, dtype=np.int64)),
        "type": pa.array(np.full(n, G_CHECK, np.int8)),
        "t_now": pa.array(np.full(n, cut, np.int64)),
        "n_open": pa.array(np.full(n, n, np.int64)),
        **{name: sel.column(name).combine_chunks() for name in _WINDOW_COLUMNS},
        "value": pa.array(np.asarray(value, np.float64)),
    }
    return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)
