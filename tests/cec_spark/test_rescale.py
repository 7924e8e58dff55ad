"""Rescale on recovery (issue 20) on real local Spark, in real processes.

A CSV pipeline with ``P`` partitions is killed with ``kill -9`` (the whole process
group) in the middle of its work (a stream folder gets thousands of rows at once and
the kill comes as soon as the upstream logs grow; each test asserts from the logs and
the state files that some of those rows were committed upstream and either not all of
them or not all processed by the operators), then resumed with ``cec recover --partitions P'``: its
export equals the failure-free export byte for byte. Count tumbling, count sliding and
time windows; a rescale killed in the middle and run again; two rescales in a row;
the key partition of the Python side equal to Spark's on many keys; a run killed
before its logs existed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cec_spark.ingest.query import partition_expr
from cec_spark.read.datasource import _StreamReader, register
from cec_spark.report import RecoverResult
from cec_spark.rundir.layout import RunLayout
from recovery.rescale import partitions_of, spark_xxhash64
from storage_log.log import StreamLog
from tests.cec_spark.helpers import (
    cec,
    spec_text,
    start_cec,
    task_states,
    wait_for,
    write_items_csv,
)
from tests.cli.test_pipeline_cli import checked

pytestmark = pytest.mark.spark

ROWS = 20_000
SOURCE = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 1000'
CASES = {
    "count_tumbling": ('{ kind = "count", size = 10 }', "avg"),
    "count_sliding": ('{ kind = "count", size = 8, slide = 3 }', "sum"),
    "time_sliding": ('{ kind = "time", size = "2s", slide = "500ms" }', "max"),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rescale")
    write_items_csv(d / "items.csv", ROWS, keys=700, seed=5)
    return d


def _spec(data: Path, case: str, partitions: int) -> Path:
    window, function = CASES[case]
    path = data / f"{case}-{partitions}.toml"
    path.write_text(spec_text(SOURCE, window=window, function=function,
                              partitions=partitions))
    return path


_REFS: dict[str, Path] = {}


def _reference(data: Path, case: str) -> Path:
    """The failure-free export of a case (once per module)."""
    if case not in _REFS:
        run = data / f"ref-{case}"
        cec(["run", "pipeline", str(_spec(data, case, 2)), "--log-dir", str(run),
             "--json"], check=True)
        out = data / f"ref-{case}.csv"
        cec(["export", str(run), "--out", str(out)], check=True)
        _REFS[case] = out
    return _REFS[case]


FILES = 10  # a killed run reads its rows from a stream folder, in this many files
# the ingest commits every chunk: every 500 rows
STREAM = 'time_field = "item_time"\npoll_ms = 50\nchunk_rows = 500'


def upstream_last_seqs(run: Path, partitions: int) -> list[int]:
    """Each generation-0 upstream log's last committed row (its seq: the source row's
    number; -1: none, or no log)."""
    out = []
    for p in range(partitions):
        path = RunLayout(run).upstream_of(0, p)
        if not path.exists():
            out.append(-1)
            continue
        with StreamLog.open(path, threads=0) as log:
            out.append(-1 if log.last_seq is None else log.last_seq)
    return out


def _processes() -> dict[int, tuple[int, int]]:
    """Every live process: pid -> (parent pid, process group); zombies left out."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            state, ppid, pgid = stat[stat.rindex(")") + 2:].split()[:3]
            if state != "Z":
                out[int(name)] = (int(ppid), int(pgid))
    return out


def groups_of(pid: int) -> set[int]:
    """The process groups of ``pid`` and its descendants: a ``cec`` run's own, and its
    JVM's PySpark daemon's (which starts its own session: a kill of the run's group
    leaves the daemon and its forked workers to notice the JVM is gone)."""
    table = _processes()
    kids: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        kids.setdefault(parent, []).append(child)
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += kids.get(p, [])
    return {table[p][1] for p in seen if p in table}


def wait_gone(groups: set[int], timeout: float = 60) -> None:
    """Wait until no process of ``groups`` is left (the killed run's orphaned Python
    workers could still commit: where a kill landed is read after this)."""
    wait_for(lambda: not any(g in groups for _, g in _processes().values()), timeout,
             f"the killed run's processes (groups {sorted(groups)}) to exit")


