"""What ``cec recover`` returns: per partition, its reconcile, repair and rescale.

The driver of ``cec recover`` only reconciles the logs; each resumed operator task
rebuilds its partition's eventual checkpoint and replays, and reports it
(``PartitionRun.recovered``): :func:`explained_by_tasks` makes each partition's line
of the recovery from the driver's reconcile and its task's explain.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cec_spark.report.common import JSON_DOCS
from cec_spark.report.run import PartitionRun, RunResult
from recovery.checkpoint import ExtentMetrics
from recovery.explain import Phase, RateModel, RecoveryExplain
from recovery.upstream import ReplayStats


@dataclass(frozen=True)
class Reconcile:
    """What a writable open of a log did to make it consistent."""

    __pydantic_config__ = JSON_DOCS
    bytes_cut: int
    """Bytes cut from the end (a torn write, or damage with --repair)."""
    cut_at: str | None
    """(segment file, byte offset) of the cut."""
    cut_reason: str | None
    """The check that failed first."""
    segments_removed: list[str]
    """Segment files removed."""
    records_indexed: int
    """Committed records that were not in the index."""
    entries_dropped: int
    """Index entries past the committed end."""
    rebuilt: bool
    """The index was (re)built from the segments."""
    rebuild_reason: str | None
    """Why."""


def reconcile_of(report: Any) -> Reconcile | None:
    """A :class:`Reconcile` from a log's ``ReconcileReport`` (None stays None)."""
    if report is None:
        return None
    return Reconcile(bytes_cut=int(report.bytes_cut),
                     cut_at=None if report.cut_at is None else str(report.cut_at),
                     cut_reason=report.cut_reason,
                     segments_removed=[str(s) for s in report.segments_removed],
                     records_indexed=int(report.records_indexed),
                     entries_dropped=int(report.entries_dropped),
                     rebuilt=bool(report.rebuilt), rebuild_reason=report.rebuild_reason)


@dataclass(frozen=True)
class OutputRepair:
    """A damaged output log cut at its first bad record (recovery writes it again)."""

    __pydantic_config__ = JSON_DOCS
    error: str
    """The damage found."""
    reconcile: Reconcile | None
    """What the repairing open cut."""


@dataclass(frozen=True)
class UpstreamRepair:
    """A damaged upstream log cut at its first bad frame (--repair)."""

    __pydantic_config__ = JSON_DOCS
    last_seq: int | None
    """The log's last position after the cut."""
    sealed: bool
    """Whether the log is still sealed."""
    reconcile: Reconcile | None
    """What the repairing open cut."""


@dataclass(frozen=True)
class RecoverPartition:
    """One partition of ``cec recover``: its recovery explained.

    The fields from ``fresh_start`` to ``rates`` are its RecoveryExplain's, null where
    none was made (no output log yet, a dry run that cannot read a log, a partition
    that the resumed run rebuilds).
    """

    # (docs/JSON.md is generated from these docstrings.) Since issue 38 item 1 the
    # explain of a partition the resumed run rebuilt is its task's report
    # (explained_by_tasks); null stays for a sealed log and a task that did not report.

    __pydantic_config__ = JSON_DOCS
    partition: int
    """The partition."""
    fresh_start: bool | None
    """Nothing to recover (null: a dry run could not tell)."""
    reason: str
    """Why, or what was done (a sentence; empty if nothing to say)."""
    n_c: int | None = None
    """Open windows in the eventual checkpoint (N_c)."""
    t_c: int | None = None
    """Input position of the last output row (the checkpoint's position)."""
    t_c_ts_us: int | None = None
    """Event time of that row, microseconds."""
    replay_after_seq: int | None = None
    """Replay start (the paper's T): every input position after it is replayed."""
    next_out_seq: int | None = None
    """The output position the resumed operator writes next (it continues with the
    input positions after t_c)."""
    extent: ExtentMetrics | None = None
    """The extent scanned (null: none)."""
    replay: ReplayStats | None = None
    """The replay (a dry run counts it without running it)."""
    phases: tuple[Phase, ...] = ()
    """Each phase's time (a dry run estimates the ones it does not run)."""
    estimated_s: float | None = None
    """All phases, estimated, seconds."""
    measured_s: float | None = None
    """All phases, measured, seconds."""
    cpu_s: float | None = None
    """All phases, CPU time, seconds."""
    rates: RateModel | None = None
    """The rate model of the estimates."""
    sealed: bool | None = None
    """The output log is sealed (the partition had finished)."""
    reconcile: Reconcile | None = None
    """What reconciling the output log cut or rebuilt."""
    repaired: OutputRepair | None = None
    """The output log was damaged and cut (recovery regenerates what was cut)."""
    upstream_repaired: UpstreamRepair | None = None
    """The upstream log was damaged and cut (--repair)."""
    refill: bool = False
    """Rebuilt by the resumed run once the ingest has read the cut rows again."""
    recover_s: float | None = None
    """Wall time of this partition's recovery, seconds."""
    # its task's (all phases, measured), else the driver's reconcile

    @classmethod
    def explained(cls, partition: int, explain: RecoveryExplain,
                  **more: Any) -> RecoverPartition:
        """Partition ``partition``'s recovery as ``explain`` says, with ``more``."""
        e = explain
        return cls(partition=partition, fresh_start=e.fresh_start, reason=e.reason,
                   n_c=e.n_c, t_c=e.t_c, t_c_ts_us=e.t_c_ts_us,
                   replay_after_seq=e.replay_after_seq, next_out_seq=e.next_out_seq,
                   extent=e.extent, replay=e.replay, phases=e.phases,
                   estimated_s=e.estimated_s, measured_s=e.measured_s, cpu_s=e.cpu_s,
                   rates=e.rates, **more)


