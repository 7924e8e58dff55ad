"""Property tests: the vectorized operator against the reference, and EC round trips."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cec.operator import OperatorConfig, ReferenceOperator, VectorOperator, ec_from_output
from cec.policy import PolicyConfig
from cec.records import G_OPEN, R, logical_rows
from cec.windows import CountWindow, SessionWindow, TimeWindow

from .helpers import FakeClock, batch, rows

# CEC_HYPOTHESIS_EXAMPLES=2000 for a thorough run; the default keeps the suite fast
EXAMPLES = int(os.environ.get("CEC_HYPOTHESIS_EXAMPLES", "120"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    key_type = draw(st.sampled_from(["int64", "string"]))
    if draw(st.booleans()):
        size = draw(st.integers(1, 6))
        window: CountWindow | TimeWindow = CountWindow(size, draw(st.integers(1, size)))
    else:
        size = draw(st.integers(1, 20))
        window = TimeWindow(size, draw(st.integers(1, size)))
    mode = draw(st.sampled_from(["none", "open-only", "targets"]))
    policy = PolicyConfig(
        mode=mode,
        q=draw(st.one_of(st.integers(0, 12), st.sampled_from(["1x", "2x", "0.5x"]))),
        u=draw(st.integers(0, 25)),
        ci_ms=draw(st.sampled_from([0.0, 0.05, 1.0, 5.0])),
        # a short CP refills the bucket within a few clock readings: many steps
        cp_ms=draw(st.sampled_from([100.0, 5.0, 0.5])),
    )
    n_keys = draw(st.integers(1, 5))
    n = draw(st.integers(0, 60))
    ts0 = draw(st.integers(-30, 30))
    seq0 = draw(st.integers(-5, 5))
    tuples = []
    ts, seq = ts0, seq0
    for _ in range(n):
        ts += draw(st.integers(0, 4))
        seq += draw(st.integers(1, 3))
        k = draw(st.integers(0, n_keys - 1))
        key: int | str = k * 7 - 3 if key_type == "int64" else f"k{k}"
        v = draw(st.one_of(st.integers(-5, 5).map(float),
                           st.floats(-1e6, 1e6, allow_nan=False)))
        tuples.append((ts, seq, key, v))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return {
        "key_type": key_type, "window": window, "policy": policy,
        "function": draw(st.sampled_from(["count", "sum", "min", "max", "avg"])),
        "tuples": tuples, "cuts": cuts,
        "clock_step": draw(st.sampled_from([0.0, 0.0001, 0.001, 0.02])),
        "record_format": draw(st.sampled_from([1, 2])),
    }


def split(tuples: list[Any], cuts: list[int], key_type: str) -> list[pa.RecordBatch]:
    bounds = [0, *cuts, len(tuples)]
    return [batch(tuples[a:b], key_type=key_type) for a, b in itertools.pairwise(bounds)]


def config(sc: dict[str, Any], clock_step: float | None = None) -> OperatorConfig:
    step = sc["clock_step"] if clock_step is None else clock_step
    return OperatorConfig(
        window=sc["window"], function=sc["function"], key_type=sc["key_type"],
        policy=sc["policy"], clock=FakeClock(step), record_format=sc.get("record_format", 2),
    )


def run(impl: Any, cfg: OperatorConfig, batches: list[pa.RecordBatch]) -> tuple[Any, list[Any]]:
    op = impl(cfg)
    outs = []
    for b in batches:
        outs.append(op.process(b))
        assert outs[-1].schema == outs[0].schema
    outs.append(op.finish())
    return op, outs


@SETTINGS
@given(scenarios())
def test_vector_equals_reference(sc: dict[str, Any]) -> None:
    batches = split(sc["tuples"], sc["cuts"], sc["key_type"])
    ref, ref_out = run(ReferenceOperator, config(sc), batches)
    vec, vec_out = run(VectorOperator, config(sc), batches)
    for a, b in zip(ref_out, vec_out, strict=True):
        assert rows(b) == rows(a)
    assert vec.state_at() == ref.state_at()
    assert (vec.n_open, vec.t_now, vec.next_out_seq, vec.q, vec.u) == (
        ref.n_open, ref.t_now, ref.next_out_seq, ref.q, ref.u)


@SETTINGS
@given(scenarios(), st.integers(1, 7), st.booleans())
def test_finish_in_parts_gives_finishs_rows(sc: dict[str, Any], rows_per_part: int,
                                            sessions: bool) -> None:
    """``finish_parts(n)``: the rows ``finish()`` gives, in order, in batches of at most
    ``n`` rows, and the operator ends in the same state (both implementations; time,
    count and session windows)."""
    if sessions:
        sc = {**sc, "window": SessionWindow(3)}
    batches = split(sc["tuples"], sc["cuts"], sc["key_type"])
    for impl in (ReferenceOperator, VectorOperator):
        whole, parted = impl(config(sc, 0.0)), impl(config(sc, 0.0))
        for b in batches:
            assert rows(whole.process(b)) == rows(parted.process(b))
        want = rows(whole.finish())
        parts = list(parted.finish_parts(rows_per_part))
        assert all(0 < p.num_rows <= rows_per_part for p in parts)
        assert [r for p in parts for r in rows(p)] == want
        assert parted.state_at() == whole.state_at()
        assert (parted.n_open, parted.next_out_seq) == (whole.n_open, whole.next_out_seq)


def foreground(outs: list[pa.RecordBatch], with_seq: bool) -> list[Any]:
    cols = ["type", "ts", "t_now", "n_open", "key", "win_start", "win_end", "tau1", "cnt",
            "sum", "min", "max", "first_ts", "last_ts", "value"]
    if with_seq:
        cols.append("seq")
    if outs:  # the columns of the rows' record format (format 2: the function's fields)
        cols = [c for c in cols if c in outs[0].schema.names]
    return [r for o in outs for r in rows(logical_rows(o), *cols) if r[0] in (R, G_OPEN)]


@SETTINGS
@given(scenarios(), st.lists(st.integers(0, 60), max_size=6))
def test_foreground_independent_of_batching(sc: dict[str, Any], other_cuts: list[int]) -> None:
    n = len(sc["tuples"])
    other = sorted(min(c, n) for c in other_cuts)
    _, ref_out = run(ReferenceOperator, config(sc), split(sc["tuples"], sc["cuts"], sc["key_type"]))
    _, vec_out = run(VectorOperator, config(sc), split(sc["tuples"], other, sc["key_type"]))
    with_seq = sc["policy"].mode != "targets"
    assert foreground(vec_out, with_seq) == foreground(ref_out, with_seq)


@SETTINGS
@given(scenarios(), st.integers(0, 10), st.sampled_from([ReferenceOperator, VectorOperator]),
       st.booleans())
def test_load_ec_round_trip(sc: dict[str, Any], at: int, impl: Any, straddle: bool) -> None:
    """Recover at a batch boundary from the EC in the output and replay after T.

    With ``straddle`` the end of the replay and the first new tuples share one batch
    (reconstruction mode ends inside it).
    """
    check_load_ec_round_trip(sc, at, impl, straddle)


def check_load_ec_round_trip(sc: dict[str, Any], at: int, impl: Any, straddle: bool, *,
                             reference: bool = False) -> None:
    """Run ``impl`` to the batch boundary ``at``, rebuild a fresh ``impl`` from the EC in
    its output, replay after T and check the rest of the output is identical.

    With ``reference`` the first run is also compared row for row, batch by batch, with
    the reference operator (and their states at the boundary).
    """
    if sc["policy"].mode == "none":
        sc = {**sc, "policy": PolicyConfig(mode="open-only")}
    tuples, key_type = sc["tuples"], sc["key_type"]
    bounds = [0, *sc["cuts"], len(tuples)]
    b = bounds[min(at, len(bounds) - 1)]
    if b == 0:
        return
    batches = split(tuples, sc["cuts"], key_type)
    # a clock that never moves keeps the budget stateless (unlimited), so even the
    # G_check rows after recovery must equal the uninterrupted run's
    cfg = config(sc, clock_step=0.0)
    first = impl(cfg)
    ref = ReferenceOperator(config(sc, clock_step=0.0)) if reference else None
    outs = []
    done = 0
    snapshot = None
    for bt in batches:
        outs.append(first.process(bt))
        if ref is not None:
            assert rows(outs[-1]) == rows(ref.process(bt))
        done += bt.num_rows
        if done == b and snapshot is None:
            snapshot = (first.state_at(), len(outs))
            if ref is not None:
                assert snapshot[0] == ref.state_at()
    assert snapshot is not None
    state, n_out = snapshot
    ec = ec_from_output(outs[:n_out], state)
    t_c = state.t_now
    assert t_c is not None
    t_c_ts = next(t for t in tuples if t[1] == t_c)[0]
    second = impl(cfg)
    second.load_ec(ec, t_c=t_c, t_c_ts=t_c_ts, next_out_seq=state.next_out_seq)
    T = min((w.tau2 for w in state.windows.values()), default=t_c)
    replay = [t for t in tuples[:b] if t[1] > T]
    mid = len(replay) // 2
    post_bounds = [b, *[c for c in sc["cuts"] if c > b], len(tuples)]
    post = [tuples[x:y] for x, y in itertools.pairwise(post_bounds)]
    assert second.process(batch(replay[:mid], key_type=key_type)).num_rows == 0
    if straddle and post:
        post[0] = replay[mid:] + post[0]
    else:
        assert second.process(batch(replay[mid:], key_type=key_type)).num_rows == 0
        assert second.state_at() == state
    after = [second.process(batch(p, key_type=key_type)) for p in post]
    after.append(second.finish())
    rest = [*outs[n_out:], first.finish()]
    assert [r for o in after for r in rows(o)] == [r for o in rest for r in rows(o)]
    assert second.state_at() == first.state_at()


@settings(max_examples=25, deadline=None)
@given(scenarios())
def test_deterministic(sc: dict[str, Any]) -> None:
    batches = split(sc["tuples"], sc["cuts"], sc["key_type"])
    _, a = run(VectorOperator, config(sc), batches)
    _, b = run(VectorOperator, config(sc), batches)
    assert [x.equals(y) for x, y in zip(a, b, strict=True)] == [True] * len(a)
