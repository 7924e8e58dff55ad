"""Time types and late data (issue 19 items 3, 4): the conversions and the late-row plan
without Spark; then real runs: a Spark TIMESTAMP parquet, an ISO jsonl and an epoch-ms
csv export alike, the unit warning fires, a bad ISO time is named, late rows are dropped
exactly (also after kill -9 and ``cec recover``)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cec.errors import SpecError
from cec.spec import PipelineSpec, parse_spec
from cec_spark.driver.runner import run_pipeline
from cec_spark.read.export import export
from cec_spark.read.inspect import inspect_extent
from cec_spark.recover.resume import recover_run
from cec_spark.source.order import LATE, late_mask
from cec_spark.source.planner import InputError, StreamDirWatcher, plan_source, read_chunk
from cec_spark.source.times import TimeValueError, to_us
from cec_spark.source.types import TimeSpec
from tests.cec_spark.helpers import (
    cec,
    read_export_csv,
    reference_count_windows,
    reference_time_windows,
    spec_text,
    start_cec,
    wait_for,
)

T0 = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z


def _spec(tmp: Path, kind: str, path: str, extra: str = "", chunk_rows: int = 100,
          window: str = '{ kind = "time", size = "1s" }', partitions: int = 2,
          where: str | None = None) -> PipelineSpec:
    src = (f'kind = "{kind}"\npath = "{path}"\ntime_field = "item_time"\n'
           f"chunk_rows = {chunk_rows}\n{extra}")
    return parse_spec(spec_text(src, where=where, window=window, function="sum",
                                partitions=partitions), origin="t.toml", base=tmp)


# --------------------------------------------------------------------------- no Spark


def test_integer_epochs_in_each_unit() -> None:
    v = pa.array([1_700_000_000, -1], pa.int64())
    assert to_us(v, "int64", "s").tolist() == [T0, -1_000_000]
    assert to_us(v, "int64", "ms").tolist() == [1_700_000_000_000, -1000]
    assert to_us(v, "int64", "us").tolist() == [1_700_000_000, -1]
    # ns is floored (toward -inf): a window bound is whole microseconds, so a floored
    # time is in exactly the windows its exact time is in
    ns = pa.array([T0 * 1000 + 999, -1, -1000, -1001], pa.int64())
    assert to_us(ns, "int64", "ns").tolist() == [T0, -1, -1, -2]
    with pytest.raises(TimeValueError, match=r"does not fit int64 microseconds as epoch s"):
        to_us(pa.array([0, 10**14]), "int64", "s")
    with pytest.raises(TimeValueError) as exc:
        to_us(pa.array([1.0, 2.5]), "int64", "ms")
    assert exc.value.index == 1 and "is not an integer (epoch ms" in exc.value.why


def test_timestamps_of_any_unit_and_iso_text() -> None:
    for unit, scale in (("s", 10**6), ("ms", 10**3), ("us", 1)):
        arr = pa.array([T0 // scale], pa.int64()).cast(pa.timestamp(unit, tz="UTC"))
        assert to_us(arr, "timestamp", "us").tolist() == [T0]
    naive_ns = pa.array([T0 * 1000 + 500], pa.int64()).cast(pa.timestamp("ns"))
    assert to_us(naive_ns, "timestamp", "us").tolist() == [T0]  # naive = UTC, floored
    texts = ["2023-11-14T22:13:20Z", "2023-11-15T00:13:20+02:00",
             "2023-11-14T22:13:20.0000019Z", "2023-11-14 22:13:20.25"]
    want = [T0, T0, T0 + 1, T0 + 250_000]
    assert to_us(pa.array(texts), "iso", "us").tolist() == want  # mixed forms: Python's
    assert to_us(pa.array(texts[:3]), "iso", "us").tolist() == want[:3]  # Arrow's
    with pytest.raises(TimeValueError) as exc:
        to_us(pa.array(["2023-11-14T22:13:20Z", "yesterday"]), "iso", "us")
    assert exc.value.index == 1 and exc.value.shown == "yesterday"


def test_spec_fields_are_checked(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "csv", "a.csv", 'time_unit = "ms"\nallowed_lateness = "1.5s"\n'
                 'late = "drop"')
    assert (spec.source.time_unit, spec.source.allowed_lateness_us, spec.source.late) == \
        ("ms", 1_500_000, "drop")
    for bad, msg in (('time_unit = "min"', r"\[source\]\.time_unit: 'min' is not one of"),
                     ('allowed_lateness = "2"', r"\[source\]\.allowed_lateness: '2' is not"),
                     ('late = "side"', r"\[source\]\.late: 'side' is not one of error|drop")):
        with pytest.raises(SpecError, match=msg):
            _spec(tmp_path, "csv", "a.csv", bad)


def test_time_unit_is_for_integer_epochs_only(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"item_id": 1, "item_price": 1.0, '
                                      '"item_time": "2024-01-01T00:00:00Z"}\n')
    with pytest.raises(InputError, match=r"a\.jsonl: item_time: the time field is ISO-8601 "
                                         r"text, an instant with no unit to choose"):
        plan_source(_spec(tmp_path, "jsonl", "a.jsonl", 'time_unit = "ms"'))


def test_the_unit_warnings(tmp_path: Path) -> None:
    ms = (T0 // 1000) + np.arange(0, 60_000, 10)
    pd.DataFrame({"item_id": 1, "item_price": 1.0, "item_time": ms}).to_csv(
        tmp_path / "a.csv", index=False)
    warned = plan_source(_spec(tmp_path, "csv", "a.csv", window='{ kind = "time", size = "10s" }'))
    assert any("look like epoch ms" in w for w in warned.warnings), warned.warnings
    assert any("less than a tenth of one window" in w for w in warned.warnings)
    right = plan_source(_spec(tmp_path, "csv", "a.csv", 'time_unit = "ms"',
                              window='{ kind = "time", size = "10s" }'))
    assert right.warnings == ()


def _late_source(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ts = T0 + np.arange(n) * 10_000 + rng.integers(-3_000_000, 50_000, n)
    ts[rng.integers(0, n, n // 50)] -= 30_000_000  # far behind: late for any lateness
    return pd.DataFrame({"item_id": rng.integers(0, 20, n),
                         "item_price": np.round(rng.uniform(-5, 100, n), 2),
                         "item_time": ts})


def _watermark_reference(df: pd.DataFrame, lateness: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The stream by the definition, row by row: (non-late rows in (ts, row) order, late)."""
    late, top = np.zeros(len(df), bool), None
    for i, t in enumerate(df.item_time.to_numpy()):
        late[i] = top is not None and t < top - lateness
        top = t if top is None else max(top, t)
    kept = df[~late].reset_index().sort_values(["item_time", "index"], kind="stable")
    return kept.drop(columns="index").reset_index(drop=True), late


