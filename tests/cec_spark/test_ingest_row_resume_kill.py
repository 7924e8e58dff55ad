"""Issue 41 item 3, the real programs: a ``cec run`` killed -9 (the whole run, as a host
crash) right after its ingest committed the upstream logs within a chunk, then ``cec
recover``: the export is exactly the reference, and the resumed ingest read from the
row the logs' tokens say, not from the chunk's start: its writer received exactly the
source rows no log held, and appended every one of them (none it had to drop as
already there). Both ingest paths: a csv file's (a Spark job per run of chunks, the
direct query) and a stream folder's (the long-lived task). The parts without Spark:
test_ingest_row_resume.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from cec_spark.ingest.logs import resume_point
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.chunk_report import counted_rows
from cec_spark.source.types import Chunk
from storage_log.log import StreamLog
from tests.cec_spark.helpers import (
    REPO,
    assert_results_equal,
    reference_count_windows,
    spec_text,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

P, SIZE = 2, 10


@dataclass(frozen=True)
class IngestPath:
    """An ingest path: the source's kind, its chunks, its rows and the crash point.

    The writer commits the logs within a chunk (with their ``row``) after a batch,
    every 100 ms while rows flow: the first chunk's commit is the point's first hit,
    the first commit within the second chunk its second (that chunk takes far longer
    than 100 ms to ingest, in several batches: the direct query's are Spark's Arrow
    batch size, set here; the long-lived task's 256 Ki rows)."""

    kind: str
    chunk: int
    rows: int
    at: str
    tag: str


# a csv chunk of 1 M rows: one of 500 k rows was once ingested within 100 ms of the
# chunk before's commit on a quiet machine (a fresh clone's CI), so it had no commit
# within it and the point's second hit was its end
PATHS = [IngestPath("csv", 1_000_000, 2_200_000, "ingest.after_token@2%i0", "i0"),
         # the long-lived task sets no tag
         IngestPath("stream-dir", 1_000_000, 2_200_000, "ingest.after_token@2", "")]
BATCH = 25_000


def _source(d: Path, path: IngestPath) -> tuple[Path, pd.DataFrame]:
    """``path.rows`` rows of 300 keys, non-decreasing times, whole-number prices (their
    sums are exact in any order: pandas' mean is the operator's); a stream folder holds
    them in one file and has ended (``_END``)."""
    rng = np.random.default_rng(41)
    n = path.rows
    df = pd.DataFrame({
        "item_id": rng.integers(0, 300, n),
        "item_price": rng.integers(0, 10_000, n).astype(np.float64),
        "item_time": 1_700_000_000_000_000 + np.cumsum(rng.integers(0, 2_000, n)),
    })
    folder = d / "in"
    folder.mkdir()
    pacsv.write_csv(pa.Table.from_pandas(df, preserve_index=False), folder / "items.csv")
    if path.kind == "csv":
        src = f'kind = "csv"\npath = "{folder / "items.csv"}"\n'
    else:
        (folder / "_END").touch()
        src = f'kind = "stream-dir"\npath = "{folder}"\nformat = "csv"\npoll_ms = 50\n'
    spec = d / "s.toml"
    spec.write_text(spec_text(f'{src}time_field = "item_time"\nchunk_rows = {path.chunk}',
                              where=None, partitions=P,
                              window=f'{{ kind = "count", size = {SIZE} }}')
                    + f'\n[run.spark]\n"spark.sql.execution.arrow.maxRecordsPerBatch" = '
                      f'{BATCH}\n')
    return spec, df


def _cec(args: list[str], log: Path, crash: dict[str, str] | None = None
         ) -> subprocess.Popen[bytes]:
    """``cec ARGS`` in a session of its own (its group is killed -9 at once), its output
    in ``log``; ``crash``: the crash point's variables (storage_log.faults)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEC_CRASH_")}
    with log.open("ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "cli.app", *args], cwd=REPO,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**env, "PYTHONUNBUFFERED": "1", **(crash or {})})


def _end(proc: subprocess.Popen[bytes], log: Path, mark: Path | None = None) -> int:
    """Wait for ``proc`` (with ``mark``: until a process leaves its mark there), then
    kill what is left of its group (the JVM, the workers) at once."""
    deadline = time.monotonic() + 600
    try:
        while proc.poll() is None and not (mark is not None and _marks(mark)):
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.005)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode


def _marks(mark: Path) -> list[Path]:
    """The marks processes left at the point (not the hidden claim of the point)."""
    return [m for m in mark.iterdir() if not m.name.startswith(".")]


def _upstream_rows(layout: RunLayout) -> list[list[int]]:
    """Each upstream log's committed seqs."""
    out = []
    for p in range(P):
        with StreamLog.open(layout.upstream(p)) as log:
            out.append([s for b in log.read_forward() for s in b.column("seq").to_pylist()])
    return out


def _chunks(layout: RunLayout) -> list[Chunk]:
    raw = json.loads(layout.source_plan_file.read_text(encoding="utf-8"))["chunks"]
    return [Chunk.from_dict(c) for c in raw]


def _chunk_seqs(layout: RunLayout, path: IngestPath) -> tuple[tuple[int, int], ...]:
    """The seqs ``[first, next)`` of the first two chunks: a csv file's from the plan
    the run stored (planned by bytes: its seqs are places in the bytes), a stream
    folder's rows."""
    if path.kind != "csv":
        return (0, path.chunk), (path.chunk, 2 * path.chunk)
    chunks = _chunks(layout)
    assert all(c.sparse for c in chunks)
    return tuple((c.first_seq, c.next_seq) for c in chunks[:2])


def _rows_below(layout: RunLayout, path: IngestPath, row: int) -> int:
    """The source rows below seq ``row`` (in chunk 1): the rows of chunk 0 (its
    reader's report) and those of chunk 1 below it."""
    if path.kind != "csv":
        return row
    chunks = _chunks(layout)
    return counted_rows(layout.source_chunk_report, chunks, 0) + row - chunks[1].first_seq


@pytest.mark.parametrize("path", PATHS, ids=[p.kind for p in PATHS])
def test_a_run_killed_after_a_commit_within_a_chunk_resumes_at_its_row(
        tmp_path: Path, path: IngestPath) -> None:
    spec, df = _source(tmp_path, path)
    run, mark, log = tmp_path / "run", tmp_path / "mark", tmp_path / "cec.log"
    mark.mkdir()
    proc = _cec(["run", "pipeline", str(spec), "--log-dir", str(run)], log,
                {"CEC_CRASH_AT": path.at, "CEC_CRASH_MARK": str(mark)})
    _end(proc, log, mark)  # the whole run killed as the writer dies at the point
    (died,) = _marks(mark)
    assert died.name.startswith("ingest.after_token.")
    assert f"tag={path.tag}\n" in died.read_text()
    layout = RunLayout(run)
    point = resume_point(layout, P)
    # the kill landed after a commit within chunk 1: every log holds its rows up to a
    # row inside it, and the ingest had rows of that chunk still to write
    _, second = _chunk_seqs(layout, path)
    assert point.chunk == 0 and second[0] < point.row < second[1], (point, log.read_text())
    below = _rows_below(layout, path, point.row)
    assert path.chunk // 2 < below < 3 * path.chunk
    had = _upstream_rows(layout)
    assert sum(len(s) for s in had) == below  # each log: its rows below the row
    assert all(s == sorted(set(s)) and (not s or s[-1] < point.row) for s in had)

    rc = _end(_cec(["recover", "--from-log", str(run)], log), log)
    assert rc == 0, log.read_text(errors="replace")[-4000:]

    # a stream folder's ingest ran as the long-lived task, not as a job per poll
    assert "one Spark job per poll" not in log.read_text(errors="replace")
    state = read_advisory(layout.ingest_state_file)
    print(f"{path.kind}: killed with every log at seq {point.row} of chunk 1, "
          f"{below} source rows below it; the resumed ingest: {state}")
    # read from the row, not from the chunk's start (row path.chunk): the writers received
    # exactly the rows no log had (no filter: every row read reaches them), each one
    # appended (written == received: none was dropped as already in its log)
    assert state["resumed_at"] == point.row
    # a csv file's resume took the plan its run stored (its bytes not read by the
    # driver: the file is as it was); a stream folder has no plan to store
    assert state.get("plan_from", "") == ("stored" if path.kind == "csv" else ""), state
    if path.kind == "csv":  # the last job's writer sealed every log (not the driver)
        assert state["sealed_by_writers"] == P, state
    assert state["first_received"] == point.row
    assert state["rows_received"] == path.rows - below == state["tuples"], \
        json.dumps(state)
    assert state["source_rows"] == path.rows, json.dumps(state)
    final = _upstream_rows(layout)
    for p in range(P):
        assert final[p][:len(had[p])] == had[p]  # what the log had, untouched
        assert final[p] == sorted(set(final[p]))  # no row twice
    assert sum(len(s) for s in final) == path.rows
    assert_results_equal(run, reference_count_windows(df, SIZE, where_nonneg=False))
