"""Issue 39: the real processes killed -9 at each named crash point
(:mod:`storage_log.faults`), recovered, and compared with an independent reference.

Every cell starts the real program with ``CEC_CRASH_AT=<point>[@n][%tag]`` and
``CEC_CRASH_MARK=<dir>``: the process that reaches the point (an ingest writer task
``i0``, an operator task ``p0``/``p1``, the driver, a standby, a tail) dies there by
SIGKILL and leaves a mark naming the point, its pid, tag and command line, which the
cell asserts. Then:

* a **task** cell lets the run go on: Spark runs the killed task again (a new Python
  worker: it reopens the logs, reconciles them and resumes from their tokens) and
  ``cec run`` itself must end with 0;
* a **host** cell kills the whole run (its process group) as soon as the mark appears,
  as a crash of the machine at that moment would, asserts the run was cut before its
  end (an output log not sealed), and runs ``cec recover --from-log``;
* the reconcile cell crashes a run where a commit's frames are written but not
  indexed, kills the recovery inside the reconcile of that log, and recovers again;
* the driver cell kills ``cec run`` right after it took its driver number, starts
  ``cec standby`` after that death (it takes over a driver that died before it came),
  kills the standby after it won the next number, and recovers with ``cec recover``;
* the idle cells (a stream folder with ``[source] idle_close``) kill the whole run
  right after its first file's chunk is committed, then the recovery (the folder has
  no new file: its first commit is an idle watermark's) between the two logs' commits
  of that watermark or after them, then recover with the folder's next file and its
  end;
* the tail cells (no Spark: the run's logs are written here as the ingest and the
  operator tasks write them) kill ``cec tail --consumer c >> FILE`` after its intent,
  inside its write, after its print, and a restarted tail before it completes its
  predecessor's acknowledgement, each time asserting what the kill left in the file
  (none, part or all of the batch its intent names); the file must hold every result
  exactly once.

Every cell ends with the results equal, cell for cell and to the last bit of every
float, to pandas: tumbling count windows per key, each window's values added left to
right (pandas' own ``mean`` compensates its sums and differs in the last bit).

Budget: a Spark cell is a real run and, but for a task cell, one or two recoveries:
measured on 2 cores (all 24 tests in 218 s at a load of 5-15), task cells 6-11 s, host
cells 10-17 s, the reconcile cell 13 s, the driver cell 12 s, the idle cells 19-21 s
(36 s at a busier moment), a tail cell 2-3 s; at a load of 17-26 (commit edb6cc4)
task cells took 16-29 s, host cells 35-52 s, the whole matrix 10 minutes. A ``pytest``
run holds one task cell, one other Spark cell (a host cell, the reconcile cell, the
driver cell or an idle cell) and one tail cell, chosen by the date (:func:`sample`:
each rotates on its own, so every cell runs within 11 days and every pair of a task
cell and another within 77); the rest are marked ``faults_full`` and run with
``CEC_FAULTS_FULL=1`` (``make test-faults``, tests/faults/conftest.py).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd
import pytest

from cec.ingest_token import IngestToken, decode_token
from cec_spark.read.export import results_table
from cec_spark.rundir.acks import ack_key, read_ack
from cec_spark.rundir.drivers import latest_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.standby.watch import run_finished
from storage_log.faults import POINTS
from storage_log.log import StreamLog
from tests.cec_spark.helpers import REPO, operate_partitions, spec_text, write_items_csv
from tests.cec_spark.test_rescale_offline import CHUNK, _ingest, _new_run, _rows

ROWS, KEYS, SIZE, PARTS = 3_000, 40, 5, 2
HARD_TIMEOUT_S = 600  # one cec process (a run or a recovery takes 10-40 s here)
COLUMNS = ["key", "window_start", "window_end", "count", "value"]


# ------------------------------------------------------------------ the reference

def count_windows(df: pd.DataFrame, size: int, how: str) -> pd.DataFrame:
    """Closed tumbling windows of ``size`` rows per ``item_id``, in row order: the first
    and last row's ``item_time`` as the bounds, the value the left-to-right sum of
    ``item_price`` (``how="sum"``) or that sum over the count (``"mean"``)."""
    df = df.reset_index(drop=True).copy()
    df["w"] = df.groupby("item_id").cumcount() // size
    g = df.groupby(["item_id", "w"], sort=False)

    def total(s: pd.Series) -> float:
        acc = 0.0
        for v in s.tolist():
            acc += v
        return acc if how == "sum" else acc / len(s)

    out = pd.DataFrame({"key": g.item_id.first(), "window_start": g.item_time.first(),
                        "window_end": g.item_time.last(), "count": g.item_price.size(),
                        "value": g.item_price.agg(total)}).reset_index(drop=True)
    out = out[out["count"] == size]
    return out.sort_values(COLUMNS[:3]).reset_index(drop=True)


def assert_exact(got: pd.DataFrame, ref: pd.DataFrame, what: str) -> None:
    """Every row and cell equal (floats to the bit), no row missing or twice."""
    got = got[COLUMNS].sort_values(COLUMNS[:3]).reset_index(drop=True)
    assert len(got) == len(ref), f"{what}: {len(got)} results, the reference has {len(ref)}"
    for col in COLUMNS:
        a, b = got[col].to_numpy(), ref[col].to_numpy()
        assert a.dtype == b.dtype and np.array_equal(a, b), (
            f"{what}: column {col} differs in {int((a != b).sum())} rows")


# ------------------------------------------------------------------ processes

def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEC_CRASH_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _start(args: Sequence[str], log: Path, env: dict[str, str],
           stdout: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """``cec ARGS`` in a session of its own (its group is killed -9 at once), output in
    ``log`` (or ``stdout``, then stderr in ``log``)."""
    with log.open("ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "cli.app", *args], cwd=REPO,
                                stdout=stdout if stdout is not None else fh,
                                stderr=fh if stdout is not None else subprocess.STDOUT,
                                start_new_session=True, env=env)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group may be gone already
        os.killpg(proc.pid, signal.SIGKILL)


def _wait(proc: subprocess.Popen[bytes], log: Path, *, mark: Path | None = None,
          point: str = "", timeout: float = HARD_TIMEOUT_S) -> int:
    """Wait for ``proc`` to end (then kill what is left of its group: a JVM, workers);
    with ``mark``, kill the whole group as soon as ``point``'s mark appears there."""
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if mark is not None and _marks(mark, point):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"{proc.args} did not end in {timeout} s (killed)\n"
                            f"{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.005)
    finally:
        _kill_group(proc)
        proc.wait()
    return proc.returncode