@pytest.mark.parametrize("chunk_rows", [37, 300, 5000])
def test_late_rows_and_the_order_do_not_depend_on_chunks(tmp_path: Path,
                                                         chunk_rows: int) -> None:
    df = _late_source(3000, 5)
    with (tmp_path / "a.jsonl").open("w") as fh:
        for row in df.itertuples(index=False):
            fh.write(json.dumps({"item_id": int(row.item_id), "item_price": row.item_price,
                                 "item_time": int(row.item_time)}) + "\n")
    spec = _spec(tmp_path, "jsonl", "a.jsonl", 'allowed_lateness = "2s"\nlate = "drop"',
                 chunk_rows=chunk_rows)
    plan = plan_source(spec)
    got = pa.concat_tables([pa.Table.from_batches(list(read_chunk(c, plan.columns,
                                                                  TimeSpec.of(spec))))
                            for c in plan.chunks]).to_pandas()
    want, late = _watermark_reference(df, 2_000_000)
    assert late.sum() > 60 and (late_mask(df.item_time.to_numpy(), None, 2_000_000) == late).all()
    assert int(got[LATE].sum()) == int(late.sum())
    assert (np.diff(got["__cec_seq"].to_numpy()) == 1).all()  # dense, increasing
    kept = got[~got[LATE]].reset_index(drop=True)
    assert kept[["item_id", "item_price", "item_time"]].equals(
        want[["item_id", "item_price", "item_time"]])


def test_late_error_names_the_row(tmp_path: Path) -> None:
    rows = [(1, 1.0, T0), (1, 1.0, T0 + 5_000_000), (1, 1.0, T0 + 4_000_000),
            (1, 1.0, T0 + 2_000_000)]
    pd.DataFrame(rows, columns=["item_id", "item_price", "item_time"]).to_csv(
        tmp_path / "a.csv", index=False)
    ok = plan_source(_spec(tmp_path, "csv", "a.csv", 'allowed_lateness = "3s"'))
    assert ok.rows == 4  # 1 s and 3 s behind: within the lateness, put back in order
    with pytest.raises(InputError) as exc:
        plan_source(_spec(tmp_path, "csv", "a.csv", 'allowed_lateness = "2s"'))
    assert str(exc.value).startswith(
        "a.csv: line 5: item_time: 2023-11-14T22:13:22.000000Z is more than allowed_lateness "
        "(2 s) behind 2023-11-14T22:13:25.000000Z"), str(exc.value)
    with pytest.raises(InputError, match=r"a\.csv: line 4: item_time: .* is before the "
                                         r"previous row's"):
        plan_source(_spec(tmp_path, "csv", "a.csv"))  # the default: no lateness, error


