"""Record format 2 (ARCHITECTURE §3) on the readers' side: EC reconstruction, recovery
and rescale's hand-off read output rows that keep only the function's aggregate
fields exactly as they read format 1, for every function and window kind.

A format-2 log here is a format-1 log with the columns format 2 does not keep dropped
(:func:`to_format2`), so both describe one run; the operator's own format-2 rows are
the lead's tests' (they must be these). Pure: no files, no Spark.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cec.operator import OperatorConfig, VectorOperator
from cec.policy import PolicyConfig
from cec.records import (
    G_CHECK,
    logged_of,
    output_schema,
    record_format,
    with_every_field,
)
from cec.window_state import AGGREGATE, LOGGED, UNTRACKED, logged_for, names, tracked_for
from cec.windows import WindowSpec, window_spec
from recovery.ec import reconstruct
from recovery.partition import recover_from_logs
from recovery.rescale import first_record, handoff, partitions_of, windows_table
from tests.recovery.harness import FakeClock, MemLog, make_stream

FUNCTIONS = ("count", "sum", "avg", "min", "max")
KINDS = ("count", "time", "session")
CASES = [(f, k) for f in FUNCTIONS for k in KINDS]
GAP = 9  # the sessions' gap (us); ts steps are 0..3


def _window(kind: str) -> WindowSpec:
    return {"count": window_spec("count", 4, 2), "time": window_spec("time", 24, 8),
            "session": window_spec("session", GAP)}[kind]


def _operator(function: str, kind: str, fmt: int) -> VectorOperator:
    return VectorOperator(OperatorConfig(
        window=_window(kind), function=function, key_type="int64", record_format=fmt,
        policy=PolicyConfig(mode="targets", q=3, u=5, ci_ms=1.0, cp_ms=10.0),
        clock=FakeClock(0.001)))


def _gap(kind: str) -> int | None:
    return GAP if kind == "session" else None


def to_format2(rows: Any, function: str, kind: str) -> Any:
    """Format-1 output rows (a batch or table) with only format 2's columns."""
    schema = output_schema(rows.schema.field("key").type, logged_for(function, kind))
    return rows.select(schema.names).cast(schema)


@cache
def _inputs() -> tuple[pa.RecordBatch, ...]:
    return tuple(make_stream(160, 5, 11, ts_step=3, max_batch=6))


@cache
def _format1_run(function: str, kind: str) -> tuple[pa.RecordBatch, ...]:
    """A format-1 log: the operator's output of every input batch, then its flush."""
    op = _operator(function, kind, 1)
    return (*(op.process(b) for b in _inputs()), op.finish())


def _cuts(records: list[pa.RecordBatch]) -> list[int]:
    """Numbers of leading records to recover from: every third boundary and the end."""
    return sorted({*range(1, len(records), 3), len(records)})


@pytest.mark.parametrize(("function", "kind"), CASES)
def test_the_schema_says_the_format(function: str, kind: str) -> None:
    full = _format1_run(function, kind)[0]
    two = to_format2(full, function, kind)
    assert record_format(full.schema) == 1 and logged_of(full.schema) == LOGGED
    assert record_format(two.schema) == 2
    kept = set(names(logged_of(two.schema)))
    assert {f.name for f in AGGREGATE} & kept == set(tracked_for(function, kind))
    # every column the readers select is there in format 2
    assert {"key", "win_start", "win_end", "tau1", "cnt", "value", "t_now", "n_open"} <= \
        set(two.schema.names)
    if kind == "count":
        assert {"first_ts", "last_ts"} <= kept