def behind(run: Path, partitions: int) -> list[int]:
    """The partitions whose upstream log is ahead of what their operator task last
    reported processed (``RUN/state/pNNNN.json`` in_last_seq, written after its
    commits every 0.5 s while busy and at once when idle): an idle run has none. Read
    after the kill. A task's counters start with it: a recovered task that processed
    nothing yet reports none (behind, as one not yet started is); the tests read it
    after new rows were committed for every partition, which an idle task would have
    processed."""
    ups = upstream_last_seqs(run, partitions)
    states = task_states(run, partitions)
    return [p for p in range(partitions)
            if ups[p] > int(states[p].get("in_last_seq") or -1)]  # type: ignore[call-overload]


def last_kept(rows: pd.DataFrame, n: int) -> int:
    """The seq of the last of the first ``n`` rows that the filter keeps."""
    return int(np.flatnonzero(rows.item_price.to_numpy()[:n] >= 0)[-1])


def _upstream_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in (run / "upstream").rglob("*.seg"))


def _kill_run(data: Path, case: str, partitions: int, run: Path, tmp: Path,
              share: float) -> int:
    """Run the case on a stream folder holding the first ``share`` of the rows (the
    same rows as ``items.csv``, in FILES files: the same export); once they are
    ingested and mostly processed, drop every other file at once and kill -9 the
    process group as soon as the upstream logs grow: mid-ingest or mid-operator
    (asserted, see _kill_mid_ingest); then ``_END``. Returns the upstream's last row at the kill."""
    window, function = CASES[case]
    live = tmp / "live"
    live.mkdir()
    rows = pd.read_csv(data / "items.csv")
    parts = [rows.iloc[i * len(rows) // FILES:(i + 1) * len(rows) // FILES]
             for i in range(FILES)]
    first = max(1, round(share * FILES))
    for i in range(first):
        parts[i].to_csv(live / f"f-{i:03d}.csv", index=False)
    spec = tmp / f"{case}-{partitions}-live.toml"
    spec.write_text(spec_text(f'kind = "stream-dir"\npath = "{live}"\n{STREAM}',
                              window=window, function=function, partitions=partitions))

    def drop() -> None:
        for i in range(first, FILES):
            tmp_file = live / f".f-{i:03d}.tmp"
            parts[i].to_csv(tmp_file, index=False)
            tmp_file.rename(live / f"f-{i:03d}.csv")

    landed = _kill_mid_ingest(spec, run, tmp, partitions, rows,
                              sum(len(parts[i]) for i in range(first)), drop)
    (live / "_END").touch()
    return landed


def _kill_mid_ingest(spec: Path, run: Path, tmp: Path, partitions: int, rows: pd.DataFrame,
                     ready: int, drop: Callable[[], None]) -> int:
    """Start ``cec run pipeline`` on a stream folder holding ``rows``' first ``ready``
    rows; once the upstream logs hold them and the operators processed 90 % of them,
    ``drop()`` the other rows' files at once (thousands of rows, a commit every 500) and
    kill -9 the process group as soon as the upstream logs grow (polled every ms); wait
    for its orphaned Python workers to go. Asserted: the kill landed in the work on the
    dropped rows: the upstream logs grew, and either not all of them are committed
    upstream (mid-ingest) or not all reported processed by the operators (mid-operator:
    a partition's upstream log ahead of its state file's in_last_seq). Returns the
    upstream's last row."""
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp / "run.log")
    before = last_kept(rows, ready)
    kept = int((rows.item_price.to_numpy()[:ready] >= 0).sum())

    def processed() -> int:
        return sum(int(s.get("in_tuples", 0) or 0)  # type: ignore[call-overload]
                   for s in task_states(run, partitions))

    wait_for(lambda: proc.poll() is None and processed() > int(kept * 0.9)
             and max(upstream_last_seqs(run, partitions)) == before, 180,
             f"{ready} rows ingested, 90 % processed")
    groups = groups_of(proc.pid)
    idle = _upstream_bytes(run)
    drop()
    wait_for(lambda: _upstream_bytes(run) != idle, 60, "the ingest to write", step=0.001)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_gone(groups)
    landed = max(upstream_last_seqs(run, partitions))
    last, late = last_kept(rows, len(rows)), behind(run, partitions)
    # mid-work: the upstream grew (a commit's frames written) and either not every
    # dropped row is committed (mid-ingest) or not all are processed (mid-operator)
    assert before <= landed and (landed < last or late), (before, landed, last, late)
    print(f"killed {'mid-ingest' if landed < last else 'mid-operator'}: upstream at row "
          f"{landed} of {before + 1}..{last}; partitions behind their upstream: {late}")
    return landed


