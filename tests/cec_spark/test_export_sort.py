"""cec export's order (cec_spark.read.sorted_runs.sort_results): key, window start, window end,
tau1, always the full sort's, whether the quick path (a stable sort by key, checked) is
taken or not; no Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cec_spark.read.sorted_runs import SORT_KEYS, quick_order, sort_results

INT64 = pa.int64()


def _results(keys: np.ndarray, ws: np.ndarray, we: np.ndarray, tau: np.ndarray,
             key_type: pa.DataType = INT64) -> pa.Table:
    return pa.table({"key": pa.array(keys, key_type), "window_start": ws, "window_end": we,
                     "count": np.ones(len(keys), np.int64), "value": np.arange(len(keys)) * 0.5,
                     "tau1": tau})


def _as_partitions(seed: int, n: int = 5000) -> pa.Table:
    """Results as a run's partitions emit them: each partition's keys its own, its rows in
    the order its windows closed (window start, then key in any order), partitions one
    after another."""
    rng = np.random.default_rng(seed)
    pairs = rng.choice(250 * 40, n, replace=False)  # (key, window) pairs, each once
    keys, ws = pairs // 40 - 50, (pairs % 40) * 10
    order = np.lexsort((rng.random(n), ws, keys % 3))  # partition = key % 3
    return _results(keys[order], ws[order], ws[order] + 10, np.arange(n)[order])


@pytest.mark.parametrize("seed", range(5))
def test_rows_as_partitions_emit_them_take_the_quick_path_and_equal_the_full_sort(
        seed: int) -> None:
    t = _as_partitions(seed)
    assert quick_order(t) is not None  # the quick path is taken
    assert sort_results(t).equals(t.sort_by(SORT_KEYS))


@pytest.mark.parametrize("seed", range(5))
def test_a_key_out_of_order_falls_back_to_the_full_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    keys = rng.integers(0, 30, n)  # many rows per key, in random window order
    ws = rng.integers(0, 5, n) * 10
    t = _results(keys, ws, ws + rng.integers(1, 3, n) * 10, rng.integers(0, 4, n))
    assert quick_order(t) is None
    assert sort_results(t).equals(t.sort_by(SORT_KEYS))


def test_ties_on_start_and_end_are_ordered_by_tau1() -> None:
    t = _results(np.array([7, 7, 7, 3]), np.array([0, 0, 0, 5]), np.array([9, 9, 9, 9]),
                 np.array([2, 1, 3, 0]))
    out = sort_results(t)
    assert quick_order(t) is None  # key 7's rows: tau1 2 before 1
    assert out.column("tau1").to_pylist() == [0, 1, 2, 3]
    assert out.equals(t.sort_by(SORT_KEYS))


def test_string_and_null_keys_and_tiny_tables_are_sorted_in_full() -> None:
    s = _results(np.array(["b", "a", "b"], object), np.array([1, 2, 0]), np.array([2, 3, 1]),
                 np.array([0, 1, 2]), pa.string())
    assert sort_results(s).equals(s.sort_by(SORT_KEYS))
    nulls = pa.table({"key": pa.array([2, None, 1], pa.int64()), "window_start": [0, 0, 0],
                      "window_end": [1, 1, 1], "count": [1, 1, 1], "value": [0.0, 1.0, 2.0],
                      "tau1": [0, 1, 2]})
    assert sort_results(nulls).equals(nulls.sort_by(SORT_KEYS))
    one = _results(np.array([4]), np.array([0]), np.array([1]), np.array([0]))
    assert sort_results(one).equals(one)

