"""FootprintOrder (the vector operator's open windows by footprint) against a brute force."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cec.operator import OperatorConfig, ReferenceOperator, VectorOperator
from cec.operator.footprint_order import FootprintOrder
from cec.operator.slots import WindowSlots
from cec.policy import PolicyConfig
from cec.windows import CountWindow, TimeWindow, WindowSpec

from .helpers import FakeClock, rows
from .test_operator_scale import stream

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.integers(0, 6)),
        st.tuples(st.just("close"), st.integers(0, 50)),
        st.tuples(st.just("check"), st.integers(0, 6)),  # the k oldest get new footprints
        st.tuples(st.just("old"), st.integers(0, 50)),  # a footprint not newer: rebuild
        st.tuples(st.just("rebuild"), st.just(0)),
    ),
    max_size=60,
)


class Model:
    """WindowSlots + FootprintOrder driven like the operator, with the expected order."""

    def __init__(self, capacity: int, slack: int) -> None:
        self.sl = WindowSlots(capacity=2)
        self.fo = FootprintOrder(capacity=capacity, slack=slack)
        self.seq = itertools.count(10)

    def expected(self) -> list[int]:
        sl = self.sl
        live = sl.live_slots().tolist()
        return sorted(live, key=lambda s: (sl.seq_at("fp_seq", s), sl.seq_at("tau2", s),
                                           sl.win_start[s]))

    def write(self, slots: Any) -> None:
        sl = self.sl
        slots = np.asarray(slots, dtype=np.int64)
        fps = np.array([next(self.seq) for _ in slots], dtype=np.int64)
        sl.set_seqs("fp_seq", slots, fps)
        sl.set_seqs("tau2", slots, fps // 3)
        self.fo.push(sl, fps, slots)

    def apply(self, op: str, arg: int) -> None:
        sl = self.sl
        live = self.expected()
        if op == "open":
            slots = sl.alloc(arg)
            sl.win_start[slots] = np.arange(len(slots)) + next(self.seq)
            self.write(slots)
        elif op == "close" and live:
            sl.release(np.array([live[arg % len(live)]], dtype=np.int64))
        elif op == "check" and live:
            chunks = list(self.fo.walk(sl, arg))
            got = np.concatenate([c[0] for c in chunks]) if chunks else np.empty(0, np.int64)
            assert got.tolist() == live[:arg]
            if len(got):
                self.fo.drop_through(int(chunks[-1][1][-1]))
                self.write(got)
        elif op == "old" and live:  # an inconsistent EC: a footprint seq seen before
            s = live[arg % len(live)]
            fp = sl.seq_at("fp_seq", live[0]) - 1 - arg % 3
            sl.set_seqs("fp_seq", np.array([s], np.int64), fp)
            self.fo.push(sl, np.array([fp], np.int64), np.array([s], np.int64))
        elif op == "rebuild":
            self.fo.rebuild(sl)

    def check(self) -> None:
        exp = self.expected()
        assert self.fo.front(self.sl) == (exp[0] if exp else -1)
        got = [s for c, _ in self.fo.walk(self.sl, len(exp) + 1) for s in c.tolist()]
        assert got == exp


@settings(max_examples=300, deadline=None)
@given(OPS, st.sampled_from([(1, 0), (4, 0), (1024, 1024)]))
def test_order_matches_brute_force(ops: list[tuple[str, int]], cap_slack: tuple[int, int]) -> None:
    m = Model(*cap_slack)
    for op, arg in ops:
        m.apply(op, arg)
        m.check()


def test_stale_entries_do_not_accumulate() -> None:
    """Behind a window that stays open, closed windows' entries are filtered out: the
    buffer stays O(open windows), not O(footprints ever written)."""
    m = Model(capacity=4, slack=8)
    m.apply("open", 1)  # the oldest footprint, never closed nor checkpointed
    for _ in range(2000):
        m.apply("open", 3)
        for _ in range(3):
            m.apply("close", -1)  # the newest
    m.check()
    assert m.sl.n_live == 1
    assert len(m.fo._fp) <= 64


def test_filter_keeps_current_entries_behind_stale_ones() -> None:
    m = Model(capacity=8, slack=0)
    for _ in range(2):  # entries: A s s s B s s s (s = closed), buffer full
        m.apply("open", 1)
        m.apply("open", 3)
        for _ in range(3):
            m.apply("close", -1)
    assert len(m.fo) == 8
    m.apply("open", 1)  # 8 entries > 2 x 3 open windows: the stale ones are filtered out
    assert len(m.fo) == 3
    m.check()


def test_front_of_empty() -> None:
    fo = FootprintOrder()
    assert fo.front(WindowSlots()) == -1
    assert list(fo.walk(WindowSlots(), 5)) == []


CASES: list[WindowSpec] = [CountWindow(10, 10), CountWindow(7, 3), TimeWindow(200, 50)]


@pytest.mark.parametrize("window", CASES)
@pytest.mark.parametrize(("mode", "ci_ms"), [("targets", 0.05), ("targets", 1.0),
                                             ("open-only", 1.0)])
def test_operator_with_a_tiny_buffer(window: WindowSpec, mode: str, ci_ms: float) -> None:
    """The vector operator with a buffer that compacts and grows all the time."""
    pol = PolicyConfig(mode=mode, q="1x", u=400, ci_ms=ci_ms, cp_ms=5.0)  # type: ignore[arg-type]

    def cfg() -> OperatorConfig:
        return OperatorConfig(window=window, function="avg", policy=pol,
                              clock=FakeClock(0.0004))

    ref = ReferenceOperator(cfg())
    vec = VectorOperator(cfg())
    vec._out.fp_order = FootprintOrder(capacity=1, slack=0)
    for b in stream(3000, 60, seed=7):
        assert rows(vec.process(b)) == rows(ref.process(b))
        assert (vec.q, vec.u) == (ref.q, ref.u)
    assert rows(vec.finish()) == rows(ref.finish())
    assert vec.state_at() == ref.state_at()


@pytest.mark.parametrize("window", CASES)
def test_open_only_order_from_the_first_query(window: WindowSpec) -> None:
    """Without a background step the order is built at the first q/u query (the
    pipeline asks after every batch) and kept up to date from then on."""
    pol = PolicyConfig(mode="open-only")

    def cfg() -> OperatorConfig:
        return OperatorConfig(window=window, function="sum", policy=pol)

    ref = ReferenceOperator(cfg())
    vec = VectorOperator(cfg())
    for i, b in enumerate(stream(3000, 60, seed=11)):
        assert rows(vec.process(b)) == rows(ref.process(b))
        if i >= 4:
            assert (vec.q, vec.u) == (ref.q, ref.u)
    assert vec._out.fp_order is not None
    assert vec.state_at() == ref.state_at()
