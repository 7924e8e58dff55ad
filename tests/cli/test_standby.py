"""``cec standby`` on real Spark with real faults (issue 27): the driver killed with
SIGKILL while it ingests or processes rows, a standby killed while its takeover's run
does (the second one finishes), the driver frozen past its lease then woken (fenced:
it writes nothing), a standby killed while it waits (the run does not notice), ``cec
run --standby``; every export byte for byte the failure-free run's. Where each kill
(and the freeze) landed is asserted from the upstream logs' last rows and the task
state files: not every row fed committed upstream (mid-ingest), or not every committed
row reported processed (mid-operator). Bad use: exit 2, one line, nothing written.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from cec_spark.rundir.drivers import latest_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import read_lease
from cec_spark.source.types import END_MARKER
from tests.cec_spark.helpers import (
    cec,
    spec_text,
    start_cec,
    task_states,
    wait_for,
    write_items_csv,
)
from tests.cec_spark.test_rescale import (
    behind,
    groups_of,
    last_kept,
    upstream_last_seqs,
    wait_gone,
)

pytestmark = pytest.mark.spark

ROWS = 150_000
P = 3
FILES = 20  # the stream folder's files; the faults happen after the first half
SOURCE = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 6000'
STREAM = ('kind = "stream-dir"\npath = "in"\nformat = "csv"\ntime_field = "item_time"\n'
          'poll_ms = 50\nchunk_rows = 2500')  # 3 upstream commits a file
READY = "standby: ready to take over"


@dataclass(frozen=True)
class Workload:
    spec: Path  # a bounded CSV source
    finished: Path  # its failure-free run
    reference: Path  # that run's export: every fault's export must equal it
    rows: pd.DataFrame  # the same rows, dropped into stream folders file by file


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """The failure-free run, with a standby (``--standby``) that is never needed: it
    ends when the run completes. A stream folder holding the same rows (in FILES files,
    then ``_END``) gives the same export."""
    d = tmp_path_factory.mktemp("standby")
    df = write_items_csv(d / "items.csv", ROWS, keys=3000, seed=11)
    spec = d / "items.toml"
    spec.write_text(spec_text(SOURCE, partitions=P))
    ref = d / "ref"
    got = cec(["run", "pipeline", str(spec), "--log-dir", str(ref), "--json", "--standby"],
              check=True)
    assert json.loads(got.stdout)["completed"]
    cec(["export", str(ref), "--out", str(d / "ref.csv")], check=True)
    wait_for(lambda: "the standby ends too" in _text(ref / "standby.log"), 240,
             "the unneeded standby to end with the run")
    said = _text(ref / "standby.log")
    assert "driver 1 ended (completed)" in said and "the standby ends too" in said, said
    assert "taking the run over" not in said
    return Workload(spec, ref, d / "ref.csv", df)


def _stream_spec(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    spec = tmp_path / "stream.toml"
    spec.write_text(spec_text(STREAM, partitions=P))
    return spec


def _drop(folder: Path, df: pd.DataFrame, files: range, end: bool = False) -> None:
    """Files ``files`` of the FILES the rows are cut into (``_END`` after them)."""
    for i in files:
        tmp = folder / f".f{i:04d}.tmp"
        df.iloc[i * len(df) // FILES:(i + 1) * len(df) // FILES].to_csv(tmp, index=False)
        tmp.rename(folder / f"f{i:04d}.csv")
    if end:
        (folder / END_MARKER).write_text("")


def _states(run: Path) -> list[dict[str, object]]:
    return task_states(run, P)


def _text(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def _kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    _signal_groups({proc.pid}, sig)


def _signal_groups(groups: set[int], sig: int) -> None:
    for g in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(g, sig)


def _export_equals(run: Path, tmp: Path, reference: Path) -> None:
    out = tmp / "export.csv"
    cec(["export", str(run), "--out", str(out)], check=True)
    assert out.read_bytes() == reference.read_bytes()


def _processing(run: Path) -> bool:
    return any(int(s.get("in_tuples", 0) or 0) > 0 for s in _states(run))  # type: ignore[call-overload]


def _claimer(run: Path, n: int) -> int:
    """The pid of the process that took driver number ``n``."""
    info = json.loads((run / "drivers" / f"{n:08d}").read_text())
    return int(info["pid"])


def _last_row(df: pd.DataFrame, files: int) -> int:
    """The seq of the last row the filter keeps among files 0..files-1."""
    return last_kept(df, files * len(df) // FILES)


def _upstream_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in (run / "upstream").rglob("*.seg"))


def _mid_work(run: Path, before: int, last: int) -> str:
    """Where a kill (or a freeze) that came as the upstream logs grew past row
    ``before`` landed, read from the upstream logs and the state files: either not
    every row up to ``last`` is committed upstream (mid-ingest) or not every committed
    row is reported processed by its operator task (mid-operator); AssertionError if
    neither (the run was idle)."""
    landed, late = max(upstream_last_seqs(run, P)), behind(run, P)
    assert before <= landed and (landed < last or late), (before, landed, last, late)
    return (f"{'mid-ingest' if landed < last else 'mid-operator'} (upstream at row "
            f"{landed} of {before + 1}..{last}, partitions {late} behind it)")


def _stop_in_work(run: Path, folder: Path, df: pd.DataFrame, files: range, before: int,
                  stop: Callable[[], None], resume: Callable[[], None]
                  ) -> tuple[str, int]:
    """Drop the files of ``files`` one by one until ``stop`` (SIGSTOP to the processes
    to fault) lands in the work on rows: after each drop, ``stop`` as soon as the
    upstream logs grow, then read where it landed (``_mid_work``, from the logs and the
    state files); if the run was already idle again (the scheduler can hold this
    process back for longer than the run takes on a file), ``resume`` and drop the next.
    Returns where it landed and how many of the FILES were dropped; AssertionError if
    no drop of ``files`` caught the run at work."""
    for i in files:
        idle = _upstream_bytes(run)
        _drop(folder, df, range(i, i + 1))
        wait_for(lambda idle=idle: _upstream_bytes(run) != idle, 60, "the ingest to write",
                 step=0.001)
        stop()
        try:
            return _mid_work(run, before, _last_row(df, i + 1)), i + 1
        except AssertionError:
            if i == files[-1]:
                raise
            resume()
    raise AssertionError(f"no files to drop: {files}")


def test_two_standbys_a_killed_driver_and_a_standby_killed_while_taking_over(
        workload: Workload, tmp_path: Path) -> None:
    """A stream folder gets the first half of the files: the run cannot end before the
    faults, whatever the machine's load. Once they are ingested, more files are dropped
    one by one, and the driver's process groups (its own, its JVM's PySpark daemon's)
    are stopped as soon as the upstream logs grow, then killed once the stop is seen to
    have landed in the work on rows (``_stop_in_work``); the rest is dropped once a
    standby claimed the run, and that standby is stopped and killed the same way: both
    deaths land in the work on rows (asserted from the logs and the state files while
    stopped: mid-ingest or mid-operator; a stopped process writes nothing before its
    kill, and after it the hot standby resumes the run within milliseconds)."""
    spec, reference = _stream_spec(tmp_path), workload.reference
    _drop(tmp_path / "in", workload.rows, range(FILES // 2))
    run = tmp_path / "run"
    # both standbys start before the run exists and warm before it does (issue 41 item
    # 4): the first for the run's partitions, the second for one, whose local master
    # has too few slots for the run's three: it starts Spark anew when the run appears
    standbys = [start_cec(["standby", "--from-log", str(run), "--partitions", str(n)],
                          tmp_path / f"sb{i}.log") for i, n in enumerate((P, 1))]
    try:
        wait_for(lambda: all("; waiting for the run" in _text(tmp_path / f"sb{i}.log")
                             for i in range(2)), 120, "the standbys to warm, then wait")
        driver = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                           tmp_path / "run.log")
        wait_for(lambda: all(READY in _text(tmp_path / f"sb{i}.log") for i in range(2)),
                 240, "both standbys to be ready")
        kept, anew = _text(tmp_path / "sb0.log"), _text(tmp_path / "sb1.log")
        assert f"{P} partitions) before the run" in kept, kept
        assert "standby: warming Spark (master" not in kept.split("waiting for the run")[1]
        assert "starting Spark anew" not in kept, kept
        assert "1 partition) before the run" in anew, anew
        assert "differ from what the standby warmed on (master local[3,3], 1 partition)" \
            in anew and "starting Spark anew" in anew, anew
        # both hot: their operator tasks follow the output logs, said by inspect extent
        wait_for(lambda: all(f"hot: {P} of {P} operator tasks" in _text(tmp_path / f"sb{i}.log")
                             for i in range(2)), 120, "both standbys to be hot")
        wait_for(lambda: json.loads(cec(["inspect", "extent", str(run), "--json"],
                                        check=True).stdout)["standbys_hot"] == 2, 30,
                 "inspect extent to see both hot standbys", step=0.5)
        seen = json.loads(cec(["inspect", "extent", str(run), "--json"], check=True).stdout)
        assert seen["standbys_ready"] == 2 and isinstance(seen["standby_behind_records"], int)
        half = _last_row(workload.rows, FILES // 2)
        wait_for(lambda: _processing(run) and max(upstream_last_seqs(run, P)) == half, 240,
                 "the first half ingested and a processed batch")
        groups = groups_of(driver.pid)  # the driver, its JVM and its Python workers
        first_kill, more = _stop_in_work(
            run, tmp_path / "in", workload.rows, range(FILES // 2, FILES * 3 // 4), half,
            lambda: _signal_groups(groups, signal.SIGSTOP),
            lambda: _signal_groups(groups, signal.SIGCONT))
        landed = max(upstream_last_seqs(run, P))  # stopped: before a standby's run writes
        _signal_groups(groups, signal.SIGKILL)
        driver.wait(30)
        wait_gone(groups)
        wait_for((run / "drivers" / "00000002").exists, 60,
                 "a standby to claim driver number 2")
        first = _claimer(run, 2)
        taking = next(s for s in standbys if s.pid == first)
        other = next(s for s in standbys if s.pid != first)
        # one file first; the rest one by one once the taking standby's run commits it
        _drop(tmp_path / "in", workload.rows, range(more, more + 1))
        wait_for(lambda: max(upstream_last_seqs(run, P)) > landed, 240,
                 "the taking standby's run to commit upstream", step=0.002)
        groups = groups_of(taking.pid)
        second_kill, dropped = _stop_in_work(
            run, tmp_path / "in", workload.rows, range(more + 1, FILES), landed,
            lambda: _signal_groups(groups, signal.SIGSTOP),
            lambda: _signal_groups(groups, signal.SIGCONT))
        _signal_groups(groups, signal.SIGKILL)
        taking.wait(30)
        wait_gone(groups)
        _drop(tmp_path / "in", workload.rows, range(dropped, FILES), end=True)
        # the other one takes over from the dead standby, and runs the run to its end
        assert other.wait(300) == 0, _text(tmp_path / f"sb{standbys.index(other)}.log")
        said = _text(tmp_path / f"sb{standbys.index(other)}.log")
        assert "taking the run over as driver 3" in said, said
        assert "standby: takeover: detected" in said, said
        # its hot tasks followed the output logs and were released (issue 41 items 1-2)
        assert f"hot: {P} of {P} operator tasks follow the output logs" in said, said
        assert f"releasing the hot standby's {P} operator tasks" in said, said
        assert (run / "drivers" / "00000003").exists()
        assert not (run / "drivers" / "00000004").exists()
        last = read_lease(run / "drivers" / "00000003.live")
        assert last is not None and last.get("ended") == "completed", last
        print(f"the driver killed {first_kill}; the taking standby killed {second_kill}")
    finally:
        for s in standbys:
            _kill_group(s)
    _export_equals(run, tmp_path, reference)


def _snapshot(run: Path, pid: int) -> dict[str, tuple[int, int]]:
    """Every file of the run but the old driver's own (its lease, and its watchdog
    evidence file, empty, which it removes as it ends)."""
    out = {}
    own = {run / "drivers" / "00000001.live"} | set((run / "watchdog").glob(f"*-{pid}.txt"))
    for path in run.rglob("*"):
        if path.is_file() and path not in own:
            st = path.stat()
            out[str(path.relative_to(run))] = (st.st_mtime_ns, st.st_size)
    return out


def test_a_frozen_driver_is_fenced_and_writes_nothing_when_woken(
        workload: Workload, tmp_path: Path) -> None:
    """The driver (its process only) is frozen with SIGSTOP as soon as the upstream
    logs grow after a file was dropped on an ingested half (asserted at once:
    mid-ingest or mid-operator; woken and the next file dropped while not:
    ``_stop_in_work``); the standby takes over, the rest of the files and ``_END``
    come, and the woken driver writes nothing."""
    spec, reference = _stream_spec(tmp_path), workload.reference
    _drop(tmp_path / "in", workload.rows, range(FILES // 2))
    run = tmp_path / "run"
    # cec run --standby starts its own standby; a second one is killed while it waits
    driver = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--standby"],
                       tmp_path / "run.log")
    extra = None
    try:
        wait_for((run / "run.toml").exists, 120, "the run to be created")
        extra = start_cec(["standby", "--from-log", str(run)], tmp_path / "extra.log")
        wait_for(lambda: READY in _text(run / "standby.log"), 240,
                 "the --standby standby to be ready")
        wait_for(lambda: READY in _text(tmp_path / "extra.log"), 240,
                 "the second standby to be ready")
        _kill_group(extra)  # the run does not notice
        extra.wait(30)
        half = _last_row(workload.rows, FILES // 2)
        wait_for(lambda: _processing(run) and max(upstream_last_seqs(run, P)) == half, 240,
                 "the first half ingested and a processed batch")
        # the driver only (its JVM runs on), read at once (its tasks go on): the freeze
        # came in the work on the dropped rows
        stopped: list[float] = []

        def freeze() -> None:
            os.kill(driver.pid, signal.SIGSTOP)
            stopped.append(time.monotonic())

        at_freeze, more = _stop_in_work(
            run, tmp_path / "in", workload.rows, range(FILES // 2, FILES * 3 // 4), half,
            freeze, lambda: os.kill(driver.pid, signal.SIGCONT))
        frozen = stopped[-1]
        wait_for((run / "drivers" / "00000002").exists, 60,
                 "the standby to take over")
        took = time.monotonic() - frozen
        assert took >= 1.5, took  # not before its 2 s lease stood still
        _drop(tmp_path / "in", workload.rows, range(more, FILES), end=True)
        wait_for(lambda: "standby: takeover: detected" in _text(run / "standby.log"), 300,
                 "the standby to run the run to its end")
        own = _text(run / "standby.log")
        assert "stood still" in own and "taking the run over as driver 2" in own, own
        lease = read_lease(run / "drivers" / "00000002.live")
        assert lease is not None and lease.get("ended") == "completed", lease
        _export_equals(run, tmp_path, reference)
        before = _snapshot(run, driver.pid)
        os.kill(driver.pid, signal.SIGCONT)
        code = driver.wait(120)
        said = _text(tmp_path / "run.log")
        assert code == 2, said[-3000:]
        assert "another driver (number 2" in said, said[-3000:]
        after = _snapshot(run, driver.pid)
        assert after == before, {k: (before.get(k), after.get(k))
                                 for k in set(before) | set(after)
                                 if before.get(k) != after.get(k)}
    finally:
        _kill_group(driver, signal.SIGCONT)
        _kill_group(driver)
        if extra is not None:
            _kill_group(extra)
    assert not _text(tmp_path / "extra.log").count("taking the run over")
    _export_equals(run, tmp_path, reference)
    print(f"the driver frozen {at_freeze}")


def test_bad_use_exits_2_in_one_line_and_writes_nothing(
        workload: Workload, tmp_path: Path) -> None:
    finished = workload.finished
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("x")
    foreign = tmp_path / "foreign"
    shutil.copytree(finished, foreign)
    for path in (foreign / "output").rglob("*.seg"):  # not finished: only the owner says no
        path.unlink()
    os.chown(foreign / "run.toml", 54321, 54321)
    for d, says in ((other, "not a run directory"), (finished, "the run is finished"),
                    (foreign, "belongs to uid 54321")):
        before = sorted(str(p) for p in d.rglob("*"))
        got = cec(["standby", "--from-log", str(d)], timeout=120)
        assert got.returncode == 2, got.stderr
        lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and says in lines[0], got.stderr
        assert sorted(str(p) for p in d.rglob("*")) == before


def test_a_driver_killed_as_its_run_appears_and_one_killed_during_a_rescale(
        workload: Workload, tmp_path: Path) -> None:
    """Three more moments: the driver killed as soon as ``run.toml`` exists (no log yet:
    the standby starts the run itself); that run killed as soon as its upstream logs
    grow (asserted: mid-ingest or mid-operator); then a ``cec recover --partitions 2``
    killed at a random moment of its rescale or of the run it resumes (asserted: before
    that driver ended; said: before or after the rescale's commit): the standby that was
    watching it takes the run over."""
    spec, reference = workload.spec, workload.reference
    run = tmp_path / "run"
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    standby = start_cec(["standby", "--from-log", str(run)], tmp_path / "sb.log")
    procs = [standby]
    try:
        driver = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                           tmp_path / "run.log")
        procs.append(driver)
        wait_for((run / "run.toml").exists, 120, "the run to be created", step=0.005)
        _kill_group(driver)
        driver.wait(30)
        assert not (run / "output").exists() or not any((run / "output").iterdir())
        wait_for(lambda: _upstream_bytes(run) > 0 or standby.poll() is not None, 300,
                 "the standby's run to commit upstream", step=0.001)
        groups = groups_of(standby.pid)
        _kill_group(standby)  # the run killed again, mid-way (asserted)
        standby.wait(30)
        wait_gone(groups)
        # driver 2, or 1 if the kill came before the run took its first number
        assert "taking the run over as driver " in _text(tmp_path / "sb.log")
        second_kill = _mid_work(run, -1, last_kept(workload.rows, ROWS))
        n = latest_driver(RunLayout(run))
        rescaling = start_cec(["recover", "--from-log", str(run), "--partitions", "2"],
                              tmp_path / "rescale.log")
        procs.append(rescaling)
        wait_for((run / "drivers" / f"{n + 1:08d}").exists, 120,
                 "the rescale's driver number")
        second = start_cec(["standby", "--from-log", str(run)], tmp_path / "sb2.log")
        procs.append(second)
        time.sleep(rng.uniform(0.0, 4.0))  # somewhere in the rescale (or just after)
        _kill_group(rescaling)
        rescaling.wait(30)
        # where the kill landed: the rescaling driver had not ended (its lease says so at
        # its end), before or after generations.toml named the new generation
        lease = read_lease(run / "drivers" / f"{n + 1:08d}.live") or {}
        assert "ended" not in lease, lease
        third_kill = ("after the rescale's commit, while the resumed run ran"
                      if len(RunLayout(run).generations) > 1 else
                      "before the rescale's commit (the standby rescales again)")
        code = second.wait(400)
        said = _text(tmp_path / "sb2.log")
        assert code == 0, said[-3000:]
        assert f"taking the run over as driver {n + 2}" in said, said[-3000:]
        print(f"seed={seed}: the standby's run killed {second_kill}; the rescale killed "
              f"{third_kill}")
    finally:
        for proc in procs:
            _kill_group(proc)
    _export_equals(run, tmp_path, reference)
