"""The vectorized operator's slot layout (cec.operator.slot_layout.SlotLayout): the bytes an
open window costs, and that the narrow and derived fields give the oracle's rows."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cec.errors import UsageError
from cec.operator import (
    OperatorConfig,
    ReferenceOperator,
    VectorOperator,
    ec_from_output,
    key_registry,
    slots,
)
from cec.operator.memory import state_bytes
from cec.operator.slots import WindowSlots
from cec.policy import PolicyConfig
from cec.windows import CountWindow, SessionWindow, TimeWindow, WindowSpec, window_spec

from .helpers import FakeClock, rows

FUNCTIONS = ["count", "sum", "min", "max", "avg"]
WINDOWS: list[WindowSpec] = [
    TimeWindow(40, 40), TimeWindow(40, 15), CountWindow(5, 5), CountWindow(6, 2),
    CountWindow(1, 1), SessionWindow(12),
]


def _input(n: int, keys: int, *, seq0: int = 0, seed: int = 3) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    seq = seq0 + np.cumsum(rng.integers(1, 3, n)).astype(np.int64)
    key = rng.integers(0, keys, n).astype(np.int64) * 11 - 7
    val = np.round(rng.normal(0, 100, n), 3)
    cuts = [0, *sorted(rng.choice(np.arange(1, n), 6, replace=False).tolist()), n]
    return [pa.RecordBatch.from_arrays(
        [pa.array(ts[a:b]), pa.array(seq[a:b]), pa.array(key[a:b]), pa.array(val[a:b])],
        names=["ts", "seq", "key", "value"]) for a, b in itertools.pairwise(cuts)]


def _config(window: WindowSpec, function: str, record_format: int = 2) -> OperatorConfig:
    return OperatorConfig(window=window, function=function,
                          policy=PolicyConfig(mode="targets", q=8, u=30, ci_ms=5.0),
                          clock=FakeClock(0.001), record_format=record_format)


def _run(impl: Any, cfg: OperatorConfig, batches: list[pa.RecordBatch]) -> tuple[Any, list[Any]]:
    op = impl(cfg)
    outs = [rows(op.process(b)) for b in batches]
    return op, [*outs, rows(op.finish())]


def test_bytes_per_open_window() -> None:
    """200,000 time windows (10 s tumbling, int64 keys, every key once), as
    ``bench/datapath.py window-bytes`` opens them: the arrays' bytes per window.

    36 per slot in record format 2 (an ``avg`` keeps ``cnt`` and ``sum`` only): int32
    ``key_idx``; ``win_start`` and ``sum`` of 8 bytes; ``tau1``, ``tau2``, ``fp_seq``,
    ``cnt`` as uint32; ``win_end`` not stored. Format 1 (a log begun in it: every row
    carries the whole partial aggregate) adds ``min``, ``max`` of 8 bytes and
    ``first_ts``, ``last_ts`` as int32 offsets: 60.
    """
    one = VectorOperator(OperatorConfig(window=window_spec("time", "10s"), key_type="int64",
                                        policy=PolicyConfig(), record_format=1))
    assert sum(np.dtype(t).itemsize for _, t in one._slots.arrays) == 60
    op = VectorOperator(OperatorConfig(window=window_spec("time", "10s"), key_type="int64",
                                       policy=PolicyConfig()))
    keys = np.random.default_rng(1).permutation(200_000).astype(np.int64)
    for lo in range(0, len(keys), 50_000):
        k = keys[lo:lo + 50_000]
        seq = np.arange(lo, lo + len(k), dtype=np.int64)
        op.process(pa.RecordBatch.from_arrays(
            [pa.array(seq // 1000), pa.array(seq), pa.array(k), pa.array(np.ones(len(k)))],
            names=["ts", "seq", "key", "value"]))
    assert op.n_open == 200_000
    sl = op._slots
    assert sum(getattr(sl, name).itemsize for name, _ in sl.arrays) == 36
    parts = state_bytes(op)
    assert parts["window slots (key_idx + state fields)"] == 36 * sl.capacity
    assert sl.capacity <= 1.25 * 200_000 + 1024  # grown by 1.25x, not doubled
    per_window = sum(parts.values()) / op.n_open
    assert per_window <= 67, parts  # 65.3: + 12 key registry, 8 footprint order, 4 index


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("window", WINDOWS, ids=repr)
def test_every_function_and_window_kind_agrees_with_the_oracle(window: WindowSpec,
                                                               function: str) -> None:
    """Rows (cnt, sum, min, max, first_ts, last_ts, value, ...), states and an EC
    round trip of the vectorized operator against the reference, per layout."""
    batches = _input(1500, 40)
    cfg = _config(window, function)
    ref, ref_out = _run(ReferenceOperator, cfg, batches)
    vec, vec_out = _run(VectorOperator, cfg, batches)
    assert vec_out == ref_out
    assert vec.state_at() == ref.state_at()
    # an EC after the first four batches, loaded into both, then the rest replayed
    head = batches[:4]
    src = ReferenceOperator(cfg)
    outs = [src.process(b) for b in head]
    state = src.state_at()
    ec = ec_from_output(outs, state)
    replay = [b for b in batches if b.num_rows]
    got = []
    for impl in (ReferenceOperator, VectorOperator):
        op = impl(cfg)
        op.load_ec(ec, t_c=state.t_now, t_c_ts=int(head[-1].column("ts")[-1].as_py()),
                   next_out_seq=state.next_out_seq)
        start = min(w.tau2 for w in state.windows.values()) if state.windows else state.t_now
        tail = [b.filter(pc.greater(b.column("seq"), start)) for b in replay]
        got.append(([rows(op.process(b)) for b in tail], rows(op.finish()), op.state_at()))
    assert got[1] == got[0]


@pytest.mark.parametrize("window", [TimeWindow(40, 15), CountWindow(6, 2), SessionWindow(12)],
                         ids=repr)
def test_positions_past_uint32_widen_the_arrays(window: WindowSpec) -> None:
    """Input seqs and output seqs that pass 2^32 - 2 (uint32 held ``value + 1``):
    the arrays become int64 and the rows stay the oracle's."""
    cfg = _config(window, "avg")
    batches = _input(600, 10, seq0=(1 << 32) - 400)
    ref, ref_out = _run(ReferenceOperator, cfg, batches)
    vec, vec_out = _run(VectorOperator, cfg, batches)
    assert vec_out == ref_out and vec.state_at() == ref.state_at()
    assert vec._slots.tau1.dtype == np.int64
    # fresh operators whose output seqs start near the limit, then cross it
    ops = []
    for impl in (ReferenceOperator, VectorOperator):
        op = impl(cfg)
        op.load_ec(ReferenceOperator(cfg).process(batches[0]).slice(0, 0), t_c=0, t_c_ts=0,
                   next_out_seq=(1 << 32) - 30)
        ops.append((op, [rows(op.process(b)) for b in batches]))
    (ref, ref_out), (vec, vec_out) = ops
    assert vec_out == ref_out and vec.state_at() == ref.state_at()
    sl = vec._slots
    assert sl.tau1.dtype == sl.tau2.dtype == sl.fp_seq.dtype == np.int64


