"""Planning a file source costs its files, not its rows (issue 38 item 2): the driver
reads file metadata (and the first chunk, which fixes the column types); the ingest
tasks check the rows they read. A bad row is still named (file, line, field) with exit
2, nothing from its chunk on is committed, and the run goes on after the fix with
``cec recover``, exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cec.errors import exit_code
from cec.ingest_token import decode_token
from cec.spec import parse_spec
from cec_spark.driver.runner import run_pipeline
from cec_spark.errors import InputError
from cec_spark.read.export import export
from cec_spark.recover.resume import recover_run
from cec_spark.run.session import build_session
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.layout import RunLayout
from cec_spark.source import check as check_mod
from cec_spark.source import read as read_mod
from cec_spark.source.file_state import FileState
from cec_spark.source.fingerprint import check_fingerprint
from cec_spark.source.planner import plan_source
from cec_spark.source.types import Chunk
from storage_log.log import StreamLog
from tests.cec_spark.helpers import read_export_csv, reference_count_windows, spec_text

pytestmark = pytest.mark.spark

P = 2
FILES = 200
ROWS = 400  # per file: one chunk each (chunk_rows = ROWS); 80 k rows in all


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = build_session(f"local[{P + 2},3]", P)
    yield session
    session.stop()


def _write_files(folder: Path, files: int, rows: int, seed: int = 3) -> pd.DataFrame:
    """``files`` csv files of ``rows`` rows each, times non-decreasing across them."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    n = files * rows
    df = pd.DataFrame({
        "item_id": rng.integers(0, 60, n),
        "item_price": np.round(rng.uniform(0.0, 100.0, n), 2),
        "item_time": 1_700_000_000_000_000 + np.cumsum(rng.integers(0, 5_000, n)),
    })
    for f in range(files):
        df.iloc[f * rows:(f + 1) * rows].to_csv(folder / f"f{f:03d}.csv", index=False)
    return df


def _spec(tmp: Path, folder: Path, rows: int) -> Path:
    src = f'kind = "csv"\npath = "{folder}"\ntime_field = "item_time"\nchunk_rows = {rows}'
    path = tmp / "s.toml"
    path.write_text(spec_text(src, partitions=P, where=None))
    return path


def _committed(run: Path) -> list[tuple[int, int]]:
    """Each upstream log's (last committed chunk, its largest committed seq; -1: none)."""
    out = []
    for p in range(P):
        with StreamLog.open(RunLayout(run).upstream(p)) as log:
            tok = decode_token(log.last_token())
            out.append((-1 if tok is None else tok.chunk,
                        -1 if log.last_seq is None else int(log.last_seq)))
    return out


def _assert_exact(run: Path, out: Path, df: pd.DataFrame) -> None:
    export(run, out)
    got, ref = read_export_csv(out), reference_count_windows(df, 10, where_nonneg=False)
    assert len(got) == len(ref) > 0
    for col in ("key", "window_start", "window_end", "count"):
        assert got[col].tolist() == ref[col].tolist(), col
    np.testing.assert_allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9)


def test_a_bad_row_in_the_last_of_200_files(spark: object, tmp_path: Path) -> None:
    """Named, exit 2; nothing from its chunk on committed (the chunks before it may
    be); after the fix, ``cec recover`` goes on and the results are exact."""
    df = _write_files(tmp_path / "src", FILES, ROWS)
    bad = tmp_path / "src" / f"f{FILES - 1:03d}.csv"
    good_text = bad.read_text()
    lines = good_text.splitlines(keepends=True)
    lines[8] = lines[8].replace(lines[8].split(",")[1], "abc", 1)  # line 9: a price
    bad.write_text("".join(lines))
    run = tmp_path / "run"
    with pytest.raises(InputError) as exc:
        run_pipeline(_spec(tmp_path, tmp_path / "src", ROWS), run, progress=False)
    assert exit_code(exc.value) == 2
    assert str(exc.value) == f"{bad.name}: line 9: item_price: 'abc' is not a number"
    # the run is planned by bytes: the bad file's first chunk and seq from its plan
    plan = json.loads(RunLayout(run).source_plan_file.read_text())["chunks"]
    first_bad = next(c for c in plan if c["file"] == str(bad))
    assert first_bad["sparse"] and first_bad["first_seq"] > len(df)  # places in bytes
    committed = _committed(run)
    for chunk, last_seq in committed:
        assert chunk < first_bad["index"] and last_seq < first_bad["first_seq"]
    # the job's first chunks were committed one by one (over 64 k rows were left):
    # the resume below reads from one of them on, past a source that changed after it
    assert min(chunk for chunk, _ in committed) >= 0
    bad.write_text(good_text)  # the fix
    rec = recover_run(run, progress=False)
    assert rec.resumed is not None and rec.resumed.completed
    _assert_exact(run, tmp_path / "out.csv", df)
    # the fixed source's fingerprint is what a later resume checks; the plan stored
    # at the run's start was not taken (the file changed): the resume planned the files
    assert (run / "source_files.json").is_file()
    assert read_advisory(RunLayout(run).ingest_state_file)["plan_from"] == "files"


