"""The commands: :func:`run` a pipeline, :func:`recover`, :func:`standby`, :func:`export`,
:func:`tail`, inspect, read the :func:`results`; the command line calls these (``cec run
pipeline`` is :func:`load` then :func:`run`; ``cec recover`` reads the stored spec with
:func:`stored_spec` to start Spark while it checks the run).

:func:`run` takes a :class:`~cec_spark.api.builder.Stream` or a spec and runs it through
:mod:`cec_spark.api.launch` (the plan, then the driver: the path of ``cec run
pipeline``), into an ordinary run directory (``run.toml``, logs), which ``cec recover
--from-log``, ``cec export``, ``cec inspect`` and ``spark.read.format("cec")`` work on.

Spark and the runtime are imported by the functions that run something (marked
"lazy"): ``cec export`` and ``cec inspect log`` go through this module and start in
0.6 s instead of 1.7 s without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cec.spec import PipelineSpec
from cec_spark.api.launch import ORIGIN, Run, results, run_spec, run_stream
from cec_spark.read.export import export as _export
from cec_spark.report import ExportResult, ExtentResult, LogReport, RecoverResult, RunResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from cec_spark.api.builder import Stream
    from cec_spark.read.tail import TailState
    from cec_spark.rundir.layout import RunLayout
    from cec_spark.standby.standby import StandbyEnd

__all__ = ["Run", "export", "inspect_extent", "inspect_log", "load", "recover", "results",
           "run", "standby", "stored_spec", "tail"]


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
        on_started: Callable[[RunLayout], None] | None = None,
        on_ended: Callable[[RunResult], None] | None = None) -> Run:
    """Run a pipeline (a :class:`~cec_spark.api.builder.Stream`, or a spec from
    :func:`load`) into ``run_dir``.

    ``run_dir`` must not exist or be empty (default for a spec file: ``runs/STEM``);
    ``max_tuples`` stops after that many source rows; ``progress`` draws the progress
    view on the terminal. ``keep_session``: use this process's SparkSession, or start
    one and leave it running (:mod:`cec_spark.api.session`); False (the command line):
    start the run's own and stop it at the end. Errors are :mod:`cec.errors`' (a bad
    spec or input: exit status 2). ``on_started``: called with the run's layout once
    its ``run.toml`` and driver lease exist (``cec run pipeline --standby`` starts a
    standby there); ``on_ended``: with the run's result once it ended (not failed),
    while its own session stops (``keep_session`` False: ``cec run pipeline --out``
    writes its file there).
    """
    if isinstance(what, PipelineSpec):
        return run_spec(what, spec_path or ORIGIN, run_dir, max_tuples=max_tuples,
                        progress=progress, keep_session=keep_session, on_started=on_started,
                        on_ended=on_ended)
    return run_stream(what, run_dir, max_tuples=max_tuples, progress=progress,
                      keep_session=keep_session)


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


def export(run_dir: Path | str, out: Path | str, fmt: str | None = None,
           consumer: str | None = None, **more: Any) -> ExportResult:
    """``cec export``: every result of the run as one CSV or parquet file (``fmt``
    None: as ``out``'s suffix says, else csv). ``more``: further options of
    :func:`cec_spark.read.export.export`."""
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
    """``cec inspect extent``: q, u, replay_after_seq, N per partition, now or as of
    ``at`` (us)."""
    from cec_spark.read.inspect import inspect_extent as extent  # noqa: PLC0415 - lazy

    return extent(run_dir, partition=partition, at=at)


def inspect_log(path: Path | str, *, verify: bool = False) -> LogReport:
    """``cec inspect log``: segments, records and (``verify``) checksums of the logs."""
    from cec_spark.read.inspect import inspect_log as describe  # noqa: PLC0415 - lazy

    return describe(path, verify=verify)
