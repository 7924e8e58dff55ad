"""A run's plan: everything a command decides before Spark runs anything, made once.

``cec run pipeline`` reads its spec file once (:func:`pipeline_spec`, with the
command line's overrides), then :func:`plan_new_run` checks the run directory
(``--log-dir``), plans and validates the source and makes the run's settings; a resume
parses the run's ``run.toml`` into a plan (:func:`plan_resume`; ``cec recover`` makes
the plan from the spec and settings it parsed for its own checks; ``--repair`` checks
the file before that, and a rescale's new file is parsed again). The :class:`RunPlan`
is then handed to every later stage: the early Spark start and the session
(``spec.run``), the ``run.toml`` writer (:attr:`RunPlan.run_text`), the operator tasks
(the same text, parsed on the executor instead of each task reading the file), the
ingest (the planned chunks; a stream folder's watcher goes on from the plan's files)
and the progress display. No later stage parses the spec file or ``run.toml`` again, or
plans an unchanged source again. (Every task and ingest writer still reads the run id
in ``run.toml``, :func:`~cec_spark.rundir.access.check_visible`: that read is the check
that its host sees the run the driver created.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cec.errors import UsageError
from cec.spec import PipelineSpec, load_spec
from cec_spark.run.rto import check_objective
from cec_spark.run.slots import check_local_slots, local_slots
from cec_spark.rundir.access import check_owner
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import (
    RunSettings,
    creation_leftover,
    read_run_file,
    run_text,
    settings_for,
)
from cec_spark.source.check import chunk_bytes_for, reports_for
from cec_spark.source.fingerprint import fingerprint
from cec_spark.source.stored import planned_with_stats
from cec_spark.source.types import SourcePlan
from cec_spark.watchdog import say


@dataclass(frozen=True)
class RunPlan:
    """A run as a command resolved it: what every stage of the run reads."""

    spec: PipelineSpec  # validated, with the command line's overrides applied
    settings: RunSettings  # run id, column types, max_tuples, the source's fingerprint
    layout: RunLayout  # the run directory, absolute (every host opens the same one)
    # the planned source; None: not planned (a resumed run's ingest plans it only if
    # it must read the source again: a completed ingest never reads it, it may be gone)
    source: SourcePlan | None = None
    run_dir: str = ""  # the run directory as the user wrote it (for messages)
    # the source's files' sizes and times as they were before ``source`` was planned
    # (:func:`cec_spark.source.stored.file_stats`; (): none, or a file changed while it
    # was planned): the ingest stores the plan with them for a resume
    source_stats: tuple[dict[str, Any], ...] = ()

    @property
    def run_text(self) -> str:
        """The text of the run's ``run.toml`` (:func:`cec_spark.rundir.run_file.run_text`)."""
        return run_text(self.spec, self.settings)

    @property
    def partitions(self) -> int:
        return self.spec.run.partitions


def default_run_dir(spec_path: Path) -> Path:
    """The run directory of a spec run without ``--log-dir``: ``runs/<spec's stem>``."""
    return Path("runs") / spec_path.stem


def pipeline_spec(spec_path: Path | str, *, partitions: int | None = None,
                  master: str | None = None, conf: dict[str, str] | None = None,
                  rto: str | None = None, standby: bool = False) -> PipelineSpec:
    """The spec of ``cec run pipeline``: the file, read once, with the overrides. An
    objective (``rto``) below this machine's floor is refused here, before Spark starts
    (:func:`cec_spark.run.rto.check_objective`; ``standby``: the run will have a warm
    standby, whose takeover is the fixed cost)."""
    spec = load_spec(Path(spec_path)).with_run(partitions=partitions, master=master,
                                               conf=conf).with_rto(rto)
    warning = check_objective(spec, standby=standby)
    if warning is not None:
        say(warning)
    return spec