@pytest.mark.parametrize(("function", "kind"), CASES)
def test_ec_of_either_format_is_the_same_checkpoint(function: str, kind: str) -> None:
    """At every third record boundary the backward scan of the format-2 log finds the
    same windows at the same footprints as of the format-1 log, their rows the format-1
    rows less the untracked columns; filled in (with_every_field) they are the format-1
    rows but for fields the function does not read (time windows' first_ts/last_ts
    included), and a session's first_ts/last_ts are its bounds'."""
    one = [b for b in _format1_run(function, kind) if b.num_rows]
    two = [to_format2(b, function, kind) for b in one]
    tracked = set(tracked_for(function, kind)) | ({"first_ts", "last_ts"}
                                                  if kind == "session" else set())
    scanned = 0
    for k in _cuts(one):
        ec1, ec2 = reconstruct(reversed(one[:k])), reconstruct(reversed(two[:k]))
        assert (ec2.n_c, ec2.t_c, ec2.t_c_ts, ec2.next_out_seq, ec2.replay_after_seq) == \
            (ec1.n_c, ec1.t_c, ec1.t_c_ts, ec1.next_out_seq, ec1.replay_after_seq)
        assert ec2.table.schema == two[0].schema
        assert ec2.table.equals(to_format2(ec1.table, function, kind))
        filled = with_every_field(ec2.table, _gap(kind))
        assert filled.schema.names == ec1.table.schema.names
        for name in filled.schema.names:
            if name in names(AGGREGATE) and name not in tracked:
                assert pc_all_equal(filled.column(name), UNTRACKED[name]), name
            else:
                assert filled.column(name).equals(ec1.table.column(name)), name
        scanned += ec2.n_c
    assert scanned > 0  # some cut had open windows


def pc_all_equal(col: pa.ChunkedArray, value: float) -> bool:
    return bool((col.to_numpy() == value).all())


