"""Issue 38 item 2: a text source planned by bytes costs its files and chunks, not its
rows (no Spark here; the runs: test_planning_in_tasks, test_ingest_row_resume_kill).

What the planner reads is measured from the kernel's count of the bytes this process
read (``rchar`` in /proc/self/io), not timed. The chunks are read back as the ingest
tasks read them (:func:`read_chunk` with a reports folder) and compared with the
source row by row; the fingerprint of a run planned by bytes (sizes and times, and the
tasks' reports of the chunks they read) is checked against files changed before,
inside and after what a run read.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cec.spec import PipelineSpec, parse_spec
from cec_spark.errors import InputError
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.check import chunk_bytes_for, reports_for
from cec_spark.source.chunk_report import ReportPath, Reports, counted_rows, read_reports
from cec_spark.source.fingerprint import check_fingerprint
from cec_spark.source.planner import plan_source
from cec_spark.source.read import chunk_table, read_chunk
from cec_spark.source.types import SEQ, Chunk, SourcePlan, TimeSpec
from tests.cec_spark.helpers import spec_text


def _frame(rows: int, seed: int, t0: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "item_id": rng.integers(0, 1_000, rows),
        "item_price": rng.integers(0, 10_000, rows).astype(np.float64) / 4,
        "item_time": t0 + np.cumsum(rng.integers(0, 1_000, rows)),
    })


def _files(folder: Path, sizes: list[int], fmt: str = "csv") -> pd.DataFrame:
    """Files of ``sizes`` rows (times going on from file to file), named in order."""
    folder.mkdir(parents=True)
    parts, t0 = [], 1_700_000_000_000_000
    for i, n in enumerate(sizes):
        df = _frame(n, i, t0)
        t0 = int(df.item_time.iloc[-1])
        path = folder / f"f{i:02d}.{fmt}"
        if fmt == "csv":
            df.to_csv(path, index=False)
        else:
            df.to_json(path, orient="records", lines=True)
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


def _spec(tmp: Path, folder: Path, chunk_rows: int, fmt: str = "csv") -> PipelineSpec:
    src = f'kind = "{fmt}"\npath = "{folder}"\ntime_field = "item_time"\n' \
          f"chunk_rows = {chunk_rows}"
    return parse_spec(spec_text(src, partitions=2, where=None), origin="s.toml", base=tmp)


def _rchar() -> int:
    with open("/proc/self/io", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("rchar:"))


def _plan(spec: PipelineSpec) -> tuple[SourcePlan, int]:
    """The run's plan (by bytes, as a new run's) and the bytes the planner read."""
    every = chunk_bytes_for(spec, None)
    assert every is not None
    before = _rchar()
    plan = plan_source(spec, validate=False, chunk_bytes=every)
    return plan, _rchar() - before


def _where(folder: Path) -> ReportPath:
    return RunLayout(folder).source_chunk_report


def _read_all(plan: SourcePlan, spec: PipelineSpec, reports: Path) -> pa.Table:
    reports.mkdir()
    time = TimeSpec.of(spec)
    batches = [b for c in plan.chunks
               for b in read_chunk(c, plan.columns, time, report=Reports(_where(reports)))]
    return pa.Table.from_batches(batches)


def test_planning_reads_a_few_bytes_a_chunk_not_the_rows(tmp_path: Path) -> None:
    """A source of 4 files and 400 k rows in chunks of 5 k rows: the plan by bytes reads
    the first chunk (it fixes the column types) and a few KiB a chunk; the plan by rows
    reads every byte (its newlines and digest)."""
    _files(tmp_path / "src", [100_000] * 4)
    spec = _spec(tmp_path, tmp_path / "src", 5_000)
    size = sum(f.stat().st_size for f in (tmp_path / "src").iterdir())
    plan, read = _plan(spec)
    every = chunk_bytes_for(spec, None)
    assert every is not None and len(plan.chunks) >= 70
    assert all(c.sparse for c in plan.chunks)
    assert read < every + len(plan.chunks) * 12 * 1024 + (64 << 10), (read, size)
    assert read < size / 8
    before = _rchar()
    dense = plan_source(spec, validate=False)
    assert _rchar() - before > size and not any(c.sparse for c in dense.chunks)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_chunks_cut_by_bytes_give_every_row_once_in_order(tmp_path: Path, fmt: str) -> None:
    """Read as the tasks read them, the chunks give the source's rows in order, each
    once; a chunk's seqs lie in ``[first_seq, next_seq)``, the seqs rise from chunk to
    chunk and file to file, and the reports count every row. A file without a last
    newline and a line longer than a chunk are cut like any other."""
    df = _files(tmp_path / "src", [3_000, 1, 2_500], fmt)
    last = tmp_path / "src" / f"f02.{fmt}"
    last.write_bytes(last.read_bytes().rstrip(b"\n"))
    first = tmp_path / "src" / f"f00.{fmt}"  # row 1000's price written with 60 k digits
    lines = first.read_bytes().split(b"\n")
    at = 1000 + (1 if fmt == "csv" else 0)
    price = repr(float(df.item_price.iloc[1000])).encode()
    assert lines[at].count(price) == 1
    lines[at] = lines[at].replace(price, price + b"0" * 60_000)
    first.write_bytes(b"\n".join(lines))
    spec = _spec(tmp_path, tmp_path / "src", 200, fmt)
    plan, _ = _plan(spec)
    every = chunk_bytes_for(spec, None)
    assert every is not None and len(lines[at]) > 2 * every  # longer than a chunk
    assert len(plan.chunks) >= 10
    got = _read_all(plan, spec, tmp_path / "run")
    assert got.num_rows == len(df)
    for col in ("item_id", "item_time"):
        assert got.column(col).to_pylist() == df[col].tolist()
    np.testing.assert_array_equal(got.column("item_price").to_numpy(), df.item_price)
    seqs = np.asarray(got.column(SEQ).to_numpy())
    assert (np.diff(seqs) > 0).all()
    at = 0
    reports = read_reports(_where(tmp_path / "run"), plan.chunks)
    for chunk in plan.chunks:
        n = int(reports[chunk.index]["rows"])
        part = seqs[at:at + n]
        assert part[0] == chunk.first_seq and part[-1] < chunk.next_seq
        at += n
    assert counted_rows(_where(tmp_path / "run"), plan.chunks,
                        plan.chunks[-1].index) == len(df)
    assert plan.chunks[-1].next_seq == sum(f.stat().st_size
                                           for f in (tmp_path / "src").iterdir())


def test_a_bad_row_is_named_by_its_line_counted_only_then(tmp_path: Path) -> None:
    """The planner counts no newline: a task that finds a bad row counts the lines
    before its chunk then, and names the line; a time going back at a chunk's first row
    names the line before it."""
    df = _files(tmp_path / "src", [2_000])
    path = tmp_path / "src" / "f00.csv"
    spec = _spec(tmp_path, tmp_path / "src", 300)
    plan, _ = _plan(spec)
    time = TimeSpec.of(spec)
    third = plan.chunks[3]
    line = path.read_bytes()[:third.start].count(b"\n") + 1  # its first row's line
    lines = path.read_text().splitlines(keepends=True)
    bad = list(lines)
    bad[line + 4 - 1] = bad[line + 4 - 1].replace(bad[line + 4 - 1].split(",")[1], "x", 1)
    path.write_text("".join(bad))
    with pytest.raises(InputError, match=rf"^f00\.csv: line {line + 4}: item_price: 'x' "
                                         "is not a number$"):
        chunk_table(third, plan.columns, time)
    back = list(lines)  # its first row's time below the row before it
    prev = int(df.item_time.iloc[line - 3])
    back[line - 1] = ",".join([*back[line - 1].split(",")[:2], f"{prev - 1}\n"])
    path.write_text("".join(back))
    with pytest.raises(InputError, match=rf"^f00\.csv: line {line}: item_time: {prev - 1} "
                                         rf"is before the previous row's {prev} \(line "
                                         rf"{line - 1}\)"):
        chunk_table(replace(third, prev_ts=prev), plan.columns, time)


def test_a_resume_checks_the_chunks_the_run_read(tmp_path: Path) -> None:
    """The fingerprint of a run planned by bytes: a file with its size and time as
    they were is taken unread; of a changed one, the chunks the run read up to its
    last committed one are read again against their reports. A fix after them passes;
    a change inside them, a missing report, an earlier file grown or gone, a file added
    before them: refused, naming the file (and the bytes)."""
    _files(tmp_path / "src", [1_500, 1_500])
    spec = _spec(tmp_path, tmp_path / "src", 300)
    plan, _ = _plan(spec)
    reports = _where(tmp_path / "run")
    (tmp_path / "run").mkdir()
    time = TimeSpec.of(spec)
    f1 = tmp_path / "src" / "f01.csv"
    in_f1 = [c for c in plan.chunks if c.file == str(f1)]
    upto = in_f1[1]  # the run read (and committed) every chunk up to f01's second
    for chunk in plan.chunks[:upto.index + 1]:
        chunk_table(chunk, plan.columns, time, Reports(reports))
    stored = list(plan.files)
    assert all(set(f) == {"file", "bytes", "mtime_ns"} for f in stored)

    def check(now: SourcePlan | None = None, upto_chunk: int | None = upto.index) -> None:
        now = now or plan_source(spec, validate=False, chunk_bytes=chunk_bytes_for(spec,
                                                                                   None))
        read_upto = None if upto_chunk is None else (upto.file, upto.stop)
        check_fingerprint(spec, stored, read_upto=read_upto, chunks=now.chunks,
                          reports=reports, upto_chunk=upto_chunk)

    check()  # nothing changed
    text = f1.read_bytes()
    after = in_f1[3].start + 5  # inside a chunk after the last one read: a fix there
    f1.write_bytes(text[:after] + b"9" + text[after:])
    check()
    with pytest.raises(InputError, match=r"f01\.csv: the source changed since the run "
                                         r"started: \d+ bytes then"):
        check(upto_chunk=None)  # --repair's check: every file as it was
    inside = in_f1[1].start + 5
    f1.write_bytes(text[:inside] + b"7" + text[inside + 1:])  # same size, new time
    with pytest.raises(InputError, match=rf"f01\.csv: bytes {in_f1[1].start}-"
                                         rf"{in_f1[1].stop}: the source changed"):
        check()
    f1.write_bytes(text)
    reports(in_f1[0].index).write_text("{")
    with pytest.raises(InputError, match=r"f01\.csv: chunk \d+: the run read it, but its "
                                         r"report .* is missing"):
        check()
    chunk_table(in_f1[0], plan.columns, time, Reports(reports))  # reported again
    check()
    f0 = tmp_path / "src" / "f00.csv"
    f0.write_bytes(f0.read_bytes() + b"1,1.0,99999999999999999\n")
    with pytest.raises(InputError, match=r"f00\.csv: the source changed since the run "
                                         r"started: \d+ bytes then, \d+ now"):
        check()
    f0.unlink()
    with pytest.raises(InputError, match=r"f00\.csv: the source changed .* gone"):
        check()
    (tmp_path / "src" / "e.csv").write_text("item_id,item_price,item_time\n")
    with pytest.raises(InputError, match=r"e\.csv: the source changed .* added"):
        check()


def test_old_runs_and_other_sources_are_planned_by_rows(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Only a new run of a text file source is planned by bytes: not parquet, not a
    ``--max-tuples`` cut, not lateness settings (whose plans read every row), not with
    ``CEC_PLAN_BY_ROWS=1`` (a run directory of today's code as runs were before); the
    stored plan of a run keeps its chunks as JSON either way."""
    _files(tmp_path / "src", [500])
    spec = _spec(tmp_path, tmp_path / "src", 100)
    assert chunk_bytes_for(spec, None) is not None
    assert chunk_bytes_for(spec, 200) is None
    late = replace(spec, source=replace(spec.source, allowed_lateness_us=1))
    assert chunk_bytes_for(late, None) is None
    monkeypatch.setenv("CEC_PLAN_BY_ROWS", "1")
    assert chunk_bytes_for(spec, None) is None
    monkeypatch.delenv("CEC_PLAN_BY_ROWS")
    plan, _ = _plan(spec)
    raw = json.loads(json.dumps([c.to_json() for c in plan.chunks]))
    assert [Chunk.from_json(c) for c in raw] == list(plan.chunks)


