"""The commands: :func:`run` a pipeline, :func:`recover`, :func:`standby`, :func:`export`,
:func:`tail`, inspect, read the :func:`results`; the command line calls these (``cec run
pipeline`` is :func:`load` then :func:`run`; ``cec recover`` reads the stored spec with
:func:`stored_spec` to start Spark while it checks the run).

:func:`run` takes a :class:`~cec_spark.api.builder.Stream` or a spec, makes the run's
plan (:func:`cec_spark.run.plan.plan_new_run`) and hands it to the driver
(:func:`cec_spark.driver.runner.run_plan`): the path of ``cec run pipeline``, into an
ordinary run directory (``run.toml``, logs), which ``cec recover --from-log``,
``cec export``, ``cec inspect`` and ``spark.read.format("cec")`` work on. A DataFrame
source is first written once to ``RUN/source`` (:mod:`cec_spark.api.frame`). A
problem the run finds with a built spec's field (a ``[filter]`` Spark cannot analyse)
names the builder call that set it, from the error's ``field``
(:class:`cec.errors.SpecError`).

Spark and the runtime are imported by the functions that run something (marked
"lazy"): ``cec export`` and ``cec inspect log`` go through this module and start in
0.6 s instead of 1.7 s without them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cec.errors import SpecError, UsageError
from cec.spec import PipelineSpec
from cec.spec.parse import field_error
from cec_spark.api.builder import ORIGIN, SOURCE_DIR, Stream, slot_of
from cec_spark.read.export import export as _export
from cec_spark.report import ExportResult, ExtentResult, LogReport, RecoverResult, RunResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from cec_spark.read.tail import TailState
    from cec_spark.rundir.layout import RunLayout
    from cec_spark.standby.standby import StandbyEnd

__all__ = ["Run", "export", "inspect_extent", "inspect_log", "load", "recover", "results",
           "run", "standby", "stored_spec", "tail"]


@dataclass(frozen=True)
class Run:
    """A run that :func:`run` made: its directory and how it ended."""

    run_dir: Path  # absolute
    outcome: RunResult

    @property
    def completed(self) -> bool:
        """Every partition consumed its whole (bounded) input."""
        return self.outcome.completed

    def results(self, spark: SparkSession | None = None) -> DataFrame:
        """The results as a Spark DataFrame (:func:`results`)."""
        return results(self.run_dir, spark)

    def export(self, out: Path | str, fmt: str = "csv", consumer: str | None = None
               ) -> ExportResult:
        """``cec export`` of this run (:func:`export`)."""
        return export(self.run_dir, out, fmt, consumer)

    def extent(self, *, partition: int | None = None, at: int | None = None) -> ExtentResult:
        """``cec inspect extent`` of this run (:func:`inspect_extent`)."""
        return inspect_extent(self.run_dir, partition=partition, at=at)


def load(spec_path: Path | str, *, partitions: int | None = None, master: str | None = None,
         conf: dict[str, str] | None = None, rto: str | None = None, **more: Any
         ) -> PipelineSpec:
    """A spec file, read once, with the command line's overrides (``cec run pipeline``:
    ``--partitions``, ``--master``, ``--conf``, ``--rto``); ``more``: further overrides of
    :func:`cec_spark.run.plan.pipeline_spec`. An objective below this machine's floor is a
    SpecError here."""
    from cec_spark.run.plan import pipeline_spec  # noqa: PLC0415 - lazy

    return pipeline_spec(spec_path, partitions=partitions, master=master, conf=conf, rto=rto,
                         **more)


def stored_spec(run_dir: Path | str, *, master: str | None = None,
                conf: dict[str, str] | None = None, trust: bool | None = None
                ) -> PipelineSpec:
    """The spec a resume of ``run_dir`` runs (its ``run.toml``, with the overrides)."""
    from cec_spark.run.plan import plan_resume  # noqa: PLC0415 - lazy

    return plan_resume(run_dir, master=master, conf=conf, trust=trust).spec


# --------------------------------------------------------------------------- run


def run(what: Stream | PipelineSpec, run_dir: Path | str | None = None, *,
        spec_path: Path | str | None = None, max_tuples: int | None = None,
        progress: bool = False, keep_session: bool = True,
        on_started: Callable[[RunLayout], None] | None = None) -> Run:
    """Run a pipeline (a :class:`~cec_spark.api.builder.Stream`, or a spec from
    :func:`load`) into ``run_dir``.

    ``run_dir`` must not exist or be empty (default for a spec file: ``runs/STEM``);
    ``max_tuples`` stops after that many source rows; ``progress`` draws the progress
    view on the terminal. ``keep_session``: use this process's SparkSession, or start
    one and leave it running (:mod:`cec_spark.api.session`); False (the command line):
    start the run's own and stop it at the end. Errors are :mod:`cec.errors`' (a bad
    spec or input: exit status 2). ``on_started``: called with the run's layout once
    its ``run.toml`` and driver lease exist (``cec run pipeline --standby`` starts a
    standby there).
    """
    if isinstance(what, PipelineSpec):
        return _run_spec(what, spec_path or ORIGIN, run_dir, max_tuples=max_tuples,
                         progress=progress, keep_session=keep_session,
                         on_started=on_started)
    pipeline = what
    if run_dir is None:
        raise UsageError(f"{pipeline.call('source')}...run(): give the run directory")
    try:
        if pipeline.frame is not None:
            return _run_frame(pipeline, pipeline.frame, run_dir, max_tuples=max_tuples,
                              progress=progress)
        return _run_spec(_objective(pipeline.spec(), pipeline), ORIGIN, run_dir,
                         max_tuples=max_tuples, progress=progress, keep_session=keep_session,
                         options_call=pipeline.call("options"))
    except SpecError as exc:  # about a field: the same error, naming the call that set it
        if not exc.field:  # (the run finds a [filter] Spark cannot analyse)
            raise
        raise field_error(pipeline.call(slot_of(exc.field)), exc.field,
                          exc.problem) from exc.__cause__


def _objective(spec: PipelineSpec, pipeline: Stream) -> PipelineSpec:
    """A built spec's recovery-time objective checked as :func:`load` checks a file's
    (below the floor: a SpecError naming the ``.checkpoint(...)`` call that set it; no
    margin: a warning on stderr)."""
    from cec_spark.run.rto import check_objective  # noqa: PLC0415 - lazy
    from cec_spark.watchdog import say  # noqa: PLC0415 - lazy

    warning = check_objective(replace(spec, origin=pipeline.call("checkpoint")))
    if warning is not None:
        say(warning)
    return spec


def _run_spec(spec: PipelineSpec, spec_path: Path | str, run_dir: Path | str | None, *,
              max_tuples: int | None, progress: bool, keep_session: bool,
              options_call: str = ".options()",
              on_started: Callable[[RunLayout], None] | None = None) -> Run:
    """Plan the run, then hand the plan to the driver: on the run's own session
    (``keep_session`` False, the command line) or on this process's (:func:`_run_lent`)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - lazy

    from cec_spark.driver.runner import run_plan  # noqa: PLC0415 - lazy
    from cec_spark.run.plan import plan_new_run  # noqa: PLC0415 - lazy

    if not keep_session:
        plan = plan_new_run(spec, spec_path, run_dir, max_tuples=max_tuples)
        return Run(plan.layout.root, run_plan(plan, progress=progress,
                                              on_started=on_started))
    from cec_spark.api.session import on_session  # noqa: PLC0415 - lazy

    spark = SparkSession.getActiveSession()
    return _run_lent(on_session(spec, spark, options_call), spec_path, run_dir, spark,
                     max_tuples=max_tuples, progress=progress)