def _recover(run: Path, partitions: int) -> dict[str, object]:
    rec = cec(["recover", "--from-log", str(run), "--partitions", str(partitions),
               "--json"], check=True)
    result = checked(rec.stdout, RecoverResult)
    assert result["resumed"]["completed"], result
    assert len(result["partitions"]) == partitions
    return result


def _export(run: Path, out: Path) -> bytes:
    cec(["export", str(run), "--out", str(out)], check=True)
    return out.read_bytes()


def test_key_partition_is_sparks(data: Path) -> None:
    """The rescale's key groups (Python) equal the ingest's (Spark SQL), for int64 and
    string keys, with and without key groups' partition counts."""
    spark = SparkSession.builder.master("local[1]").getOrCreate()
    try:
        ids = spark.range(-5000, 15000).select(
            F.col("id").alias("k"), (F.col("id") * 7919 + 3).cast("string").alias("s"))
        rows = ids.select(
            "k", "s", F.xxhash64("k").alias("hk"), F.xxhash64("s").alias("hs"),
            *[partition_expr(F.col("k"), p, 128).alias(f"k{p}") for p in (1, 2, 3, 8, 128)],
            *[partition_expr(F.col("s"), p, 128).alias(f"s{p}") for p in (1, 3, 8)],
        ).collect()
    finally:
        spark.stop()
    keys = [int(r["k"]) for r in rows] + [1 << 62, -(1 << 63)]
    assert [spark_xxhash64(int(r["k"])) for r in rows] == [int(r["hk"]) for r in rows]
    assert [spark_xxhash64(str(r["s"])) for r in rows] == [int(r["hs"]) for r in rows]
    for p in (1, 2, 3, 8, 128):
        assert partitions_of([int(r["k"]) for r in rows], p, 128).tolist() == \
            [int(r[f"k{p}"]) for r in rows]
    for p in (1, 3, 8):
        assert partitions_of([str(r["s"]) for r in rows], p, 128).tolist() == \
            [int(r[f"s{p}"]) for r in rows]
    assert len(set(partitions_of(keys, 8, 128).tolist())) == 8


@pytest.mark.parametrize(("case", "old", "new", "share"), [
    ("count_sliding", 2, 8, 0.5),
    ("time_sliding", 3, 1, 0.25),
])
def test_kill9_then_recover_with_other_partitions(data: Path, tmp_path: Path, case: str,
                                                  old: int, new: int, share: float) -> None:
    reference = _reference(data, case)
    run = tmp_path / "run"
    _kill_run(data, case, old, run, tmp_path, share)
    result = _recover(run, new)
    rescale = result["rescale"]
    assert isinstance(rescale, dict)
    assert (rescale["from_partitions"], rescale["to_partitions"]) == (old, new)
    assert len(rescale["windows_per_partition"]) == new
    print(f"{case}: {old} -> {new} at C={rescale['cut']}, windows moved "
          f"{rescale['windows_per_partition']}, old partitions {rescale['old']}")
    assert _export(run, tmp_path / "got.csv") == reference.read_bytes()
    gens = RunLayout(run).generations
    assert [g.partitions for g in gens] == [old, new]
    # time travel reaches back to the rescale, and says so before it
    before = cec(["inspect", "extent", str(run), "--at", str(gens[1].cut_ts - 1)])
    assert before.returncode == 2 and "rescale" in before.stderr, before.stderr