def test_the_driver_reads_no_row_past_the_first_chunk(spark: object, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """The driver's planning parses the first chunk (its types) and each chunk's last
    line (its watermark) only; the row checks run in the ingest tasks (other processes:
    this one's check raises if called), and the run is exact."""
    rows = 300
    df = _write_files(tmp_path / "src", 12, rows)
    parsed: list[int] = []
    parse = check_mod.parse_text

    def counting(*args: object, **kwargs: object) -> object:
        table = parse(*args, **kwargs)  # type: ignore[arg-type]
        parsed.append(table.num_rows)
        return table

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("the driver checked a chunk's rows")

    monkeypatch.setattr(check_mod, "parse_text", counting)
    monkeypatch.setattr(read_mod, "_checked_table", refuse)
    run = tmp_path / "run"
    summary = run_pipeline(_spec(tmp_path, tmp_path / "src", rows), run, progress=False)
    assert summary.completed and summary.source_rows == len(df)
    # the first chunk, then one line per other chunk (each file's parsed in one go)
    assert parsed[0] == rows and sum(parsed[1:]) == 11, parsed
    _assert_exact(run, tmp_path / "out.csv", df)


def test_a_resume_checks_the_source_only_up_to_what_it_read(tmp_path: Path) -> None:
    """The fingerprint keeps a digest per chunk boundary: a file fixed after the last
    committed chunk passes (also in the same file), one changed before it does not;
    ``--repair``'s check (no ``read_upto``) still wants every file as it was (no Spark)."""
    df = _write_files(tmp_path / "src", 2, 30)
    spec = parse_spec(_spec(tmp_path, tmp_path / "src", 10).read_text(), origin="s.toml",
                      base=tmp_path)
    plan = plan_source(spec, validate=False)
    assert [c.check for c in plan.chunks] == [False] + [True] * 5  # the first: types
    assert [c.prev_ts for c in plan.chunks[1:]] == [c.wm for c in plan.chunks[:-1]]
    assert [c.wm for c in plan.chunks] == df.item_time.iloc[9::10].tolist()
    stored = list(plan.files)
    second = plan.chunks[4]  # f001.csv's second chunk; its third is after it
    f1 = Path(second.file)
    text = f1.read_text().splitlines(keepends=True)
    text[-2] = text[-2].replace(text[-2].split(",")[1], "7.5", 1)  # in the third chunk
    f1.write_text("".join(text))
    upto = (second.file, second.stop)
    check_fingerprint(spec, stored, read_upto=upto)
    # with the digests a plan of the source made just now (a resume's), the same
    check_fingerprint(spec, stored, read_upto=upto,
                      now=list(plan_source(spec, validate=False).files))
    with pytest.raises(InputError, match=r"f001\.csv: the source changed since the run"):
        check_fingerprint(spec, stored)
    text[2] = text[2].replace(text[2].split(",")[1], "8.5", 1)  # in its first chunk
    f1.write_text("".join(text))
    with pytest.raises(InputError, match=r"f001\.csv: the source changed since the run "
                       r"started in the part already read \(its first \d+ bytes"):
        check_fingerprint(spec, stored, read_upto=upto,
                          now=list(plan_source(spec, validate=False).files))
    f0 = tmp_path / "src" / "f000.csv"
    f0.write_text(f0.read_text().replace(",", ", ", 1))
    with pytest.raises(InputError, match=r"f000\.csv: the source changed"):
        check_fingerprint(spec, stored, read_upto=upto)


HEAD = "item_id,item_price,item_time\n"
GOOD = "1,1.0,10\n2,2.0,11\n3,3.0,12\n4,4.0,13\n"  # lines 2-5: two chunks of 2


def _jsonl(rows: str) -> str:
    out = []
    for line in rows.splitlines(keepends=True):
        if not line.strip():
            out.append(line)
            continue
        k, v, t = line.strip().split(",")
        out.append(f'{{"item_id": {k}, "item_price": {v}, "item_time": {t}}}\n')
    return "".join(out)


@pytest.mark.parametrize(("kind", "bad", "message"), [
    ("csv", "5,2.5,14\n\n6,1.0,15\n", "a.csv: line 7: the line is blank"),
    ("csv", "5,2.5,14\n6,inf,15\n", "a.csv: line 7: item_price: inf is not a finite number"),
    ("csv", "5,2.5,14\n6,x,15\n", "a.csv: line 7: item_price: 'x' is not a number"),
    ("csv", "5,2.5,14\n6,1.0\n", "a.csv: line 7: expected 3 fields"),
    ("csv", "5,2.5,12\n", "a.csv: line 6: item_time: 12 is before the previous row's 13 "
                          "(line 5)"),
    ("csv", "5,2.5,14\n6,2.5,13\n", "a.csv: line 7: item_time: 13 is before the previous "
                                    "row's 14"),
    ("jsonl", "5,2.5,14\n\n6,1.0,15\n", "a.jsonl: line 6: the line is blank"),
    ("jsonl", "5,2.5,12\n", "a.jsonl: line 5: item_time: 12 is before the previous row's "
                            "13 (line 4)"),
])
def test_a_bad_row_past_the_first_chunk_is_named_by_the_tasks_check(
        tmp_path: Path, kind: str, bad: str, message: str) -> None:
    """The checks a task runs (here through ``plan_source(validate=True)``, which runs
    them in order) name a bad row in a later chunk as the planner named it in the
    first one; ``validate=False`` plans the same source without reading that row."""
    text = HEAD + GOOD + bad if kind == "csv" else _jsonl(GOOD + bad)
    (tmp_path / f"a.{kind}").write_text(text)
    src = f'kind = "{kind}"\npath = "a.{kind}"\ntime_field = "item_time"\nchunk_rows = 2'
    spec = parse_spec(spec_text(src), origin="t.toml", base=tmp_path)
    plan = plan_source(spec, validate=False)
    assert plan.chunks[0].check is False and all(c.check for c in plan.chunks[1:])
    with pytest.raises(InputError) as exc:
        plan_source(spec)
    assert str(exc.value).startswith(message), str(exc.value)


def test_a_bad_parquet_row_past_the_first_chunk(tmp_path: Path) -> None:
    """Parquet: the chunk's row groups are read by its task, the row named from 0 within
    the file, as the planner names it; the plan takes each chunk's last time from the
    footer (no row read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    times = [10, 11, 12, 13, 14, 15, 9, 16]
    table = pa.table({"item_id": pa.array(range(8), pa.int64()),
                      "item_price": pa.array([1.0] * 8),
                      "item_time": pa.array(times, pa.int64())})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=2)
    src = 'kind = "parquet"\npath = "a.parquet"\ntime_field = "item_time"\nchunk_rows = 2'
    spec = parse_spec(spec_text(src), origin="t.toml", base=tmp_path)
    plan = plan_source(spec, validate=False)
    assert [c.wm for c in plan.chunks] == [11, 13, 15, 16]  # the groups' largest times
    with pytest.raises(InputError, match=r"^a\.parquet: row 6: item_time: 9 is before the "
                       r"previous row's 15"):
        plan_source(spec)


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_parquet_timestamps_plan_from_the_footer(tmp_path: Path, unit: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An INT64 TIMESTAMP time field (pyarrow's, Spark's with TIMESTAMP_MICROS): each
    chunk's last time comes from its last row group's statistics, no row group read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = 1_700_000_000_000_000
    us = [base + i * 1000 for i in range(8)]
    scale = {"ms": 1 / 1000, "us": 1, "ns": 1000}[unit]
    raw = pa.array([int(t * scale) for t in us], pa.int64())
    table = pa.table({"item_id": pa.array(range(8), pa.int64()),
                      "item_price": pa.array([1.0] * 8),
                      "item_time": raw.cast(pa.timestamp(unit, tz="UTC"))})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=2)
    src = 'kind = "parquet"\npath = "a.parquet"\ntime_field = "item_time"\nchunk_rows = 2'
    spec = parse_spec(spec_text(src), origin="t.toml", base=tmp_path)

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("a row group read")

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", refuse)
    plan = plan_source(spec, validate=False)
    assert [c.wm for c in plan.chunks] == [us[1], us[3], us[5], us[7]]


@pytest.mark.parametrize(("prices", "message"), [
    ([5, 6, 7, (1 << 53) + 1], r"^a\.parquet: row 3 \(row groups 1-1\): "
                                          r"item_price: 9007199254740993 is beyond 2\^53"),
    ([5.0, 6.0, float("nan"), 7.0], r"^a\.parquet: row 2: item_price: nan is not a finite"),
])
def test_parquet_values_past_the_first_chunk(tmp_path: Path, prices: list[float],
                                             message: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"item_id": pa.array(range(4), pa.int64()), "item_price": prices,
                      "item_time": pa.array([1, 2, 3, 4], pa.int64())})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=2)
    src = 'kind = "parquet"\npath = "a.parquet"\ntime_field = "item_time"\nchunk_rows = 2'
    spec = parse_spec(spec_text(src), origin="t.toml", base=tmp_path)
    assert plan_source(spec, validate=False).chunks[1].check
    with pytest.raises(InputError, match=message):
        plan_source(spec)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_lateness_plans_from_the_times_alone_as_from_every_row(tmp_path: Path,
                                                                kind: str) -> None:
    """With ``allowed_lateness`` the plan needs every row's time: the run's plan reads
    the time column alone (the task checks the rest) and makes the same chunks (held
    rows, seq ranges, watermarks) as a pass that reads and checks every row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    n = 500
    times = 1_000_000 + np.cumsum(rng.integers(0, 1000, n)) - rng.integers(0, 3000, n)
    df = pd.DataFrame({"item_id": rng.integers(0, 9, n),
                       "item_price": np.round(rng.uniform(0, 9, n), 2), "item_time": times})
    (tmp_path / "src").mkdir()
    for f in range(3):
        part = df.iloc[f * 170:(f + 1) * 170]
        if kind == "csv":
            part.to_csv(tmp_path / "src" / f"f{f}.csv", index=False)
        else:
            pq.write_table(pa.Table.from_pandas(part, preserve_index=False),
                           tmp_path / "src" / f"f{f}.parquet", row_group_size=37)
    src = (f'kind = "{kind}"\npath = "src"\ntime_field = "item_time"\nchunk_rows = 37\n'
           'allowed_lateness = "2ms"\nlate = "drop"')
    spec = parse_spec(spec_text(src), origin="t.toml", base=tmp_path)
    light = plan_source(spec, validate=False)
    st = FileState(spec, None)  # every row read and checked
    for path in sorted((tmp_path / "src").iterdir()):
        check_mod.plan_file(st, path, kind)
    st.flush()

    def fields(c: Chunk) -> tuple[object, ...]:
        return (c.index, c.file, c.start, c.stop, c.first_seq, c.rows, c.max_before,
                c.seq_base, c.seq_end, c.final, c.wm, tuple(k.index for k in c.carry))

    assert [fields(c) for c in light.chunks] == [fields(c) for c in st.chunks]
    assert any(c.carry for c in light.chunks)
    assert all(c.check for c in light.chunks[1:] if not c.final)  # the flush: no rows
