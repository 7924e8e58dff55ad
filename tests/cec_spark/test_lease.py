"""Leases and the standby's watch, without Spark: real processes holding leases, killed
with SIGKILL, frozen with SIGSTOP, ending by themselves; the decision, pure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cec.errors import UsageError
from cec_spark.rundir.drivers import latest_driver, standbys
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import (
    BEAT_S,
    BeatJudge,
    Lease,
    lock_state,
    pid_alive,
    read_lease,
    same_machine,
)
from cec_spark.standby.watch import DriverWatch, check_is_run, judge
from tests.cec_spark.helpers import REPO

# A driver in a process of its own: takes the next driver number of RUN (with its lease),
# says it on stdout, then sleeps, or ends by itself when told so on stdin.
DRIVER = """
import sys, time
from pathlib import Path
from cec_spark.rundir.drivers import end_driver, take_driver
from cec_spark.rundir.layout import RunLayout
layout = RunLayout(Path(sys.argv[1]))
n = take_driver(layout)
print(n, flush=True)
line = sys.stdin.readline().strip()
if line:
    end_driver(layout, n, line, 0 if line == "completed" else 5, "told to")
    print("ended", flush=True)
time.sleep(600)
"""


def _driver(run: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(run)], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    n = int(proc.stdout.readline())
    return proc, n


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    root.mkdir()
    (root / "run.toml").write_text("# a run\n")
    return root


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_lease_beats_and_says_how_it_ended(tmp_path: Path) -> None:
    path = tmp_path / "x.live"
    lease = Lease(path, {"driver": 7})
    first = read_lease(path)
    assert first is not None and first["driver"] == 7 and first["pid"] == os.getpid()
    assert same_machine(first) and pid_alive(first["pid"], first["start"])
    assert lock_state(path) == "held"
    time.sleep(3 * BEAT_S)
    later = read_lease(path)
    assert later is not None and later["beat"] > first["beat"]
    with pytest.raises(RuntimeError, match="another process holds"):
        Lease(path, {})
    lease.update(state="ready")
    assert read_lease(path)["state"] == "ready"  # type: ignore[index]
    lease.end("completed", 0, "done")
    ended = read_lease(path)
    assert ended is not None and ended["ended"] == "completed" and ended["code"] == 0
    assert lock_state(path) == "free"
    time.sleep(2 * BEAT_S)  # no more beats after the end
    assert read_lease(path)["beat"] == ended["beat"]  # type: ignore[index]
    assert lock_state(tmp_path / "none.live") == "missing"
    path.write_bytes(b'{"beat": 3, "pi')  # torn: read again later, not an error
    assert read_lease(path) is None


def test_a_reused_pid_is_not_the_holder() -> None:
    assert pid_alive(os.getpid(), None)
    stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    assert pid_alive(os.getpid(), int(stat[19]))
    assert not pid_alive(os.getpid(), int(stat[19]) + 1)  # same pid, another process
    assert not pid_alive(2 ** 22 + 12345, None)


def test_the_beat_judge_counts_on_its_own_clock() -> None:
    j = BeatJudge(2.0)
    assert not j.see(100.0, {"beat": 1, "pid": 5})
    assert not j.see(101.5, {"beat": 1, "pid": 5})
    assert not j.see(101.9, {"beat": 2, "pid": 5})  # moved: the clock restarts
    assert not j.see(103.0, None)  # unreadable this time: no news, the clock runs on
    assert j.see(103.9, {"beat": 2, "pid": 5})
    assert j.stood_s(104.0) == pytest.approx(2.1)
    j2 = BeatJudge(2.0)
    assert not j2.see(0.0, None)  # never seen: counts from the first look
    assert j2.see(2.0, None)


@pytest.mark.parametrize(("kw", "said"), [
    ({"record": {"ended": "completed"}}, "ended"),
    ({"record": None, "missing_s": 2.5}, "died: it has no lease"),
    ({"released_": True, "trusted_lock": True}, "died: its process ended"),
    ({"released_": True, "trusted_lock": False}, None),  # another flock domain: no news
    ({"pid_gone": True}, "died: its process is gone"),
    ({"stood_s": 2.0}, "died: its lease stood still for 2.0 s"),
    ({"stood_s": 1.9}, None),
])
def test_the_decision(kw: dict[str, object], said: str | None) -> None:
    args: dict[str, object] = {"released_": False, "trusted_lock": False,
                               "record": {"beat": 1}, "pid_gone": False, "stood_s": 0.0,
                               "lease_s": 2.0, "missing_s": 0.0}
    args.update(kw)
    got = judge(**args)  # type: ignore[arg-type]
    assert (got is None) if said is None else (got is not None and got.startswith(said))


def test_a_killed_driver_is_seen_at_once(run: Path) -> None:
    proc, n = _driver(run)
    try:
        watch = DriverWatch(RunLayout(run), n, lease_s=30.0)
        assert watch.look() is None and watch.trusted_lock
        os.kill(proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        verdict = watch.wait()
        took = time.monotonic() - t0
    finally:
        _kill(proc)
    assert verdict.kind == "died" and verdict.driver == n, verdict
    assert took < 5.0, took  # the lock's release (or the pid): not the 30 s lease


def test_a_frozen_driver_is_seen_after_its_lease(run: Path) -> None:
    proc, n = _driver(run)
    try:
        watch = DriverWatch(RunLayout(run), n, lease_s=1.5)
        assert watch.look() is None
        os.kill(proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        verdict = watch.wait()
        took = time.monotonic() - t0
        record = read_lease(RunLayout(run).driver_lease(n))
        assert record is not None and pid_alive(record["pid"], record["start"])
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        _kill(proc)
    assert verdict.kind == "died" and "stood still" in verdict.how, verdict
    assert took >= 1.0, took  # it holds its lock and its pid: only the beat tells


def test_an_ended_driver_is_not_taken_over_and_a_newer_one_is_followed(run: Path) -> None:
    proc, n = _driver(run)
    proc2 = None
    try:
        layout = RunLayout(run)
        watch = DriverWatch(layout, n, lease_s=5.0)
        assert watch.look() is None
        proc2, n2 = _driver(run)  # a cec recover elsewhere took the run
        assert n2 == n + 1
        assert watch.wait().kind == "newer"
        watch2 = DriverWatch(layout, n2, lease_s=5.0)
        assert watch2.look() is None
        assert proc2.stdin is not None and proc2.stdout is not None
        proc2.stdin.write("failed\n")
        proc2.stdin.flush()
        assert proc2.stdout.readline().strip() == "ended"
        verdict = watch2.wait()
        assert (verdict.kind, verdict.outcome, verdict.code) == ("ended", "failed", 5)
    finally:
        _kill(proc)
        if proc2 is not None:
            _kill(proc2)


def test_of_standbys_racing_for_a_dead_driver_exactly_one_wins(run: Path) -> None:
    proc, n = _driver(run)
    _kill(proc)
    script = ("import sys; from pathlib import Path; "
              "from cec_spark.rundir.drivers import claim_driver; "
              "from cec_spark.rundir.layout import RunLayout; "
              "print(claim_driver(RunLayout(Path(sys.argv[1])), int(sys.argv[2])))")
    racers = [subprocess.Popen([sys.executable, "-c", script, str(run), str(n)], cwd=REPO,
                               text=True, stdout=subprocess.PIPE) for _ in range(4)]
    got = [r.communicate(timeout=60)[0].strip() for r in racers]
    assert sorted(got) == sorted(["None"] * 3 + [str(n + 1)]), got
    assert latest_driver(RunLayout(run)) == n + 1


def test_what_a_standby_accepts_as_a_run(tmp_path: Path) -> None:
    check_is_run(tmp_path / "not-yet")  # a run about to be created: wait for it
    (tmp_path / "empty").mkdir()
    check_is_run(tmp_path / "empty")
    creating = tmp_path / "creating"  # what cec run writes a moment before run.toml
    (creating / "state").mkdir(parents=True)
    (creating / ".run.toml.host.123.tmp").write_text("x")
    check_is_run(creating)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(UsageError, match=r"not a run directory \(it has no run.toml"):
        check_is_run(other)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        check_is_run(tmp_path / "file")


def test_standbys_alive_are_listed_and_dead_ones_are_not(run: Path) -> None:
    layout = RunLayout(run)
    lease = Lease(layout.standbys_dir / "h-1.live", {"standby": True, "state": "ready"})
    dead = layout.standbys_dir / "h-2.live"
    dead.write_text(json.dumps({"beat": 1, "at": time.time() - 60, "pid": 2 ** 22 + 7,
                                "state": "ready"}))
    try:
        found = standbys(layout)
        assert [s["state"] for s in found] == ["ready"] and found[0]["pid"] == os.getpid()
    finally:
        lease.end("driver ended")
    assert standbys(layout) == []
