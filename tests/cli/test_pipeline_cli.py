"""The `cec` commands end to end, in real processes, with real crashes.

A failure-free run of a CSV pipeline is the reference. Each crash test produces the
same export after: kill -9 of the whole `cec run` process group at a random moment and
`cec recover --from-log`; SIGKILL of one operator task's Python worker (Spark retries
the task, which recovers from its output log); a torn or corrupted output-log tail
healed by `cec recover`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from cec_spark.ingest.logs import committed_chunk, upstream_sealed
from cec_spark.report import ExportResult, ExtentResult, LogReport, RecoverResult, RunResult
from cec_spark.rundir.checksum import CHECKSUM_PREFIX, sign_run_text
from cec_spark.rundir.layout import RunLayout
from cec_spark.standby.watch import run_finished
from cli.app import main
from cli.schema import problems
from tests.cec_spark.helpers import (
    REPO,
    alive,
    cec,
    read_export_csv,
    reference_count_windows,
    spec_text,
    start_cec,
    task_states,
    wait_for,
    write_items_csv,
)

pytestmark = pytest.mark.spark

ROWS = 150_000
P = 3
SOURCE = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 6000'


def checked(text: str, cls: type) -> dict[str, Any]:
    """A command's ``--json`` output, parsed, after checking it against the schema of
    docs/JSON.md (cli/schema.py)."""
    doc: dict[str, Any] = json.loads(text)
    assert problems(doc, cls) == [], problems(doc, cls)
    return doc


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(spec, reference export) of a failure-free run."""
    d = tmp_path_factory.mktemp("workload")
    df = write_items_csv(d / "items.csv", ROWS, keys=3000, seed=11)
    spec = d / "items.toml"
    spec.write_text(spec_text(SOURCE, partitions=P))
    run = cec(["run", "pipeline", str(spec), "--log-dir", str(d / "ref"), "--json",
               "--out", str(d / "ref-run.csv")], check=True)
    summary = checked(run.stdout, RunResult)
    assert summary["completed"] and summary["source_rows"] == ROWS
    assert summary["export"]["out"] == str(d / "ref-run.csv")
    # with --json nothing human goes to stderr: not the JVM's boot warning, not the UI
    assert "incubator" not in run.stderr and "Spark UI" not in run.stderr, run.stderr
    exported = cec(["export", str(d / "ref"), "--out", str(d / "ref.csv"), "--json"],
                   check=True)
    assert checked(exported.stdout, ExportResult)["rows"] > 0
    # without --format the file's name says the format: parquet here, the same rows
    cec(["export", str(d / "ref"), "--out", str(d / "ref.parquet")], check=True)
    assert pq.read_table(d / "ref.parquet").num_rows == summary["export"]["rows"]
    # `run --out` wrote what `cec export` writes, in the run's own process
    assert (d / "ref-run.csv").read_bytes() == (d / "ref.csv").read_bytes()
    assert summary["export"]["rows"] == checked(exported.stdout, ExportResult)["rows"]
    # the crash tests compare their exports byte for byte with this one: key, window,
    # count and the average all equal pandas' (issue 29: the average was not checked)
    _same_as_pandas(read_export_csv(d / "ref.csv"), reference_count_windows(df, 10))
    return spec, d / "ref.csv"


def _same_as_pandas(got: pd.DataFrame, ref: pd.DataFrame) -> None:
    """Every window of the export equals the pandas reference: key, bounds, count, and
    the average (to 1e-9 relative: pandas sums in another order)."""
    cols = ["key", "window_start", "window_end", "count"]
    assert got[cols].values.tolist() == ref[cols].values.tolist()
    assert len(got) > 0 and got["value"].notna().all()
    assert np.allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9,
                       atol=0.0), (got["value"] - ref["value"]).abs().max()


@pytest.fixture(scope="module")
def trimming(workload: tuple[Path, Path]) -> Path:
    """The workload's spec with small upstream segments trimmed without lag.

    The crash tests run it: a recovery must find every upstream record it replays
    although the ingest kept deleting segments below the operators' floors.
    """
    spec = workload[0].with_name("items-trim.toml")
    spec.write_text(spec_text(SOURCE, partitions=P,
                              extra_run="segment_kb = 16\ntrim_lag_s = 0"))
    return spec


def _trimmed(run: Path) -> int:
    """Upstream segments deleted so far (the first kept one no longer starts at 0)."""
    n = 0
    for p in range(P):
        segs = sorted((run / "upstream" / f"p{p:04d}").glob("*.seg"))
        n += bool(segs) and int(segs[0].name[:20]) > 0
    return n


def _states(run: Path) -> list[dict[str, object]]:
    return task_states(run, P)


def _export_equals(run: Path, tmp: Path, reference: Path) -> None:
    out = tmp / "export.csv"
    cec(["export", str(run), "--out", str(out)], check=True)
    assert out.read_bytes() == reference.read_bytes()