def _cec(args: Sequence[str], log: Path, **extra: str) -> None:
    """``cec ARGS`` to its end, which must be 0."""
    proc = _start(args, log, _env(**extra))
    rc = _wait(proc, log)
    assert rc == 0, f"cec {' '.join(args)} -> {rc}\n{log.read_text(errors='replace')[-4000:]}"


@dataclass(frozen=True)
class Landed:
    """The process that died at a point: its pid, tag and command line (its mark)."""

    pid: int
    tag: str
    argv: str


def _marks(mark: Path, point: str) -> list[Path]:
    return [m for m in mark.iterdir() if m.name.startswith(point + ".")]


def landed(mark: Path, point: str) -> Landed:
    """The one process killed at ``point`` (its mark in ``mark``)."""
    found = _marks(mark, point)
    assert len(found) == 1, f"{point}: marks {sorted(m.name for m in mark.iterdir())}"
    fields = dict(line.split("=", 1) for line in found[0].read_text().splitlines())
    return Landed(int(found[0].name.rsplit(".", 1)[1]), fields["tag"], fields["argv"])


def point_of(at: str) -> str:
    return at.split("%", maxsplit=1)[0].split("@", maxsplit=1)[0]


# ------------------------------------------------------------------ the Spark cells

@dataclass(frozen=True)
class Source:
    spec: Path
    reference: pd.DataFrame


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    """3,000 rows of 40 keys in 6 chunks, 2 partitions, windows of 5 rows, avg."""
    d = tmp_path_factory.mktemp("faults")
    df = write_items_csv(d / "items.csv", ROWS, keys=KEYS, seed=3, negative=False)
    spec = d / "faults.toml"
    spec.write_text(spec_text(f'kind = "csv"\npath = "{d / "items.csv"}"\n'
                              'time_field = "item_time"\nchunk_rows = 500',
                              where=None, function="avg", partitions=PARTS,
                              window=f'{{ kind = "count", size = {SIZE} }}'))
    ref = count_windows(df, SIZE, "mean")
    assert len(ref) > 500
    return Source(spec, ref)


