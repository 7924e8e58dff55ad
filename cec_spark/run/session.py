"""The SparkSession of a pipeline run, configured for long-lived tasks and Arrow.

Settings and why (DESIGN §7):

* ``spark.sql.shuffle.partitions = P`` (200 made stateful queries ~6x slower here);
* Arrow for every JVM/Python crossing, with big batches
  (``spark.sql.execution.arrow.maxRecordsPerBatch``);
* the Python workers run this interpreter (``sys.executable``), so they import the
  same ``cec``;
* speculation off (a speculative copy of a long-lived task would be a second writer);
* the Spark UI on, as Spark has it (its URL is printed at start; on a local master
  it listens on 127.0.0.1 only, as the driver does), without its kill buttons;
* quiet logs from the JVM's first line (``log4j2.properties`` given to the driver JVM
  on its command line, then ``setLogLevel("ERROR")``);
* one Python worker daemon for SQL and RDD jobs alike: PySpark starts a daemon per set
  of worker environment variables, and its "simplified traceback" (on by default) adds
  one to SQL jobs only, so an RDD job and a SQL job each started a daemon importing cec
  (``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled = false``; the
  operator job and the direct ingest are RDD jobs, a [filter]'s ingest query is SQL);
* the JVMs' just-in-time compiler limited to its first tier (``-XX:TieredStopAtLevel=1``,
  :data:`JIT_OPTS`): a run's JVM mostly moves Arrow bytes to and from Python, and the
  optimizing compiler spent ~10 of its ~20 CPU seconds compiling code that runs a few
  seconds (issue 30; 3 M rows on a quiet 2-core machine: wall 0.80x, CPU 0.73x, measured
  side by side with ``bench/datapath.py``, outputs equal).

Each of these (but speculation and the daemon module) can be overridden by the spec's
``[run.spark]`` table or ``--conf key=value``.

The master defaults to ``local[P+2,3]`` (:func:`cec.spec.default_master`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from cec.errors import CecError, UsageError
from cec.spec.model import is_local_master
from cec_spark.run import jvm_archive
from cec_spark.run.lazy_session import LazySession

ARROW_BATCH_ROWS = 1 << 19
#: the driver's (and a cluster's executors') JIT: the client compiler only (see above)
JIT_OPTS = "-XX:TieredStopAtLevel=1"


LOG4J = Path(__file__).with_name("log4j2.properties")


def default_conf(master: str, partitions: int) -> dict[str, str]:
    """cec's Spark settings for a run; a user's ``[run.spark]``/``--conf`` override them."""
    local = {
        # a local run talks to itself only: never bind the driver to a public interface
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    } if is_local_master(master) else {"spark.executor.extraJavaOptions": JIT_OPTS}
    return {
        **local,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J} {JIT_OPTS}",
        # the UI is on, as Spark has it, but cannot kill a stage: a killed stage
        # would fail a long-lived operator task (a resubmit, not a loss, but a stall)
        "spark.ui.enabled": "true",
        "spark.ui.killEnabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.default.parallelism": str(partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
        "spark.sql.adaptive.enabled": "false",
        "spark.speculation": "false",
        "spark.pyspark.python": sys.executable,
        "spark.python.worker.reuse": "true",
        "spark.python.daemon.module": "cec_spark.driver.daemon",
        # one daemon for SQL and RDD jobs (see above): a SQL job's workers otherwise
        # get one more environment variable, so a daemon of their own
        "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
        "spark.driver.memory": "2g",
        "spark.sql.session.timeZone": "UTC",
    }


# Settings a run cannot work without: a user's value is refused, not silently used.
FIXED = {
    "spark.speculation": ("false", "a speculative copy of a long-lived task would be a "
                          "second writer of its log"),
    "spark.python.daemon.module": ("cec_spark.driver.daemon", "the Python workers must fork "
                                   "from cec's daemon"),
}


# the class archive this process's JVM writes at its exit (None: it writes none)
_WRITING: list[jvm_archive.Archive] = []


def worker_environment(master: str) -> None:
    """What this process's environment gives the JVM and the Python worker daemon it
    starts (they inherit it): the daemon single-threaded when it forks (see
    :mod:`cec_spark.driver.daemon`), this interpreter for the workers."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local_master(master):  # else Spark warns that the host name resolves to loopback
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def build_session(master: str, partitions: int, conf: Mapping[str, str] | None = None, *,
                  app_name: str = "cec", write_archive: bool = False,
                  warm: bool = False) -> SparkSession:
    """A (possibly already running) SparkSession for ``master`` with cec's settings.

    ``conf`` (the spec's ``[run.spark]`` and ``--conf``) overrides the defaults. A
    setting Spark refuses is a UsageError (exit 2) carrying Spark's own message, a SQL
    setting's too (checked here, not at the first job that reads it). A new
    driver JVM maps the class archive of :mod:`cec_spark.run.jvm_archive` if there is
    one; with ``write_archive`` and none yet, it writes one at its exit, which
    :func:`stop_session` (not ``spark.stop()``) waits for and keeps.

    With ``warm`` (the early start of a command) and a local master, a one-task job
    starts the Python worker daemon as soon as the SparkContext is up
    (:func:`_warm_daemon`), and, when ``conf`` sets no ``spark.sql.*`` (nothing of the
    user's for the SQL state to check), the session's SQL part is made at its first
    use only (:class:`~cec_spark.run.lazy_session.LazySession`): a run of RDD jobs
    never makes it, and its jobs start once the context is up.
    """
    conf = dict(conf or {})
    for key, (value, why) in FIXED.items():
        if key in conf and conf[key] != value:
            raise UsageError(f"Spark setting {key}={conf[key]}: cec needs {value} ({why})")
    # PySpark 4.3 warns about pandas 3 on every Arrow UDF; cec moves Arrow, not pandas.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                            category=FutureWarning)
    worker_environment(master)

    settings = {**default_conf(master, partitions), **conf}
    archive = _class_archive(conf, write_archive)
    if archive is not None:
        settings["spark.driver.extraJavaOptions"] += " " + archive.options
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
            _launch_quiet_gateway(master, app_name, settings)
        lazy = None
        if warm and is_local_master(master) and SparkContext._active_spark_context is None:
            sc = _warm_daemon(master, app_name, settings)
            if not any(k.startswith("spark.sql.") for k in conf):  # none to check now
                lazy = LazySession(sc, builder.getOrCreate)
        if lazy is not None:
            spark = cast(SparkSession, lazy)
        else:
            spark = builder.getOrCreate()  # with the context _warm_daemon made, if so
            # the SQL settings are checked when the session's SQL state is made, which
            # the first SQL use would do: a bad one (spark.sql.shuffle.partitions=abc)
            # failed the ingest's job 5 times, about 34 s, then exit 1, after the run
            # was created
            spark.conf.get("spark.sql.session.timeZone")
    except Exception as exc:
        raise _start_error(exc, master, conf) from exc
    spark.sparkContext.setLogLevel("ERROR")
    if archive is not None and archive.part is not None:
        _WRITING[:] = [archive]
    return spark