def explained_by_tasks(parts: list[RecoverPartition],
                       resumed: RunResult | None) -> list[RecoverPartition]:
    """Each partition of a recovery as the driver reconciled it (``parts``), with what
    its resumed operator task recovered (``resumed``'s ``per_partition``): the task's
    explain where it made one; a fresh start where its output log held nothing; the
    driver's line as it is where nothing was left to recover (no output log, a sealed
    one) or the task did not report (an interrupted run; no run at all: ``parts``)."""
    if resumed is None:
        return parts
    tasks: dict[int, PartitionRun] = {t.partition: t for t in resumed.per_partition}
    return [_by_task(e, tasks.get(e.partition)) for e in parts]


def _by_task(e: RecoverPartition, task: PartitionRun | None) -> RecoverPartition:
    if e.fresh_start is not None:  # no output log, or a sealed one: nothing rebuilt
        return e
    if task is None:
        return replace(e, reason="its operator task did not report its recovery (the "
                       "run ended first)")
    more: dict[str, Any] = {"reconcile": e.reconcile, "repaired": e.repaired,
                            "upstream_repaired": e.upstream_repaired, "refill": e.refill}
    if task.recovered is None:  # the task found nothing to recover
        return replace(e, fresh_start=True, reason="nothing to recover: its output log "
                       "holds no record")
    ex = task.recovered
    return RecoverPartition.explained(e.partition, ex, sealed=False,
                                      recover_s=ex.measured_s, **more)


@dataclass(frozen=True)
class RescalePartition:
    """What a rescale did with one partition of the old generation."""

    __pydantic_config__ = JSON_DOCS
    partition: int
    """The old partition."""
    state: str
    """drained (processed its input up to the cut), ahead (its output went past the
    cut: the rows after end_seq are not results), sealed (done; nothing moves) or
    empty."""
    t_c: int | None
    """Input position of its output's last row before the rescale (null: no row)."""
    end_seq: int
    """Its last output seq that belongs to the run (-1: none)."""
    drained_tuples: int
    """Upstream tuples processed after t_c up to the cut."""
    windows: int
    """Its open windows as of the cut (handed to the new partitions)."""


@dataclass(frozen=True)
class RescaleResult:
    """``cec recover --partitions P'``: the run's partitions changed at a cut."""

    __pydantic_config__ = JSON_DOCS
    run_dir: str
    """The run directory (absolute)."""
    from_partitions: int
    """Partitions before."""
    to_partitions: int
    """Partitions after."""
    generation: int
    """The new generation (its logs: output/gNNNN/, upstream/gNNNN/)."""
    cut: int
    """C: every input tuple at or before this seq is in the old generation."""
    chunk: int
    """The source chunk that ends at the cut (-1: none)."""
    dry_run: bool
    """Explained only: nothing written."""
    old: list[RescalePartition]
    """Each old partition."""
    windows_per_partition: list[int]
    """Open windows handed to each new partition."""

    def lines(self) -> list[str]:
        moved = ", ".join(f"p{p}: {n}" for p, n in enumerate(self.windows_per_partition))
        verb = "would rescale" if self.dry_run else "rescaled"
        return [f"{verb} from {self.from_partitions} to {self.to_partitions} partitions "
                f"(generation {self.generation}) at the cut C = seq {self.cut} (source "
                f"chunk {self.chunk})", f"open windows per new partition: {moved or 'none'}"]


@dataclass(frozen=True)
class RecoverResult:
    """``cec recover``: every partition's recovery, then the resumed run."""

    __pydantic_config__ = JSON_DOCS
    run_dir: str
    """The run directory (absolute)."""
    dry_run: bool
    """Explained only: nothing reconciled, recovered or resumed."""
    partitions: list[RecoverPartition]
    """Each partition's recovery."""
    repairs: list[str]
    """What --repair repaired (one sentence each; also on stderr)."""
    resumed: RunResult | None
    """The resumed run (null for a dry run)."""
    would: list[str] = field(default_factory=list)
    """A dry run: what a recover would do and why, one sentence per partition, then one
    for the run (empty when not a dry run)."""
    rescale: RescaleResult | None = None
    """The rescale done (or, dry run, planned) before the recovery (--partitions)."""
