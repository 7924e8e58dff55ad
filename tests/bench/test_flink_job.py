"""The Flink side of the fair benchmark, its parts that need no Flink: the input layout,
the SQL and configuration it hands Flink, and the reading of what Flink writes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from bench.fair_spark import SENTINEL_KEY, START_US, make_data, normalize
from bench.flink_job import (
    ROWS_VIEW,
    SHARED_CSV,
    _job,
    checkpoint_rows,
    committed_files,
    flink_conf,
    flink_input,
    flink_output,
    input_rows,
    latest_checkpoint,
    normalize_flink,
    query_sql,
    reference_windows,
    shared_csv,
    sink_ddl,
    source_ddl,
    source_rows,
    split_round_robin,
)
from bench.harness import compare


def test_round_robin_keeps_every_row_once_and_each_part_in_order() -> None:
    t = pa.table({"item_time": list(range(100, 107))})
    parts = split_round_robin(t, 5, 3)  # global rows 5..11
    assert [p.column("item_time").to_pylist() for p in parts] == [
        [101, 104], [102, 105], [100, 103, 106]]
    one = split_round_robin(t, 0, 1)
    assert one[0].equals(t)


def test_flink_input_is_k_time_ordered_csv_files_made_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_data(data, 250, 7, 100)
    assert input_rows(data) == 250
    csv = flink_input(data, 2)
    assert csv.parent == data.parent and csv != data  # beside the input, never in it
    files = sorted(csv.glob("part-*.csv"))
    assert [f.name for f in files] == ["part-000.csv", "part-001.csv"]
    names = ["item_id", "item_price", "item_time"]
    parts = [pacsv.read_csv(f, read_options=pacsv.ReadOptions(column_names=names))
             for f in files]
    for p in parts:
        times = p.column("item_time").to_pylist()
        assert times == sorted(times)
    every = pa.concat_tables(parts).sort_by("item_time")
    original = pa.concat_tables([pq.read_table(f) for f in sorted(data.glob("*.parquet"))])
    assert every.num_rows == 251  # the sentinel too, last in its file
    assert every.column("item_time").to_pylist() == original.column("item_time").to_pylist()
    assert every.column("item_id").to_pylist() == original.column("item_id").to_pylist()
    stamp = files[0].stat().st_mtime_ns
    assert flink_input(data, 2) == csv and files[0].stat().st_mtime_ns == stamp  # reused


def test_ddl_and_query_say_what_the_benchmark_compares() -> None:
    src = source_ddl("/tmp/it's here")
    assert "'/tmp/it''s here'" in src
    assert "WATERMARK FOR ts AS ts - INTERVAL '0.001' SECOND" in src
    assert "TO_TIMESTAMP_LTZ(item_time / 1000, 3)" in src
    assert "'format' = 'csv'" in sink_ddl("/o")
    tumble = query_sql()
    assert "TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '10' SECOND)" in tumble
    assert "AVG(CAST(item_price AS DOUBLE))" in tumble
    assert "HOP(TABLE src, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND)" in (
        query_sql(sliding=True))


def test_the_shared_csv_is_one_time_ordered_file_with_a_header_made_once(
        tmp_path: Path) -> None:
    """bench/growth_bench.py's CSV table: the file cec, Spark and Flink all read."""
    data = tmp_path / "data"
    make_data(data, 250, 7, 100)
    csv = shared_csv(data)
    assert csv == tmp_path / "data-csv"  # beside the input, never in it
    assert sorted(f.name for f in csv.iterdir()) == ["_source.json", SHARED_CSV]
    text = (csv / SHARED_CSV).read_text()
    assert text.startswith("item_id,item_price,item_time\n")  # no quotes: cec's header
    read = pacsv.read_csv(csv / SHARED_CSV)  # the header names the columns
    original = pa.concat_tables([pq.read_table(f) for f in sorted(data.glob("*.parquet"))])
    assert read.schema.names == original.schema.names
    assert read.cast(original.schema).equals(original)  # every row, in stream order
    assert read.column("item_id").to_pylist()[-1] == SENTINEL_KEY  # the sentinel last
    assert read.column("item_time").to_pylist()[0] == START_US  # integer epoch µs
    made = (csv / SHARED_CSV).stat().st_mtime_ns
    assert shared_csv(data) == csv and (csv / SHARED_CSV).stat().st_mtime_ns == made
    (data / "part-00000.parquet").unlink()  # other parquet files: made again from them
    make_data(data, 250, 7, 100, seed=8)
    assert shared_csv(data) == csv and (csv / SHARED_CSV).read_text() != text


