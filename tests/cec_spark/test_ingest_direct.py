"""The upstream rows made in Python (cec_spark.ingest.project), without Spark: the key
partition equals Spark's (recovery.rescale's xxhash64), the projection's columns and
casts are the Spark query's. (The Spark query against this path, log for log:
tests/cec_spark/test_run_spark.py::test_parallel_ingest_writes_the_same_logs, whose
one-task run takes the direct query.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cec.spec import load_spec
from cec_spark.ingest.project import (
    PART,
    TABLE_SPAN,
    Partitioner,
    Projector,
    direct_reason,
    xxhash64_int64,
)
from cec_spark.ingest.writer import PART as WRITER_PART
from cec_spark.rundir.run_file import settings_for
from cec_spark.source.types import SEQ, ColumnTypes
from recovery.rescale import partitions_of, spark_xxhash64
from tests.cec_spark.helpers import spec_text


def test_vectorized_xxhash64_is_sparks() -> None:
    rng = np.random.default_rng(11)
    keys = np.concatenate([
        rng.integers(-(1 << 63), (1 << 63) - 1, 20_000, dtype=np.int64),
        np.array([0, 1, -1, 42, (1 << 63) - 1, -(1 << 63), 1 << 32, -(1 << 31)], np.int64)])
    want = np.array([spark_xxhash64(int(k)) for k in keys], np.int64)
    assert np.array_equal(xxhash64_int64(keys), want)


@pytest.mark.parametrize(("partitions", "groups"), [(4, 128), (3, 100), (5, None), (4, None),
                                                    (7, 1), (1, 128)])
def test_int64_partition_equals_the_rescale_partition(partitions: int,
                                                      groups: int | None) -> None:
    rng = np.random.default_rng(5)
    keys = [*rng.integers(-(1 << 62), 1 << 62, 3000).tolist(), 0, -1, 7, 7,
            *rng.integers(0, 100, 500).tolist()]
    got = Partitioner(partitions, groups)(pa.array(keys, pa.int64())).to_numpy().tolist()
    assert got == partitions_of(keys, partitions, groups or partitions).tolist()
    # a string key takes the per-distinct-key path: the same partitions
    strs = [str(k) for k in keys[:200]]
    got_s = Partitioner(partitions, groups)(pa.array(strs)).to_numpy().tolist()
    assert got_s == partitions_of(strs, partitions, groups or partitions).tolist()


def test_null_int64_keys_hash_as_the_seed() -> None:
    part = Partitioner(5, 128)
    got = part(pa.array([None, 3, None], pa.int64())).to_numpy().tolist()
    assert got[0] == got[2] == (42 % 128) * 5 // 128
    assert got[1] == partitions_of([3], 5, 128)[0]
    chunked = pa.chunked_array([pa.array([3], pa.int64()), pa.array([None], pa.int64())])
    assert part(chunked).to_numpy().tolist() == [got[1], got[0]]


def _spec(tmp_path: Path, extra_source: str = "", where: str | None = None):  # type: ignore[no-untyped-def]
    src = 'kind = "csv"\npath = "x.csv"\ntime_field = "item_time"\n' + extra_source
    path = tmp_path / "s.toml"
    path.write_text(spec_text(src, where=where, partitions=4))
    return load_spec(path)


def test_projection_is_the_spark_querys_columns(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    big = (1 << 53) + 1  # Spark's cast to double rounds it; never an error
    batch = pa.RecordBatch.from_pydict({
        "item_id": pa.array([5, 6, None], pa.int64()),
        "item_price": pa.array([big, 2, None], pa.int64()),
        "item_time": pa.array([10, 20, 30], pa.int64()),
        SEQ: pa.array([0, 1, 2], pa.int64())})
    out = Projector(spec, 128, None)(batch)
    assert PART == WRITER_PART
    assert out.schema.names == ["ts", "seq", "item_id", "item_price", PART]
    assert out.schema.types == [pa.int64(), pa.int64(), pa.int64(), pa.float64(), pa.int32()]
    assert out.column("item_price").to_pylist() == [float(big), 2.0, None]
    assert out.column("ts").to_pylist() == [10, 20, 30]
    assert out.column(PART).to_pylist() == [
        *partitions_of([5, 6], 4, 128).tolist(), (42 % 128) * 4 // 128]


def test_what_python_cannot_match_runs_the_spark_query(tmp_path: Path) -> None:
    cols = ColumnTypes(("item_id", "item_price", "item_time"), ("int64", "int64", "int64"))
    assert direct_reason(_spec(tmp_path), settings_for(_spec(tmp_path), cols, None)) is None
    late = _spec(tmp_path, 'allowed_lateness = "1s"\n')
    assert "allowed_lateness" in (direct_reason(late, settings_for(late, cols, None)) or "")
    floats = ColumnTypes(cols.names, ("float64", "int64", "int64"))
    spec = _spec(tmp_path)
    assert "item_id" in (direct_reason(spec, settings_for(spec, floats, None)) or "")


@pytest.mark.parametrize(("partitions", "groups"), [(4, 128), (3, None), (200, 1000)])
def test_the_partition_table_gives_the_hashed_partitions(partitions: int,
                                                         groups: int | None) -> None:
    """Batches whose keys fit the table, move it, widen it, overflow it and sit at the
    int64 ends: every partition is the hashed one."""
    rng = np.random.default_rng(partitions)
    edge = (1 << 63) - 1
    batches = [rng.integers(0, 100, 5000), rng.integers(0, 100, 5000),  # reuse the table
               rng.integers(90, 3000, 5000),  # wider: grows, keeps the known keys
               rng.integers(-5000, 10, 5000),  # moves below
               rng.integers(0, 1 << 40, 5000),  # too wide: hashed whole
               rng.integers(1 << 40, (1 << 40) + 100, 50),  # far from the table: a new one
               np.array([edge, edge - 1, edge - 5000], np.int64),
               np.array([-edge - 1, -edge, 0], np.int64),
               np.array([], np.int64)]
    part = Partitioner(partitions, groups)
    for keys in batches:
        got = part(pa.array(keys.astype(np.int64), pa.int64())).to_numpy().tolist()
        assert got == partitions_of(keys.tolist(), partitions, groups or partitions).tolist()
        table = part._table
        assert table is None or len(table) <= TABLE_SPAN
    # nulls still hash as the seed, with the table in use
    got = part(pa.array([None, 3, None, 4], pa.int64())).to_numpy().tolist()
    assert got[0] == got[2] == part.of_hash(42)
    assert got[1::2] == partitions_of([3, 4], partitions, groups or partitions).tolist()
