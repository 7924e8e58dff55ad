"""EC reconstruction on hand-built and simulated output records (no log, no operator)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recovery.ec as ecmod
from recovery.ec import (
    EventualCheckpoint,
    NothingToRecover,
    reconstruct,
    reconstruct_reference,
)
from recovery.errors import ExtentError, InconsistentLogError
from tests.recovery.synth import GC, GO, R, output_schema, row, rows_to_batches, simulate

BOTH = [reconstruct, reconstruct_reference]


def ec_of(fn: Any, batches: list[pa.RecordBatch], **kw: Any) -> EventualCheckpoint:
    res = fn(list(reversed(batches)), **kw)
    assert isinstance(res, EventualCheckpoint), res
    return res


def ids(ec: EventualCheckpoint) -> list[tuple[Any, int, int]]:
    t = ec.table
    return list(
        zip(
            t.column("key").to_pylist(),
            t.column("win_start").to_pylist(),
            t.column("seq").to_pylist(),
            strict=True,
        )
    )


@pytest.mark.parametrize("fn", BOTH)
def test_empty_log_is_nothing_to_recover(fn: Any) -> None:
    assert isinstance(fn([]), NothingToRecover)
    empty = pa.RecordBatch.from_pylist([], schema=output_schema())
    res = fn([empty, empty])
    assert isinstance(res, NothingToRecover)
    assert res.schema == output_schema()


@pytest.mark.parametrize("fn", BOTH)
def test_only_g_open(fn: Any) -> None:
    rows = [row(GO, 1, 1, 7, 1), row(GO, 2, 2, 8, 2), row(GO, 3, 3, 9, 3)]
    ec = ec_of(fn, rows_to_batches(rows, [1, 1, 1]))
    assert (ec.n_c, ec.t_c, ec.t_c_ts, ec.replay_after_seq, ec.next_out_seq) == (3, 3, 30, 1, 3)
    assert ids(ec) == [(7, 1, 0), (8, 2, 1), (9, 3, 2)]
    assert ec.extent.records == 3
    assert ec.extent.replay_length == 2
    assert ec.extent.g_open_found == 3
    assert [f.age for f in ec.extent.oldest] == [2, 1, 0]


@pytest.mark.parametrize("fn", BOTH)
def test_n_c_zero_is_empty_ec_with_t_equal_t_c(fn: Any) -> None:
    rows = [row(GO, 1, 1, 7, 1), row(R, 5, 0, 7, 1, 2)]
    ec = ec_of(fn, rows_to_batches(rows))
    assert (ec.n_c, ec.t_c, ec.replay_after_seq, ec.table.num_rows) == (0, 5, 5, 0)
    assert ec.table.schema == output_schema()
    assert ec.extent.records == 1


@pytest.mark.parametrize("fn", BOTH)
def test_g_check_supersedes_g_open(fn: Any) -> None:
    rows = [
        row(GO, 1, 1, 7, 1),
        row(GO, 2, 2, 8, 2),
        row(GC, 4, 2, 7, 1, 3),  # newer footprint of (7, 1)
        row(GO, 5, 3, 9, 5),
    ]
    ec = ec_of(fn, rows_to_batches(rows, [2, 2]))
    assert ids(ec) == [(8, 2, 1), (7, 1, 2), (9, 5, 3)]
    assert ec.replay_after_seq == 2
    assert ec.table.column("cnt").to_pylist() == [1, 3, 1]
    assert ec.extent.g_check_found == 1
    assert ec.extent.records == 3


@pytest.mark.parametrize("fn", BOTH)
def test_window_closed_and_reopened_inside_the_extent(fn: Any) -> None:
    # Key 7: window opened at 1, checked, closed at 6, a new one opened at 8.
    rows = [
        row(GO, 0, 1, 5, 0),
        row(GO, 1, 2, 7, 1),
        row(GC, 3, 2, 7, 1, 2),
        row(R, 6, 1, 7, 1, 3),
        row(GO, 8, 2, 7, 8),
    ]
    ec = ec_of(fn, rows_to_batches(rows, [1, 1, 1, 1, 1]))
    assert ids(ec) == [(5, 0, 0), (7, 8, 4)]
    assert ec.replay_after_seq == 0
    assert ec.extent.closed_skipped == 1


@pytest.mark.parametrize("fn", BOTH)
def test_time_window_ids_reuse_the_key(fn: Any) -> None:
    # Sliding time windows: key 3 holds windows starting at 0 and 50; 0 closes.
    rows = [
        row(GO, 1, 1, 3, 0),
        row(GO, 2, 2, 3, 50),
        row(R, 4, 1, 3, 0, 2),
        row(GO, 4, 2, 3, 100),
        row(GC, 4, 2, 3, 50, 3),
    ]
    ec = ec_of(fn, rows_to_batches(rows, [2, 3]))
    assert ids(ec) == [(3, 100, 3), (3, 50, 4)]
    assert (ec.t_c, ec.replay_after_seq, ec.extent.records) == (4, 4, 2)


@pytest.mark.parametrize("fn", BOTH)
def test_string_keys(fn: Any) -> None:
    rows = [row(GO, 1, 1, "a", 1), row(GO, 2, 2, "b", 2), row(R, 3, 1, "a", 1, 2)]
    ec = ec_of(fn, rows_to_batches(rows, key_type=pa.string()))
    assert ids(ec) == [("b", 2, 1)]


@pytest.mark.parametrize("fn", BOTH)
def test_log_ends_before_n_c_windows(fn: Any) -> None:
    rows = [row(GO, 1, 1, 7, 1), row(GO, 2, 2, 8, 2), row(GO, 3, 3, 9, 3)]
    batches = rows_to_batches(rows, [1, 1, 1])
    with pytest.raises(ExtentError, match="N_c=3"):
        fn(list(reversed(batches[1:])))  # the oldest record was trimmed


@pytest.mark.parametrize("fn", BOTH)
def test_bad_type_and_bad_order_are_loud(fn: Any) -> None:
    rows = [row(GO, 1, 1, 7, 1), row(9, 2, 2, 8, 2), row(GO, 3, 2, 9, 3)]
    with pytest.raises(InconsistentLogError, match="type 9"):
        fn(list(reversed(rows_to_batches(rows, [1, 1, 1]))))
    ok = [row(GO, 1, 1, 7, 1), row(GO, 2, 2, 8, 2), row(GO, 3, 3, 9, 3)]
    with pytest.raises(InconsistentLogError, match="newest-first"):
        b = rows_to_batches(ok, [1, 1, 1])
        fn([b[1], b[2], b[0]])  # not newest first


@pytest.mark.parametrize("fn", BOTH)
def test_time_travel_by_seq_and_ts(fn: Any) -> None:
    rows = [
        row(GO, 1, 1, 7, 1),
        row(GO, 2, 2, 8, 2),
        row(R, 4, 1, 7, 1, 2),
        row(GO, 6, 2, 9, 6),
    ]
    batches = rows_to_batches(rows, [3, 1])
    ec = ec_of(fn, batches, at_seq=1)
    assert (ec.n_c, ec.t_c, ids(ec)) == (2, 2, [(7, 1, 0), (8, 2, 1)])
    ec = ec_of(fn, batches, at_ts=59)  # rows with ts <= 59: up to t_now 4
    assert (ec.n_c, ec.t_c, ec.t_c_ts, ids(ec)) == (1, 4, 40, [(8, 2, 1)])
    assert isinstance(fn(list(reversed(batches)), at_ts=5), NothingToRecover)
    with pytest.raises(ExtentError, match="trimmed"):
        fn(list(reversed(batches[1:])), at_seq=1)


def truth_ids(model_rows: list[dict[str, Any]], truth: dict[tuple[Any, int], int]) -> list[Any]:
    return sorted((w[0], w[1], i) for w, i in truth.items())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 250),
    keys=st.integers(1, 12),
    size=st.integers(2, 6),
    slide_div=st.integers(1, 3),
    seed=st.integers(0, 10**6),
    check_p=st.sampled_from([0.0, 0.2, 0.7]),
    chunk=st.sampled_from([1, 3, 1 << 16]),
    cut=st.floats(0, 1),
    data=st.data(),
)
def test_vectorized_equals_reference_and_truth(
    n: int,
    keys: int,
    size: int,
    slide_div: int,
    seed: int,
    check_p: float,
    chunk: int,
    cut: float,
    data: st.DataObject,
) -> None:
    slide = max(1, size // slide_div)
    model = simulate(n, keys, size, slide, seed, check_p)
    if not model.rows:
        return
    sizes = data.draw(st.lists(st.integers(0, 7), min_size=1, max_size=len(model.rows) + 1))
    batches = rows_to_batches(model.rows, sizes)
    at = int(cut * (len(model.rows) - 1))
    old = ecmod.MIN_CHUNK_ROWS
    ecmod.MIN_CHUNK_ROWS = chunk
    try:
        fast = ec_of(reconstruct, batches, at_seq=at)
    finally:
        ecmod.MIN_CHUNK_ROWS = old
    ref = ec_of(reconstruct_reference, batches, at_seq=at)
    assert fast.table.equals(ref.table)
    assert (fast.n_c, fast.t_c, fast.t_c_ts, fast.replay_after_seq, fast.last_out_seq) == (
        ref.n_c,
        ref.t_c,
        ref.t_c_ts,
        ref.replay_after_seq,
        ref.last_out_seq,
    )
    fm, rm = fast.extent, ref.extent
    assert (fm.records, fm.windows_found, fm.closed_skipped, fm.oldest) == (
        rm.records,
        rm.windows_found,
        rm.closed_skipped,
        rm.oldest,
    )
    assert sorted(ids(fast)) == truth_ids(model.rows, model.truth[at])
    assert fast.n_c == len(model.truth[at])


@pytest.mark.parametrize("fn", BOTH)
def test_scan_stops_reading_at_the_extent(fn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ecmod, "MIN_CHUNK_ROWS", 16)
    # 599 one-row records; the extent is the last one (N_c = 1, a reopened window).
    rows = [row(GO, 0, 1, 1, 0)]
    for i in range(1, 300):
        rows += [row(R, 2 * i - 1, 0, 1, 2 * i - 2), row(GO, 2 * i, 1, 1, 2 * i)]
    batches = rows_to_batches(rows, [1] * len(rows))
    consumed = 0

    def newest_first() -> Any:
        nonlocal consumed
        for b in reversed(batches):
            consumed += 1
            yield b

    ec = fn(newest_first())
    assert isinstance(ec, EventualCheckpoint)
    assert ec.extent.records == 1 and ec.n_c == 1
    assert consumed <= 16
