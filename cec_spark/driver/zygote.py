"""The Python worker daemon's imports made before Spark asks for the daemon.

A local run's first row waits for the worker daemon (:mod:`cec_spark.driver.daemon`),
and the daemon imports numpy, pyarrow, pandas, pyspark and cec before it forks a
worker: about 1 CPU s, which Spark starts only once the SparkContext is up. Before
that, while the JVM is launched and the driver plans, a core is idle for about a
second.

So the early start of a local run (``cli.app``, before the JVM's) also starts a
*zygote* (:func:`spawn`): a Python process that makes the daemon's imports at
once and then waits on a Unix socket, whose path it puts in the environment the JVM
inherits (:data:`ENV`). When Spark then starts its daemon, ``cec_spark.driver.daemon``
hands its standard streams, arguments, environment and directory over to the zygote
(:func:`hand_over`), which becomes that daemon: PySpark's own ``daemon.manager()`` on
the JVM's pipes. The process Spark started stays, forwards ``SIGTERM`` and ends when the
daemon does, so Spark's handle on its daemon is unchanged.

The zygote takes one hand-over, and only one it can serve: the same interpreter, and
every variable read at the interpreter's start or at an import (:func:`_import_time`)
the one it was started with (else the daemon imports for itself, as without a zygote).
An unclaimed zygote ends when the driver does (its standard input is the driver's
pipe) or after :data:`UNCLAIMED_S`. ``CEC_WORKER_ZYGOTE=0`` turns it off.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

#: the environment variable naming the zygote's socket (``0``: no zygote)
ENV = "CEC_WORKER_ZYGOTE"
#: seconds an unclaimed zygote waits before it ends
UNCLAIMED_S = 300.0
#: seconds a daemon waits for the zygote's answer (its imports) before it imports itself
ANSWER_S = 120.0
#: the most a hand-over's message may be (the daemon's environment as JSON)
_MAX_MSG = 1 << 20

#: a zygote's folder (its socket's) older than this is one a SIGKILL left behind
STALE_S = 3600.0
_PREFIX = "cec-zygote-"

# the driver's end of each zygote's standard input: it closes when the driver ends
_SPAWNED: list[subprocess.Popen[bytes]] = []


def spawn(master: str) -> None:
    """Start a zygote for this process's next Spark daemon, if ``master`` is local;
    name its socket in ``os.environ`` (call before the JVM starts: it inherits the
    variable, with the worker environment of
    :func:`cec_spark.run.session.worker_environment`, set here first). Nothing if
    ``CEC_WORKER_ZYGOTE`` is already set (``0``: off) or the zygote cannot start."""
    from cec.spec.model import is_local_master  # noqa: PLC0415 - not in the daemon
    from cec_spark.run.session import worker_environment  # noqa: PLC0415

    if os.environ.get(ENV) or _SPAWNED or not is_local_master(master):
        return
    worker_environment(master)
    _remove_stale()
    folder = tempfile.mkdtemp(prefix=_PREFIX)  # 0700: only this user connects
    path = os.path.join(folder, "s")
    env = dict(os.environ)
    # what Spark gives its daemon and what the interpreter reads at its start
    env.setdefault("PYTHONHASHSEED", "0")
    env["PYTHONUNBUFFERED"] = "YES"
    try:
        # not the driver's stdout or stderr: a caller reading them to their end would
        # wait for this process too (a zygote whose imports fail ends; the daemon then
        # imports for itself, and the same error shows there, in Spark's task error)
        proc = subprocess.Popen([sys.executable, "-m", "cec_spark.driver.zygote", path],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env, close_fds=True)
    except OSError:
        _remove(path)  # the folder, empty: no socket was made
        return
    _SPAWNED.append(proc)
    os.environ[ENV] = path


def _remove_stale() -> None:
    """Remove this user's zygote folders older than :data:`STALE_S`: a zygote removes
    its own when it is claimed or ends, and lives unclaimed for at most
    :data:`UNCLAIMED_S` between two connections, so an older one was left by a zygote
    killed outright (SIGKILL to its driver's process group)."""
    root = tempfile.gettempdir()
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if (entry.name.startswith(_PREFIX) and entry.is_dir(follow_symlinks=False)
                        and st.st_uid == os.getuid() and now - st.st_mtime > STALE_S):
                    _remove(os.path.join(entry.path, "s"))


def _import_time(env: dict[str, str]) -> dict[str, str]:
    """The variables an interpreter or an import reads once: the zygote serves a
    daemon only if they are its own. The interpreter's are ``PYTHONxxx`` without an
    underscore (Spark's ``PYTHON_WORKER_...`` are read by each task); ``PYTHONPATH``
    aside (:func:`_paths_served`)."""
    prefixes = ("CEC_", "OMP_", "OPENBLAS_", "MKL_", "JE_", "ARROW_", "MALLOC_", "LD_",
                "GLIBC_")
    return {k: v for k, v in env.items()
            if (k.startswith(prefixes) or (k.startswith("PYTHON") and "_" not in k))
            and k not in ("PYTHONPATH", ENV)}


def hand_over(path: str) -> int | None:
    """In the process Spark started as its daemon: hand the daemon's part to the
    zygote at ``path`` and wait for it to end (its exit status: 0, or 1 after a
    ``SIGTERM``). ``None``: no zygote took it (none there, already taken, or another
    environment): this process is the daemon itself."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except OSError:
        return None
    with conn:
        msg = json.dumps({"env": dict(os.environ), "cwd": os.getcwd(),
                          "python": [sys.executable, sys.version],
                          "argv": sys.argv}).encode()
        fds = array.array("i", [0, 1, 2])
        try:
            conn.sendmsg([len(msg).to_bytes(4, "big") + msg],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
            conn.settimeout(ANSWER_S)  # the zygote's imports may still be running
            answer = b""
            while not answer.endswith(b"\n") and (chunk := conn.recv(64)):
                answer += chunk
            if not answer.startswith(b"pid "):
                return None
            pid = int(answer[4:])
            conn.sendall(b"go\n")  # only now does the zygote take the streams
        except (OSError, ValueError):  # a timeout among them: it takes nothing then
            return None
    stopped = [False]

    def forward(signum: int, _frame: object) -> None:
        stopped[0] = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)
    _wait_for(pid)
    return 1 if stopped[0] else 0


def _wait_for(pid: int) -> None:
    """Until process ``pid`` (not a child) has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd: look twice a second
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            select.select([], [], [], 0.5)
    try:  # readable once the process has ended (select retries after a signal)
        while not select.select([fd], [], [], None)[0]:
            pass
    finally:
        os.close(fd)


def spark_archive(path: str) -> bool:
    """Spark's own entries on a worker's PYTHONPATH: its pyspark and py4j zips, and a
    jar (PythonUtils puts the spark-core jar there; it holds no Python module)."""
    name = os.path.basename(path)
    return (path.endswith(".zip") and name.startswith(("pyspark", "py4j"))) or \
        path.endswith(".jar")


def _paths_served(env: dict[str, object]) -> bool:
    """Every entry of the daemon's ``PYTHONPATH`` but Spark's own archives (which the
    daemon drops, this interpreter having the same pyspark) is on this one's path."""
    entries = str(env.get("PYTHONPATH", "")).split(os.pathsep)
    return all(p in sys.path for p in entries if p and not spark_archive(p))


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]] | None:
    """One hand-over: its message and the three descriptors passed with it."""
    fds = array.array("i")
    message: object = None
    try:
        conn.settimeout(ANSWER_S)
        data, anc, _flags, _addr = conn.recvmsg(_MAX_MSG, socket.CMSG_LEN(3 * fds.itemsize))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            more = conn.recv(_MAX_MSG)
            if not more:
                break
            data += more
        if len(data) >= 4 and len(data) == 4 + int.from_bytes(data[:4], "big"):
            message = json.loads(data[4:])
    except (OSError, ValueError):
        message = None
    if len(fds) != 3 or not isinstance(message, dict):
        for fd in fds:
            os.close(fd)
        return None
    return message, list(fds)


