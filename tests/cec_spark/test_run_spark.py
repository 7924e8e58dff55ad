"""Failure-free runs on a real local Spark, checked against independent pandas computations."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cec.errors import RecoveryError, SpecError
from cec.records import G_OPEN, G_OPEN_R, R, logical_rows
from cec_spark.driver.runner import resume_run, run_pipeline
from cec_spark.read.export import export, results_table
from cec_spark.read.inspect import inspect_extent, inspect_log
from cec_spark.recover.resume import recover_run
from cec_spark.run.session import build_session
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.layout import RunLayout
from storage_log.log import StreamLog
from tests.cec_spark.helpers import (
    read_export_csv,
    reference_count_windows,
    reference_time_windows,
    spec_text,
    write_items_csv,
)

pytestmark = pytest.mark.spark

P = 3


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = build_session(f"local[{P + 2},3]", P)
    yield session
    session.stop()


def _assert_matches(got: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert len(got) == len(ref)
    for col in ("key", "window_start", "window_end", "count"):
        assert got[col].tolist() == ref[col].tolist(), col
    np.testing.assert_allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9)


def _upstream_rows(run: Path) -> list[pa.Table]:
    out = []
    for p in range(P):
        with StreamLog.open(RunLayout(run).upstream(p)) as log:
            out.append(pa.Table.from_batches(list(log.read_forward())))
    return out


@pytest.mark.parametrize("source", ["csv", "generator"])
def test_parallel_ingest_writes_the_same_logs(spark: object, tmp_path: Path,
                                              source: str) -> None:
    """ingest_tasks = 4: readers in parallel, a shuffle by key partition, one writer
    per log (P = 3 of them): every upstream log holds the same rows in the same order
    as the single-task ingest's, so the results are identical."""
    if source == "csv":
        write_items_csv(tmp_path / "items.csv", 30_000, keys=300)
        src = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 4000'
    else:
        src = ('kind = "generator"\nrows = 40000\nkeys = 500\nseed = 3\n'
               'interval_us = 10\ntime_field = "item_time"')
    runs = {}
    for tasks in (1, 4):
        spec = tmp_path / f"s{tasks}.toml"
        spec.write_text(spec_text(src, partitions=P, extra_run=f"ingest_tasks = {tasks}"))
        run = tmp_path / f"run{tasks}"
        summary = run_pipeline(spec, run, progress=False)
        assert summary.completed
        # the last job's writers sealed every log (each writer its own), not the driver
        state = read_advisory(RunLayout(run).ingest_state_file)
        assert state["sealed_by_writers"] == P, state
        export(run, tmp_path / f"out{tasks}.csv")
        runs[tasks] = run
    one, many = _upstream_rows(runs[1]), _upstream_rows(runs[4])
    assert sum(t.num_rows for t in one) > 0
    for a, b in zip(one, many, strict=True):
        assert a.equals(b)
        seqs = b.column("seq").to_numpy()
        assert (seqs[1:] > seqs[:-1]).all()  # each log in source order
    assert (tmp_path / "out1.csv").read_bytes() == (tmp_path / "out4.csv").read_bytes()


