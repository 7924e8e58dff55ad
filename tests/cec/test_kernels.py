"""The vector operator picks the kernel documented for each window kind."""

from __future__ import annotations

import numpy as np
import pytest

from cec.operator import OperatorConfig, VectorOperator
from cec.operator.count_sliding import CountSlidingKernel
from cec.operator.count_tumbling import CountSizeOneKernel, CountTumblingKernel
from cec.operator.kernel import WindowShape, _close_order
from cec.operator.key_index import KeyWindows
from cec.operator.sessions import SessionKernel
from cec.operator.slot_layout import SlotLayout
from cec.operator.slots import WindowSlots
from cec.operator.time_windows import TimeKernel, factorize, first_occurrences
from cec.windows import CountWindow, TimeWindow, WindowSpec


@pytest.mark.parametrize(("window", "kernel"), [
    (CountWindow(1, 1), CountSizeOneKernel),
    (CountWindow(10, 10), CountTumblingKernel),
    (CountWindow(10, 5), CountSlidingKernel),
    (CountWindow(7, 3), CountSlidingKernel),
    (CountWindow(2, 1), CountSlidingKernel),
    (TimeWindow(100, 100), TimeKernel),
    (TimeWindow(100, 30), TimeKernel),
])
def test_kernel_per_window_kind(window: WindowSpec, kernel: type) -> None:
    op = VectorOperator(OperatorConfig(window=window))
    assert type(op._kernel) is kernel
    assert op._by_key.max_open == window.max_open_per_key


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("spread", [1, 10**6])
def test_factorize_and_first_occurrences_against_a_dict(seed: int, spread: int) -> None:
    """The time kernel's new windows: factorize numbers the (key, m) pairs 0, 1, ... in
    order of first appearance (few keys, ``spread`` 1, and many, 10**6), and
    first_occurrences finds each pair's first row by one running maximum: both as a
    dict gives them, and the rows np.unique(return_index=True) gave."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    n_keys = max(1, n // 7) * spread
    key_idx = rng.integers(0, n_keys, n).astype(np.int64)
    m = np.sort(rng.integers(-3, 4, n)).astype(np.int64) + seed * 10**9
    codes, n_new = factorize(key_idx, m, n_keys)
    number: dict[tuple[int, int], int] = {}
    expected = [number.setdefault((int(k), int(w)), len(number))
                for k, w in zip(key_idx, m, strict=True)]
    assert codes.tolist() == expected and n_new == len(number)
    first = first_occurrences(codes)
    assert len(first) == n_new
    assert np.array_equal(first, np.unique(codes, return_index=True)[1])
    assert first_occurrences(codes[:0]).size == 0


@pytest.mark.parametrize("layout", ["time", "count", "session"])
def test_the_close_order_is_win_end_tau1_win_start(layout: str) -> None:
    # the narrow keys (tau1 as stored, no win_end where it follows from win_start) give
    # the order of the whole one, ties and a widened tau1 included
    lay = {"time": SlotLayout(end_offset=100, ts_from_start=True),
           "count": SlotLayout(end_constant=-1),
           "session": SlotLayout(first_is_start=True)}[layout]
    rng = np.random.default_rng(7)
    for widen in (False, True):
        sl = WindowSlots(capacity=2048, layout=lay)
        n = 1500
        slots = sl.alloc(n)
        start = rng.integers(0, 20, n) * 10
        sl.open(slots, np.zeros(n, np.int64), start,
                start + rng.integers(1, 30, n) * (not lay.end_offset), rng.integers(0, 40, n),
                start)
        if widen:
            sl.set_seqs("tau1", slots[:1], np.array([1 << 40]))
        closing = rng.permutation(slots)
        want = closing[np.lexsort((sl.win_start[closing], sl.seqs("tau1", closing),
                                   sl.ends(closing)))]
        assert np.array_equal(_close_order(sl, closing), want)


def test_due_skips_its_scan_only_while_no_window_can_end() -> None:
    # the bound on the open windows' starts (opened, loaded with put, released) never
    # hides a due window: due(ts) is the scan's answer at every ts
    rng = np.random.default_rng(11)
    sl = WindowSlots(capacity=64, layout=SlotLayout(end_offset=100, ts_from_start=True))
    kern = TimeKernel(WindowShape(size=100, slide=100, max_open=1), sl, KeyWindows(1))
    for _ in range(200):
        k = int(rng.integers(0, 6))
        new = sl.alloc(k)
        start = rng.integers(0, 50, k) * 100
        if rng.random() < 0.5:
            sl.open(new, np.zeros(k, np.int64), start, start + 100, np.zeros(k, np.int64),
                    start)
        else:
            sl.put("win_start", new, start)
        live = sl.live_slots()
        if len(live) and rng.random() < 0.4:
            sl.release(rng.choice(live, size=min(len(live), 3), replace=False))
        ts = int(rng.integers(0, 5200))
        live = sl.live_slots()
        due = kern.due(ts)
        assert np.array_equal(due, live[sl.win_start[live] + 100 <= ts])
        if rng.random() < 0.5:  # as the kernels do; or kept open
            sl.release(due)


def test_session_due_skips_its_scan_only_while_no_session_can_end() -> None:
    # sessions: a bound on the stored ends (opened, loaded, moved later as tuples come)
    rng = np.random.default_rng(12)
    sl = WindowSlots(capacity=64, layout=SlotLayout(first_is_start=True))
    kern = SessionKernel(100, sl, KeyWindows(1))
    for _ in range(200):
        k = int(rng.integers(0, 6))
        new = sl.alloc(k)
        start = rng.integers(0, 5000, k)
        if rng.random() < 0.5:
            sl.open(new, np.zeros(k, np.int64), start, start + 100, np.zeros(k, np.int64),
                    start)
        else:
            sl.put("win_start", new, start)
            sl.put("win_end", new, start + rng.integers(100, 300, k))
        live = sl.live_slots()
        if len(live):  # some sessions go on: their ends move later
            moved = rng.choice(live, size=min(len(live), 2), replace=False)
            sl.win_end[moved] += rng.integers(0, 200, len(moved))
        ts = int(rng.integers(0, 5500))
        live = sl.live_slots()
        due = kern.due(ts)
        assert np.array_equal(due, live[sl.win_end[live] < ts])
        if rng.random() < 0.5:
            sl.release(due)