def _class_archive(conf: Mapping[str, str], write: bool) -> jvm_archive.Archive | None:
    """The class archive a new driver JVM maps (or writes, if ``write``), if any."""
    if SparkContext._gateway is not None or "spark.driver.extraJavaOptions" in conf:
        return None
    archive = jvm_archive.plan()
    if archive is not None and archive.part is not None and not write:
        return None  # nobody would wait for the dump: don't pay for it
    return archive


def _spark_conf(master: str, app_name: str, settings: Mapping[str, str], *,
                defaults: bool) -> SparkConf:
    """The run's settings as a SparkConf (``defaults``: over the JVM's ``spark.*``
    properties, as ``SparkSession.builder.getOrCreate`` makes its context's)."""
    conf = SparkConf(loadDefaults=defaults).setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    return conf


# the thread of the job that starts the Python worker daemon early (_warm_daemon)
_WARMING: list[threading.Thread] = []


def _warm_daemon(master: str, app_name: str, settings: Mapping[str, str]) -> SparkContext:
    """Make the SparkContext (as ``getOrCreate`` would), then start the Python worker
    daemon in a thread: a job of one task that does nothing.

    The daemon imports cec before it forks a worker (1.2-1.4 s here,
    :mod:`cec_spark.driver.daemon`). Started by the run's first job, it came after the
    SparkSession's start (about 1 s), on the way to the first row. The run's jobs then
    fork their workers from this daemon (one daemon: see the module's notes)."""

    sc = SparkContext.getOrCreate(_spark_conf(master, app_name, settings, defaults=True))

    def run() -> None:
        with contextlib.suppress(Exception):  # the run's own jobs start it otherwise
            sc.setJobGroup("cec-warm", "cec: start the Python worker daemon")
            sc.parallelize([0], 1).mapPartitions(lambda rows: iter(())).collect()

    thread = threading.Thread(target=run, name="cec-warm-daemon", daemon=True)
    _WARMING[:] = [thread]
    thread.start()
    return sc


