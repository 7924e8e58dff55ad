"""The vector operator picks the kernel documented for each window kind."""

from __future__ import annotations

import pytest

from cec.operator import OperatorConfig, VectorOperator
from cec.operator.count_sliding import CountSlidingKernel
from cec.operator.count_tumbling import CountSizeOneKernel, CountTumblingKernel
from cec.operator.time_windows import TimeKernel
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