def _results(run: Path) -> pd.DataFrame:
    return results_table(run).to_pandas()


def _sealed(run: Path) -> bool:
    """Every output log of the run is sealed (the run had ended)."""
    return run_finished(RunLayout(run), PARTS)


@dataclass(frozen=True)
class Cell:
    """``at``: CEC_CRASH_AT; ``host``: the whole run killed there (else only the
    process at the point); ``who``: the tag of the process that must die there."""

    at: str
    host: bool
    who: str

    @property
    def id(self) -> str:
        return f"{self.at.replace('%', '-')}-{'host' if self.host else 'task'}"


# @n chosen mid-work from the hits of one 3,000-row run: the ingest writer (i0) appends
# 12 records and commits 2 logs (once, with the job's token); each operator task (p0,
# p1) appends about 6 records and commits about 4 times, 2 or 3 of them group commits
# (fewer under load: the groups are timed), the last its seal (a host kill there would
# land after the end: no p-cell of log.before_commit/between_fsyncs goes past @2)
CELLS = [
    Cell("log.after_append@6%i0", False, "i0"),
    Cell("log.after_append@3%p1", True, "p1"),
    Cell("log.before_commit@2%p0", False, "p0"),
    Cell("log.before_commit%i0", True, "i0"),
    Cell("log.between_fsyncs%i0", False, "i0"),
    Cell("log.between_fsyncs@2%p1", True, "p1"),
    Cell("ingest.between_logs%i0", True, "i0"),
    Cell("ingest.between_logs%i0", False, "i0"),
    Cell("ingest.after_token%i0", False, "i0"),
    Cell("ingest.after_token%i0", True, "i0"),
    Cell("operator.before_group_commit@2%p1", False, "p1"),
    Cell("operator.before_group_commit@2%p0", True, "p0"),
    Cell("operator.after_group_commit@2%p0", False, "p0"),
    Cell("operator.after_group_commit@2%p1", True, "p1"),
]


IDLE_POINTS = ["ingest.between_logs", "ingest.after_token"]  # the idle cells' points
#: the Spark cells but the task cells, by id: the host cells, the reconcile cell, the
#: driver cell and the idle cells (a day's sample holds one of them)
OTHERS = ([c.id for c in CELLS if c.host] + ["reconcile", "driver"]
          + [f"idle-{p}" for p in IDLE_POINTS])


def sample(day: datetime.date) -> set[str]:
    """The ids of the day's sample of Spark cells: one task cell and one of
    :data:`OTHERS`, each list rotating by the date's ordinal (7 and 11 cells, coprime:
    every pair comes within 77 days). Each adds one real run and one or two recoveries
    (20-50 s); the tail cells rotate apart (:func:`_tail_params`)."""
    tasks = [c.id for c in CELLS if not c.host]
    n = day.toordinal()
    return {tasks[n % len(tasks)], OTHERS[n % len(OTHERS)]}


TODAY = sample(datetime.date.today())


def _unless_today(cell_id: str) -> list[pytest.MarkDecorator]:
    """No mark for a cell of today's sample, else ``faults_full``."""
    return [] if cell_id in TODAY else [pytest.mark.faults_full]


