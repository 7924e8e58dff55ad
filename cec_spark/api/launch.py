"""A run started from Python: the plan, then the driver, and the :class:`Run` it returns.

:func:`run_spec` runs a :class:`~cec.spec.PipelineSpec` (a spec file's, or a built one),
:func:`run_stream` a built pipeline (:class:`~cec_spark.api.builder.Stream`, seen here
only through :class:`Pipeline`): each makes the run's plan
(:func:`cec_spark.run.plan.plan_new_run`) and hands it to the driver
(:func:`cec_spark.driver.runner.run_plan`), on the run's own SparkSession (the command
line) or on this process's (:mod:`cec_spark.api.session`). A DataFrame source is first
written once to ``RUN/source`` (:mod:`cec_spark.api.frame`). A problem the run finds
with a built spec's field (a ``[filter]`` Spark cannot analyse) names the builder call
that set it, from the error's ``field`` (:class:`cec.errors.SpecError`).

Both :meth:`Stream.run <cec_spark.api.builder.Stream.run>` and
:func:`cec_spark.api.commands.run` come here; this module imports neither of theirs,
so the builder and the commands do not import each other. Spark and the runtime are
imported by the functions that run something ("lazy").
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cec.errors import SpecError, UsageError
from cec.spec import PipelineSpec
from cec.spec.parse import field_error
from cec_spark.report import ExportResult, ExtentResult, RunResult
from cec_spark.rundir.layout import SOURCE_DIR

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from cec_spark.rundir.layout import RunLayout

__all__ = ["ORIGIN", "Pipeline", "Run", "results", "run_spec", "run_stream"]

#: how a spec built in Python names itself (``run.toml``'s first line, messages)
ORIGIN = "cec_spark.api"


class Pipeline(Protocol):
    """What running a built pipeline needs of it (:class:`cec_spark.api.builder.Stream`)."""

    @property
    def frame(self) -> DataFrame | None:
        """A DataFrame source (None: a file, folder or generator source)."""

    def spec(self, run_dir: Path | str | None = None) -> PipelineSpec:
        """The validated spec."""

    def call(self, slot: str) -> str:
        """The text of the builder call that set ``slot``."""

    def call_of(self, loc: tuple[str | int, ...]) -> str:
        """The text of the builder call that set the spec field at ``loc``."""


@dataclass(frozen=True)
class Run:
    """A run that :func:`cec_spark.api.commands.run` (or ``Stream.run``) made: its
    directory and how it ended."""

    run_dir: Path  # absolute
    outcome: RunResult

    @property
    def completed(self) -> bool:
        """Every partition consumed its whole (bounded) input."""
        return self.outcome.completed

    def results(self, spark: SparkSession | None = None) -> DataFrame:
        """The results as a Spark DataFrame (:func:`results`)."""
        return results(self.run_dir, spark)

    def export(self, out: Path | str, fmt: str | None = None, consumer: str | None = None
               ) -> ExportResult:
        """``cec export`` of this run (:func:`cec_spark.read.export.export`)."""
        from cec_spark.read.export import export  # noqa: PLC0415 - lazy

        return export(self.run_dir, out, fmt, consumer)

    def extent(self, *, partition: int | None = None, at: int | None = None) -> ExtentResult:
        """``cec inspect extent`` of this run (:func:`cec_spark.read.inspect.inspect_extent`)."""
        from cec_spark.read.inspect import inspect_extent  # noqa: PLC0415 - lazy

        return inspect_extent(self.run_dir, partition=partition, at=at)


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


def run_stream(pipeline: Pipeline, run_dir: Path | str | None, *, max_tuples: int | None,
               progress: bool, keep_session: bool = True) -> Run:
    """Run a built pipeline into ``run_dir`` (:func:`cec_spark.api.commands.run`)."""
    if run_dir is None:
        raise UsageError(f"{pipeline.call('source')}...run(): give the run directory")
    try:
        if pipeline.frame is not None:
            return _run_frame(pipeline, pipeline.frame, run_dir, max_tuples=max_tuples,
                              progress=progress)
        return run_spec(_objective(pipeline.spec(), pipeline), ORIGIN, run_dir,
                        max_tuples=max_tuples, progress=progress, keep_session=keep_session,
                        options_call=pipeline.call("options"))
    except SpecError as exc:  # about a field: the same error, naming the call that set it
        if not exc.field:  # (the run finds a [filter] Spark cannot analyse)
            raise
        raise field_error(pipeline.call_of(exc.field), exc.field,
                          exc.problem) from exc.__cause__


def _objective(spec: PipelineSpec, pipeline: Pipeline) -> PipelineSpec:
    """A built spec's recovery-time objective checked as
    :func:`cec_spark.api.commands.load` checks a file's
    (below the floor: a SpecError naming the ``.checkpoint(...)`` call that set it; no
    margin: a warning on stderr)."""
    from cec_spark.run.rto import check_objective  # noqa: PLC0415 - lazy
    from cec_spark.watchdog import say  # noqa: PLC0415 - lazy

    warning = check_objective(replace(spec, origin=pipeline.call("checkpoint")))
    if warning is not None:
        say(warning)
    return spec


def run_spec(spec: PipelineSpec, spec_path: Path | str, run_dir: Path | str | None, *,
             max_tuples: int | None, progress: bool, keep_session: bool,
             options_call: str = ".options()",
             on_started: Callable[[RunLayout], None] | None = None,
             on_ended: Callable[[RunResult], None] | None = None) -> Run:
    """Plan the run, then hand the plan to the driver: on the run's own session
    (``keep_session`` False, the command line) or on this process's (:func:`_run_lent`)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - lazy

    from cec_spark.driver.runner import run_plan  # noqa: PLC0415 - lazy
    from cec_spark.run.plan import plan_new_run  # noqa: PLC0415 - lazy

    if not keep_session:
        plan = plan_new_run(spec, spec_path, run_dir, max_tuples=max_tuples)
        return Run(plan.layout.root, run_plan(plan, progress=progress,
                                              on_started=on_started, on_ended=on_ended))
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


def _run_frame(pipeline: Pipeline, frame: DataFrame, run_dir: Path | str, *,
               max_tuples: int | None, progress: bool) -> Run:
    """Check everything that can be checked, stage the DataFrame, run on its session."""
    from cec_spark.api.frame import stage, staged_frame  # noqa: PLC0415 - lazy
    from cec_spark.api.session import check_workers, on_session  # noqa: PLC0415 - lazy
    from cec_spark.run.plan import check_new_run_dir  # noqa: PLC0415 - lazy
    from cec_spark.run.slots import check_local_slots  # noqa: PLC0415 - lazy

    spark = frame.sparkSession
    spec = on_session(_objective(pipeline.spec(run_dir), pipeline), spark,
                      pipeline.call("options"))
    staged = staged_frame(frame, spec, {k: pipeline.call(k) for k in
                                        ("source", "group_by", "agg")})
    check_local_slots(spec.run.partitions, spec.run.effective_master)
    layout = check_new_run_dir(Path(run_dir))
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