def _processed(run: Path) -> int:
    """The rows the operator tasks have consumed, as their state files say (every
    0.5 s: behind the tasks by up to that)."""
    return sum(int(s.get("in_tuples", 0)) for s in _states(run))  # type: ignore[call-overload]


def _ingested_chunk(run: Path) -> int:
    """The last chunk every upstream log committed (-1: none yet)."""
    return committed_chunk(RunLayout(run), P)[0]


def test_kill9_of_the_whole_run_then_recover(workload: tuple[Path, Path], trimming: Path,
                                             tmp_path: Path) -> None:
    """kill -9 of the whole run right after its ingest's K-th commit (K drawn from 1 to
    4): the writer dies at the crash point ``ingest.after_token@K%i0``
    (storage_log.faults) and the test kills the whole run as soon as its mark appears,
    as a crash of the host at that moment would. The writer commits after each chunk of
    6,000 rows while more than 64 Ki rows of its job are left (``COMMIT_AT_END_ROWS``):
    about 13 commits before its last, so the kill lands in the ingest whatever the
    machine's speed, and the test asserts it (the ingest at the chunk of that commit,
    no upstream log sealed, a partition not done, an output log not sealed). Two earlier
    ways to draw the moment landed after the work on a quiet machine, where the whole
    run takes about 0.5 s: a share of the rows as the operators' state files say (every
    0.5 s), and the ingest's committed chunk polled every 5 ms (a poll opens 3 logs)."""
    spec, reference = trimming, workload[1]
    run, mark = tmp_path / "run", tmp_path / "mark"
    mark.mkdir()
    seed = random.randrange(1 << 30)
    target = random.Random(seed).randint(1, 4)
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log", env={"CEC_CRASH_AT": f"ingest.after_token@{target}%i0",
                                                "CEC_CRASH_MARK": str(mark)})
    wait_for(lambda: proc.poll() is not None
             or any(not m.name.startswith(".") for m in mark.iterdir()), 180,
             f"the ingest's commit {target} (its crash point)", step=0.005)
    assert proc.poll() is None, (seed, target, (tmp_path / "run.log").read_text()[-3000:])
    pids = [int(s["pid"]) for s in _states(run) if "pid" in s]  # type: ignore[call-overload]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    # Spark's Python workers leave with their JVM (SIGHUP from the worker daemon)
    wait_for(lambda: not any(alive(pid) for pid in pids), 60, "orphaned workers to exit")
    done = [bool(s.get("done")) for s in _states(run)]
    processed = _processed(run)
    chunk = _ingested_chunk(run)
    # where the kill landed: in the ingest's work, at its commit ``target``
    assert target - 1 <= chunk < 24 and not upstream_sealed(RunLayout(run), P), \
        (seed, target, chunk)
    assert not all(done) and not run_finished(RunLayout(run), P), (seed, target, done)
    assert processed < ROWS, (seed, target, processed)
    # a dry run says what the recover will do, per partition and for the run, and why
    dry = cec(["recover", "--from-log", str(run), "--dry-run"], check=True).stdout
    would = [ln for ln in dry.splitlines() if ln.startswith("would: ")]
    assert len(would) == P + 1 and would[-1].startswith("would: run: "), dry
    assert all(ln.startswith(f"would: partition {p}: ") for p, ln in enumerate(would[:P])), dry
    assert "would rebuild the eventual checkpoint of" in dry or "start fresh" in dry, dry
    rec = cec(["recover", "--from-log", str(run), "--json"], check=True)
    result = checked(rec.stdout, RecoverResult)
    assert result["resumed"]["completed"], (seed, target, result)
    assert len(result["partitions"]) == P
    print(f"seed={seed} killed at the ingest's commit {target}, chunk {chunk} of 25 "
          f"ingested, "
          f"{processed} rows consumed as the state files said, "
          f"partitions done at the kill: {done}, upstream logs trimmed: {_trimmed(run)} "
          f"of {P}")
    _export_equals(run, tmp_path, reference)