def test_a_run_killed_before_its_logs_starts_with_other_partitions(
        data: Path, tmp_path: Path) -> None:
    """kill -9 as ``run.toml`` appears, while Spark starts (before the ingest created
    ``upstream/``, issue 29): ``cec recover --partitions 3`` has nothing to move and
    starts the run with 3 partitions; its export equals the failure-free one."""
    case = "count_tumbling"
    reference = _reference(data, case)
    run = tmp_path / "run"
    proc = start_cec(["run", "pipeline", str(_spec(data, case, 2)), "--log-dir", str(run),
                      "--json"], tmp_path / "run.log")
    wait_for((run / "run.toml").exists, 120, "run.toml", step=0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert not (run / "upstream").exists(), "killed too late: the logs exist"
    result = _recover(run, 3)
    rescale = result["rescale"]
    assert isinstance(rescale, dict)
    assert (rescale["cut"], rescale["windows_per_partition"]) == (-1, [0, 0, 0])
    assert [o["state"] for o in rescale["old"]] == ["empty", "empty"]
    assert _export(run, tmp_path / "got.csv") == reference.read_bytes()
    assert [g.partitions for g in RunLayout(run).generations] == [2, 3]


def test_a_stream_continues_after_the_cut(data: Path, tmp_path: Path) -> None:
    """A stream folder: kill -9 while the run works on the two files dropped after the
    first one was processed (mid-ingest or mid-operator, asserted), ``_END``, recover
    with fewer partitions: the new generation's ingest reads the source from the cut on
    (the first file is not read again), and the export equals the failure-free
    run's over the same rows (the case's reference: the same rows in a stream folder
    give the same export, see _kill_run)."""
    rows = pd.read_csv(data / "items.csv")
    thirds = [rows.iloc[i * len(rows) // 3:(i + 1) * len(rows) // 3] for i in range(3)]
    window, function = CASES["count_tumbling"]
    reference = _reference(data, "count_tumbling").read_bytes()

    def spec(folder: Path, partitions: int) -> Path:
        path = tmp_path / f"{folder.name}.toml"
        path.write_text(spec_text(f'kind = "stream-dir"\npath = "{folder}"\n{STREAM}',
                                  window=window, function=function, partitions=partitions))
        return path

    live = tmp_path / "live"
    live.mkdir()
    thirds[0].to_csv(live / "f-000.csv", index=False)
    run = tmp_path / "run"

    def drop() -> None:
        for i in (1, 2):
            thirds[i].to_csv(live / f".f-{i:03d}.tmp", index=False)
            (live / f".f-{i:03d}.tmp").rename(live / f"f-{i:03d}.csv")

    landed = _kill_mid_ingest(spec(live, 3), run, tmp_path, 3, rows, len(thirds[0]), drop)
    (live / "_END").touch()
    result = _recover(run, 2)
    rescale = result["rescale"]
    # the cut is past the first file (every log holds it), at most the last row: the
    # whole drop when the kill landed mid-operator, as it may on a loaded machine
    assert isinstance(rescale, dict), rescale
    assert len(thirds[0]) - 1 <= rescale["cut"] <= len(rows) - 1, rescale
    print(f"stream: killed at upstream row {landed}; 3 -> 2 at C={rescale['cut']}, "
          f"windows moved "
          f"{rescale['windows_per_partition']}")
    assert result["resumed"]["source_rows"] == len(rows)
    assert _export(run, tmp_path / "got.csv") == reference
    # the Spark reader reads both generations: the export's rows, each once
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # its planner runs cec
    spark = SparkSession.builder.master("local[1]").getOrCreate()
    try:
        register(spark)
        got = spark.read.format("cec").load(str(run)).select(
            "key", "count", "value").collect()
        reader = _StreamReader({"path": str(run)})
        offsets = reader.latestOffset()
    finally:
        spark.stop()
    exported = pd.read_csv(tmp_path / "got.csv")
    assert sorted((int(r["key"]), int(r["count"]), round(float(r["value"]), 6))
                  for r in got) == sorted(
        zip(exported["key"].astype(int), exported["count"].astype(int),
            exported["value"].round(6), strict=True))
    assert set(offsets) == {"0", "1", "2", "g1/0", "g1/1"}


def test_a_killed_rescale_runs_again_and_rescales_twice(data: Path, tmp_path: Path) -> None:
    """kill -9 of ``cec recover --partitions 8`` while it rescales or resumes; a second
    one (to 2) finishes the job; then a finished run refuses another rescale."""
    case = "count_tumbling"
    reference = _reference(data, case)
    run = tmp_path / "run"
    _kill_run(data, case, 3, run, tmp_path, 0.1)
    proc = start_cec(["recover", "--from-log", str(run), "--partitions", "8"],
                     tmp_path / "recover.log")
    wait_for((run / "output" / "g0001").exists, 120, "the rescale's new logs")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    time.sleep(2.0)  # its Spark workers (if it got that far) go with the JVM
    gens = RunLayout(run).generations
    result = _recover(run, 2)
    rescale = result["rescale"]
    assert isinstance(rescale, dict)
    # either the killed rescale had committed generation 1 (8 partitions), or not
    assert rescale["generation"] == (2 if gens else 1)
    assert _export(run, tmp_path / "got.csv") == reference.read_bytes()
    done = cec(["recover", "--from-log", str(run), "--partitions", "4"])
    assert done.returncode == 2 and "complete" in done.stderr, done.stderr
    too_many = cec(["recover", "--from-log", str(run), "--partitions", "129", "--dry-run"])
    assert too_many.returncode == 2 and "key groups" in too_many.stderr, too_many.stderr
