"""The shared workload generator: deterministic, ordered, in range."""

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
