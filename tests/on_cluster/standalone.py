"""A real Spark standalone cluster on this machine: a Master and Workers on 127.0.0.1.

Each Worker stands in for a host (DESIGN §8): it runs in its own mount namespace
(``unshare -m``), where a tmpfs hides the driver's private directory and the shared
directory is seen through the Worker's own FUSE mount (``bindfs -f DIR DIR``): the
same files, but its own page cache and its own ``flock`` domain, as a host sees an NFS
export. Each Worker has its own work, local and index-cache directories. The driver is
the test process's ``cec`` (``--master spark://127.0.0.1:PORT``); Spark settings for it
come from :attr:`Cluster.conf_dir` (``SPARK_CONF_DIR``): loopback only, short network
timeouts so that a frozen executor is declared lost in about 20 s.

Every process starts in a session of its own and is ended by its process group, never
by name. Every wait has a deadline.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
START_TIMEOUT_S = 90.0

#: The Java options of the cluster's own JVMs (Master, Workers, executors): the tests'
#: driver JVMs' (``SPARK_SUBMIT_OPTS``, the client compiler only: see tests/conftest.py),
#: for the same reason (short-lived JVMs on 2 shared cores).
JVM_OPTS = os.environ.get("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1").strip()

SPARK_DEFAULTS = {
    **({"spark.executor.extraJavaOptions": JVM_OPTS} if JVM_OPTS else {}),
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.network.timeout": "20s",
    "spark.network.timeoutInterval": "5s",
    "spark.executor.heartbeatInterval": "2s",
    "spark.task.maxFailures": "8",
    "spark.executor.memory": "768m",
    "spark.ui.enabled": "false",
}


def missing_tools() -> str | None:
    """Why a cluster cannot start here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (mount namespaces)"
    for tool in ("unshare", "bindfs", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install bindfs util-linux)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen[bytes]
    log: Path
    dir: Path

    @property
    def pgid(self) -> int:
        return self.proc.pid  # start_new_session: the session and group leader


@dataclass
class Cluster:
    base: Path
    shared: Path
    private: Path
    master: subprocess.Popen[bytes] | None = None
    master_port: int = 0
    ui_port: int = 0
    workers: list[Worker] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def conf_dir(self) -> Path:
        return self.base / "conf"

    def env(self) -> dict[str, str]:
        """The driver's environment: loopback, the cluster's Spark settings."""
        return {**os.environ, "SPARK_CONF_DIR": str(self.conf_dir),
                "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}

    # ------------------------------------------------------------------ start / stop

    @classmethod
    def start(cls, base: Path, shared: Path, private: Path, *, workers: int = 3,
              cores: int = 2) -> Cluster:
        why = missing_tools()
        if why is not None:
            raise RuntimeError(why)
        base.mkdir(parents=True, exist_ok=True)
        c = cls(base, shared, private)
        atexit.register(c.stop)
        c.conf_dir.mkdir(exist_ok=True)
        (c.conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{k} {v}\n" for k, v in SPARK_DEFAULTS.items()))
        c.master_port, c.ui_port = _free_port(), _free_port()
        log = base / "master.log"
        c.master = subprocess.Popen(
            [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host",
             "127.0.0.1", "--port", str(c.master_port), "--webui-port", str(c.ui_port)],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
            env=c._spark_env(base / "master"))
        c._wait(lambda: c._json() is not None, "the Master to start", log)
        for _ in range(workers):
            c.add_worker(cores)
        c.wait_workers(workers)
        return c

    def _spark_env(self, home: Path) -> dict[str, str]:
        home.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(home), "SPARK_PID_DIR": str(home),
                "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS}

    def add_worker(self, cores: int) -> Worker:
        i = len(self.workers)
        d = self.base / f"worker{i}"
        for sub in ("work", "local", "index"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        env = {**self._spark_env(d), "SPARK_LOCAL_DIRS": str(d / "local"),
               "SPARK_WORKER_DIR": str(d / "work"), "CEC_INDEX_DIR": str(d / "index")}
        shared, private = str(self.shared), str(self.private)
        script = (
            'set -e\n'
            f'mount -t tmpfs tmpfs "{private}"\n'
            f'bindfs -f "{shared}" "{shared}" &\n'
            'i=0\n'
            f'until grep -q " {shared} fuse" /proc/self/mounts; do\n'
            '  i=$((i+1)); [ $i -lt 100 ] || { echo "bindfs did not mount"; exit 1; }\n'
            '  sleep 0.1\n'
            'done\n'
            f'exec "{SPARK_CLASS}" org.apache.spark.deploy.worker.Worker {self.url} '
            f'--host 127.0.0.1 --cores {cores} --memory 2g --work-dir "{d / "work"}" '
            f'--webui-port {_free_port()}\n')
        log = d / "worker.log"
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                 "sh", "-c", script], stdout=log.open("wb"),
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)
        w = Worker(i, proc, log, d)
        self.workers.append(w)
        return w

    def stop(self) -> None:
        """Everything, by process group; idempotent."""
        for w in self.workers:
            _kill_group(w.pgid, signal.SIGCONT)
            _kill_group(w.pgid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                w.proc.wait(10)
        if self.master is not None:
            _kill_group(self.master.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                self.master.wait(10)
            self.master = None

    # ------------------------------------------------------------------ state

    def _json(self) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/",
                                        timeout=2) as r:
                data = json.loads(r.read().decode())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def alive_workers(self) -> int:
        data = self._json() or {}
        n = data.get("aliveworkers", 0)
        return int(n) if isinstance(n, int) else 0

    def wait_workers(self, n: int, timeout: float = START_TIMEOUT_S) -> None:
        self._wait(lambda: self.alive_workers() == n, f"{n} alive workers",
                   self.workers[-1].log if self.workers else self.base / "master.log",
                   timeout)

    def _wait(self, cond: object, what: str, log: Path,
              timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():  # type: ignore[operator]
                return
            time.sleep(0.3)
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}:\n{tail}")

    # ------------------------------------------------------------------ faults

    def worker_of(self, pid: int) -> Worker:
        """The Worker whose session holds process ``pid`` (an executor's Python worker)."""
        sid = os.getsid(pid)
        for w in self.workers:
            if w.pgid == sid:
                return w
        raise LookupError(f"pid {pid} belongs to no worker of this cluster")

    def kill_worker(self, w: Worker) -> None:
        """SIGKILL the whole "host": Worker, executor, Python workers, its FUSE mount."""
        _kill_group(w.pgid, signal.SIGKILL)
        w.proc.wait(30)

    def freeze_worker(self, w: Worker, sig: int = signal.SIGSTOP) -> list[int]:
        """SIGSTOP (or SIGCONT) every process of the "host" but its file system."""
        done = []
        for pid in _session(w.pgid):
            if _cmdline(pid).startswith("bindfs"):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                done.append(pid)
        return done


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _session(sid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(d)) == sid:
                    out.append(int(d))
    return out


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return os.path.basename(raw.split(b"\0")[0].decode(errors="replace"))
