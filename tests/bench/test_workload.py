"""The shared workload generator: deterministic, ordered, in range; and the Spark anchor."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.workload import (
    MANIFEST,
    SCHEMA,
    ensure_dataset,
    generate_table,
    iter_batches,
    load_dataset,
    read_dataset,
    split_rows,
    write_dataset,
)


def test_same_seed_same_bytes_other_seed_differs() -> None:
    a = generate_table(50_000, 1_000, seed=7)
    b = generate_table(50_000, 1_000, seed=7)
    c = generate_table(50_000, 1_000, seed=8)
    assert a.schema == SCHEMA
    assert a.equals(b)
    assert not a.equals(c)


def test_row_count_is_exact() -> None:
    table = generate_table(10, 5, seed=1)
    assert table.num_rows == 10
    assert generate_table(0, 5, seed=1).num_rows == 0


def test_time_is_non_decreasing_and_keys_in_range() -> None:
    n_keys = 100
    table = generate_table(200_000, n_keys, seed=3, rate=50_000.0)
    ids = table.column("item_id").to_numpy()
    times = table.column("item_time").to_numpy()
    prices = table.column("item_price").to_numpy()
    assert ids.dtype == np.int64 and times.dtype == np.int64 and prices.dtype == np.int64
    assert ids.min() >= 0 and ids.max() < n_keys
    assert len(np.unique(ids)) == n_keys  # 2 000 draws per key: all keys occur
    assert np.all(np.diff(times) >= 0)
    assert prices.min() >= 1 and prices.max() <= 10_000
    # Event time advances at about `rate` tuples per second.
    span_s = (times[-1] - times[0]) / 1e6
    assert 3.8 < span_s < 4.2


def test_keys_are_roughly_uniform() -> None:
    ids = generate_table(400_000, 4, seed=11).column("item_id").to_numpy()
    counts = np.bincount(ids, minlength=4)
    assert np.all(np.abs(counts - 100_000) < 2_000)


def test_invalid_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="n_keys"):
        generate_table(10, 0)
    with pytest.raises(ValueError, match="n_rows"):
        generate_table(-1, 10)
    with pytest.raises(ValueError, match="files"):
        split_rows(10, 0)


def test_split_rows_covers_in_order() -> None:
    ranges = split_rows(10, 3)
    assert ranges == [(0, 3), (3, 6), (6, 10)]
    assert split_rows(2, 4) == [(0, 0), (0, 1), (1, 1), (1, 2)]


def test_iter_batches_concatenate_to_the_table() -> None:
    batches = iter_batches(10_000, 50, seed=5, batch_rows=3_000)
    assert [b.num_rows for b in batches] == [3_000, 3_000, 3_000, 1_000]
    table = generate_table(10_000, 50, seed=5)
    assert np.array_equal(
        np.concatenate([b.column(0).to_numpy() for b in batches]),
        table.column("item_id").to_numpy(),
    )


def test_write_dataset_files_in_stream_order(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "w", 10_001, 20, seed=9, files=4)
    assert [p.name for p in ds.files] == [f"part-{i:05d}.parquet" for i in range(4)]
    mtimes = [os.stat(p).st_mtime for p in ds.files]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == 4
    parts = [pq.read_table(p) for p in ds.files]
    assert sum(t.num_rows for t in parts) == 10_001
    assert all(t.schema.equals(SCHEMA) for t in parts)
    # Files are consecutive in time: the last timestamp of one <= the first of the next.
    for left, right in itertools.pairwise(parts):
        assert left.column("item_time")[-1].as_py() <= right.column("item_time")[0].as_py()
    assert read_dataset(tmp_path / "w").equals(generate_table(10_001, 20, seed=9))
    assert (tmp_path / "w" / MANIFEST).exists()
    assert load_dataset(tmp_path / "w").spec == ds.spec


def test_write_dataset_refuses_a_dirty_directory(tmp_path: Path) -> None:
    write_dataset(tmp_path / "w", 100, 5, seed=1, files=2)
    with pytest.raises(FileExistsError):
        write_dataset(tmp_path / "w", 100, 5, seed=1, files=2)


def test_ensure_dataset_reuses_matching_and_refuses_other(tmp_path: Path) -> None:
    first = ensure_dataset(tmp_path / "w", 1_000, 5, seed=1, files=2)
    again = ensure_dataset(tmp_path / "w", 1_000, 5, seed=1, files=2)
    assert again.files == first.files
    with pytest.raises(FileExistsError, match="different workload"):
        ensure_dataset(tmp_path / "w", 1_000, 6, seed=1, files=2)


@pytest.mark.spark
def test_spark_baseline_matches_pandas(tmp_path: Path) -> None:
    """The anchor computes the right thing: its final state equals a pandas groupby mean."""
    from bench.spark_baseline import get_session, read_final_state, run_stateful

    ds = write_dataset(tmp_path / "data", 20_000, 500, seed=42, files=2, rate=10_000.0)
    expected = (
        read_dataset(ds.directory).to_pandas().groupby("item_id")["item_price"].mean()
    )
    spark = get_session()
    try:
        res = run_stateful(
            ds.directory, tmp_path / "ck", "rocksdb",
            sink="parquet", output_dir=tmp_path / "out", spark=spark,
        )
        assert res.batches == 2 and res.rows == 20_000
        assert res.final_state_rows == 500
        assert res.steady_rows_per_s > 0 and res.checkpoint_bytes > 0
        assert res.jvm_cpu_s > 0
        got = read_final_state(tmp_path / "out").set_index("item_id")["avg_price"]
        assert list(got.index) == list(expected.index)
        np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=1e-12)

        # The event-time variant on the other provider: one row per (window, key).
        win = run_stateful(
            ds.directory, tmp_path / "ckw", "hdfs", query="windowed", window="1 second",
            sink="parquet", output_dir=tmp_path / "outw", spark=spark,
        )
        assert win.rows == 20_000
        frame = read_dataset(ds.directory).to_pandas()
        frame["window_start_us"] = frame["item_time"] // 1_000_000 * 1_000_000
        want = frame.groupby(["window_start_us", "item_id"])["item_price"].mean()
        have = read_final_state(tmp_path / "outw").set_index(["window_start_us", "item_id"])
        assert list(have.index) == list(want.index)
        np.testing.assert_allclose(have["avg_price"].to_numpy(), want.to_numpy(), rtol=1e-12)
    finally:
        spark.stop()


def test_progress_summary_and_table_without_spark(tmp_path: Path) -> None:
    """The arithmetic of the anchor: steady rate excludes the cold first batch."""
    from bench.spark_baseline import (
        AnchorReport,
        BatchStat,
        RestartResult,
        _summarize,
        committed_batches,
        offset_batches,
    )

    ck = tmp_path / "ck"
    (ck / "commits").mkdir(parents=True)
    (ck / "offsets").mkdir()
    for i in range(2):
        (ck / "commits" / str(i)).write_text("v1\n{}\n")
        (ck / "commits" / f".{i}.crc").write_text("")
    for i in range(3):
        (ck / "offsets" / str(i)).write_text("v1\n")
    assert committed_batches(ck) == [0, 1]
    assert offset_batches(ck) == [0, 1, 2]

    def progress(batch: int, rows: int, ms: int) -> dict[str, object]:
        return {
            "batchId": batch,
            "numInputRows": rows,
            "durationMs": {"triggerExecution": ms, "addBatch": ms // 2},
            "stateOperators": [{"numRowsTotal": 7, "memoryUsedBytes": 9, "commitTimeMs": 1}],
        }

    stat = BatchStat.from_progress(progress(0, 10, 100))
    assert (stat.input_rows, stat.trigger_ms, stat.add_batch_ms, stat.state_rows) == (
        10, 100, 50, 7,
    )
    res = _summarize(
        [progress(0, 1_000, 5_000), progress(1, 1_000, 500), progress(2, 1_000, 500),
         progress(3, 0, 100)],
        provider="rocksdb", query="keyed", rows=3_000, keys=10, files=3,
        max_files_per_trigger=1, shuffle_partitions=2, sink="noop", wall_s=6.0,
        checkpoint_dir=ck, session_start_s=None, spark_version="test", jvm_cpu_s=1.5,
    )
    assert res.batches == 3
    assert res.rows_per_cpu_s == pytest.approx(2_000.0)
    assert res.steady_rows_per_s == pytest.approx(2_000.0)
    assert res.first_batch_s == pytest.approx(5.0)
    assert res.wall_rows_per_s == pytest.approx(500.0)
    assert res.checkpoint_bytes > 0
    assert res.checkpoint_bytes_per_tuple == pytest.approx(res.checkpoint_bytes / 3_000)
    with pytest.raises(RuntimeError, match="read 1000 rows"):
        _summarize(
            [progress(0, 1_000, 10)], provider="hdfs", query="keyed", rows=3_000, keys=1,
            files=1, max_files_per_trigger=1, shuffle_partitions=2, sink="noop", wall_s=1.0,
            checkpoint_dir=ck, session_start_s=None, spark_version="test",
        )
    rst = RestartResult(
        provider="rocksdb", query="keyed", rows=3_000, keys=10, files=3,
        shuffle_partitions=2, committed_before_kill=1, inflight_at_kill=True,
        checkpoint_bytes_at_kill=1, state_rows_at_kill=7, session_start_s=4.0,
        restart_first_batch_s=3.25, first_batch_id=1, first_batch_rows=1_000,
        first_batch_trigger_ms=3_000, catch_up_s=4.5, rows_after_restart=2_000,
        cold_first_batch_s=2.0, load_avg_1m=0.5,
    )
    report = AnchorReport(rows=3_000, keys=10, files=3, shuffle_partitions=2, repeats=1,
                          runs=[res], restarts=[rst])
    table = report.to_markdown()
    assert "| keyed | rocksdb | 1 | 3 | 2,000 | 500 | 2,000 | 5.00 |" in table
    assert "| 3.25 | 4.50 |" in table
    assert report.to_dict()["restarts"][0]["restart_first_batch_s"] == 3.25