def test_a_stream_folder_releases_held_rows_at_end(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    rows = [(1, 1.0, T0 + 3_000_000), (1, 2.0, T0 + 1_000_000)]
    pd.DataFrame(rows, columns=["item_id", "item_price", "item_time"]).to_csv(
        folder / "f-000.csv", index=False)
    spec = _spec(tmp_path, "stream-dir", "in", 'format = "csv"\nallowed_lateness = "5s"')
    watcher = StreamDirWatcher(spec)
    first = watcher.poll()
    assert [c.emit_end - c.emit_base for c in first] == [0]  # both held: nothing passed them
    (folder / "_END").touch()
    flush = watcher.poll()
    assert len(flush) == 1 and flush[0].final and flush[0].emit_end - flush[0].emit_base == 2
    out = pa.Table.from_batches(list(read_chunk(flush[0], watcher.plan.columns,
                                                TimeSpec.of(spec))))
    assert out.column("item_time").to_pylist() == [T0 + 1_000_000, T0 + 3_000_000]


def test_a_watcher_going_on_from_a_plan_plans_as_one_that_saw_everything(
        tmp_path: Path) -> None:
    """A run's watcher continues from the plan made at the start (its held rows too): its
    chunks equal those of a watcher that found every file at once."""
    folder = tmp_path / "in"
    folder.mkdir()
    df = _late_source(900, 4)
    spec = _spec(tmp_path, "stream-dir", "in", 'format = "csv"\nallowed_lateness = "2s"\n'
                 'late = "drop"')
    df.iloc[:300].to_csv(folder / "f-0.csv", index=False)
    first = StreamDirWatcher(spec)
    first.poll()
    going_on = StreamDirWatcher(spec, start=first.plan)
    df.iloc[300:600].to_csv(folder / "f-1.csv", index=False)
    going_on.poll()
    df.iloc[600:].to_csv(folder / "f-2.csv", index=False)
    (folder / "_END").touch()
    going_on.poll()
    everything = StreamDirWatcher(spec)
    everything.poll()
    assert going_on.plan.chunks == everything.plan.chunks
    assert everything.plan.chunks[-1].final  # held rows released at _END


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """One Spark session for the runs made in this process (run_pipeline uses it)."""
    from cec_spark.run.session import build_session

    session = build_session("local[4,3]", 2)
    yield session
    session.stop()


def _run(spec: Path, run: Path) -> dict[str, object]:
    """``cec run pipeline SPEC --log-dir RUN --json``, in this process (its session)."""
    return dataclasses.asdict(run_pipeline(spec, run, progress=False))


def _export(run: Path, out: Path) -> pa.Table:
    export(run, out, "parquet")  # what `cec export --format parquet` does, in this process
    return pq.read_table(out)


@pytest.mark.spark
def test_timestamp_iso_and_epoch_ms_sources_export_alike(spark: object, tmp_path: Path) -> None:
    n = 6000
    rng = np.random.default_rng(3)
    us = T0 + np.cumsum(rng.integers(0, 20, n)) * 1000  # whole milliseconds
    df = pd.DataFrame({"item_id": rng.integers(0, 30, n),
                       "item_price": np.round(rng.uniform(0, 100, n), 2), "item_time": us})
    # a TIMESTAMP column as Spark writes it by default: INT96 (nanoseconds, UTC), in a
    # folder of part files beside Spark's _SUCCESS
    (tmp_path / "ts").mkdir()
    when = pa.array(us * 1000, pa.int64()).cast(pa.timestamp("ns"))
    table = pa.Table.from_pandas(df, preserve_index=False).set_column(2, "item_time", when)
    pq.write_table(table.slice(0, n // 2), tmp_path / "ts" / "part-00000.parquet",
                   use_deprecated_int96_timestamps=True)
    pq.write_table(table.slice(n // 2), tmp_path / "ts" / "part-00001.parquet",
                   use_deprecated_int96_timestamps=True)
    (tmp_path / "ts" / "_SUCCESS").touch()
    assert pq.ParquetFile(tmp_path / "ts" / "part-00000.parquet").schema.column(2)\
        .physical_type == "INT96"
    with (tmp_path / "iso.jsonl").open("w") as fh:
        for i, row in enumerate(df.itertuples(index=False)):
            at = pd.Timestamp(int(row.item_time), unit="us", tz="UTC")
            text = (at.isoformat().replace("+00:00", "Z") if i % 2
                    else at.tz_convert("Europe/Athens").isoformat())  # with an offset
            fh.write(json.dumps({"item_id": int(row.item_id), "item_price": row.item_price,
                                 "item_time": text}) + "\n")
    df.assign(item_time=us // 1000).to_csv(tmp_path / "ms.csv", index=False)
    window = '{ kind = "time", size = "1s", slide = "500ms" }'
    sources = {"ts": ('kind = "parquet"\npath = "ts"', "timestamp"),
               "iso": ('kind = "jsonl"\npath = "iso.jsonl"', "iso"),
               "ms": ('kind = "csv"\npath = "ms.csv"\ntime_unit = "ms"', "int64")}
    exports = {}
    for name, (src, kind) in sources.items():
        spec = tmp_path / f"{name}.toml"
        spec.write_text(spec_text(f'{src}\ntime_field = "item_time"\nchunk_rows = 2000',
                                  where=None, window=window, function="sum", partitions=2))
        result = _run(spec, tmp_path / f"run-{name}")
        assert result["completed"] and result["warnings"] == [], result["warnings"]
        assert f'"{kind}"' in (tmp_path / f"run-{name}" / "run.toml").read_text()
        exports[name] = _export(tmp_path / f"run-{name}", tmp_path / f"{name}.parquet")
    table = exports["ts"]
    assert table.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    assert table.schema.metadata[b"cec.window_end"] == b"exclusive"
    assert table.num_rows > 100 and exports["iso"].equals(table) and exports["ms"].equals(table)
    ref = reference_time_windows(df, 1_000_000, 500_000, "sum")
    export(tmp_path / "run-ms", tmp_path / "ms.csv.out", "csv")
    text = (tmp_path / "ms.csv.out").read_text().splitlines()
    assert text[1].split(",")[1].startswith('"2023-11-14T22:13:') and text[1].split(",")[1]\
        .endswith('Z"'), text[1]
    got = read_export_csv(tmp_path / "ms.csv.out")
    cols = ["key", "window_start", "window_end", "count"]
    assert got[cols].values.tolist() == ref[cols].values.tolist()


@pytest.mark.spark
def test_a_suspicious_unit_warns_in_the_result_stderr_and_inspect(
        spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ms = (T0 // 1000) + np.arange(0, 600_000, 100)
    pd.DataFrame({"item_id": np.arange(len(ms)) % 7, "item_price": 1.0,
                  "item_time": ms}).to_csv(tmp_path / "ms.csv", index=False)
    spec = tmp_path / "ms.toml"
    spec.write_text(spec_text('kind = "csv"\npath = "ms.csv"\ntime_field = "item_time"',
                              where=None, window='{ kind = "time", size = "10s" }',
                              partitions=1))
    warnings = _run(spec, tmp_path / "run")["warnings"]
    assert isinstance(warnings, list)
    assert any("look like epoch ms, but time_unit = \"us\"" in w for w in warnings), warnings
    assert "cec: warning: [source].item_time: values like" in capsys.readouterr().err
    assert inspect_extent(tmp_path / "run").warnings == warnings
    assert "warnings = [" in (tmp_path / "run" / "run.toml").read_text()


def test_a_bad_iso_time_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    lines = [{"item_id": 1, "item_price": 1.0, "item_time": f"2024-01-01T00:00:0{i}Z"}
             for i in range(3)]
    lines[2]["item_time"] = "2024-01-01 25:00:00"
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = tmp_path / "a.toml"
    spec.write_text(spec_text('kind = "jsonl"\npath = "a.jsonl"\ntime_field = "item_time"',
                              where=None))
    proc = cec(["run", "pipeline", str(spec), "--log-dir", str(tmp_path / "run")])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "a.jsonl: line 3: item_time: '2024-01-01 25:00:00' is not an ISO-8601 time" \
        in proc.stderr, proc.stderr[-2000:]


def _late_counts_now(run: Path) -> list[int]:
    """The late counts committed so far (the upstream logs' tokens; a run may write)."""
    from cec.ingest_token import decode_token
    from storage_log.log import StreamLog

    out = []
    for log_dir in sorted(run.glob("upstream/p*")):
        try:
            with StreamLog.open(log_dir) as log:
                tok = decode_token(log.last_token())
                out.append(0 if tok is None else tok.late)
        except Exception:  # being created
            out.append(0)
    return out


def _late_counts(run: Path) -> list[int]:
    """``cec inspect extent``'s late rows per partition."""
    return [p.late_rows for p in inspect_extent(run).partitions]


@pytest.mark.spark
def test_late_rows_are_dropped_exactly_also_after_kill9(spark: object, tmp_path: Path) -> None:
    """The late source under late = "drop" exports what its non-late rows in time order
    give (pandas, from the definition), with the late rows counted per partition (after
    the filter); a run of it killed with -9 and recovered ends with the same export and
    the same counts."""
    df = _late_source(60_000, 9)
    df.to_csv(tmp_path / "late.csv", index=False)
    want, late = _watermark_reference(df, 2_000_000)
    expected_late = int((late & (df.item_price.to_numpy() >= 0)).sum())  # after the filter
    ref = reference_count_windows(want, 5)  # the filter item_price >= 0, as the spec's
    src = ('path = "late.csv"\nkind = "csv"\ntime_field = "item_time"\nchunk_rows = 2000\n'
           'allowed_lateness = "2s"\nlate = "drop"')
    dropping = tmp_path / "late.toml"  # read by 2 tasks, a shuffle to the writers
    dropping.write_text(spec_text(src, window='{ kind = "count", size = 5 }', partitions=2,
                                  extra_run="ingest_tasks = 2"))
    result = _run(dropping, tmp_path / "late")
    assert result["late_rows"] == expected_late > 100, (result["late_rows"], expected_late)
    per_partition = result["late_rows_per_partition"]
    assert _late_counts(tmp_path / "late") == per_partition and min(per_partition) > 0
    reference = _export(tmp_path / "late", tmp_path / "late.parquet")
    assert reference.schema.metadata[b"cec.window_end"] == b"inclusive"
    got = reference.to_pandas()
    for col in ("window_start", "window_end"):
        got[col] = (got[col] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(1, "us")
    cols = ["key", "window_start", "window_end", "count"]
    assert len(ref) > 1000 and got[cols].values.tolist() == ref[cols].values.tolist()
    np.testing.assert_allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-12)
    metrics = (tmp_path / "late" / "metrics" / "cec.prom").read_text()
    assert f'cec_late_rows_total{{run="{tmp_path / "late"}",partition="0"}} ' \
           f'{per_partition[0]}' in metrics
    # the same rows as a stream folder of 4 files: killed with -9 after the first file's
    # rows are committed (the others do not exist yet), then recovered to the end
    folder = tmp_path / "in"
    folder.mkdir()
    parts = np.array_split(np.arange(len(df)), 4)
    df.iloc[parts[0]].to_csv(folder / "f-0.csv", index=False)
    streaming = tmp_path / "stream.toml"
    streaming.write_text(spec_text(src.replace('path = "late.csv"\nkind = "csv"',
                                               'path = "in"\nkind = "stream-dir"'),
                                   window='{ kind = "count", size = 5 }', partitions=2))
    run = tmp_path / "killed"
    proc = start_cec(["run", "pipeline", str(streaming), "--log-dir", str(run)],
                     tmp_path / "run.log")
    try:
        wait_for(lambda: sum(_late_counts_now(run)) > 0 or proc.poll() is not None, 180,
                 "the first committed late rows")
        time.sleep(float(np.random.default_rng().uniform(0.0, 0.5)))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    at_kill = _late_counts_now(run)
    assert 0 < sum(at_kill) < expected_late, (at_kill, (tmp_path / "run.log").read_text())
    print(f"killed; late rows committed at the kill: {at_kill} of {per_partition}",
          file=sys.stderr)
    for i in (1, 2, 3):
        df.iloc[parts[i]].to_csv(folder / f".f-{i}.tmp", index=False)
        (folder / f".f-{i}.tmp").rename(folder / f"f-{i}.csv")
    (folder / "_END").touch()
    rec = recover_run(run, progress=False)  # `cec recover --from-log RUN`, in this process
    assert rec.resumed is not None and rec.resumed.completed
    assert rec.resumed.late_rows == expected_late
    assert _late_counts(run) == per_partition
    assert _export(run, tmp_path / "killed.parquet").equals(reference)