def test_parallel_ingest_killed_then_recovered(workload: tuple[Path, Path],
                                               tmp_path: Path) -> None:
    """Ingest over 3 reader and 3 writer tasks (a shuffle by key partition), trimmed
    without lag, kill -9 of the whole run while the upstream logs fill: the recovery
    re-reads nothing twice and skips nothing (the export equals the reference).

    The ingest is short: probed on 2 cores, its upstream logs were sealed 0.5 s after
    the operators' first batch at a load of 9, and 2.1 s after the first upstream
    bytes at a load of 18 (the writers get their rows in a few batches of the shuffle),
    so a kill at a random time 0 to 1.5 s after the first upstream bytes, as this test
    did, could land after the ingest. The kill now comes at the first append of a
    random writer task: that task dies at the crash
    point ``log.after_append@1%iW`` (storage_log.faults) and the test kills the whole
    run as soon as its mark appears, as a crash of the host at that moment would;
    then it asserts where the kill landed: in that writer, mid-ingest (an upstream log
    not sealed, the last chunk not committed). Not a later append: a writer gets its
    ~48,000 rows from the shuffle in Arrow batches of up to 512 Ki rows
    (``ARROW_BATCH_ROWS``), and one appended to its log only twice in a run (its
    partition's ``in_batches`` 2), so a kill at its third append never came."""
    spec = workload[0].with_name("items-parallel.toml")  # beside the source it names
    spec.write_text(spec_text(SOURCE, partitions=P,
                              extra_run="ingest_tasks = 3\nsegment_kb = 16\ntrim_lag_s = 0"))
    reference = workload[1]
    run, mark = tmp_path / "run", tmp_path / "mark"
    mark.mkdir()
    at = f"log.after_append@1%i{random.randrange(P)}"  # every writer appends once at least
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log", env={"CEC_CRASH_AT": at,
                                                "CEC_CRASH_MARK": str(mark)})

    def died() -> list[Path]:
        return [m for m in mark.iterdir() if m.name.startswith("log.after_append.")]

    try:
        wait_for(lambda: died() or proc.poll() is not None, 180, f"the crash point {at}",
                 step=0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    # where the kill landed: in that writer task, mid-ingest
    assert len(died()) == 1, (at, (tmp_path / "run.log").read_text()[-3000:])
    assert f"tag={at.rsplit('%', 1)[1]}\n" in died()[0].read_text(), at
    layout = RunLayout(run)
    chunk = committed_chunk(layout, P)[0]
    assert not upstream_sealed(layout, P) and chunk < -(-ROWS // 6000) - 1, (at, chunk)
    rec = cec(["recover", "--from-log", str(run), "--json"], check=True)
    assert json.loads(rec.stdout)["resumed"]["completed"]
    _export_equals(run, tmp_path, reference)


def test_sigkill_of_one_operator_worker_is_retried(workload: tuple[Path, Path],
                                                   trimming: Path, tmp_path: Path) -> None:
    spec, reference = trimming, workload[1]
    run = tmp_path / "run"
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log")
    victim = 1

    def busy() -> bool:
        s = _states(run)[victim]
        return int(s.get("in_tuples", 0)) > 0 and not s.get("done")  # type: ignore[call-overload]

    wait_for(busy, 180, f"partition {victim} to process a batch")
    pid = int(_states(run)[victim]["pid"])  # type: ignore[call-overload]
    os.kill(pid, signal.SIGKILL)
    assert proc.wait(300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    state = _states(run)[victim]
    assert int(state["pid"]) != pid  # type: ignore[call-overload]
    assert state["recovered"], state  # the retried task rebuilt its EC from the log
    print(f"upstream logs trimmed: {_trimmed(run)} of {P}")
    _export_equals(run, tmp_path, reference)


def test_torn_and_corrupted_output_tails_are_healed(workload: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    _spec, reference = workload
    run = tmp_path / "run"
    shutil.copytree(reference.parent / "ref", run)

    def last_segment(p: int) -> Path:
        return sorted((run / "output" / f"p{p:04d}").glob("*.seg"))[-1]

    with last_segment(0).open("ab") as fh:  # a torn append after the committed end
        fh.write(os.urandom(333))
    seg = last_segment(1)  # a flipped byte inside the last records
    data = bytearray(seg.read_bytes())
    data[int(len(data) * 0.97)] ^= 0xFF
    seg.write_bytes(bytes(data))
    seg = last_segment(2)  # a tail torn off inside a committed record
    os.truncate(seg, int(seg.stat().st_size * 0.9))
    rec = cec(["recover", "--from-log", str(run), "--json"], check=True)
    result = json.loads(rec.stdout)
    assert result["resumed"]["completed"]
    parts = result["partitions"]
    assert parts[1].get("repaired")  # a damaged whole record: corruption, repaired
    # cut inside the last committed record: with this host's index of the log (the
    # original directory) that is corruption; a copy has no index here, and its bytes
    # alone look like a torn write: cut. Either way it is cut and regenerated.
    assert parts[2].get("repaired") or parts[2]["reconcile"]["bytes_cut"] > 0
    _export_equals(run, tmp_path, reference)


@pytest.mark.parametrize(("spec", "data", "needle"), [
    ("function", None, "s.toml: [aggregate].function: 'median' is not one of"),
    ("missing", None, "[source].path: no such file"),
    ("ok", "item_id,item_price,item_time\n1,1.0,5\n2,2.0,4\n",
     "items.csv: line 3: item_time: 4 is before the previous row's 5"),
    ("ok", "item_id,item_price,item_time\n1,1.0,5\n2,2.0\n",
     "items.csv: line 3: expected 3 fields"),
    ("ok", "item_id,item_price,item_time\n1,1.0,5\n2,x,6\n",
     "items.csv: line 3: item_price: 'x' is not a number"),
    ("ok", "id,item_price,item_time\n1,1.0,5\n", "items.csv: line 1: missing column 'item_id'"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              spec: str, data: str | None, needle: str) -> None:
    text = spec_text(SOURCE, partitions=P)
    if spec == "function":
        text = text.replace('function = "avg"', 'function = "median"')
    if spec == "missing":
        text = text.replace('path = "items.csv"', 'path = "nope.csv"')
    if data is not None:
        (tmp_path / "items.csv").write_text(data)
    (tmp_path / "s.toml").write_text(text)
    run = tmp_path / "run"
    code = main(["run", "pipeline", str(tmp_path / "s.toml"), "--log-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in " ".join(err.split()), err
    assert not run.exists()


def test_reused_log_dir_and_non_run_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    write_items_csv(tmp_path / "items.csv", 100)
    (tmp_path / "s.toml").write_text(spec_text(SOURCE, partitions=P))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.toml").write_text("")
    assert main(["run", "pipeline", str(tmp_path / "s.toml"), "--log-dir",
                 str(tmp_path / "run")]) == 2
    assert "already holds a run" in capsys.readouterr().err
    for args in (["recover", "--from-log", str(tmp_path)], ["export", str(tmp_path),
                                                            "--out", str(tmp_path / "x")],
                 ["inspect", "extent", str(tmp_path)], ["inspect", "log", str(tmp_path)]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert "not a cec run directory" in err or "neither a run directory" in err, err


def test_ctrl_c_stops_an_unbounded_run_cleanly_and_it_resumes(tmp_path: Path) -> None:
    """A stream folder is unbounded: the run goes on until Ctrl-C (SIGINT to the
    foreground process group, as a terminal sends it); the logs are then consistent,
    and once the stream has ended `cec recover` completes it exactly."""
    folder = tmp_path / "in"
    folder.mkdir()  # empty: the run waits for its first file (issue 19 item 7)
    df = write_items_csv(tmp_path / "all.csv", 6_000, keys=40, seed=5)
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text('kind = "stream-dir"\npath = "in"\ntime_field = "item_time"\n'
                              "poll_ms = 50", partitions=P,
                              extra_run="segment_kb = 4\ntrim_lag_s = 0"))  # trims too
    run = tmp_path / "run"
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json",
                      "--out", str(tmp_path / "never.csv")], tmp_path / "run.log")
    wait_for(lambda: "waiting for the first file in the stream folder" in
             (tmp_path / "run.log").read_text(), 60, "the run to say it waits for a file")
    assert not run.exists()  # nothing is written before the first file fixes the types
    df.iloc[:2_000].to_csv(folder / ".f-000.tmp", index=False)
    (folder / ".f-000.tmp").rename(folder / "f-000.csv")
    wait_for(lambda: sum(int(s.get("in_tuples", 0)) for s in _states(run)) > 0, 180,
             "the first file to be processed")
    df.iloc[2_000:4_000].to_csv(folder / ".f-001.tmp", index=False)
    (folder / ".f-001.tmp").rename(folder / "f-001.csv")
    wait_for(lambda: sum(int(s.get("in_tuples", 0)) for s in _states(run)) > 2_500, 120,
             "the second file to be processed")
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(120) == 130, (tmp_path / "run.log").read_text()[-3000:]
    summary = _last_json((tmp_path / "run.log").read_text())
    assert summary["interrupted"] and not summary["completed"]
    # --out is written only by a run that ended; this one says so
    assert summary["export"] is None and not (tmp_path / "never.csv").exists()
    assert "never.csv: not written, the run was interrupted" in (tmp_path / "run.log"
                                                                  ).read_text()
    assert all(s.get("stopped") for s in _states(run))
    logs = cec(["inspect", "log", str(run), "--verify", "--json"], check=True)
    assert all(lg["verify"]["ok"] for lg in checked(logs.stdout, LogReport)["logs"])
    df.iloc[4_000:].to_csv(folder / "f-002.csv", index=False)
    (folder / "_END").touch()
    rec = json.loads(cec(["recover", "--from-log", str(run), "--json"], check=True).stdout)
    assert rec["resumed"]["completed"]
    print(f"upstream logs trimmed: {_trimmed(run)} of {P}")
    cec(["export", str(run), "--out", str(tmp_path / "out.csv")], check=True)
    _same_as_pandas(read_export_csv(tmp_path / "out.csv"), reference_count_windows(df, 10))


def test_a_stream_that_ends_before_its_first_file_exits_2(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "_END").touch()
    (tmp_path / "s.toml").write_text(spec_text(
        'kind = "stream-dir"\npath = "in"\ntime_field = "item_time"', partitions=1))
    assert _code(["run", "pipeline", str(tmp_path / "s.toml"), "--log-dir",
                  str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the stream ended (_END) before its first data file" in err, err
    assert not (tmp_path / "run").exists()


def _last_json(text: str) -> dict[str, object]:
    """The JSON document `cec ... --json` printed last (stdout and stderr are mixed)."""
    start = text.rfind("\n{\n") + 1 if "\n{\n" in text else text.find("{\n")
    end = text.rfind("\n}") + 2
    return json.loads(text[start:end])  # type: ignore[no-any-return]


@pytest.mark.parametrize(("args", "needle"), [
    (["--master", "local[2]"], "needs 4 Spark task slots at once (3 long-lived operator "
                               "tasks + 1 for the ingest); local[2] has 2"),
    (["--conf", "spark.network.timeout=12s"],
     "Spark refused to start with master local[5,3] (your settings: "
     "spark.network.timeout=12s): IllegalArgumentException: requirement failed: "
     "spark.network.timeoutInterval should be less than or equal to spark.network.timeout"),
    (["--conf", "spark.executor.memory=zz"],  # refused by spark-submit, before the JVM
     "Spark refused to start with master local[5,3] (your settings: "   # is up
     "spark.executor.memory=zz): SparkException: Executor memory must be a positive number"),
    (["--conf", "spark.sql.shuffle.partitions=abc"],  # a SQL setting: read by a job only,
     "Spark refused to start with master local[5,3] (your settings: "  # so checked at once
     "spark.sql.shuffle.partitions=abc): SparkIllegalArgumentException: "
     "[INVALID_CONF_VALUE.TYPE_MISMATCH] The value 'abc' in the config "
     '"spark.sql.shuffle.partitions" is invalid'),
    (["--conf", "spark.speculation=true"], "Spark setting spark.speculation=true: cec needs "
                                           "false"),
    (["--conf", "driver.memory=4g"], "--conf: 'driver.memory' is not a Spark setting"),
    (["--out", "r.xml", "--format", "xml"],  # refused before the run, as cec export does
     "cec: --format: 'xml' is not one of csv|parquet"),
    (["--out", "r.parquet", "--format", "csv"],
     "cec: --out r.parquet: its name says parquet, --format says csv"),
    (["--conf", "spark.driver.memory"], "--conf: expected key=value"),
])
def test_bad_spark_settings_exit_2_and_leave_no_run(tmp_path: Path, args: list[str],
                                                    needle: str) -> None:
    """A setting Spark (or cec) refuses is one line with Spark's own reason, exit 2, in
    a separate process (the JVM's own stack trace of it is not printed either)."""
    write_items_csv(tmp_path / "items.csv", 100)
    (tmp_path / "s.toml").write_text(spec_text(SOURCE, partitions=P))
    run = tmp_path / "run"
    got = cec(["run", "pipeline", str(tmp_path / "s.toml"), "--log-dir", str(run), *args])
    err = " ".join(got.stderr.split())
    assert got.returncode == 2, got.stderr[-3000:]
    assert needle in err, err
    assert "\tat " not in got.stderr and "Traceback" not in got.stderr, got.stderr
    assert not run.exists()


def test_a_plain_run_says_where_its_spark_ui_is_and_nothing_else(tmp_path: Path) -> None:
    """Issue 19 item 6: the Spark UI is on (local: on 127.0.0.1) and its URL is said;
    every stderr line of a run is cec's own (the JVM's boot warning is not passed on)."""
    write_items_csv(tmp_path / "items.csv", 200)
    (tmp_path / "s.toml").write_text(spec_text(SOURCE, partitions=1))
    got = cec(["run", "pipeline", str(tmp_path / "s.toml"), "--log-dir",
               str(tmp_path / "run")], check=True)
    lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("cec: ") for ln in lines), got.stderr
    ui = [ln for ln in lines if ln.startswith("cec: Spark UI: ")]
    assert len(ui) == 1 and ui[0].split()[3].startswith("http://127.0.0.1:"), lines


def test_a_second_driver_takes_over_and_the_first_stops(workload: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    """`cec recover` while the run's own driver still runs (as from another host): the
    newer driver runs the run to the end, the older one stops with exit 2 naming it, and
    the output is exactly the failure-free run's. The source is a stream folder that
    ends (``_END``) only once the older driver has stopped."""
    spec, reference = workload
    rows = pd.read_csv(spec.parent / "items.csv")
    stream = tmp_path / "stream"
    stream.mkdir()
    half = len(rows) // 2
    rows.iloc[:half].to_csv(stream / "part-0.csv", index=False)
    sspec = tmp_path / "stream.toml"
    sspec.write_text(spec_text(f'kind = "stream-dir"\npath = "{stream}"\n'
                               'time_field = "item_time"\npoll_ms = 100', partitions=P))
    run = tmp_path / "run"
    first = start_cec(["run", "pipeline", str(sspec), "--log-dir", str(run)],
                      tmp_path / "first.log")
    second = None
    try:
        wait_for(lambda: any(int(s.get("in_tuples", 0)) > 0 for s in _states(run)), 180,
                 "the first processed batch")
        second = start_cec(["recover", "--from-log", str(run), "--json"],
                           tmp_path / "second.log")
        first.wait(180)
        rows.iloc[half:].to_csv(stream / "part-1.csv", index=False)
        (stream / "_END").touch()
        second.wait(600)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    text = (tmp_path / "first.log").read_text()
    assert first.returncode == 2, text[-3000:]
    assert "another driver (number 2" in " ".join(text.split()), text[-3000:]
    assert second.returncode == 0, (tmp_path / "second.log").read_text()[-3000:]
    assert not (run / "STOP").exists()
    _export_equals(run, tmp_path, reference)


def _move_source(run: Path, old: Path, new: Path) -> None:
    """Point run.toml at another source path (a correctly signed edit: as if the source
    had been moved away)."""
    text = (run / "run.toml").read_text()
    assert str(old) in text
    body = "".join(ln for ln in text.splitlines(keepends=True)
                   if not ln.startswith(CHECKSUM_PREFIX))
    (run / "run.toml").write_text(sign_run_text(body.replace(str(old), str(new))))


def test_a_completed_run_recovers_and_exports_without_its_source(
        workload: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 17 item 9: the source of a completed run is gone (here: run.toml names a
    file that does not exist); recover neither plans nor reads it."""
    spec, reference = workload
    run = tmp_path / "run"
    shutil.copytree(spec.parent / "ref", run)
    _move_source(run, spec.parent / "items.csv", tmp_path / "gone.csv")
    got = cec(["recover", "--from-log", str(run), "--json"])
    assert got.returncode == 0, got.stderr[-3000:]
    assert json.loads(got.stdout)["resumed"]["completed"]
    _export_equals(run, tmp_path, reference)


def _code(args: list[str]) -> int:
    """``main``'s exit status (on success click raises SystemExit(0))."""
    try:
        return main(args)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_inspect_extent_at_the_ends_of_time(workload: tuple[Path, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 17 item 15: --at INT64_MAX is the newest extent, not a struct.error; a value
    outside int64 is exit 2 naming the option."""
    run = workload[0].parent / "ref"
    assert _code(["inspect", "extent", str(run), "--at", str((1 << 63) - 1), "--json"]) == 0
    newest = checked(capsys.readouterr().out, ExtentResult)["partitions"]
    assert _code(["inspect", "extent", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"] == newest
    assert _code(["inspect", "extent", str(run), "--at", str(-(1 << 63))]) == 0
    capsys.readouterr()
    assert _code(["inspect", "extent", str(run), "--at", str(1 << 63)]) == 2
    assert "--at: 9223372036854775808 is not a timestamp" in capsys.readouterr().err


def test_run_toml_damaged_edited_or_lost_then_repaired(workload: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    """Issue 17 item 5: run.toml carries a checksum and a backup. A flipped byte is
    damage (exit 3, naming the file and --repair), a changed partition count is an
    edit (exit 2), a missing run.toml with its backup present is damage; --repair
    restores it and the run exports exactly."""
    spec, reference = workload
    run = tmp_path / "run"
    shutil.copytree(spec.parent / "ref", run)
    good = (run / "run.toml").read_bytes()
    flipped = bytearray(good)
    flipped[good.index(b"[aggregate]") + 1] ^= 0x20  # [aggregate] -> [Aggregate]
    cases = [(bytes(flipped), 3, "damaged"),
             (good.replace(b"partitions = 3", b"partitions = 4"), 2,
              "edited after the run started"),
             (None, 3, "run.toml is missing")]
    for content, code, needle in cases:
        if content is None:
            (run / "run.toml").unlink()
        else:
            (run / "run.toml").write_bytes(content)
        got = cec(["export", str(run), "--out", str(tmp_path / "x.csv")])
        err = " ".join(got.stderr.split())
        assert got.returncode == code, err
        assert needle in err and f"cec recover --from-log {run} --repair" in err, err
        assert "Traceback" not in got.stderr
    rec = cec(["recover", "--from-log", str(run), "--repair", "--json"])
    assert rec.returncode == 0, rec.stderr[-3000:]
    assert "restored" in rec.stderr
    assert (run / "run.toml").read_bytes() == good
    _export_equals(run, tmp_path, reference)


def _flip_upstream(run: Path, p: int) -> int:
    """Flip one byte in the middle of partition p's first upstream segment."""
    seg = sorted((run / "upstream" / f"p{p:04d}").glob("*.seg"))[0]
    data = bytearray(seg.read_bytes())
    at = len(data) // 2
    data[at] ^= 0x01
    seg.write_bytes(bytes(data))
    return at


def _upstream_ends(run: Path) -> list[object]:
    got = cec(["inspect", "log", str(run), "--json"], check=True)
    return [log["last_seq"] for log in json.loads(got.stdout)["logs"]
            if "/upstream/" in log["path"]]


def test_damaged_upstream_is_cut_and_read_again_from_the_source(
        workload: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 17 item 1: a flipped byte in the middle of an upstream segment; verify names
    it (exit 3). A durable upstream log (``[run] upstream = "durable"``): recover without
    --repair names the damage and the command (exit 3); with --repair the log is cut at
    the bad frame, the rows cut are ingested again from the source, verify is clean,
    every upstream log ends where it did and the export is exact. A cache of the source
    (the default, issue 40 item 2) is cut so by a plain recover. With the source gone
    the cut rows cannot be read again: exit 4 naming the partition and the rows lost."""
    spec, reference = workload
    durable = spec.with_name("items-durable.toml")  # beside items.csv (a relative path)
    durable.write_text(spec.read_text().replace("[run]\n", '[run]\nupstream = "durable"\n', 1))
    assert 'upstream = "durable"' in durable.read_text()
    durable_run = tmp_path / "durable-ref"
    cec(["run", "pipeline", str(durable), "--log-dir", str(durable_run)], check=True)
    for case in ("durable", "cache", "source gone"):
        run = tmp_path / f"run-{case}"
        shutil.copytree(durable_run if case == "durable" else spec.parent / "ref", run)
        ends = _upstream_ends(run)
        _flip_upstream(run, 0)
        verify = cec(["inspect", "log", str(run), "--verify"])
        assert verify.returncode == 3, verify.stdout + verify.stderr
        if case == "source gone":
            _move_source(run, spec.parent / "items.csv", tmp_path / "gone.csv")
            got = cec(["recover", "--from-log", str(run)])
            err = " ".join(got.stderr.split())
            assert got.returncode == 4, err
            assert "partition 0: rows with seq" in err and "gone.csv" in err, err
            continue
        if case == "durable":
            plain = cec(["recover", "--from-log", str(run)])
            assert plain.returncode == 3, plain.stderr[-2000:]
            assert "--repair" in plain.stderr and "partition 0" in plain.stderr
        args = ["--repair"] if case == "durable" else []
        rec = cec(["recover", "--from-log", str(run), *args, "--json"])
        assert rec.returncode == 0, rec.stderr[-3000:]
        assert "partition 0: upstream log cut after seq" in rec.stderr, rec.stderr
        assert _upstream_ends(run) == ends
        verify = cec(["inspect", "log", str(run), "--verify"])
        assert verify.returncode == 0, verify.stdout + verify.stderr
        _export_equals(run, tmp_path, reference)


def test_time_windows_past_int64_exit_2_naming_the_tuple(tmp_path: Path) -> None:
    """Issue 17 item 12: timestamps near INT64_MAX under time windows used to give exit 0
    with window_end < window_start; now exit 2 naming the tuple, no retries."""
    top = (1 << 63) - 1
    lines = ["item_id,item_price,item_time"] + [f"{i % 3},{i}.0,{top - 150 + i}"
                                                 for i in range(150)]
    (tmp_path / "items.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "s.toml").write_text(spec_text(
        SOURCE, partitions=2, window='{ kind = "time", size = "100us" }'))
    got = cec(["run", "pipeline", str(tmp_path / "s.toml"), "--log-dir", str(tmp_path / "r")])
    err = " ".join(got.stderr.split())
    assert got.returncode == 2, err[-3000:]
    assert "would end after the int64 range of timestamps" in err, err[-3000:]
    assert "resubmitting" not in err and "Lost task" not in err, err[-3000:]


def test_two_runs_racing_for_one_empty_directory(workload: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    """Issue 17 item 8: two `cec run` on the same empty --log-dir at the same moment.
    One runs to the end (its export is the reference); the other exits 2 up front
    saying the directory holds a run or is not empty: no traceback, no exit 1, and the
    winner's run is untouched."""
    spec, reference = workload
    run = tmp_path / "run"
    run.mkdir()
    procs = [start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                       tmp_path / f"run{i}.log") for i in range(2)]
    codes = [p.wait(600) for p in procs]
    logs = [(tmp_path / f"run{i}.log").read_text() for i in range(2)]
    assert sorted(codes) == [0, 2], (codes, [log[-3000:] for log in logs])
    loser = logs[codes.index(2)]
    assert "already holds a run" in loser or "is not empty" in loser, loser[-3000:]
    assert "Traceback" not in loser, loser[-3000:]
    _export_equals(run, tmp_path, reference)


def test_run_directories_are_private_and_foreign_ones_need_trust(
        workload: tuple[Path, Path], tmp_path: Path) -> None:
    """A run directory holds the user's data and code ([filter] is Spark SQL that a
    resume executes): cec creates it 0700/0600, and refuses to resume one another user
    owns unless --trust."""
    ref = workload[0].parent / "ref"
    for path in (ref, ref / "run.toml", ref / "output", *ref.glob("output/p0000/*.seg")):
        assert path.stat().st_mode & 0o077 == 0, (path, oct(path.stat().st_mode))
    run = tmp_path / "run"
    shutil.copytree(ref, run)
    os.chown(run / "run.toml", 4242, 4242)
    got = cec(["recover", "--from-log", str(run)])
    assert got.returncode == 2, got.stderr
    assert "belongs to uid 4242" in got.stderr and "--trust" in got.stderr
    assert cec(["recover", "--from-log", str(run), "--dry-run"]).returncode == 0


def test_disk_full_is_one_error_exit_3_then_recovers_exactly(workload: tuple[Path, Path],
                                                             tmp_path: Path) -> None:
    """Issue 17 item 10: the run directory on a 1 MiB tmpfs (its own mount namespace)
    fills up: one message naming the file and 'No space left on device', exit 3, no
    resubmits; the run directory, copied out to a roomy disk, recovers exactly."""
    import shutil as sh
    import subprocess
    import sys

    if sh.which("unshare") is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI must run as root with unshare (util-linux)")
        pytest.skip("needs root and unshare")
    spec, reference = workload
    small = tmp_path / "small"
    small.mkdir()
    script = ('mount -t tmpfs -o size=1m tmpfs "$1" && '
              f'{sys.executable} -m cli.app run pipeline "$2" --log-dir "$1/run"; '
              'echo "exit=$?"; cp -a "$1/run" "$3"')
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script, "sh", str(small), str(spec), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    err = " ".join(proc.stderr.split())
    assert "exit=3" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "No space left on device" in err and str(small / "run") in err, err[-3000:]
    assert "resubmitting" not in err and "Traceback" not in proc.stderr, err[-3000:]
    rec = cec(["recover", "--from-log", str(tmp_path / "run"), "--json"])
    assert rec.returncode == 0, rec.stderr[-3000:]
    _export_equals(tmp_path / "run", tmp_path, reference)


def test_output_retention_keeps_what_a_consumer_and_recovery_need(
        workload: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 17 item 11: output logs trimmed to 20 KB while a consumer exports
    incrementally, with a kill -9 and a recovery in between: the consumer's exports
    together are exactly the failure-free results, and the logs did shrink."""
    spec, reference = workload
    rows = pd.read_csv(spec.parent / "items.csv")
    stream = tmp_path / "stream"
    stream.mkdir()
    parts = [rows.iloc[i * len(rows) // 6:(i + 1) * len(rows) // 6] for i in range(6)]

    def feed(i: int) -> None:
        parts[i].to_csv(tmp_path / f".p{i}.tmp", index=False)
        os.replace(tmp_path / f".p{i}.tmp", stream / f"part-{i}.csv")

    feed(0)
    sspec = tmp_path / "stream.toml"
    sspec.write_text(spec_text(f'kind = "stream-dir"\npath = "{stream}"\n'
                               'time_field = "item_time"\npoll_ms = 100', partitions=P,
                               extra_run="segment_kb = 16\ntrim_lag_s = 0\n"
                                         "output_keep_mb = 0.02"))
    run = tmp_path / "run"
    exports = []

    def consume() -> None:
        out = tmp_path / f"e{len(exports)}.csv"
        cec(["export", str(run), "--out", str(out), "--consumer", "c"], check=True)
        exports.append(read_export_csv(out))

    proc = start_cec(["run", "pipeline", str(sspec), "--log-dir", str(run)],
                     tmp_path / "run.log")
    try:
        for i in (1, 2):
            feed(i)
        wait_for(lambda: sum(int(s.get("in_tuples", 0)) for s in _states(run))
                 >= 0.4 * len(rows), 180, "half of the input processed")
        consume()
        feed(3)
        time.sleep(2.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    consume()
    rec = start_cec(["recover", "--from-log", str(run)], tmp_path / "recover.log")
    try:
        feed(4)
        feed(5)
        (stream / "_END").touch()
        assert rec.wait(300) == 0, (tmp_path / "recover.log").read_text()[-3000:]
    finally:
        if rec.poll() is None:
            os.killpg(rec.pid, signal.SIGKILL)
    consume()
    cols = ["key", "window_start", "window_end"]
    got = pd.concat(exports).sort_values(cols).reset_index(drop=True)
    want = read_export_csv(reference).sort_values(cols).reset_index(drop=True)
    keep = [*cols, "count"]
    assert got[keep].values.tolist() == want[keep].values.tolist()
    assert (got["value"] - want["value"]).abs().max() < 1e-9
    logs = json.loads(cec(["inspect", "log", str(run), "--json"], check=True).stdout)["logs"]
    firsts = [lg["first_seq"] for lg in logs if "/output/" in lg["path"]]
    assert any(f is not None and f > 0 for f in firsts), firsts  # retention trimmed
    at0 = checked(cec(["inspect", "extent", str(run), "--at", "0", "--json"],
                      check=True).stdout, ExtentResult)["partitions"]
    assert any("time travel reaches back to ts" in e.get("reason", "") for e in at0), at0
    everything = cec(["export", str(run), "--out", str(tmp_path / "all.csv")], check=True)
    assert everything.returncode == 0 and len(read_export_csv(tmp_path / "all.csv")) < len(want)