def test_flink_reads_the_header_line_as_nulls_and_drops_that_row() -> None:
    src = source_ddl("/d", header=True)
    assert "'csv.ignore-parse-errors' = 'true'" in src
    assert "TO_TIMESTAMP_LTZ(COALESCE(item_time, 0) / 1000, 3)" in src  # never a NULL time
    assert "ignore-parse-errors" not in source_ddl("/d")  # the K-file copies: strict
    assert ROWS_VIEW.endswith("FROM src WHERE item_time IS NOT NULL")
    statements, insert = _job(Path("/d"), Path("/o"), False, header=True)
    assert statements[1] == ROWS_VIEW
    assert "TUMBLE(TABLE src_rows, DESCRIPTOR(ts), INTERVAL '10' SECOND)" in insert
    plain, insert = _job(Path("/d"), Path("/o"), False)
    assert len(plain) == 2 and "TABLE src," in insert


def test_conf_checkpoints_and_restore() -> None:
    plain = flink_conf(2, rest_port=1234)
    assert plain["parallelism.default"] == "2" and plain["rest.port"] == "1234"
    assert plain["execution.runtime-mode"] == "streaming"
    assert plain["table.local-time-zone"] == "UTC"
    assert plain["rest.bind-address"] == "127.0.0.1"
    assert not any(k.startswith("execution.checkpointing") for k in plain)
    ck = flink_conf(1, rest_port=1, checkpoint_dir="file:///c", checkpoint_interval_ms=1000,
                    restore="/c/j/chk-3")
    assert ck["execution.checkpointing.interval"] == "1000 ms"
    assert ck["execution.checkpointing.dir"] == "file:///c"
    assert ck["execution.checkpointing.externalized-checkpoint-retention"] == (
        "RETAIN_ON_CANCELLATION")
    assert ck["execution.state-recovery.path"] == "/c/j/chk-3"
    with pytest.raises(ValueError, match="parallelism"):
        flink_conf(0, rest_port=1)
    with pytest.raises(ValueError, match="state backend"):
        flink_conf(1, rest_port=1, state_backend="memory")
    with pytest.raises(ValueError, match="directory"):
        flink_conf(1, rest_port=1, checkpoint_interval_ms=1000)


def _flink_rows(rows: list[tuple[int, str, str, float]]) -> pa.Table:
    k, s, e, a = zip(*rows, strict=True)
    return pa.table({"f0": list(k), "f1": list(s), "f2": list(e), "f3": list(a)})


def test_flink_output_normalized_as_cec_and_spark_outputs() -> None:
    got = normalize_flink(_flink_rows([
        (2, "2026-01-01 00:00:10", "2026-01-01 00:00:20", 2.5),
        (SENTINEL_KEY, "2026-01-01 01:00:00", "2026-01-01 01:00:10", 0.0),
        (1, "2026-01-01 00:00:00.000", "2026-01-01 00:00:10", 7.0)]))
    want = normalize(pa.table({
        "key": [1, 2], "window_start": [START_US, START_US + 10_000_000],
        "window_end": [START_US + 10_000_000, START_US + 20_000_000], "avg": [7.0, 2.5]}))
    assert compare(want, got, ("want", "flink")) is None
    assert got.column("key").to_pylist() == [1, 2]
    off = normalize_flink(_flink_rows([(1, "2026-01-01 00:00:00.001", "2026-01-01 00:00:10",
                                        7.0), (2, "2026-01-01 00:00:10",
                                               "2026-01-01 00:00:20", 2.5)]))
    assert compare(want, off) is not None  # a millisecond off is a difference
    with pytest.raises(ValueError, match="columns"):
        normalize_flink(pa.table({"a": [1]}))
    with pytest.raises(ValueError, match="empty"):
        normalize_flink(pa.table({"k": [1], "s": pa.array([None], pa.string()),
                                  "e": ["2026-01-01 00:00:10"], "a": [1.0]}))