def _serve(path: str) -> None:
    """The zygote: listen, import, take one hand-over, become PySpark's daemon."""
    # a Ctrl-C at the terminal reaches the driver's process group, this process too
    # until it is the daemon (PySpark's daemon leaves that group): the driver answers it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # before the imports: a daemon that comes early waits on them
    listener.listen(4)
    started = dict(os.environ)
    try:
        import gc  # noqa: PLC0415

        from pyspark import daemon  # noqa: PLC0415

        import cec_spark.ingest.job  # noqa: PLC0415 - the daemon's imports
        import cec_spark.run.task  # noqa: PLC0415, F401
    except BaseException:  # a daemon coming now finds no socket: it imports for itself
        _remove(path)
        raise

    gc.collect()
    gc.freeze()  # as cec_spark.driver.daemon does before its first fork
    message, fds, conn = _claim(listener, path, started)
    listener.close()
    _remove(path)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    env = message["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    with contextlib.suppress(OSError):
        os.chdir(str(message.get("cwd", ".")))
    argv = message.get("argv")
    if isinstance(argv, list) and argv:  # the daemon's: PySpark's names the worker module
        sys.argv[:] = [str(a) for a in argv]
    conn.close()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    daemon.manager()


def _claim(listener: socket.socket, path: str, started: dict[str, str]
           ) -> tuple[dict[str, object], list[int], socket.socket]:
    """The first hand-over this process can serve (its message, the daemon's three
    descriptors, the connection); this process ends if the driver does first, or if
    nobody comes for :data:`UNCLAIMED_S`."""
    while True:
        ready = select.select([listener.fileno(), 0], [], [], UNCLAIMED_S)[0]
        if not ready or (0 in ready and not os.read(0, 1 << 12)):
            _remove(path)
            os._exit(0)  # the driver ended, or nobody came
        if listener.fileno() not in ready:
            continue
        conn, _ = listener.accept()
        got = _receive(conn)
        if got is not None:
            env = got[0].get("env")
            if (isinstance(env, dict) and _paths_served(env)
                    and got[0].get("python") == [sys.executable, sys.version]
                    and _import_time(env) == _import_time(started) and _agreed(conn)):
                return got[0], got[1], conn
            for fd in got[1]:
                os.close(fd)
        conn.close()


def _agreed(conn: socket.socket) -> bool:
    """Tell the daemon this process's pid and hear it agree: one that gave up waiting
    (:data:`ANSWER_S`) has imported for itself, and its streams must not be taken."""
    try:
        conn.sendall(b"pid %d\n" % os.getpid())
        return conn.recv(3) == b"go\n"
    except OSError:
        return False


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))


if __name__ == "__main__":
    _serve(sys.argv[1])