@pytest.mark.parametrize(("function", "kind"), CASES)
def test_recovery_from_a_format2_log_gives_the_same_results(function: str, kind: str
                                                          ) -> None:
    """Recovered from the first k records of each log (scan, load, replay; three k), a
    format-2 operator and a format-1 one go on to the same rows, but for the columns
    format 2 does not keep; the results (R) equal the failure-free run's."""
    one = [b for b in _format1_run(function, kind) if b.num_rows]
    two = [to_format2(b, function, kind) for b in one]
    up = MemLog(_inputs())
    whole = pa.Table.from_batches(list(_format1_run(function, kind)))
    cuts = _cuts(one)
    for k in (cuts[1], cuts[len(cuts) // 2], cuts[-1]):
        rec1 = recover_from_logs(MemLog(one[:k]), up, _operator(function, kind, 1),
                                 key_column="key")
        rec2 = recover_from_logs(MemLog(two[:k]), up, _operator(function, kind, 2),
                                 key_column="key")
        assert rec1.t_c == rec2.t_c
        after = rec1.t_c if rec1.t_c is not None else -1
        rest = [b for b in up.read_forward(after_seq=after)] if after >= 0 else list(_inputs())
        op1, op2 = rec1.operator, rec2.operator
        out1 = pa.Table.from_batches([*(op1.process(b) for b in rest), op1.finish()])
        out2 = pa.Table.from_batches([*(op2.process(b) for b in rest), op2.finish()])
        assert out2.schema == two[0].schema
        assert out2.equals(to_format2(out1, function, kind))
        # the results after the cut are the failure-free run's, whatever the format
        seq_end = int(one[k - 1].column("seq")[-1].as_py())
        done = whole.filter(pa.compute.greater(whole.column("seq"), seq_end))
        results = [t.filter(pa.compute.equal(t.column("type"), 1)).drop_columns(["seq"])
                   for t in (to_format2(done, function, kind), out2)]
        assert results[1].equals(results[0])


@pytest.mark.parametrize(("function", "kind"), CASES)
def test_handoff_of_either_format_or_a_mix_is_one_record(function: str, kind: str) -> None:
    """Three old partitions' open windows handed to two new ones: from format-1 tables,
    format-2 tables or a mix, with the window kind or without (inferred), the new logs'
    first records are of format 2 and equal; the format-1 records (``logged`` every
    field) are them plus the untracked columns. Each loads into a format-2 operator
    with the old windows' tracked state."""
    groups, old_p = 64, 3
    batch = pa.Table.from_batches(_inputs())
    target = partitions_of(batch.column("key").to_pylist(), old_p, groups)
    ops = [_operator(function, kind, 1) for _ in range(old_p)]
    for q, op in enumerate(ops):
        mine = batch.filter(pa.array(target == q)).combine_chunks()
        if mine.num_rows:
            op.process(mine.to_batches()[0])
    full = [windows_table(op.state_at(), "int64") for op in ops]
    assert all(op.open_windows().select(w.column_names).sort_by("tau1").equals(
        w.sort_by("tau1")) for op, w in zip(ops, full, strict=True))
    wcols = ["key", *names(logged_for(function, kind))]
    two = [w.select(wcols) for w in full]
    cut = int(batch.column("seq")[-1].as_py())
    ts = int(batch.column("ts")[-1].as_py())
    if kind == "time":  # the handoff's ts before every handed window's end
        ts = min(int(pa.compute.min(w.column("win_end")).as_py())
                 for w in full if w.num_rows) - 1
    kw: dict[str, Any] = dict(cut=cut, ts=ts, partitions=2, groups=groups,
                              function=function, key_type="int64")
    fmt1 = handoff(full, **kw, window_kind=kind, logged=LOGGED)
    by_kind = {name: handoff(tables, **kw, window_kind=kind, session_gap=_gap(kind))
               for name, tables in (("one", full), ("two", two),
                                    ("mixed", [full[0], two[1], full[2]]))}
    assert sum(r.num_rows for r in fmt1) == sum(w.num_rows for w in full) > 0
    for p, rec in enumerate(fmt1):
        assert record_format(rec.schema) == 1
        for name, recs in by_kind.items():
            assert record_format(recs[p].schema) == 2, name
            assert recs[p].equals(to_format2(rec, function, kind)), name
    before = {(k, s): row for w in full for k, s, row in
              zip(w.column("key").to_pylist(), w.column("win_start").to_pylist(),
                  w.to_pylist(), strict=True)}
    keep = ["win_end", "tau1", *tracked_for(function, kind)]
    for rec in by_kind["two"]:
        ec = reconstruct([rec])
        assert set(ec.table.column("type").to_pylist()) <= {G_CHECK}
        op = _operator(function, kind, 2)
        op.load_ec(ec.table, t_c=ec.t_c, t_c_ts=ec.t_c_ts, next_out_seq=ec.next_out_seq)
        loaded = op.open_windows()
        for row in loaded.to_pylist():
            old = before[(row["key"], row["win_start"])]
            assert {c: row[c] for c in keep} == {c: old[c] for c in keep}


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_format1_record_from_format2_sessions_derives_their_times(function: str) -> None:
    """A format-1 record made of format-2 sessions (the session gap given) has their
    first_ts/last_ts exactly (win_start, win_end - gap); without the gap it is refused."""
    op = _operator(function, "session", 1)
    for b in _inputs():
        op.process(b)
    full = windows_table(op.state_at(), "int64")
    assert full.num_rows
    two = full.select(["key", *names(logged_for(function, "session"))])
    kw: dict[str, Any] = dict(cut=0, ts=0, function=function, key_type="int64",
                              window_kind="session", logged=LOGGED)
    mine = first_record([two], session_gap=GAP, **kw)
    ref = first_record([full], **kw)
    for name in ("first_ts", "last_ts", "cnt", "win_start", "win_end", "value",
                 *tracked_for(function, "session")):
        assert mine.column(name).equals(ref.column(name)), name
    with pytest.raises(ValueError, match="session gap"):
        first_record([two], **kw)
    assert np.array_equal(mine.column("last_ts").to_numpy(),
                          mine.column("win_end").to_numpy() - GAP)
