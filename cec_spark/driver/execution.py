"""A plan's execution: the ingest and the operators run concurrently to their end.

Two threads of Spark jobs share one SparkSession (:mod:`cec_spark.driver.jobs`):

* the **operator job**: one job of P long-lived tasks (:func:`cec_spark.run.task.run_partition`).
  When it aborts (a task exhausted its ``local[N,F]`` attempts, or an executor was
  lost) the driver resubmits it, up to :data:`~cec_spark.driver.jobs.MAX_RESUBMITS`
  times; every task then finds its output log and recovers;
* the **ingest**: one job per source chunk (:mod:`cec_spark.ingest.job`), resumable.

The main thread (:func:`execute`) draws the progress display, checks that the run is
still this driver's and that its task slots are there, says what a run that stopped
moving waits on, and handles Ctrl-C: the first one creates ``RUN/STOP`` (tasks and
ingest end at their next batch boundary, every log committed); a second one cancels
the jobs (the logs are still consistent: the log reconciles on the next open).
``cec recover --from-log RUN`` resumes either way. At the end it raises what failed,
or reports the run from the tasks' counters (:class:`~cec_spark.report.RunResult`).

Who calls it: :mod:`cec_spark.driver.runner`, once a driver holds the run and its
session is ready.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any

from pyspark.sql import SparkSession

from cec.errors import CecError
from cec_spark.driver.jobs import (
    JobState,
    ingest_thread,
    operator_thread,
    request_stop,
    spark_error,
)
from cec_spark.driver.progress import ProgressView
from cec_spark.errors import DriverSupersededError, PipelineError
from cec_spark.ingest.logs import create_logs, late_rows
from cec_spark.ingest.query import IngestProgress
from cec_spark.report import RunResult
from cec_spark.run.cluster import SlotWatch
from cec_spark.run.plan import RunPlan
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.drivers import check_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.watchdog import DEFAULT_STALL_S, Watchdog, say

__all__ = ["STOP_GRACE_S", "execute"]

STOP_GRACE_S = 30.0


def _fingerprint(ingest: IngestProgress, states: list[dict[str, Any]]
                 ) -> tuple[object, ...]:
    """What moves while a run makes progress: ingest counters and task counters
    (``states``: the progress view's last look at the state files, no read of its own)."""
    tasks = []
    for st in states:
        tasks.append((st.get("pid"), st.get("in_tuples"), st.get("out_rows"),
                      st.get("done"), st.get("recovered") is not None))
    return (ingest.chunks_done, ingest.source_rows, ingest.sealed, tuple(tasks))


def _waiting_on(plan: RunPlan, shared: JobState) -> str:
    """A phrase for what a run that makes no progress is waiting on."""
    partitions = plan.partitions
    missing = [p for p in range(partitions) if not read_advisory(plan.layout.state_file(p))]
    if missing:
        return (f"the operator tasks of partitions {missing} to start (a run needs "
                f"{partitions} + 1 free Spark task slots; is the cluster full?)")
    if not shared.ingest.sealed and not shared.ingest_done.is_set():
        if plan.spec.source.kind == "stream-dir":
            return f"new files in the stream folder {plan.spec.source.path}"
        total = shared.ingest.chunks_total
        of = "" if total is None else f"/{total}"
        return f"the ingest (the Spark job of chunk {shared.ingest.chunks_done + 1}{of})"
    return "the operator tasks to consume their upstream logs"


def execute(spark: SparkSession, plan: RunPlan, *, progress: bool = True,
            stall_s: float = DEFAULT_STALL_S, driver: int | None = None,
            watch: SlotWatch | None = None) -> RunResult:
    """Run ingest and operators of ``plan``'s run to the end (or a stop).

    The steps: start the two job threads (:func:`_start_jobs`), draw the progress and
    watch the run until the operator job ends (:func:`_watch`), stop the ingest if the
    operators gave up, raise what failed (:func:`_raise_failure`), and report from the
    tasks' counters (:func:`_run_result`).

    When nothing moves for ``stall_s`` seconds it says on stderr what it waits on and
    leaves every thread's stack in ``RUN/watchdog/`` (:class:`Watchdog`). ``driver`` is
    this driver's number (:func:`~cec_spark.rundir.drivers.take_driver`): the run stops
    when a newer driver takes over. ``watch`` gives up when lost task slots do not come back. The
    ingest reads ``plan.source``'s chunks (None: it plans the source only if it must).
    """
    layout = plan.layout
    if layout.stop_file.exists():
        layout.stop_file.unlink()
    create_logs(layout, plan.partitions, plan.spec.run.fsync)
    shared = JobState()
    started, started_at = time.monotonic(), time.time()
    _start_jobs(spark, plan, driver, shared)
    view = ProgressView(layout, plan.partitions, shared.ingest, enabled=progress,
                        objective=plan.spec.checkpoint.rto_us is not None, driver=driver)
    interrupted = _watch(spark, plan, shared, view, stall_s=stall_s, driver=driver,
                         watch=watch)
    if shared.operator_error is not None:  # the operators gave up: stop the ingest too
        request_stop(layout, shared,
                     file=not isinstance(shared.operator_error, DriverSupersededError))
    shared.ingest_done.wait(STOP_GRACE_S)
    shared.operators_done.wait(STOP_GRACE_S)
    elapsed = time.monotonic() - started
    _raise_failure(shared)
    return _run_result(plan, shared, interrupted=interrupted, elapsed=elapsed,
                       started_at=started_at)


def _start_jobs(spark: SparkSession, plan: RunPlan, driver: int | None,
                shared: JobState) -> None:
    """The operator job's thread and the ingest's (:mod:`cec_spark.driver.jobs`)."""
    for name, target in (("cec-operators", operator_thread), ("cec-ingest", ingest_thread)):
        threading.Thread(target=target, args=(spark, plan, driver, shared), name=name,
                         daemon=True).start()


def _watch(spark: SparkSession, plan: RunPlan, shared: JobState, view: ProgressView, *,
           stall_s: float, driver: int | None, watch: SlotWatch | None) -> bool:
    """The main thread until the operator job ends: the progress display, and the first
    Ctrl-C asks for a stop (:func:`_stop_on_interrupt`). True: it was interrupted."""
    previous = signal.getsignal(signal.SIGINT)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with view, Watchdog(plan.layout.watchdog_file(socket.gethostname(), os.getpid()),
                            stall_s) as dog:
            _wait_for_operators(spark, plan, shared, view, dog, driver=driver, watch=watch)
            if shared.operator_error is None and shared.cluster_error is None:
                # the ingest's job returns just after the operators end (execute waits
                # for it next): its last figures, the seal, go into the final metrics
                shared.ingest_done.wait(STOP_GRACE_S)
            view.refresh()
    except KeyboardInterrupt:
        _stop_on_interrupt(spark, plan.layout, shared, view)
        return True
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    return False


def _wait_for_operators(spark: SparkSession, plan: RunPlan, shared: JobState,
                        view: ProgressView, dog: Watchdog, *, driver: int | None,
                        watch: SlotWatch | None) -> None:
    """Twice a second until the operator job ends (or the ingest failed): check that
    the run is still this driver's and the slots are there, refresh the view (which
    looks at the run's files only when due: :meth:`ProgressView.look`), and say once
    what a run that stopped moving waits on."""
    layout, stall_s = plan.layout, dog.stall_s
    seen = _fingerprint(shared.ingest, view.state_list())
    told = False
    while not shared.operators_done.wait(0.5):
        if shared.ingest_done.is_set() and shared.ingest_error is not None:
            return
        try:
            check_driver(layout, driver)  # first: a driver woken from a freeze writes nothing
            if watch is not None:
                watch.check()
        except CecError as exc:  # superseded, or the slots did not come back
            shared.cluster_error = exc
            request_stop(layout, shared, file=not isinstance(exc, DriverSupersededError))
            spark.sparkContext.cancelAllJobs()
            return
        view.refresh()
        now = _fingerprint(shared.ingest, view.state_list())
        if now != seen:
            seen, told = now, False
            dog.progress()
        elif not told and dog.stalled() >= stall_s:
            told = True
            say(f"no progress for {dog.stalled():.0f} s: waiting for "
                f"{_waiting_on(plan, shared)}; every thread's stack is in {dog.evidence}")


def _stop_on_interrupt(spark: SparkSession, layout: RunLayout, shared: JobState,
                       view: ProgressView) -> None:
    """Ctrl-C: STOP, then wait for every partition to commit; a second Ctrl-C (or
    :data:`STOP_GRACE_S`) cancels the jobs."""
    request_stop(layout, shared)
    view.note("stopping: waiting for every partition to commit (Ctrl-C again to cancel)")
    try:
        shared.operators_done.wait(STOP_GRACE_S)
        shared.ingest_done.wait(STOP_GRACE_S)
    except KeyboardInterrupt:
        pass
    if not (shared.operators_done.is_set() and shared.ingest_done.is_set()):
        spark.sparkContext.cancelAllJobs()


def _raise_failure(shared: JobState) -> None:
    """Raise what ended the run early: the cluster, the ingest, the operator job (a
    user error as it is, anything else as a :class:`PipelineError`)."""
    if shared.cluster_error is not None:
        raise shared.cluster_error
    if shared.ingest_error is not None:
        err = shared.ingest_error
        if isinstance(err, CecError):
            raise err
        raise PipelineError(f"ingest failed: {spark_error(err)}") from err
    if isinstance(shared.operator_error, CecError):
        raise shared.operator_error
    if shared.operator_error is not None:
        raise PipelineError(f"operator job failed {shared.resubmits} times: "
                            f"{spark_error(shared.operator_error)}") from shared.operator_error


def _run_result(plan: RunPlan, shared: JobState, *, interrupted: bool, elapsed: float,
                started_at: float) -> RunResult:
    """The run's report, from the tasks' counters and the ingest's; a completed run's
    STOP file is removed."""
    layout, partitions = plan.layout, plan.partitions
    tasks = sorted(shared.results, key=lambda c: c.p)
    completed = (not interrupted and len(tasks) == partitions
                 and all(c.done for c in tasks))
    if completed and layout.stop_file.exists():
        layout.stop_file.unlink()
    rows = shared.ingest.source_rows
    # steady: from the first input batch any operator saw to the end (no start-up)
    firsts = [c.first_input_at for c in tasks if c.first_input_at]
    steady_s = time.time() - min(firsts) if firsts else None
    late = late_rows(layout, partitions)  # committed with the upstream logs: exact
    ingest = shared.ingest
    return RunResult(
        run_dir=str(layout.root),
        partitions=partitions,
        completed=completed,
        interrupted=interrupted,
        source_rows=rows,
        ingested_tuples=ingest.tuples,
        operator_tuples=sum(c.in_tuples for c in tasks),
        elapsed_s=round(elapsed, 3),
        source_rows_per_s=round(rows / elapsed, 1) if elapsed > 0 else None,
        steady_s=None if steady_s is None else round(steady_s, 3),
        started_at_us=int(started_at * 1e6),
        steady_rows_per_s=round(rows / steady_s, 1) if steady_s else None,
        resubmits=shared.resubmits,
        ingest_s=None if ingest.finished is None
        else round(ingest.finished - ingest.started, 3),
        ingest_jobs_s=[round(x, 3) for x in ingest.job_seconds],
        ingest_writer_s={k: round(v, 3) for k, v in ingest.writer_s.items()},
        upstream_segments_trimmed=ingest.trimmed_segments,
        results=sum(c.r for c in tasks),
        per_partition=[c.partition_run() for c in tasks],
        late_rows=sum(late), late_rows_per_partition=late,
        warnings=list(plan.settings.warnings),
    )
