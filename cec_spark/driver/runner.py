"""The driver: starts a run (or resumes one), runs ingest and operators concurrently.

Two threads of Spark jobs share one SparkSession:

* the **operator job**: one job of P long-lived tasks (:func:`cec_spark.run.task.run_partition`).
  When it aborts (a task exhausted its ``local[N,F]`` attempts, or an executor was
  lost) the driver resubmits it, up to :data:`MAX_RESUBMITS` times; every task then
  finds its output log and recovers;
* the **ingest**: one job per source chunk (:mod:`cec_spark.ingest.job`), resumable.

The main thread draws the progress display and handles Ctrl-C: the first one creates
``RUN/STOP`` (tasks and ingest end at their next batch boundary, every log committed);
a second one cancels the jobs (the logs are still consistent: the log reconciles on
the next open). ``cec recover --from-log RUN`` resumes either way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from cec.errors import CecError, UsageError
from cec_spark.driver.jobs import (
    MAX_RESUBMITS,
    JobState,
    ingest_thread,
    operator_thread,
    request_stop,
    spark_error,
)
from cec_spark.driver.progress import ProgressView
from cec_spark.errors import DriverSupersededError, PipelineError
from cec_spark.ingest.logs import create_logs, late_rows, upstream_sealed
from cec_spark.ingest.query import IngestProgress, check_filter
from cec_spark.report import RunResult
from cec_spark.run.cluster import SlotWatch, wait_for_slots
from cec_spark.run.plan import RunPlan, default_run_dir, pipeline_spec, plan_new_run, plan_resume
from cec_spark.run.probe import probe
from cec_spark.run.session import (
    early_start_pending,
    is_local,
    session_for,
    stop_session,
)
from cec_spark.run.slots import check_local_slots
from cec_spark.rundir.layout import RunLayout
from cec_spark.watchdog import DEFAULT_STALL_S, Watchdog, announce_wait, say

__all__ = ["MAX_RESUBMITS", "STOP_GRACE_S", "DriverTurn", "default_run_dir", "execute",
           "resume_run", "run_pipeline", "run_plan"]

STOP_GRACE_S = 30.0


def _fingerprint(plan: RunPlan, ingest: IngestProgress) -> tuple[object, ...]:
    """What moves while a run makes progress: ingest counters and task counters."""
    tasks = []
    for p in range(plan.partitions):
        st = plan.layout.read_state(p)
        tasks.append((st.get("pid"), st.get("in_tuples"), st.get("out_rows"),
                      st.get("done"), st.get("recovered") is not None))
    return (ingest.chunks_done, ingest.source_rows, ingest.sealed, tuple(tasks))


def _waiting_on(plan: RunPlan, shared: JobState) -> str:
    """A phrase for what a run that makes no progress is waiting on."""
    partitions = plan.partitions
    missing = [p for p in range(partitions) if not plan.layout.read_state(p)]
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
    this driver's number (:meth:`RunLayout.take_driver`): the run stops when a newer
    driver takes over. ``watch`` gives up when lost task slots do not come back. The
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
    """Twice a second until the operator job ends (or the ingest failed): redraw, check
    that the run is still this driver's and the slots are there, and say once what a
    run that stopped moving waits on."""
    layout, stall_s = plan.layout, dog.stall_s
    seen = _fingerprint(plan, shared.ingest)
    told = False
    while not shared.operators_done.wait(0.5):
        if shared.ingest_done.is_set() and shared.ingest_error is not None:
            return
        try:
            layout.check_driver(driver)  # first: a driver woken from a freeze writes nothing
            if watch is not None:
                watch.check()
        except CecError as exc:  # superseded, or the slots did not come back
            shared.cluster_error = exc
            request_stop(layout, shared, file=not isinstance(exc, DriverSupersededError))
            spark.sparkContext.cancelAllJobs()
            return
        view.refresh()
        now = _fingerprint(plan, shared.ingest)
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


def _session(plan: RunPlan, progress: bool) -> tuple[SparkSession, bool]:
    existed = not early_start_pending() and SparkSession.getActiveSession() is not None
    run = plan.spec.run
    spark = announce_wait(f"Spark to start (master {run.effective_master})",
                          lambda: session_for(run.effective_master, run.partitions,
                                              run.spark_conf, write_archive=not existed))
    url = spark.sparkContext.uiWebUrl
    if progress and url:  # with --json, stderr is kept for the one error object
        say(f"Spark UI: {url} (while the run lasts; --conf spark.ui.enabled=false "
            f"turns it off)")
    return spark, not existed


def _prepare(spark: SparkSession, plan: RunPlan) -> SlotWatch:
    """Before any task: enough slots (exit 2 with the numbers), and, on a cluster, every
    executor sees the run directory and the source (exit 2 naming host and path)."""
    sc = spark.sparkContext
    spec, layout = plan.spec, plan.layout
    master = spec.run.effective_master
    slots = wait_for_slots(sc, spec.run.partitions, master, spec.run.executor_wait_s)
    if not is_local(master):
        done = upstream_sealed(layout, spec.run.partitions)  # the source is not read again
        paths = [str(spec.source.path)] if spec.source.path is not None and not done else []
        announce_wait("every executor to check that it sees the run directory",
                      lambda: probe(spark, layout, plan.settings.run_id, paths, slots))
    return SlotWatch(sc, spec.run.partitions, master, spec.run.slot_timeout_s)


def run_pipeline(spec_path: Path | str, run_dir: Path | str | None = None, *,
                 partitions: int | None = None, master: str | None = None,
                 conf: dict[str, str] | None = None,
                 max_tuples: int | None = None, progress: bool = True) -> RunResult:
    """A spec file to a finished run in one call: validate, store ``run.toml``, run to
    the end or Ctrl-C (tests and benchmarks call it; ``cec run pipeline`` goes through
    :func:`cec_spark.api.load` and :func:`cec_spark.api.run`, which end in the same
    :func:`run_plan`).

    Everything that can be wrong with the spec or a bounded source is found before
    anything is written (exit status 2, nothing on disk). ``conf`` is stored with the
    spec's ``[run.spark]``; the run directory is stored absolute, so that every host of
    a cluster opens the same one. (:func:`run_plan` of
    :func:`cec_spark.run.plan.plan_new_run`.)
    """
    spec = pipeline_spec(spec_path, partitions=partitions, master=master, conf=conf)
    return run_plan(plan_new_run(spec, spec_path, run_dir, max_tuples=max_tuples),
                    progress=progress)


def run_plan(plan: RunPlan, *, progress: bool = True,
             on_started: Callable[[RunLayout], None] | None = None) -> RunResult:
    """Start the new run ``plan`` (:func:`cec_spark.run.plan.plan_new_run`): store its
    ``run.toml``, take driver number 1, start Spark, check the filter and the slots, run.

    ``on_started`` is called once ``run.toml`` and the driver's lease exist (the command
    line starts a standby there: ``cec run pipeline --standby``)."""
    layout = plan.layout
    # run.toml before Spark starts (5-20 s): a run killed at any moment after this
    # line is resumed by `cec recover` (or taken over by a standby), not left as a
    # directory no command accepts; the driver's lease from the same moment
    created = not layout.root.exists()
    layout.write_run_text(plan.run_text)
    driver = layout.take_driver()
    for text in plan.settings.warnings:  # nothing is guessed: said, and kept in run.toml
        say(f"warning: {text}")
    with DriverTurn(layout, driver) as turn:
        if on_started is not None:
            on_started(layout)
        try:
            spark, owned = _session(plan, progress)
        except UsageError:  # a setting Spark refused: the run never started
            turn.unmake(created)
            raise
        try:
            try:
                check_filter(spark, plan)
                watch = _prepare(spark, plan)
            except UsageError:  # cec's, or the log's (_prepare may open the upstream logs)
                turn.unmake(created)  # nothing but run.toml was written: take it back
                raise
            return turn.done(execute(spark, plan, progress=progress, driver=driver,
                                     watch=watch))
        finally:
            if owned:
                stop_session(spark)


class DriverTurn:
    """A driver's time on a run: its lease (taken with its number,
    :meth:`RunLayout.take_driver`) ends with how the driver ended, so that a standby
    watching it tells an end from a death: ``completed``, ``stopped`` (Ctrl-C, STOP),
    ``superseded``, ``failed`` with the exit status (:meth:`RunLayout.end_driver`)."""

    def __init__(self, layout: RunLayout, driver: int | None) -> None:
        self.layout, self.driver = layout, driver
        self.result: RunResult | None = None
        self._unmade = False

    def __enter__(self) -> DriverTurn:
        return self

    def done(self, result: RunResult) -> RunResult:
        self.result = result
        return result

    def unmake(self, created: bool) -> None:
        """The run never started (a bad ``[filter]``, a refused Spark setting): remove
        its files, this driver's number and lease included."""
        self._unmade = True
        self.layout.end_driver(self.driver, "failed", 2, "the run never started")
        _unmake(self.layout, created)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if self._unmade:
            return
        outcome, code, reason = "failed", 1, ""
        if exc is None:
            done = self.result is not None and self.result.completed
            outcome, code = ("completed", 0) if done else ("stopped", 0)
        elif isinstance(exc, DriverSupersededError):
            outcome, code = "superseded", exc.exit_code
        elif isinstance(exc, KeyboardInterrupt):
            outcome, code = "stopped", 130
        else:
            code = exc.exit_code if isinstance(exc, CecError) else 1
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        self.layout.end_driver(self.driver, outcome, code, reason)