def _sampled(cell_id: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A test of one cell: marked ``faults_full`` unless it is in today's sample."""
    def mark(test: Callable[..., None]) -> Callable[..., None]:
        for m in _unless_today(cell_id):
            test = m(test)
        return test
    return mark


def _params() -> list[object]:
    return [pytest.param(c, id=c.id, marks=_unless_today(c.id)) for c in CELLS]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("cell", _params())
def test_a_kill_at_the_point_then_recovery_is_exact(source: Source, tmp_path: Path,
                                                    cell: Cell) -> None:
    run, mark, log = tmp_path / "run", tmp_path / "mark", tmp_path / "cec.log"
    mark.mkdir()
    point = point_of(cell.at)
    proc = _start(["run", "pipeline", str(source.spec), "--log-dir", str(run)], log,
                  _env(CEC_CRASH_AT=cell.at, CEC_CRASH_MARK=str(mark)))
    rc = _wait(proc, log, mark=mark if cell.host else None, point=point)
    died = landed(mark, point)
    assert died.tag == cell.who and "pyspark.worker" in died.argv, died
    if cell.host:
        assert not _sealed(run), "the kill landed after the run's end"
        _cec(["recover", "--from-log", str(run)], log)
    else:  # Spark ran the killed task again, which resumed from the logs
        assert rc == 0, f"{cell.at}: cec run -> {rc}\n{log.read_text()[-4000:]}"
    assert_exact(_results(run), source.reference, cell.id)


@pytest.mark.spark
@pytest.mark.slow
@_sampled("reconcile")
def test_a_kill_inside_the_reconcile_of_a_crashed_log(source: Source, tmp_path: Path) -> None:
    """A host crash right after the ingest wrote a commit's frames (not indexed), then a
    recovery killed inside the reconcile of that log, then a recovery to the end."""
    run, log = tmp_path / "run", tmp_path / "cec.log"
    first, second = tmp_path / "mark1", tmp_path / "mark2"
    first.mkdir()
    second.mkdir()
    proc = _start(["run", "pipeline", str(source.spec), "--log-dir", str(run)], log,
                  _env(CEC_CRASH_AT="log.before_commit%i0", CEC_CRASH_MARK=str(first)))
    _wait(proc, log, mark=first, point="log.before_commit")
    assert landed(first, "log.before_commit").tag == "i0"
    assert not _sealed(run)
    proc = _start(["recover", "--from-log", str(run)], log,
                  _env(CEC_CRASH_AT="log.during_reconcile", CEC_CRASH_MARK=str(second)))
    _wait(proc, log, mark=second, point="log.during_reconcile")
    died = landed(second, "log.during_reconcile")
    assert not _sealed(run)
    _cec(["recover", "--from-log", str(run)], log)
    assert_exact(_results(run), source.reference, f"reconcile killed in {died}")


@pytest.mark.spark
@pytest.mark.slow
@_sampled("driver")
def test_a_driver_killed_after_its_number_and_a_standby_killed_after_its_claim(
        source: Source, tmp_path: Path) -> None:
    """``cec run`` dies right after it took driver number 1; a standby started after
    that death claims number 2 and dies; ``cec recover`` (number 3) ends the run."""
    run, log = tmp_path / "run", tmp_path / "cec.log"
    m1, m2 = tmp_path / "mark1", tmp_path / "mark2"
    m1.mkdir()
    m2.mkdir()
    proc = _start(["run", "pipeline", str(source.spec), "--log-dir", str(run)], log,
                  _env(CEC_CRASH_AT="driver.after_number", CEC_CRASH_MARK=str(m1)))
    assert _wait(proc, log) == -signal.SIGKILL
    assert "run pipeline" in landed(m1, "driver.after_number").argv
    layout = RunLayout(run)
    assert latest_driver(layout) == 1
    proc = _start(["standby", "--from-log", str(run)], log,
                  _env(CEC_CRASH_AT="driver.during_claim", CEC_CRASH_MARK=str(m2)))
    assert _wait(proc, log) == -signal.SIGKILL, log.read_text()[-4000:]
    assert "standby" in landed(m2, "driver.during_claim").argv
    assert latest_driver(layout) == 2 and not _sealed(run)
    _cec(["recover", "--from-log", str(run)], log)
    assert latest_driver(layout) == 3
    assert_exact(_results(run), source.reference, "driver cell")


# ------------------------------------------------------------------ the idle cells

IDLE_ROWS = 1_500  # rows per file of the stream folder (two files)
IDLE_TIMEOUT_S = 300  # a stream run never ends by itself: how long to wait for a point


def _tokens(run: Path) -> list[IngestToken]:
    """Each upstream log's last token (every log has one here)."""
    out = []
    for p in range(PARTS):
        with StreamLog.open(RunLayout(run).upstream(p)) as log:
            tok = decode_token(log.last_token())
        assert tok is not None, f"upstream log {p} has no token"
        out.append(tok)
    return out


def _drop_file(folder: Path, df: pd.DataFrame, i: int) -> None:
    tmp = folder / f".f{i:04d}.tmp"
    df.to_csv(tmp, index=False)
    tmp.rename(folder / f"f{i:04d}.csv")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("point", [pytest.param(p, id=p, marks=_unless_today(f"idle-{p}"))
                                   for p in IDLE_POINTS])
def test_a_kill_in_an_idle_watermark_commit_then_recovery_is_exact(tmp_path: Path,
                                                                   point: str) -> None:
    """A stream folder with ``idle_close = "1s"``, one file in it: the whole run is
    killed once that file's chunk is committed (``ingest.after_token``, the first hit:
    a first chunk has no commit within it); ``cec recover`` finds no new file, so its
    ingest's first commit is an idle watermark's (:func:`cec_spark.ingest.logs.
    commit_watermark`), and it is killed at ``point`` in it: the logs' tokens say so
    (``ingest.between_logs``: the first log has the idle watermark, the second not
    yet); then a file with later times, the folder's end and ``cec recover``: the
    results equal pandas'."""
    folder, run, log = tmp_path / "in", tmp_path / "run", tmp_path / "cec.log"
    folder.mkdir()
    spec = tmp_path / "idle.toml"
    spec.write_text(spec_text(f'kind = "stream-dir"\npath = "{folder}"\nformat = "csv"\n'
                              'time_field = "item_time"\npoll_ms = 50\n'
                              'idle_close = "1s"', where=None, function="avg",
                              partitions=PARTS,
                              window=f'{{ kind = "count", size = {SIZE} }}'))
    df = write_items_csv(tmp_path / "all.csv", 2 * IDLE_ROWS, keys=KEYS, seed=11,
                         negative=False)
    first, later = df.iloc[:IDLE_ROWS], df.iloc[IDLE_ROWS:].copy()
    later["item_time"] += 3_600_000_000  # an hour on: past any idle watermark
    _drop_file(folder, first, 0)
    end = int(first.item_time.iloc[-1])
    m1, m2 = tmp_path / "mark1", tmp_path / "mark2"
    m1.mkdir()
    m2.mkdir()

    proc = _start(["run", "pipeline", str(spec), "--log-dir", str(run)], log,
                  _env(CEC_CRASH_AT="ingest.after_token", CEC_CRASH_MARK=str(m1)))
    _wait(proc, log, mark=m1, point="ingest.after_token", timeout=IDLE_TIMEOUT_S)
    assert "pyspark.worker" in landed(m1, "ingest.after_token").argv
    before = _tokens(run)
    assert [t.chunk for t in before] == [0] * PARTS, before  # the first file, whole
    assert all(t.watermark is not None and t.watermark >= end for t in before), before

    proc = _start(["recover", "--from-log", str(run)], log,
                  _env(CEC_CRASH_AT=point, CEC_CRASH_MARK=str(m2)))
    _wait(proc, log, mark=m2, point=point, timeout=IDLE_TIMEOUT_S)
    assert "pyspark.worker" in landed(m2, point).argv
    after = _tokens(run)
    assert [t.chunk for t in after] == [0] * PARTS, after  # no row since: idle commits
    moved = [a.watermark != b.watermark for a, b in zip(after, before, strict=True)]
    assert moved == ([True, False] if point == "ingest.between_logs" else [True] * PARTS), (
        point, before, after)
    assert all(a.watermark is not None and b.watermark is not None
               and a.watermark >= b.watermark + 1_000_000
               for a, b, m in zip(after, before, moved, strict=True) if m), (before, after)
    assert not _sealed(run)

    _drop_file(folder, later, 1)
    (folder / "_END").touch()
    _cec(["recover", "--from-log", str(run)], log)
    assert _sealed(run)
    assert_exact(_results(run), count_windows(pd.concat([first, later]), SIZE, "mean"),
                 f"idle {point}")


# ------------------------------------------------------------------ the tail cells

TAIL_SIZE = 7  # tests/cec_spark/test_rescale_offline.py's runs: sum over count windows
TAIL_CHUNKS = 5  # of its source's 12 chunks of 500 rows: the tail is killed at the 3rd batch


def _tail_lines(path: Path) -> pd.DataFrame:
    """The tail's JSON lines as the export's columns (bounds as int64 microseconds)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    df = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("window_start", "window_end"):
        when = pd.to_datetime(df[col], utc=True, format="ISO8601")
        df[col] = (when - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(1, "us")
    return df.astype({"key": "int64", "count": "int64", "value": "float64"})


def _caught_up(layout: RunLayout) -> bool:
    """Consumer ``c`` acknowledged every output log's last record."""
    acks = read_ack(layout, "c")
    for p in range(PARTS):
        with StreamLog.open(layout.output(p)) as log:
            last = log.last_seq
        if last is not None and acks.get(ack_key(0, p), -1) < last:
            return False
    return True


def _tail(layout: RunLayout, sink: Path, log: Path, **extra: str
          ) -> subprocess.Popen[bytes]:
    """``cec tail RUN --consumer c >> sink``."""
    with sink.open("ab") as out:
        return _start(["tail", str(layout.root), "--consumer", "c"], log, _env(**extra),
                      stdout=out)


TAIL_CELLS = {  # point: CEC_CRASH_AT (what the restarted tail finds)
    "tail.after_intent": "tail.after_intent@3",  # the file at its old size: print
    "tail.mid_print": "tail.mid_print@3",  # part of the batch: cut it, print it whole
    "tail.after_print": "tail.after_print@3",  # the whole batch: complete the ack
    "tail.before_ack": "tail.after_print@3",  # the same, and that tail killed too
}


def _printed_of_intent(layout: RunLayout, sink: Path) -> str:
    """After a kill between intent and ack: how much of the intent's batch is in the
    file (``none``, ``part``, ``all``), from the intent's size of the file and bytes."""
    intent = json.loads(layout.consumer_intent("c").read_text())
    before, nbytes, size = intent["out"][2], intent["bytes"], sink.stat().st_size
    assert nbytes > 0 and before <= size <= before + nbytes, (intent, size)
    return "none" if size == before else "all" if size == before + nbytes else "part"


def _tail_params() -> list[object]:
    points = sorted(TAIL_CELLS)
    sample = points[datetime.date.today().toordinal() % len(points)]
    return [pytest.param(p, id=p, marks=[] if p == sample else [pytest.mark.faults_full])
            for p in points]


@pytest.mark.parametrize("point", _tail_params())
def test_a_tail_killed_at_the_point_prints_every_result_once(tmp_path: Path,
                                                             point: str) -> None:
    """The run goes on chunk by chunk; the tail (appending to a file) follows it and is
    killed at the third batch; restarted, it goes on; the file is the reference."""
    layout = _new_run(tmp_path, "run", f'{{ kind = "count", size = {TAIL_SIZE} }}', PARTS)
    rows = _rows(tmp_path)
    sink, log, mark = tmp_path / "lines.jsonl", tmp_path / "tail.log", tmp_path / "mark"
    mark.mkdir()
    first = TAIL_CELLS[point]
    proc = _tail(layout, sink, log, CEC_CRASH_AT=first, CEC_CRASH_MARK=str(mark))
    chunks = TAIL_CHUNKS
    restarted = False
    for c in range(chunks):
        _ingest(layout, rows, range(c, c + 1), seal=c == chunks - 1)
        operate_partitions(layout)
        deadline = time.monotonic() + 60
        while proc.poll() is None and not _caught_up(layout) and c < chunks - 1:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.01)
        # killed at the point: restart it (once: the restarted tail, armed with nothing,
        # may end normally on its own once the last chunk sealed the run, before this
        # look; it is waited for below)
        if not restarted and proc.poll() is not None:
            assert proc.returncode == -signal.SIGKILL, log.read_text()[-3000:]
            killed = landed(mark, point_of(first))
            assert "tail" in killed.argv
            assert _printed_of_intent(layout, sink) == {
                "tail.after_intent": "none", "tail.mid_print": "part"}.get(point, "all")
            if point == "tail.before_ack":  # the restarted tail dies completing the ack
                again = _tail(layout, sink, log, CEC_CRASH_AT="tail.before_ack",
                              CEC_CRASH_MARK=str(mark))
                assert _wait(again, log, timeout=60) == -signal.SIGKILL, \
                    log.read_text()[-3000:]
                landed(mark, "tail.before_ack")
                assert layout.consumer_intent("c").exists()  # still to be settled
            proc, restarted = _tail(layout, sink, log), True
    assert restarted, "the tail was never killed at its point"
    assert _wait(proc, log) == 0, log.read_text()[-3000:]  # the run's end ends the tail
    assert _marks(mark, point), f"the tail never reached {point}"
    fed = pd.read_csv(tmp_path / "items.csv").iloc[:TAIL_CHUNKS * CHUNK]
    ref = count_windows(fed, TAIL_SIZE, "sum")
    assert_exact(_tail_lines(sink), ref, point)