def test_only_committed_files_are_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-a-0-0").write_text('1,"2026-01-01 00:00:00","2026-01-01 00:00:10",4.5\n')
    (out / ".part-a-1-0.inprogress.x").write_text(
        '9,"2026-01-01 00:00:00","2026-01-01 00:00:10",1.0\n')
    (out / "_SUCCESS").write_text("")
    (out / "part-a-1-1").write_text("")
    assert [p.name for p in committed_files(out)] == ["part-a-0-0", "part-a-1-1"]
    t = flink_output(out)
    assert t.to_pylist() == [{"key": 1, "window_start": START_US,
                              "window_end": START_US + 10_000_000, "avg": 4.5}]
    with pytest.raises(FileNotFoundError):
        flink_output(tmp_path / "none")


def test_source_rows_sums_the_sources_records_out_only() -> None:
    metrics = [{"id": "0.Source__src[1].numRecordsOut", "value": "150"},
               {"id": "1.Source__src[1].numRecordsOut", "value": "70"},
               {"id": "1.Source__src[1].numRecordsOutPerSecond", "value": "9e4"},
               {"id": "0.Calc[2].numRecordsOut", "value": "150"},
               {"id": "0.numRecordsOut", "value": "3"},
               {"id": "2.Source__src[1].numRecordsOut", "value": "n/a"}]
    assert source_rows(metrics) == 220
    assert source_rows([]) == 0


def test_reference_windows_tumbling_and_sliding() -> None:
    s = 10_000_000
    t = pa.table({"item_id": [1, 1, 2, 1, SENTINEL_KEY],
                  "item_price": [10, 20, 5, 40, 0],
                  "item_time": [START_US, START_US + 7_000_000, START_US + 3,
                                START_US + s + 1, START_US + 99 * s]})
    tumble = reference_windows(t)
    assert tumble.to_pylist() == [
        {"key": 1, "window_start": START_US, "window_end": START_US + s, "avg": 15.0},
        {"key": 1, "window_start": START_US + s, "window_end": START_US + 2 * s,
         "avg": 40.0},
        {"key": 2, "window_start": START_US, "window_end": START_US + s, "avg": 5.0}]
    slide = reference_windows(t, sliding=True)
    key1 = [(r["window_start"] - START_US, r["avg"]) for r in slide.to_pylist()
            if r["key"] == 1]
    # 10 s windows every 5 s: [-5,5) {10}, [0,10) {10,20}, [5,15) {20,40}, [10,20) {40}
    assert key1 == [(-5_000_000, 10.0), (0, 15.0), (5_000_000, 30.0), (s, 40.0)]


def test_checkpoint_rows_and_latest_checkpoint(tmp_path: Path) -> None:
    samples = [(1000.0, 10), (2000.0, 50), (3000.0, 90)]
    assert checkpoint_rows(samples, 2500.0) == 50
    assert checkpoint_rows(samples, 500.0) == 0
    for n, done in ((9, True), (10, True), (11, False)):
        chk = tmp_path / "job" / f"chk-{n}"
        chk.mkdir(parents=True)
        if done:
            (chk / "_metadata").write_bytes(b"x")
    assert [p.name for p in latest_checkpoint(tmp_path)] == ["chk-10", "chk-9"]
    assert latest_checkpoint(tmp_path / "empty") == []