def test_narrow_arrays_while_positions_fit() -> None:
    vec = VectorOperator(_config(TimeWindow(40, 15), "avg", record_format=1))
    for b in _input(600, 10, seq0=(1 << 32) - 3000):
        vec.process(b)
    sl = vec._slots
    assert sl.tau1.dtype == sl.tau2.dtype == sl.fp_seq.dtype == sl.cnt.dtype == np.uint32
    assert sl.first_ts.dtype == sl.last_ts.dtype == np.int32
    assert not hasattr(sl, "win_end")


def _slots_with_counts(counts: list[int]) -> WindowSlots:
    sl = WindowSlots()
    s = sl.alloc(len(counts))
    zeros = np.zeros(len(counts), np.int64)
    sl.open(s, zeros, zeros, zeros, zeros, zeros)
    sl.put("cnt", s, np.array(counts, np.int64))
    return sl


def test_cnt_stays_uint32_until_a_window_could_pass_it() -> None:
    top = (1 << 32) - 1
    # a bound near the top from closed windows: recomputed from the open ones, kept
    sl = _slots_with_counts([5, top - 10])
    sl.release(np.array([1], np.int64))
    sl.accumulate(np.zeros(20, np.int64), np.ones(20), np.zeros(20, np.int64))
    assert sl.cnt.dtype == np.uint32 and sl.counts(np.array([0])).tolist() == [25]
    # an open window that would pass it: widened first, the count exact
    sl = _slots_with_counts([5, top - 10])
    sl.accumulate(np.ones(20, np.int64), np.ones(20), np.zeros(20, np.int64))
    assert sl.cnt.dtype == np.int64 and sl.counts(np.array([0, 1])).tolist() == [5, top + 10]
    # an EC count past uint32: widened when loaded
    sl = _slots_with_counts([1 << 40])
    assert sl.cnt.dtype == np.int64 and sl.column("cnt", np.array([0])).tolist() == [1 << 40]


def test_past_2_31_keys_or_slots_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_registry, "MAX_INDEX", 2000)
    monkeypatch.setattr(slots, "MAX_INDEX", 2000)
    op = VectorOperator(_config(TimeWindow(40, 40), "avg"))
    keys = np.arange(2500, dtype=np.int64)
    seq = np.arange(2500, dtype=np.int64)
    with pytest.raises(UsageError, match=r"2,500 distinct keys .* over its limit of 2,000"):
        op.process(pa.RecordBatch.from_arrays(
            [pa.array(seq * 0), pa.array(seq), pa.array(keys), pa.array(np.ones(2500))],
            names=["ts", "seq", "key", "value"]))
    sl = WindowSlots()
    with pytest.raises(UsageError, match=r"3,000 open windows .* over its limit of 2,001"):
        sl.alloc(3000)


def test_an_ec_window_that_does_not_fit_the_spec_is_refused() -> None:
    cfg = _config(TimeWindow(40, 40), "avg", record_format=1)  # its rows log first_ts
    src = ReferenceOperator(cfg)
    outs = [src.process(b) for b in _input(300, 5)]
    state = src.state_at()
    ec = ec_from_output(outs, state)
    ends = ec.column("win_end").to_numpy().copy()
    ends[0] += 1
    bad = ec.set_column(ec.schema.get_field_index("win_end"), "win_end", pa.array(ends))
    with pytest.raises(UsageError, match=r"has win_end \d+, not \d+ \(the window spec's\)"):
        VectorOperator(cfg).load_ec(bad, t_c=state.t_now, t_c_ts=0,
                                    next_out_seq=state.next_out_seq)
    firsts = ec.column("first_ts").to_numpy().copy()
    firsts[0] = -(1 << 40)
    bad = ec.set_column(ec.schema.get_field_index("first_ts"), "first_ts", pa.array(firsts))
    with pytest.raises(UsageError, match=r"outside it"):
        VectorOperator(cfg).load_ec(bad, t_c=state.t_now, t_c_ts=0,
                                    next_out_seq=state.next_out_seq)
