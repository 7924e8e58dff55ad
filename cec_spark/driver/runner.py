"""A driver's turn on a run: start a new run, or resume one, and execute its plan.

* :func:`run_plan` starts the run a plan made (:func:`cec_spark.run.plan.plan_new_run`):
  ``run.toml`` is written and driver number 1 taken before Spark starts, so a run killed
  at any moment after is resumed by ``cec recover``, not left as a directory no command
  accepts; then the session, the ``[filter]`` and slot checks, and the execution.
* :func:`resume_run` resumes a stored run (:func:`cec_spark.run.plan.plan_resume`): the
  ingest goes on from its tokens, every task recovers from its output log.
* :class:`DriverTurn`: the driver's lease ends with how the driver ended (completed,
  stopped, superseded, failed), so a standby tells an end from a death; a run that
  never started is taken back whole.

Running the plan's jobs to their end is :func:`cec_spark.driver.execution.execute`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from cec.errors import CecError, UsageError
from cec.spec.model import is_local_master
from cec_spark.driver.execution import execute
from cec_spark.errors import DriverSupersededError
from cec_spark.ingest.logs import upstream_sealed
from cec_spark.ingest.query import check_filter
from cec_spark.report import RunResult
from cec_spark.run.cluster import SlotWatch, wait_for_slots
from cec_spark.run.plan import RunPlan, pipeline_spec, plan_new_run, plan_resume
from cec_spark.run.probe import probe
from cec_spark.run.session import (
    early_start_pending,
    session_for,
    stop_session,
)
from cec_spark.run.slots import check_local_slots
from cec_spark.rundir.drivers import end_driver, take_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import write_run_text
from cec_spark.watchdog import announce_wait, say

__all__ = ["DriverTurn", "prepare_executors", "resume_run", "run_pipeline", "run_plan"]


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


def prepare_executors(spark: SparkSession, plan: RunPlan) -> SlotWatch:
    """Before any task: enough slots (exit 2 with the numbers), and, on a cluster, every
    executor sees the run directory and the source (exit 2 naming host and path)."""
    sc = spark.sparkContext
    spec, layout = plan.spec, plan.layout
    master = spec.run.effective_master
    slots = wait_for_slots(sc, spec.run.partitions, master, spec.run.executor_wait_s)
    if not is_local_master(master):
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
             on_started: Callable[[RunLayout], None] | None = None,
             on_ended: Callable[[RunResult], None] | None = None) -> RunResult:
    """Start the new run ``plan`` (:func:`cec_spark.run.plan.plan_new_run`): store its
    ``run.toml``, take driver number 1, start Spark, check the filter and the slots, run.

    ``on_started`` is called once ``run.toml`` and the driver's lease exist (the command
    line starts a standby there: ``cec run pipeline --standby``); ``on_ended`` with the
    run's result once it ended (not failed), while the run's own session stops
    (``cec run pipeline --out`` writes its file there; it keeps its own errors: the run
    itself ended as the result says)."""
    layout = plan.layout
    # run.toml before Spark starts (5-20 s): a run killed at any moment after this
    # line is resumed by `cec recover` (or taken over by a standby), not left as a
    # directory no command accepts; the driver's lease from the same moment
    created = not layout.root.exists()
    write_run_text(layout, plan.run_text)
    driver = take_driver(layout)
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
                watch = prepare_executors(spark, plan)
            except UsageError:  # cec's, or the log's (prepare_executors may open the upstream logs)
                turn.unmake(created)  # nothing but run.toml was written: take it back
                raise
            result = turn.done(execute(spark, plan, progress=progress, driver=driver,
                                       watch=watch))
        except BaseException:
            if owned:
                stop_session(spark)
            raise
        _end(spark if owned else None, result, on_ended)
        return result


def _end(spark: SparkSession | None, result: RunResult,
         on_ended: Callable[[RunResult], None] | None) -> None:
    """``spark`` stopped (None: not the run's own) while ``on_ended(result)`` runs: the
    JVM stops (0.1-0.3 s) on a thread while ``--out``'s file is written."""
    if on_ended is None or spark is None:
        if spark is not None:
            stop_session(spark)
        if on_ended is not None:
            on_ended(result)
        return
    failed: list[BaseException] = []

    def stop() -> None:
        try:
            stop_session(spark)
        except BaseException as exc:  # raised below, on the caller's thread
            failed.append(exc)

    stopper = threading.Thread(target=stop, name="cec-session-stop")
    stopper.start()
    try:
        on_ended(result)
    finally:
        stopper.join()
    if failed:
        raise failed[0]


class DriverTurn:
    """A driver's time on a run: its lease (taken with its number,
    :func:`~cec_spark.rundir.drivers.take_driver`) ends with how the driver ended, so that
    a standby watching it tells an end from a death: ``completed``, ``stopped`` (Ctrl-C,
    STOP), ``superseded``, ``failed`` with the exit status
    (:func:`~cec_spark.rundir.drivers.end_driver`)."""

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
        end_driver(self.layout, self.driver, "failed", 2, "the run never started")
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
        end_driver(self.layout, self.driver, outcome, code, reason)


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
    driver = take_driver(plan.layout)  # from here on, an older driver of this run stops
    with DriverTurn(plan.layout, driver) as turn:
        return turn.done(_resume(plan, progress, driver))


def _resume(plan: RunPlan, progress: bool, driver: int) -> RunResult:
    spark, owned = _session(plan, progress)
    try:
        watch = prepare_executors(spark, plan)
        return execute(spark, plan, progress=progress, driver=driver, watch=watch)
    finally:
        if owned:
            stop_session(spark)