def _parquet(folder: Path, frames: list[pd.DataFrame]) -> None:
    folder.mkdir(parents=True)
    for i, df in enumerate(frames):
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False),
                       folder / f"f{i:02d}.parquet", row_group_size=5_000)


def test_a_parquet_source_is_fingerprinted_by_the_tasks_reports(tmp_path: Path) -> None:
    """A parquet source's plan reads its footers and its first chunk, no file's
    bytes digested: the tasks digest the row groups they read. A changed value in a
    row group the run read is refused, naming the file and bytes; the files' sizes
    and times are the fingerprint in the plan."""
    t0 = 1_700_000_000_000_000
    frames = [_frame(100_000, 0, t0), _frame(100_000, 1, t0 + 10**12)]
    _parquet(tmp_path / "src", frames)
    spec = parse_spec(spec_text(f'kind = "parquet"\npath = "{tmp_path / "src"}"\n'
                                'time_field = "item_time"\nchunk_rows = 10000',
                                partitions=2, where=None), origin="s.toml", base=tmp_path)
    assert reports_for(spec, None) and chunk_bytes_for(spec, None) is None
    size = sum(f.stat().st_size for f in (tmp_path / "src").iterdir())
    before = _rchar()
    plan = plan_source(spec, validate=False, reports=True)
    assert _rchar() - before < size / 4
    assert all(c.reported and not c.sparse for c in plan.chunks) and len(plan.chunks) == 20
    assert all(set(f) == {"file", "bytes", "mtime_ns"} for f in plan.files)
    got = _read_all(plan, spec, tmp_path / "run2")
    assert got.column("item_time").to_pylist() == pd.concat(frames).item_time.tolist()
    reports = _where(tmp_path / "run2")
    assert counted_rows(reports, plan.chunks, 19) == 200_000
    stored, second = list(plan.files), Path(plan.chunks[-1].file)
    fixed = frames[1].copy()
    fixed.loc[60_000, "item_price"] = 1.25  # row group 12 of the file: chunk 16
    pq.write_table(pa.Table.from_pandas(fixed, preserve_index=False), second,
                   row_group_size=5_000)
    check_fingerprint(spec, stored, read_upto=(str(second), None), chunks=plan.chunks,
                      reports=reports, upto_chunk=15)  # read up to chunk 15: a fix after
    with pytest.raises(InputError, match=rf"{second.name}: bytes \d+-\d+: the source "
                                         "changed since the run read them"):
        check_fingerprint(spec, stored, read_upto=(str(second), None), chunks=plan.chunks,
                          reports=reports, upto_chunk=16)