def _run_lent(spec: PipelineSpec, spec_path: Path | str, run_dir: Path | str | None,
              spark: SparkSession | None, *, max_tuples: int | None, progress: bool,
              staged: str | None = None, workers_checked: bool = False) -> Run:
    """Plan the run, then run the plan on ``spark`` (None: a session started here and
    left running, so that :meth:`Run.results` reads through it)."""
    from cec_spark.api.session import lent  # noqa: PLC0415 - lazy
    from cec_spark.driver.runner import run_plan  # noqa: PLC0415 - lazy
    from cec_spark.run.plan import plan_new_run  # noqa: PLC0415 - lazy

    plan = plan_new_run(spec, spec_path, run_dir, max_tuples=max_tuples, staged=staged)
    with lent(spark, plan.spec, workers_checked=workers_checked):
        return Run(plan.layout.root, run_plan(plan, progress=progress))


def _run_frame(pipeline: Stream, frame: DataFrame, run_dir: Path | str, *,
               max_tuples: int | None, progress: bool) -> Run:
    """Check everything that can be checked, stage the DataFrame, run on its session."""
    from cec_spark.api.frame import stage, staged_frame  # noqa: PLC0415 - lazy
    from cec_spark.api.session import check_workers, on_session  # noqa: PLC0415 - lazy
    from cec_spark.run.plan import check_log_dir  # noqa: PLC0415 - lazy
    from cec_spark.run.slots import check_local_slots  # noqa: PLC0415 - lazy

    spark = frame.sparkSession
    spec = on_session(_objective(pipeline.spec(run_dir), pipeline), spark,
                      pipeline.call("options"))
    staged = staged_frame(frame, spec, {k: pipeline.call(k) for k in
                                        ("source", "group_by", "agg")})
    check_local_slots(spec.run.partitions, spec.run.effective_master)
    layout = check_log_dir(Path(run_dir))
    check_workers(spark)
    created = not layout.root.exists()
    layout.root.mkdir(parents=True, exist_ok=True)
    try:
        if stage(staged, layout.source_dir, spec.source.time_field,
                 spec.source.chunk_rows) == 0:
            raise UsageError(f"{pipeline.call('source')}: the DataFrame has no rows")
        return _run_lent(spec, ORIGIN, layout.root, spark, max_tuples=max_tuples,
                         progress=progress, staged=SOURCE_DIR, workers_checked=True)
    except BaseException:
        if not layout.exists():  # the run never started: take back what we wrote
            shutil.rmtree(layout.source_dir, ignore_errors=True)
            if created:
                with contextlib.suppress(OSError):
                    layout.root.rmdir()
        raise


