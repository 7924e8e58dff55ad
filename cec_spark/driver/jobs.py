"""The driver's two threads of Spark jobs and their retries (:mod:`cec_spark.driver.execution`).

* the **operator job** (:func:`operator_thread`): one job of P long-lived tasks
  (:func:`cec_spark.run.task.run_partition`), resubmitted when it aborts, up to
  :data:`MAX_RESUBMITS` times; every task then finds its output log and recovers. A
  hot standby's operator job, already running (:mod:`cec_spark.standby.hot`, offered
  with :func:`offer_prepared`), is released instead of the first submission when it
  is for the same run, generation and partitions;
* the **ingest** (:func:`ingest_thread`): :func:`cec_spark.ingest.job.ingest`, retried
  the same way (it resumes from the upstream logs' tokens). A stream folder's ingest is
  one long-lived Spark task (:mod:`cec_spark.ingest.stream`, in the slot the run keeps
  for the ingest next to the P operator tasks), or one Spark job per poll where that
  task cannot match the bounded path's semantics.

An error a retry cannot fix (:func:`_fatal`: a user error a task raised) ends the
retries at once. The loop is :func:`_retry`, shared by both threads (a hand-written
loop of a dozen lines: tenacity's retry predicate, stop and before-sleep hooks would
need as many lines to say the same, and would hide the stop event's check).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.sql import SparkSession

from cec.errors import CecError, UsageError
from cec_spark.errors import DriverSupersededError
from cec_spark.ingest.job import ingest
from cec_spark.ingest.query import IngestProgress
from cec_spark.run.counters import TaskCounters
from cec_spark.run.plan import RunPlan
from cec_spark.run.task import run_partition
from cec_spark.rundir.drivers import latest_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.watchdog import say
from storage_log.errors import LogWriteError

__all__ = ["MAX_RESUBMITS", "JobState", "PreparedOperators", "ingest_thread",
           "offer_prepared", "operator_thread", "request_stop", "spark_error"]

MAX_RESUBMITS = 5


def _task_entry(plan: RunPlan, driver: int | None
                ) -> Callable[[Iterable[int]], Iterator[str]]:
    """The operator job's function: Spark partition ``p`` holds the one number ``p``.

    The job is ``sc.parallelize(range(P), P).mapPartitions(...)``, an RDD job: a SQL
    job (``spark.range(P).mapInArrow``, before) cost the driver's JVM about 1 s of
    planning and code generation on the way to the first row, every run. Its workers
    fork from the one daemon the ingest's do (:mod:`cec_spark.run.session`). The
    function carries the run directory, the run id, ``driver`` and the run's
    ``run.toml`` text (:attr:`RunPlan.run_text`: the tasks parse it instead of reading
    the file), not the plan. Each task yields one string: its :class:`TaskCounters` as
    JSON (:meth:`TaskCounters.to_json`).
    """
    run_dir, run_id, run_text = str(plan.layout.root), plan.settings.run_id, plan.run_text

    def run(partitions: Iterable[int]) -> Iterator[str]:
        for p in partitions:
            yield run_partition(run_dir, int(p), run_id, driver, run_text=run_text).to_json()

    return run


class PreparedOperators(Protocol):
    """An operator job already running, its tasks waiting to be released (a hot
    standby's, :class:`cec_spark.standby.hot.HotTasks`)."""

    def matches(self, plan: RunPlan) -> bool:
        """Its tasks can run ``plan`` (the same run, generation and partitions)."""
        ...

    def release(self, driver: int | None) -> list[str]:
        """Release its tasks as driver ``driver``'s; wait for the job's end and return
        each task's result (:meth:`TaskCounters.to_json`). Raises what the job raised."""
        ...

    def cancel(self) -> None:
        """End its tasks (not released)."""
        ...


_PREPARED: list[PreparedOperators] = []


def offer_prepared(job: PreparedOperators | None) -> None:
    """The operator job the next :func:`operator_thread` of this process releases
    instead of submitting one (None: withdraw the offer)."""
    _PREPARED.clear()
    if job is not None:
        _PREPARED.append(job)


def _take_prepared(plan: RunPlan) -> PreparedOperators | None:
    """The offered job, taken, if it can run ``plan``; one that cannot is cancelled."""
    if not _PREPARED:
        return None
    job = _PREPARED.pop()
    if job.matches(plan):
        return job
    job.cancel()
    return None


# Errors of a task that another attempt cannot fix: the job is not resubmitted.
_FATAL = re.compile(r"\b(RunNotVisibleError|DriverSupersededError|LogNotFoundError|"
                    r"InputRangeError|InputOrderError|LogWriteError|WindowMemoryError): (.+)")


def _fatal(exc: BaseException) -> CecError | None:
    """The user error a failed Spark job carries from a task, if retrying cannot help."""
    m = _FATAL.search(str(exc))
    if m is None:
        return None
    if m.group(1) == "DriverSupersededError":
        return DriverSupersededError(m.group(2).strip())
    if m.group(1) == "LogWriteError":  # disk full, read-only: exit 3, once
        return LogWriteError(m.group(2).strip())
    return UsageError(m.group(2).strip())


@dataclass
class JobState:
    """What the two job threads and the driver's main thread share: the stop, the
    ingest's progress, each side's error and end, the operator tasks' last counters."""

    stop: threading.Event = field(default_factory=threading.Event)
    ingest: IngestProgress = field(default_factory=IngestProgress)
    ingest_error: BaseException | None = None
    operator_error: BaseException | None = None
    cluster_error: CecError | None = None
    results: list[TaskCounters] = field(default_factory=list)  # the last job's
    resubmits: int = 0
    operators_done: threading.Event = field(default_factory=threading.Event)
    ingest_done: threading.Event = field(default_factory=threading.Event)


def _retry(job: Callable[[], None], what: str, again: str, stop: threading.Event,
           count: Callable[[], int]) -> BaseException | None:
    """Run ``job`` until it returns, retrying a failure after a growing delay.

    Returns the error that ends it: a user error (cec's, the log's, or one a task
    carried), or the last failure after :data:`MAX_RESUBMITS` retries; None when it
    ran to the end or failed because of a stop. ``count`` counts a retry and returns
    how many there were.
    """
    while True:
        try:
            job()
            return None
        except CecError as exc:  # cec's, or the log's (a refused write, a lock)
            return exc
        except Exception as exc:
            if stop.is_set():
                return None
            fatal = _fatal(exc)
            if fatal is not None:
                return fatal
            n = count()
            if n > MAX_RESUBMITS:
                return exc
            # e.g. a dying worker of a killed run still holds a log's writer lock
            delay = min(2.0 ** n, 10.0)
            say(f"{what} failed ({spark_error(exc)}); {again} in {delay:.0f} s "
                f"({n}/{MAX_RESUBMITS})")
            time.sleep(delay)


def operator_thread(spark: SparkSession, plan: RunPlan, driver: int | None,
                    shared: JobState) -> None:
    """The operator job, resubmitted by :func:`_retry`; its tasks' counters, parsed once,
    go to ``shared.results``."""
    sc = spark.sparkContext
    partitions = plan.partitions

    def job() -> None:
        prepared = _take_prepared(plan)
        if prepared is not None:
            say(f"releasing the hot standby's {partitions} operator tasks (they followed "
                "the output logs; no job to launch, no eventual checkpoint to rebuild)")
            shared.results = [TaskCounters.from_json(r) for r in prepared.release(driver)]
            return
        sc.setJobGroup("cec-operators", "cec operator tasks", interruptOnCancel=True)
        rows = (sc.parallelize(range(partitions), partitions)
                .mapPartitions(_task_entry(plan, driver)).collect())
        shared.results = [TaskCounters.from_json(r) for r in rows]

    def count() -> int:
        shared.resubmits += 1
        return shared.resubmits

    try:
        shared.operator_error = _retry(job, "operator job", "resubmitting", shared.stop,
                                       count)
    finally:
        shared.operators_done.set()


def ingest_thread(spark: SparkSession, plan: RunPlan, driver: int | None,
                  shared: JobState) -> None:
    """The ingest of ``plan`` (:func:`cec_spark.ingest.job.ingest`), retried by
    :func:`_retry`; a failure stops the operator tasks too."""
    layout = plan.layout

    def should_stop() -> bool:  # a stop, or a newer driver took the run
        return shared.stop.is_set() or (driver is not None
                                        and latest_driver(layout) > driver)

    tries = [0]

    def count() -> int:
        tries[0] += 1
        return tries[0]

    try:
        shared.ingest_error = _retry(
            lambda: ingest(spark, plan, shared.ingest, should_stop, driver=driver),
            "ingest job", "retrying", shared.stop, count)
    finally:
        shared.ingest_done.set()
        if shared.ingest_error is not None:
            request_stop(layout, shared,
                         file=not isinstance(shared.ingest_error, DriverSupersededError))


def request_stop(layout: RunLayout, shared: JobState, *, file: bool = True) -> None:
    """Stop this driver's tasks: the STOP file, unless the run is no longer ours (a newer
    driver runs it: its tasks must not see a STOP)."""
    shared.stop.set()
    if file:
        with contextlib.suppress(OSError):
            layout.stop_file.touch()


def spark_error(exc: BaseException) -> str:
    """One line for a failed Spark job: the last line of the Python traceback it carries
    (an RDD job's error has the JVM's stack after it), else its last line naming an
    error that is not a frame of a JVM stack."""
    text = str(exc)
    at = text.rfind("Traceback (most recent call last)")
    if at >= 0:
        for ln in text[at:].splitlines()[1:]:
            if ln.strip() and not ln.startswith((" ", "\t")):
                return ln.strip()[:500]
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith(("at ", "..."))]
    for ln in reversed(lines):
        if "Error" in ln or "Exception" in ln:
            return ln[:500]
    return (lines[-1] if lines else repr(exc))[:500]
