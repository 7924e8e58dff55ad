"""The worker daemon's zygote (:mod:`cec_spark.driver.zygote`), without Spark.

A zygote is started as the early start starts it; a process stands in for the one
Spark starts as its daemon (``python -m cec_spark.driver.daemon``: it calls
:func:`~cec_spark.driver.zygote.hand_over`). A hand-over whose import-time environment
differs is refused, one whose daemon gave up waiting is not taken, and the zygote waits
for the next; an accepted one makes the zygote PySpark's daemon on the stand-in's
pipes: it writes its port where Spark reads it, and ends (with the stand-in) when that
standard input closes, as Spark's end closes it. An unclaimed zygote ends with its
driver, and the folder of one killed outright is removed at a later start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cec_spark.driver import zygote
from tests.cec_spark.helpers import REPO

STAND_IN = (
    "import os, sys\n"
    "from cec_spark.driver.zygote import hand_over\n"
    "status = hand_over(sys.argv[1])\n"
    "if status is None:\n"
    "    sys.stderr.write('refused\\n')\n"
    "    sys.exit(7)\n"
    "sys.exit(status)\n"
)

# the first half of hand_over: the message and the descriptors sent, the answer read,
# and no "go"
GAVE_UP = (
    "import array, json, os, socket, sys\n"
    "c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "c.connect(sys.argv[1])\n"
    "m = json.dumps({'env': dict(os.environ), 'cwd': os.getcwd(),\n"
    "                'python': [sys.executable, sys.version], 'argv': sys.argv}).encode()\n"
    "c.sendmsg([len(m).to_bytes(4, 'big') + m],\n"
    "          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [0, 1, 2]).tobytes())])\n"
    "sys.stdout.buffer.write(c.recv(64))\n"
    "c.close()\n"
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != zygote.ENV}
    env.update(PYTHONHASHSEED="0", PYTHONUNBUFFERED="YES", PYTHONPATH=str(REPO))
    return env


def _start_zygote(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    path = str(tmp_path / "z" / "s")
    os.mkdir(tmp_path / "z", 0o700)
    proc = subprocess.Popen([sys.executable, "-m", "cec_spark.driver.zygote", path],
                            stdin=subprocess.PIPE, env=_env(), cwd=REPO)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert proc.poll() is None, f"the zygote exited: {proc.returncode}"
        assert time.monotonic() < deadline, "the zygote made no socket in 60 s"
        time.sleep(0.05)
    return proc, path


def _gone(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def test_no_zygote_no_hand_over(tmp_path: Path) -> None:
    assert zygote.hand_over(str(tmp_path / "none")) is None


def test_the_import_time_environment_is_what_must_match() -> None:
    base = {"PYTHONHASHSEED": "0", "CEC_CRASH_AT": "x", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": "/a", "PYTHON_WORKER_FACTORY_SECRET": "s", "HOME": "/h",
            zygote.ENV: "/z"}
    assert zygote._import_time(base) == {"PYTHONHASHSEED": "0", "CEC_CRASH_AT": "x",
                                         "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_refused_then_served_then_ended_with_spark_pipe(tmp_path: Path) -> None:
    proc, path = _start_zygote(tmp_path)
    try:
        # another value of a variable read at an import: the stand-in is its own daemon
        other = {**_env(), "CEC_CRASH_AT": "nowhere:1"}
        got = subprocess.run([sys.executable, "-c", STAND_IN, path], env=other,
                             capture_output=True, timeout=120, check=False, cwd=REPO)
        assert got.returncode == 7 and b"refused" in got.stderr, got
        assert proc.poll() is None and os.path.exists(path)
        # a daemon that gave up waiting (it imports for itself) never says "go": the
        # zygote takes nothing of it and waits for the next
        gave_up = subprocess.run([sys.executable, "-c", GAVE_UP, path], env=_env(),
                                 capture_output=True, timeout=120, check=False, cwd=REPO)
        assert gave_up.returncode == 0 and gave_up.stdout.startswith(b"pid "), gave_up
        time.sleep(0.5)
        assert proc.poll() is None and os.path.exists(path)
        # Spark's own archives on the daemon's PYTHONPATH are no obstacle
        env = {**_env(), "PYTHONPATH": os.pathsep.join([str(REPO), "/x/lib/pyspark.zip",
                                                         "/x/jars/spark-core_2.13.jar"])}
        spark_side = subprocess.Popen([sys.executable, "-c", STAND_IN, path], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, cwd=REPO)
        assert spark_side.stdout is not None and spark_side.stdin is not None
        port = int.from_bytes(spark_side.stdout.read(4), "big", signed=True)
        assert 0 < port < 65536, port  # PySpark's daemon.manager() wrote it: the zygote
        assert not os.path.exists(path)  # one hand-over only
        assert spark_side.poll() is None  # it waits for the daemon it handed over to
        spark_side.stdin.close()  # Spark's end: the daemon shuts down, the stand-in ends
        assert _gone(spark_side) == 0
        # the daemon ended (PySpark's manager exits 1 even then: its `finally` calls
        # shutdown(1) after shutdown(0))
        assert _gone(proc) in (0, 1)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_an_unclaimed_zygote_ends_with_its_driver(tmp_path: Path) -> None:
    proc, path = _start_zygote(tmp_path)
    assert proc.stdin is not None
    proc.stdin.close()  # the driver's end of its pipe, as when the driver exits
    assert _gone(proc, 60) == 0
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_folders_a_killed_zygote_left_are_removed_at_the_next_spawn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old, fresh, other = (tmp_path / "cec-zygote-old", tmp_path / "cec-zygote-new",
                         tmp_path / "not-a-zygote")
    for d in (old, fresh, other):
        d.mkdir()
        (d / "s").touch()
    hours_ago = time.time() - 2 * 3600
    for d in (old, other):
        os.utime(d, (hours_ago, hours_ago))
    zygote._remove_stale()
    assert not old.exists() and fresh.exists() and other.exists()


@pytest.mark.parametrize(("setting", "master"), [("0", "local[2]"), (None, "spark://127.0.0.1:7077")])
def test_off_or_a_cluster_master_starts_no_zygote(
        setting: str | None, master: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``CEC_WORKER_ZYGOTE=0`` turns the zygote off, and a cluster's master (whose
    executors' daemons the driver does not start) starts none: no process, no folder,
    and the variable as it was (the daemon then imports for itself)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(zygote, "_SPAWNED", [])
    if setting is None:
        monkeypatch.delenv(zygote.ENV, raising=False)
    else:
        monkeypatch.setenv(zygote.ENV, setting)
    zygote.spawn(master)
    assert zygote._SPAWNED == []
    assert os.environ.get(zygote.ENV) == setting
    assert not any(p.name.startswith("cec-zygote-") for p in tmp_path.iterdir())
