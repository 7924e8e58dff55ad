"""Concurrency: one log opened, read and written from many threads and processes at once.

Issue 14: ``cec run pipeline`` hung forever in about 1 run in 7 because two threads of
the driver opened the same log's LMDB index at the same moment (py-lmdb's ``open_db``
without a transaction begins a write transaction with the GIL held; see
``storage_log.index``). A deadlock holds the GIL, so it would freeze pytest itself:
the load runs in child processes under a hard timeout, and a child that does not end
in time fails the test with every thread's stack (``faulthandler``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storage_log.log import StreamLog

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 4.0
HARD_TIMEOUT = SECONDS + 150  # the child dumps its stacks after SECONDS + 120


def _start(log: Path, role: str, threads: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.storage_log.stress_child", str(log), role,
         str(SECONDS), str(threads)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> int:
    try:
        out, err = proc.communicate(timeout=HARD_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"stress child hung (killed after {HARD_TIMEOUT} s):\n{err[-6000:]}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err[-6000:]}"
    assert out.startswith("ok "), out
    return int(out.split()[1])


@pytest.mark.slow
def test_threads_of_one_process(tmp_path: Path) -> None:
    """A writer thread and 6 reader threads of one process: thousands of opens."""
    log = tmp_path / "log"
    opens = _finish(_start(log, "writer", 6))
    assert opens >= 1000, f"only {opens} reader opens"
    with StreamLog.open(log) as r:
        assert r.verify() > 100


@pytest.mark.slow
def test_threads_of_several_processes(tmp_path: Path) -> None:
    """A writer process with reader threads and two reader processes on one log."""
    log = tmp_path / "log"
    StreamLog.open(log, writable=True, create=True).close()
    procs = [_start(log, "writer", 3), _start(log, "reader", 3), _start(log, "reader", 3)]
    opens = [_finish(p) for p in procs]
    assert min(opens) >= 100, opens
    with StreamLog.open(log) as r:
        assert r.verify() > 100
