"""cec.order.stable_order: numpy's stable argsort, by counting passes where the keys'
range allows; no Spark."""

from __future__ import annotations

import numpy as np
import pytest

from cec.order import stable_order


@pytest.mark.parametrize(("dtype", "span"), [
    (np.int8, 1), (np.int8, 100), (np.int32, 4), (np.int32, 200), (np.int32, 70_000),
    (np.int32, 1 << 30),
    *[(t, s) for t in (np.int64, np.uint64)
      for s in (1, 200, 70_000, 1 << 31, (1 << 32) + 5, 1 << 62)]])
def test_the_radix_order_is_numpys_stable_argsort(dtype: type, span: int) -> None:
    """stable_order (one 8-bit or one or two 16-bit counting passes, or numpy's merge sort past 32
    bits) gives exactly np.argsort(kind="stable"): ties in the order they came."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(span % 997)
    lo = int(info.min) if info.min < 0 and span < int(info.max) else 0
    raw = rng.integers(0, span, 2000, dtype=np.uint64)  # many ties below 2000
    key = np.array([int(v) + lo for v in raw] + [lo, lo + span - 1] * 3, dtype=dtype)
    order = stable_order(key)
    assert np.array_equal(order, np.argsort(key, kind="stable"))
    assert np.array_equal(stable_order(key[:1]), [0]) and stable_order(key[:0]).size == 0