# --------------------------------------------------------------------------- others


def recover(run_dir: Path | str, *, dry_run: bool = False, progress: bool = False,
            master: str | None = None, conf: dict[str, str] | None = None,
            repair: bool = False, trust: bool = False, partitions: int | None = None,
            **more: Any) -> RecoverResult:
    """``cec recover --from-log RUN``: rebuild every partition's eventual checkpoint and
    resume the run to its end (``dry_run``: only explain); ``partitions``: rescale to
    that many. ``more``: further options of :func:`cec_spark.recover.resume.recover_run`."""
    from cec_spark.recover.resume import recover_run  # noqa: PLC0415 - lazy

    return recover_run(run_dir, dry_run=dry_run, progress=progress, master=master, conf=conf,
                       repair=repair, trust=trust, partitions=partitions, **more)


def standby(run_dir: Path | str, *, master: str | None = None,
            conf: dict[str, str] | None = None, progress: bool = False,
            **more: Any) -> StandbyEnd:
    """``cec standby --from-log RUN``: warm up, watch the run's driver, and take the run
    over when it dies (:func:`cec_spark.standby.standby.standby`; ``more``: its further
    options, ``lease_s`` and ``trust``)."""
    from cec_spark.standby.standby import standby as guard  # noqa: PLC0415 - lazy

    return guard(run_dir, master=master, conf=conf, progress=progress, **more)


def export(run_dir: Path | str, out: Path | str, fmt: str = "csv",
           consumer: str | None = None, **more: Any) -> ExportResult:
    """``cec export``: every result of the run as one CSV or parquet file. ``more``:
    further options of :func:`cec_spark.read.export.export`."""
    return _export(run_dir, out, fmt, consumer, **more)


def tail(run_dir: Path | str, *, fmt: str = "jsonl", from_start: bool = False,
         consumer: str | None = None, **more: Any) -> TailState:
    """``cec tail``: print each result of the run as soon as it is durable, until a bounded
    run completes. ``more``: further options of :func:`cec_spark.read.tail.tail` (``out``,
    ``stop``)."""
    from cec_spark.read.tail import tail as follow  # noqa: PLC0415 - lazy

    return follow(run_dir, fmt=fmt, from_start=from_start, consumer=consumer, **more)


def inspect_extent(run_dir: Path | str, *, partition: int | None = None,
                   at: int | None = None) -> ExtentResult:
    """``cec inspect extent``: q, u, T, N per partition, now or as of ``at`` (us)."""
    from cec_spark.read.inspect import inspect_extent as extent  # noqa: PLC0415 - lazy

    return extent(run_dir, partition=partition, at=at)


def inspect_log(path: Path | str, *, verify: bool = False) -> LogReport:
    """``cec inspect log``: segments, records and (``verify``) checksums of the logs."""
    from cec_spark.read.inspect import inspect_log as describe  # noqa: PLC0415 - lazy

    return describe(path, verify=verify)


def results(run_dir: Path | str, spark: SparkSession | None = None) -> DataFrame:
    """The results of a run as a Spark DataFrame: ``spark.read.format("cec")``
    (:mod:`cec_spark.read.datasource`; the same rows as ``cec export``, plus ``partition``
    and ``seq``), through ``spark`` or this process's active session."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - lazy

    from cec_spark.read.datasource import register  # noqa: PLC0415 - lazy

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise UsageError("results(): no SparkSession in this process; pass spark=")
    register(spark)
    return spark.read.format("cec").load(os.path.abspath(run_dir))