def test_csv_count_windows_equal_pandas(spark: object, tmp_path: Path) -> None:
    df = write_items_csv(tmp_path / "items.csv", 20_000, keys=200)
    src = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 6000'
    (tmp_path / "s.toml").write_text(spec_text(src, partitions=P))
    run = tmp_path / "run"
    summary = run_pipeline(tmp_path / "s.toml", run, progress=False)
    assert summary.completed and summary.source_rows == 20_000
    kept = int((df.item_price >= 0).sum())
    assert summary.ingested_tuples == kept == summary.operator_tuples
    ref = reference_count_windows(df, 10)
    assert summary.results == len(ref)
    out = export(run, tmp_path / "out.csv")
    assert out.rows == len(ref)
    _assert_matches(read_export_csv(tmp_path / "out.csv"), ref)
    # the stored run.toml is enough to resume; a finished run resumes to the same output
    again = resume_run(run, progress=False)
    assert again.completed and again.ingested_tuples == 0
    export(run, tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_bytes() == (tmp_path / "out.csv").read_bytes()
    # a finished run never reads its source again: a changed one does not matter ...
    with (tmp_path / "items.csv").open("a") as fh:
        fh.write(f"1,1.0,{int(df.item_time.iloc[-1]) + 1}\n")
    assert resume_run(run, progress=False).completed
    # ... but a run that must read it again (an upstream log cut by --repair) refuses it
    cut = tmp_path / "cut"
    shutil.copytree(run, cut)
    seg = sorted((cut / "upstream" / "p0000").glob("*.seg"))[0]
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 1
    seg.write_bytes(bytes(data))
    with pytest.raises(RecoveryError, match=r"items.csv: the source changed since the run "
                       r"started: \d+ bytes .*lost partition 0: rows with seq"):
        recover_run(cut, repair=True, progress=False)
    # the inspection commands read the same directory
    logs = inspect_log(run, verify=True)
    assert len(logs.logs) == 2 * P and all(lg.verify and lg.verify.ok for lg in logs.logs)
    assert all(lg.sealed for lg in logs.logs)
    extent = inspect_extent(run)
    opened = sum(p.counts.G_open for p in extent.partitions if p.counts)
    assert opened >= len(ref)
    assert sum(p.counts.R for p in extent.partitions if p.counts) == len(ref)
    assert sum(p.n_c or 0 for p in extent.partitions) == opened - len(ref)
    t_mid = int(df.item_time.iloc[10_000])
    past = inspect_extent(run, partition=1, at=t_mid)
    assert (past.partitions[0].t_c_ts_us or 0) <= t_mid
    dry = recover_run(run, dry_run=True)
    assert [p.partition for p in dry.partitions] == list(range(P))
    assert all(p.sealed for p in dry.partitions)
    assert dry.would[:P] == [f"partition {p}: finished before (its output log is sealed): "
                             "nothing to rebuild or replay" for p in range(P)]
    assert dry.would[P].startswith("run: the source was read to its end")
    json.dumps(dataclasses.asdict(dry))


def test_size_one_windows_store_g_open_with_r(spark: object, tmp_path: Path) -> None:
    """Fast windows: each tuple's G_open and R share a row, every reader sees both."""
    df = write_items_csv(tmp_path / "items.csv", 5_000, keys=20)
    src = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 2000'
    (tmp_path / "s.toml").write_text(spec_text(
        src, window='{ kind = "count", size = 1 }', partitions=P))
    run = tmp_path / "run"
    summary = run_pipeline(tmp_path / "s.toml", run, progress=False)
    kept = int((df.item_price >= 0).sum())
    assert summary.completed and summary.results == kept
    assert sum(p.g_open for p in summary.per_partition) == kept
    extent = inspect_extent(run)
    assert sum(p.counts.R for p in extent.partitions if p.counts) == kept
    assert sum(p.counts.G_open for p in extent.partitions if p.counts) == kept
    assert all(p.n_c == 0 for p in extent.partitions)
    export(run, tmp_path / "out.csv")
    _assert_matches(read_export_csv(tmp_path / "out.csv"), reference_count_windows(df, 1))
    # stored: one row per tuple; written out: G_open then R, dense output seq
    layout = RunLayout(run)
    with StreamLog.open(layout.output(0)) as log:
        stored = pa.Table.from_batches(list(log.read_forward()))
    assert set(stored.column("type").to_pylist()) == {G_OPEN_R}
    tuples = logical_rows(stored.combine_chunks().to_batches()[0])
    assert tuples.column("type").to_pylist() == [G_OPEN, R] * stored.num_rows
    assert tuples.column("seq").to_pylist() == list(range(2 * stored.num_rows))


def test_jsonl_sliding_time_windows_equal_pandas(spark: object, tmp_path: Path) -> None:
    df = write_items_csv(tmp_path / "x.csv", 8_000, keys=30)
    with (tmp_path / "items.jsonl").open("w") as fh:
        for rec in df.to_dict(orient="records"):
            fh.write(json.dumps(rec) + "\n")
    src = 'kind = "jsonl"\npath = "items.jsonl"\ntime_field = "item_time"\nchunk_rows = 3000'
    (tmp_path / "s.toml").write_text(spec_text(
        src, window='{ kind = "time", size = "2s", slide = "500ms" }', function="sum",
        partitions=P))
    run = tmp_path / "run"
    assert run_pipeline(tmp_path / "s.toml", run, progress=False).completed
    got = results_table(run).to_pandas()
    ref = reference_time_windows(df, 2_000_000, 500_000, "sum")
    _assert_matches(got, ref)


def test_generator_stream_dir_and_max_tuples(spark: object, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    src = 'kind = "generator"\nrows = 60000\nkeys = 500\nseed = 3\nchunk_rows = 25000'
    (tmp_path / "g.toml").write_text(spec_text(src, where=None, partitions=P))
    summary = run_pipeline(tmp_path / "g.toml", tmp_path / "g", progress=False,
                           max_tuples=50_000)
    assert summary.completed and summary.source_rows == 50_000
    ids = spark.range(50_000).select(  # type: ignore[attr-defined]
        F.pmod(F.xxhash64(F.lit(3), F.col("id")), F.lit(500)).alias("k"))
    expected = sum(int(r["n"]) // 10 for r in ids.groupBy("k").agg(F.count("*").alias("n"))
                   .collect())
    assert summary.results == expected
    # a parquet folder (Spark's own reader, file by file, in name order)
    pq_dir = tmp_path / "pq"
    pq_dir.mkdir()
    pdf = write_items_csv(tmp_path / "p.csv", 9_000, keys=25, seed=9)
    for i, lo in enumerate(range(0, 9_000, 3_000)):
        pdf.iloc[lo:lo + 3_000].to_parquet(pq_dir / f"part-{i:05d}.parquet", index=False,
                                           row_group_size=1_000)
    src = 'kind = "parquet"\npath = "pq"\ntime_field = "item_time"\nchunk_rows = 4000'
    (tmp_path / "p.toml").write_text(spec_text(src, partitions=P))
    assert run_pipeline(tmp_path / "p.toml", tmp_path / "p", progress=False).completed
    _assert_matches(results_table(tmp_path / "p").to_pandas(), reference_count_windows(pdf, 10))
    # a stream folder whose files and _END are all there runs like a bounded source
    folder = tmp_path / "in"
    folder.mkdir()
    df = write_items_csv(tmp_path / "all.csv", 3_000, keys=20)
    for i, lo in enumerate(range(0, 3_000, 1_000)):
        df.iloc[lo:lo + 1_000].to_csv(folder / f"f{i}.csv", index=False)
    (folder / "_END").touch()
    src = 'kind = "stream-dir"\npath = "in"\ntime_field = "item_time"\npoll_ms = 20'
    (tmp_path / "d.toml").write_text(spec_text(src, partitions=P))
    assert run_pipeline(tmp_path / "d.toml", tmp_path / "d", progress=False).completed
    _assert_matches(results_table(tmp_path / "d").to_pandas(), reference_count_windows(df, 10))


def test_bad_filter_is_a_spec_error_before_anything_is_written(spark: object,
                                                              tmp_path: Path) -> None:
    write_items_csv(tmp_path / "items.csv", 100)
    src = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"'
    (tmp_path / "s.toml").write_text(spec_text(src, where="no_such_col > 1", partitions=P))
    with pytest.raises(SpecError, match=r"s\.toml: \[filter\]\.where: 'no_such_col > 1'"):
        run_pipeline(tmp_path / "s.toml", tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
