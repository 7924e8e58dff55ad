"""Session windows: semantics (Spark's ties), the vectorized operator against the
reference (hypothesis), a pandas reference, and EC round trips (reconstruction)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cec.errors import InputOrderError, InputRangeError, SpecError
from cec.operator import OperatorConfig, ReferenceOperator, VectorOperator, ec_from_output
from cec.policy import PolicyConfig
from cec.records import G_OPEN, RESULT_TYPES, R
from cec.windows import SessionWindow, session_window, window_spec

from .helpers import FakeClock, batch, rows
from .test_operator_property import SETTINGS, split

IMPLS = [ReferenceOperator, VectorOperator]


def cfg(gap: int, function: str = "avg", mode: str = "open-only", **kw: Any) -> OperatorConfig:
    return OperatorConfig(window=SessionWindow(gap), function=function,
                          policy=PolicyConfig(mode=mode, **kw))  # type: ignore[arg-type]


def results(outs: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(r[1:] for o in outs for r in rows(
        o, "type", "key", "win_start", "win_end", "cnt", "value") if r[0] in RESULT_TYPES)


def test_spec() -> None:
    assert session_window("30s") == SessionWindow(30_000_000)
    w = window_spec("session", "500ms")
    assert (w.kind, w.size, w.slide, w.tumbling, w.max_open_per_key) == (
        "session", 500_000, 500_000, False, 1)
    with pytest.raises(SpecError, match="gap, not a slide"):
        window_spec("session", "1s", "1s")
    with pytest.raises(SpecError, match="gap"):
        SessionWindow(0)


@pytest.mark.parametrize("impl", IMPLS)
def test_tie_at_the_gap_joins_like_spark(impl: Any) -> None:
    # Spark 4: events at 0, 10, 20 s with a 10 s gap are one session [0, 30); 31 s is new
    op = impl(cfg(10, "count"))
    outs = [op.process(batch([(0, 1, 1, 1), (10, 2, 1, 1), (20, 3, 1, 1), (31, 4, 1, 1)])),
            op.finish()]
    assert results(outs) == [(1, 0, 30, 3, 3.0), (1, 31, 41, 1, 1.0)]
    # the close comes with the tuple at 31 (after 30), the last one at the end of stream
    r = [x for o in outs for x in rows(o, "type", "t_now", "n_open") if x[0] == R]
    assert r == [(R, 4, 0), (R, 4, 0)]


@pytest.mark.parametrize("impl", IMPLS)
def test_g_open_has_the_opening_end_and_other_keys_close(impl: Any) -> None:
    op = impl(cfg(5, "sum"))
    out = op.process(batch([(0, 0, 1, 1.0), (3, 1, 1, 2.0), (4, 2, 2, 5.0), (9, 3, 2, 1.0)]))
    got = rows(out, "type", "key", "win_start", "win_end", "cnt", "t_now")
    # key 1's session [0, 3 + 5 = 8] closes at ts 9 (a tuple of key 2), before it applies
    assert got == [(G_OPEN, 1, 0, 5, 1, 0), (G_OPEN, 2, 4, 9, 1, 2), (R, 1, 0, 8, 2, 3)]
    assert op.n_open == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_ts_range(impl: Any) -> None:
    op = impl(cfg(10))
    with pytest.raises(InputRangeError, match="session window"):
        op.process(batch([((1 << 63) - 11, 0, 1, 1.0)]))


@pytest.mark.parametrize("split_at", [None, 3])
def test_a_late_tuple_that_would_bridge_two_sessions_is_refused_by_both(
        split_at: int | None) -> None:
    """The operators take input in ts order only (the pipeline's ingest sorts rows
    within ``allowed_lateness``, docs/ARCHITECTURE.md §4): a tuple older than the one
    before it, here one that would bridge key 1's sessions [0, 10] and [30, 40] with a
    gap of 15, is refused by both with the same InputOrderError naming it, in one batch or
    after a batch boundary, and before any state changes; the sorted input makes the
    one merged session both give."""
    tuples = [(0, 0, 1, 1.0), (10, 1, 1, 2.0), (30, 2, 1, 3.0), (40, 3, 1, 4.0),
              (20, 4, 1, 10.0)]
    errors, states = [], []
    for impl in IMPLS:
        op = impl(cfg(15, "sum"))
        if split_at is not None:
            op.process(batch(tuples[:split_at + 1]))
        before = op.state_at()
        with pytest.raises(InputOrderError) as info:
            op.process(batch(tuples if split_at is None else tuples[split_at + 1:]))
        assert op.state_at() == before  # nothing changed
        errors.append(str(info.value))
        states.append(before)
    assert errors[0] == errors[1]
    assert "(ts=20, seq=4)" in errors[0] and "ts must not decrease" in errors[0]
    assert states[0] == states[1]
    # in ts order (what the ingest hands over) the bridging tuple merges the two
    ordered = sorted(tuples)
    ordered = [(ts, i, k, v) for i, (ts, _, k, v) in enumerate(ordered)]
    for impl in IMPLS:
        _, outs = run(impl, cfg(15, "sum"), [batch(ordered)])
        assert results(outs) == [(1, 0, 55, 5, 20.0)]


def pandas_frame(tuples: list[tuple[int, int, Any, float]], gap: int) -> pd.DataFrame:
    """Sessions by pandas: per key, a new session where the ts step exceeds the gap."""
    df = pd.DataFrame(tuples, columns=["ts", "seq", "key", "value"])
    df = df.sort_values(["key", "seq"], kind="stable")
    step = df.groupby("key")["ts"].diff()
    df["sid"] = (step.isna() | (step > gap)).cumsum()
    agg = df.groupby("sid").agg(key=("key", "first"), start=("ts", "min"),
                                last=("ts", "max"), cnt=("ts", "size"),
                                total=("value", "sum"))
    agg["end"] = agg["last"] + gap
    return agg


def pandas_sessions(tuples: list[tuple[int, int, Any, float]], gap: int) -> list[Any]:
    if not tuples:
        return []
    agg = pandas_frame(tuples, gap)
    return sorted((1, r.key, int(r.start), int(r.end), int(r.cnt)) for r in agg.itertuples())


@st.composite
def session_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    key_type = draw(st.sampled_from(["int64", "string"]))
    n_keys = draw(st.integers(1, 5))
    n = draw(st.integers(0, 60))
    ts, seq = draw(st.integers(-30, 30)), draw(st.integers(-5, 5))
    tuples = []
    for _ in range(n):
        ts += draw(st.integers(0, 4))
        seq += draw(st.integers(1, 3))
        k = draw(st.integers(0, n_keys - 1))
        key: int | str = k * 7 - 3 if key_type == "int64" else f"k{k}"
        v = draw(st.one_of(st.integers(-5, 5).map(float),
                           st.floats(-1e6, 1e6, allow_nan=False)))
        tuples.append((ts, seq, key, v))
    policy = PolicyConfig(
        mode=draw(st.sampled_from(["none", "open-only", "targets"])),
        q=draw(st.one_of(st.integers(0, 12), st.sampled_from(["1x", "2x", "0.5x"]))),
        u=draw(st.integers(0, 25)), ci_ms=draw(st.sampled_from([0.0, 0.05, 1.0, 5.0])),
        cp_ms=draw(st.sampled_from([100.0, 5.0, 0.5])))
    return {"key_type": key_type, "window": SessionWindow(draw(st.integers(1, 12))),
            "policy": policy, "tuples": tuples,
            "function": draw(st.sampled_from(["count", "sum", "min", "max", "avg"])),
            "cuts": sorted(draw(st.lists(st.integers(0, n), max_size=6))),
            "clock_step": draw(st.sampled_from([0.0, 0.0001, 0.001, 0.02]))}


def config(sc: dict[str, Any]) -> OperatorConfig:
    return OperatorConfig(window=sc["window"], function=sc["function"],
                          key_type=sc["key_type"], policy=sc["policy"],
                          clock=FakeClock(sc["clock_step"]))


def run(impl: Any, c: OperatorConfig, batches: list[Any]) -> tuple[Any, list[Any]]:
    op = impl(c)
    outs = [op.process(b) for b in batches]
    outs.append(op.finish())
    return op, outs


@SETTINGS
@given(session_scenarios())
def test_vector_equals_reference_and_pandas(sc: dict[str, Any]) -> None:
    batches = split(sc["tuples"], sc["cuts"], sc["key_type"])
    ref, ref_out = run(ReferenceOperator, config(sc), batches)
    vec, vec_out = run(VectorOperator, config(sc), batches)
    for a, b in zip(ref_out, vec_out, strict=True):
        assert rows(b) == rows(a)
    assert vec.state_at() == ref.state_at()
    assert (vec.n_open, vec.t_now, vec.next_out_seq, vec.q, vec.u) == (
        ref.n_open, ref.t_now, ref.next_out_seq, ref.q, ref.u)
    got = sorted(r[:5] for o in ref_out for r in rows(
        o, "type", "key", "win_start", "win_end", "cnt") if r[0] in RESULT_TYPES)
    assert got == pandas_sessions(sc["tuples"], sc["window"].gap_us)
    if sc["function"] == "sum" and sc["tuples"]:  # pandas sums in its own order: approx
        agg = pandas_frame(sc["tuples"], sc["window"].gap_us)
        want = {(r.key, int(r.start)): float(r.total) for r in agg.itertuples()}
        have = {(r[0], r[1]): r[2] for o in ref_out for r in rows(
            o, "key", "win_start", "value", "type") if r[3] in RESULT_TYPES}
        assert have == pytest.approx(want)


@SETTINGS
@given(session_scenarios(), st.integers(0, 60), st.sampled_from(IMPLS))
def test_ec_reconstruction_is_exact(sc: dict[str, Any], cut: int, impl: Any) -> None:
    """Crash after input tuple ``cut``: EC from the output log so far, load, replay from
    ``T``, and the rest of the output equals the failure-free run's (seqs included)."""
    tuples = sc["tuples"]
    if sc["policy"].mode == "none" or not tuples:
        return
    cut = min(cut, len(tuples) - 1)
    c = config(sc)
    op = impl(c)
    before = [op.process(batch([t], key_type=sc["key_type"])) for t in tuples[:cut + 1]]
    truth_state = op.state_at()
    after = [op.process(batch([t], key_type=sc["key_type"])) for t in tuples[cut + 1:]]
    after.append(op.finish())
    t_c, t_c_ts = tuples[cut][1], tuples[cut][0]
    ec_table = ec_from_output(pa.Table.from_batches(before), truth_state)
    rec = impl(config(sc))
    nxt = sum(b.num_rows for b in before)
    rec.load_ec(ec_table, t_c=t_c, t_c_ts=t_c_ts, next_out_seq=nxt)
    t_min = min((r["t_now"] for r in ec_table.to_pylist()), default=t_c)
    replay = [t for t in tuples[:cut + 1] if t[1] > t_min]
    if replay:
        assert rows(rec.process(batch(replay, key_type=sc["key_type"]))) == []
    got = rec.state_at()
    assert got.windows == truth_state.windows
    if sc["policy"].mode == "open-only":  # no G_check: the foreground rows agree
        rest = [rec.process(batch([t], key_type=sc["key_type"])) for t in tuples[cut + 1:]]
        rest.append(rec.finish())
        assert [rows(b) for b in rest] == [rows(b) for b in after]