def plan_new_run(spec: PipelineSpec, spec_path: Path | str,
                 run_dir: Path | str | None = None, *,
                 max_tuples: int | None = None, staged: str | None = None) -> RunPlan:
    """Check everything about a new run that can be checked before anything is written.

    A bad ``--max-tuples``, too few local task slots, a run directory that holds
    anything, a bounded source without its files or columns, a bad row in its first
    chunk or a stream folder that ends before its first file: UsageError (exit 2),
    nothing on disk. The other rows of a bounded source are not read here (its plan
    costs its files, not its rows): the ingest tasks check them. An empty stream
    folder: wait for its first file. The run directory is made absolute, so that every
    host of a cluster opens the same one. ``staged``: the one entry the run directory
    may already hold, the run's own source written there by the caller (the Python API
    stages a DataFrame as ``RUN/source``, :mod:`cec_spark.api`).
    """
    if max_tuples is not None and max_tuples < 0:
        raise UsageError(f"--max-tuples: must be >= 0, got {max_tuples}")
    check_local_slots(spec.run.partitions, spec.run.effective_master)
    run_dir = run_dir if run_dir is not None else default_run_dir(Path(spec_path))
    layout = check_new_run_dir(run_dir, staged=staged)
    # from the files' metadata: the ingest tasks check the rows (Chunk.check)
    chunk_bytes, reports = chunk_bytes_for(spec, max_tuples), reports_for(spec, max_tuples)
    source, stats = planned_with_stats(spec, max_tuples, chunk_bytes, reports)
    if spec.source.kind == "stream-dir" and not source.columns.names:
        raise UsageError(f"{spec.source.path}: the stream folder holds no file yet; the "
                         "first file fixes the column types")
    given = spec.run.ingest_tasks if spec.run.ingest_tasks_given else None
    tasks, why = choose_ingest_tasks(given, slots=local_slots(spec.run.effective_master),
                                     partitions=spec.run.partitions,
                                     cores=os.cpu_count() or 1)
    if tasks != spec.run.ingest_tasks:
        spec = replace(spec, run=replace(spec.run, ingest_tasks=tasks))
    files = source.files or tuple(fingerprint(spec))  # made while planning, or now
    settings = settings_for(spec, source.columns, max_tuples, files,
                            source.warnings + ((why,) if why is not None else ()),
                            chunk_bytes, reports)
    return RunPlan(spec, settings, layout, source, str(run_dir), stats)


#: what the rule of :func:`choose_ingest_tasks` was measured on (docs/PROFILE.md)
INGEST_TASKS_MEASURED = ("on 2 cores, P = 4, 3 M rows: 1 ingest task took 0.79x the wall "
                         "time and 0.87x the CPU of 2 (whose rows cross a Spark shuffle)")


def choose_ingest_tasks(given: int | None, *, slots: int | None, partitions: int,
                        cores: int) -> tuple[int, str | None]:
    """The ingest tasks of a new run, and the sentence that says why (None: nothing to
    say: the user's own number, or the one task every run had before).

    ``given``: ``[run].ingest_tasks`` as written in the spec (None: not written). Else
    the task slots Spark gives (``slots``: a local master's; None on a cluster, whose
    slots are known only once it runs: one task) after the ``partitions`` operator
    tasks, but no more than the cores no operator task needs: a second ingest task
    reads in parallel, but its rows then cross a Spark shuffle, which costs more CPU
    than it saves where the operators need the cores (:data:`INGEST_TASKS_MEASURED`).
    Pure: the caller hands in the slots and the cores.
    """
    if given is not None:
        return given, None
    if slots is None:
        return 1, None
    n = max(1, min(slots - partitions, cores - partitions))
    if n == 1:
        return 1, None
    return n, (f"[run].ingest_tasks is not set: {n} ingest tasks (Spark gives {slots} task "
               f"slots, the {partitions} operator tasks take {partitions}; {n} of the "
               f"{cores} cores are left to the ingest); set ingest_tasks to choose")


def check_new_run_dir(run_dir: Path | str, *, staged: str | None = None) -> RunLayout:
    """The layout of a new run in the run directory ``run_dir`` (``cec run``'s
    ``--log-dir``, made absolute), which must not exist or be an empty directory (but
    for an entry named ``staged``, and what a ``cec run`` killed before its run.toml
    existed left, :func:`~cec_spark.rundir.run_file.creation_leftover`); else
    UsageError."""
    layout = RunLayout(Path(os.path.abspath(run_dir)))
    if layout.exists():
        raise UsageError(f"{run_dir}: already holds a run; resume it with "
                         f"'cec recover --from-log {run_dir}' or choose another --log-dir")
    if layout.root.exists() and not layout.root.is_dir():
        raise UsageError(f"{run_dir}: --log-dir exists and is not a directory")
    if layout.root.exists() and any(p.name != staged and not creation_leftover(layout, p)
                                    for p in layout.root.iterdir()):
        raise UsageError(f"{run_dir}: --log-dir exists and is not empty")
    return layout


def plan_resume(run_dir: Path | str, *, master: str | None = None,
                conf: dict[str, str] | None = None, trust: bool | None = None) -> RunPlan:
    """The plan of a stored run, from its ``run.toml`` (parsed here), with ``master`` and
    ``conf`` over the stored ones for this resume only. ``trust`` not None: first refuse
    a run directory another user owns unless it is True
    (:func:`cec_spark.rundir.access.check_owner`).
    """
    layout = RunLayout(Path(os.path.abspath(run_dir)))
    if trust is not None:
        check_owner(layout, trust)
    spec, settings = read_run_file(layout)
    return RunPlan(spec.with_run(master=master, conf=conf), settings, layout,
                   run_dir=str(run_dir))