def test_every_point_has_a_cell_and_a_call() -> None:
    """The matrix covers POINTS, and the code calls each of them (crash_point refuses
    a name not in POINTS): a point without a cell or a call fails here."""
    covered = {point_of(c.at) for c in CELLS} | set(TAIL_CELLS) | set(IDLE_POINTS) | {
        "log.during_reconcile", "driver.after_number", "driver.during_claim"}
    assert covered == set(POINTS)
    code = "\n".join(f.read_text() for pkg in ("storage_log", "cec_spark")
                     for f in (REPO / pkg).rglob("*.py"))
    called = {p for p in POINTS if f'crash_point("{p}")' in code}
    assert called == set(POINTS), f"never called: {sorted(set(POINTS) - called)}"


def test_the_daily_sample_rotates_over_every_spark_cell() -> None:
    """Each day samples one task cell and one other Spark cell; 11 days in a row sample
    every cell, and the test functions' marks follow :data:`TODAY`."""
    tasks = {c.id for c in CELLS if not c.host}
    assert len(set(OTHERS)) == len(OTHERS) == 11 and len(tasks) == 7
    first = datetime.date(2026, 1, 1)
    seen: set[str] = set()
    for d in range(len(OTHERS)):
        day = sample(first + datetime.timedelta(days=d))
        assert len(day & tasks) == 1 and len(day & set(OTHERS)) == 1, day
        seen |= day
    assert seen == tasks | set(OTHERS)
    for name, cell_id in (("test_a_kill_inside_the_reconcile_of_a_crashed_log", "reconcile"),
                          ("test_a_driver_killed_after_its_number_and_a_standby_killed_"
                           "after_its_claim", "driver")):
        marks = {m.name for m in getattr(globals()[name], "pytestmark", [])}
        assert ("faults_full" in marks) == (cell_id not in TODAY), (name, marks)
