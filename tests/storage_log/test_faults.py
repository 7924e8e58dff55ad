"""The crash-point seam itself: off by default, kills -9 at the n-th hit, tags, marks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from storage_log.faults import POINTS, crash_point

PROG = """
import os, sys
from storage_log.faults import crash_point, set_tag
print(f"pid={os.getpid()}", file=sys.stderr, flush=True)
set_tag(sys.argv[1])
for i in range(5):
    print(i, flush=True)
    crash_point("log.before_commit")
print("done", flush=True)
"""


def _run(env_at: str, tag: str, mark: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CEC_CRASH_AT=env_at, CEC_CRASH_MARK=str(mark))
    return subprocess.run([sys.executable, "-c", PROG, tag], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_off_unless_named_and_unknown_names_refused() -> None:
    crash_point("log.before_commit")  # not armed in the test process: returns
    with pytest.raises(ValueError, match=r"not in storage_log\.faults\.POINTS"):
        crash_point("log.no_such_point")
    assert all("." in name for name in POINTS)


def test_kills_at_the_nth_hit_and_marks_where(tmp_path: Path) -> None:
    p = _run("log.before_commit@3", "p0", tmp_path)
    assert p.returncode == -signal.SIGKILL
    assert p.stdout.split() == ["0", "1", "2"]  # died at the third hit, nothing after
    marks = [m.name for m in tmp_path.iterdir() if not m.name.startswith(".")]
    assert len(marks) == 1 and marks[0] == f"log.before_commit.{_pid(p)}"


def _pid(p: subprocess.CompletedProcess[str]) -> int:
    return int(p.stderr.split("pid=")[1].split()[0])


def test_with_a_mark_directory_a_point_kills_once(tmp_path: Path) -> None:
    """The first process to reach the point dies; a second one (a Spark task's retry, a
    recovery with the same environment) goes past it, as after one crash."""
    first = _run("log.before_commit@2", "p0", tmp_path)
    again = _run("log.before_commit@2", "p0", tmp_path)
    assert first.returncode == -signal.SIGKILL and first.stdout.split() == ["0", "1"]
    assert again.returncode == 0 and again.stdout.split()[-1] == "done"
    assert sorted(m.name for m in tmp_path.iterdir()) == [
        ".log.before_commit.once", f"log.before_commit.{_pid(first)}"]
    env = dict(os.environ, CEC_CRASH_AT="log.before_commit")  # no mark: every one dies
    env.pop("CEC_CRASH_MARK", None)
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", PROG, "p0"], env=env, capture_output=True,
                           text=True, timeout=60, check=False)
        assert p.returncode == -signal.SIGKILL


def test_armed_names_the_point() -> None:
    code = ("from storage_log.faults import armed; "
            "print(armed(), armed('tail.mid_print'), armed('log.after_append'))")
    env = dict(os.environ, CEC_CRASH_AT="tail.mid_print@2")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=60, check=True)
    assert p.stdout.split() == ["True", "True", "False"]


def test_a_tag_narrows_the_point_to_its_processes(tmp_path: Path) -> None:
    other = _run("log.before_commit%p1", "p0", tmp_path)
    assert other.returncode == 0 and other.stdout.split()[-1] == "done"
    assert not list(tmp_path.iterdir())
    mine = _run("log.before_commit%p1", "p1", tmp_path)
    assert mine.returncode == -signal.SIGKILL and mine.stdout.split() == ["0"]


def test_a_misspelt_point_in_the_environment_is_an_error_at_import() -> None:
    env = dict(os.environ, CEC_CRASH_AT="log.before_comit")
    p = subprocess.run([sys.executable, "-c", "import storage_log.faults"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 1 and "no crash point 'log.before_comit'" in p.stderr