#: What the JVM itself writes on stderr before any of its logging is configured:
#: Spark's launcher always adds ``--add-modules=jdk.incubator.vector``, and the JVM
#: then warns at boot, on every run. Lines matching this are not passed on.
JVM_BOOT_NOISE = re.compile(rb"^WARNING: Using incubator modules: jdk\.incubator\.vector\s*$")


def _launch_quiet_gateway(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the driver JVM (as ``getOrCreate`` would) with its stderr through a pipe
    that a daemon thread copies to this process's stderr, less :data:`JVM_BOOT_NOISE`.

    Until the JVM is up its lines are held back: if it exits instead (Spark refused a
    setting), the error raised carries its exception line and the Java stack trace is
    not printed. Everything the JVM writes later (log4j's errors, a crash) reaches
    stderr in order. The JVM ends when this process does (PySpark keeps its stdin as
    a pipe).
    """
    conf = _spark_conf(master, app_name, settings, defaults=False)
    read_fd, write_fd = os.pipe()
    copier = _StderrCopier(read_fd)
    try:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            conf, popen_kwargs={"stderr": write_fd})
    except Exception as exc:
        os.close(write_fd)
        copier.finished.wait(5)  # the JVM has exited: its pipe ends
        raise RuntimeError("\n".join([str(exc), *copier.held])) from exc
    os.close(write_fd)  # the JVM holds its own copy
    copier.release()
    SparkContext._ensure_initialized(gateway=gateway)


class _StderrCopier:
    """Copies the JVM's stderr to fd 2 (less :data:`JVM_BOOT_NOISE`), holding lines back
    until :meth:`release`."""

    def __init__(self, read_fd: int) -> None:
        self.held: list[str] = []
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._holding = True
        threading.Thread(target=self._copy, args=(read_fd,), name="cec-jvm-stderr",
                         daemon=True).start()

    def release(self) -> None:
        with self._lock:
            self._holding = False
            for line in self.held:
                self._write(line.encode() + b"\n")
            self.held.clear()

    @staticmethod
    def _write(line: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(2, line)

    def _copy(self, read_fd: int) -> None:
        try:
            with os.fdopen(read_fd, "rb", buffering=0) as pipe:
                for line in iter(pipe.readline, b""):
                    if JVM_BOOT_NOISE.match(line):
                        continue
                    with self._lock:
                        if self._holding:
                            self.held.append(line.decode(errors="replace").rstrip("\n"))
                        else:
                            self._write(line)
        finally:
            self.finished.set()


class _EarlyStart:
    """A SparkSession being started in a background thread (:func:`start_early`)."""

    def __init__(self, key: tuple[object, ...], master: str, partitions: int,
                 conf: Mapping[str, str]) -> None:
        self.key = key
        self.done = threading.Event()
        self.spark: SparkSession | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._start, args=(master, partitions, dict(conf)),
                         name="cec-spark-start", daemon=True).start()

    def _start(self, master: str, partitions: int, conf: dict[str, str]) -> None:
        try:
            self.spark = build_session(master, partitions, conf, write_archive=True,
                                       warm=True)
        except BaseException as exc:  # handed to the thread that takes the session
            self.error = exc
        finally:
            self.done.set()

    def take(self) -> SparkSession:
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.spark is not None
        # the JVM's active session is per thread: make it this thread's too, as if
        # this thread had built it
        if isinstance(self.spark, LazySession):  # nothing made yet to make active
            return self.spark
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.spark._jsparkSession)
        return self.spark


_EARLY: list[_EarlyStart] = []


def _key(master: str, partitions: int, conf: Mapping[str, str] | None) -> tuple[object, ...]:
    return (master, partitions, tuple(sorted((conf or {}).items())))


def start_early(master: str, partitions: int, conf: Mapping[str, str] | None = None) -> None:
    """Begin starting the run's SparkSession now, in a background thread.

    A driver JVM takes 3-5 s to start; the command line calls this as soon as it
    knows the master, partitions and Spark settings (from the spec or ``run.toml``),
    so that the JVM starts while this process imports the pipeline's modules, plans
    the source and writes ``run.toml`` (measured: about 1 s of every ``cec run``).
    :func:`session_for` with the same settings takes the session; a process that
    fails before then exits, and the JVM, whose standard input is this process's
    pipe, ends with it. Nothing happens if this process already has a JVM.
    """
    if SparkContext._gateway is None and not _EARLY:
        _EARLY.append(_EarlyStart(_key(master, partitions, conf), master, partitions,
                                  conf or {}))


def early_start_pending() -> bool:
    """A session was started early and not yet taken (it is this process's own)."""
    return bool(_EARLY)


def session_for(master: str, partitions: int, conf: Mapping[str, str] | None = None, *,
                write_archive: bool = False) -> SparkSession:
    """The session :func:`start_early` started for these settings, else
    :func:`build_session` (a session started early for other settings is stopped
    first: it would be handed out in their place)."""
    if _EARLY:
        early = _EARLY.pop()
        if early.key == _key(master, partitions, conf):
            return early.take()
        with contextlib.suppress(Exception):
            stop_session(early.take())
    return build_session(master, partitions, conf, write_archive=write_archive)


def stop_session(spark: SparkSession) -> None:
    """``spark.stop()``; if this process's JVM writes a class archive, end the JVM and
    keep the archive (the first run of an installation only).

    PySpark's ``stop()`` ends with shutting down the driver's accumulator server, a
    ``socketserver`` whose handler polls its connection once a second and whose loop
    polls every 0.5 s: measured here, 0.8 of the 1.0 s ``stop()`` took, paid at the
    end of every ``cec`` process. That server receives accumulator updates from
    tasks; once the JVM's context is stopped no task can send one, so its shutdown is
    left to a daemon thread (it completes within about a second in a long-lived
    process, and is not waited for by one that exits).
    """
    while _WARMING:  # its job ends within seconds; stopping under it says so on stderr
        _WARMING.pop().join(10)
    sc = spark.sparkContext
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        sc._accumulatorServer = None  # type: ignore[assignment]
    spark.stop()
    if server is not None:
        threading.Thread(target=server.shutdown, name="cec-accumulator-stop",
                         daemon=True).start()
    while _WRITING:
        jvm_archive.finish(_WRITING.pop())


def _start_error(exc: Exception, master: str, conf: Mapping[str, str]) -> CecError:
    """Spark did not start: a one-line error with Spark's own reason."""
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    reason = lines[0] if lines else repr(exc)
    for ln in lines:
        if m := re.search(r"(\w+(?:Exception|Error)): (.+)", ln):
            reason = f"{m.group(1)}: {m.group(2)}"
            break
    reason = reason[:400]
    settings = ", ".join(f"{k}={v}" for k, v in conf.items())
    if "IllegalArgumentException" in text or "SparkException" in text or "Invalid" in text:
        given = f" (your settings: {settings})" if settings else ""
        return UsageError(f"Spark refused to start with master {master}{given}: {reason}")
    return CecError(f"Spark did not start (master {master}): {reason}")
