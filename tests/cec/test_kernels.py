"""The vector operator picks the kernel documented for each window kind."""

from __future__ import annotations

import numpy as np
import pytest

from cec.operator import OperatorConfig, VectorOperator
from cec.operator.count_sliding import CountSlidingKernel
from cec.operator.count_tumbling import CountSizeOneKernel, CountTumblingKernel
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
def test_first_occurrences_are_numpys_unique_return_index(seed: int) -> None:
    """The time kernel's first membership of each new window: factorize's codes (in order
    of first appearance), their first indices by one running maximum, exactly what
    np.unique(return_index=True) gave (keys and window numbers with many repeats)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    key_idx = rng.integers(0, max(1, n // 7), n).astype(np.int64)
    m = np.sort(rng.integers(-3, 4, n)).astype(np.int64) + seed * 10**9
    codes, n_new = factorize(key_idx, m, int(key_idx.max()) + 1)
    first = first_occurrences(codes)
    assert len(first) == n_new
    assert np.array_equal(first, np.unique(codes, return_index=True)[1])
    assert first_occurrences(codes[:0]).size == 0