def _unmake(layout: RunLayout, created: bool) -> None:
    """Remove the run files of a run that never started (a bad ``[filter]``)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(layout.drivers_dir):
            (layout.drivers_dir / name).unlink()
        layout.drivers_dir.rmdir()
    with contextlib.suppress(OSError):
        layout.run_file.unlink()
        layout.backup_file.unlink(missing_ok=True)
        layout.state_dir(0).rmdir()
        if created:
            layout.root.rmdir()


def resume_run(run_dir: Path | str, *, master: str | None = None,
               conf: dict[str, str] | None = None, progress: bool = True,
               driver: int | None = None, plan: RunPlan | None = None) -> RunResult:
    """Resume the run stored in ``run_dir`` (ingest from its tokens, tasks recover).

    ``master`` and ``conf`` override the stored ones for this resume only (a recovery
    may run on another cluster than the run it resumes). ``plan``: the run's plan
    (:func:`cec_spark.run.plan.plan_resume`, overrides applied) when the caller has
    read ``run.toml`` already; else it is read here.
    """
    if plan is None:
        plan = plan_resume(run_dir, master=master, conf=conf)
    check_local_slots(plan.partitions, plan.spec.run.effective_master)
    if driver is not None:  # the caller's turn (cec recover, a standby)
        return _resume(plan, progress, driver)
    driver = plan.layout.take_driver()  # from here on, an older driver of this run stops
    with DriverTurn(plan.layout, driver) as turn:
        return turn.done(_resume(plan, progress, driver))


def _resume(plan: RunPlan, progress: bool, driver: int) -> RunResult:
    spark, owned = _session(plan, progress)
    try:
        watch = _prepare(spark, plan)
        return execute(spark, plan, progress=progress, driver=driver, watch=watch)
    finally:
        if owned:
            stop_session(spark)
