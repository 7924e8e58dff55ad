"""What each command's library function returns: frozen dataclasses, one per result.

(Over 400 lines: declarations only, one documented field per line, one file so that
``docs/JSON.md`` and its schema test come from one place.)

* :class:`RunResult` (``cec run pipeline``, and the ``resumed`` run of ``cec recover``),
  with one :class:`PartitionRun` per partition;
* :class:`RecoverResult` (``cec recover``), one :class:`RecoverPartition` per partition;
* :class:`ExtentResult` (``cec inspect extent``), one :class:`ExtentPartition` each;
* :class:`LogReport` (``cec inspect log``), one :class:`LogInfo` per log;
* :class:`ExportResult` (``cec export``).

The CLI renders any of them (``cli/render.py``); ``--json`` is
``dataclasses.asdict`` of the result, fields in the order declared here, every field
always present (``null`` when it does not apply). ``docs/JSON.md`` is generated from
these classes, the docstring under each field included (``cli/schema.py``).

Names: a partition is ``partition``; durations are seconds (``*_s``); wall-clock
times and the logs' event times are int64 microseconds (``*_us``); positions in a log
(``seq``, ``t_c``, ``T``) are plain integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# pydantic (used by cli/schema.py only, never at run time) reads each field's docstring
_DOCS: dict[str, Any] = {"use_attribute_docstrings": True}


def now_us(wall_s: float | None) -> int | None:
    """A ``time.time()`` wall clock value as int64 microseconds."""
    return None if wall_s is None else round(wall_s * 1e6)


# --------------------------------------------------------------------------- recovery


@dataclass(frozen=True)
class Footprint:
    """One open window's newest checkpoint row in the eventual checkpoint."""

    __pydantic_config__ = _DOCS
    key: int | str
    """The window's key."""
    win_start: int
    """The window's start, as the output log's win_start column holds it."""
    kind: str
    """G_open or G_check."""
    t_w: int
    """Input position of the footprint row."""
    out_seq: int
    """Output position of the footprint row."""
    age: int
    """t_c - t_w, in input positions."""


@dataclass(frozen=True)
class Extent:
    """What the backward scan of the output log went through."""

    __pydantic_config__ = _DOCS
    records: int
    """The extent q: output rows from the oldest footprint to the last row."""
    batches: int
    """Log records decoded."""
    bytes: int
    """Their in-memory (Arrow) size, bytes."""
    windows_found: int
    """Open windows found (N_c)."""
    g_open_found: int
    """G_open rows found."""
    g_check_found: int
    """G_check rows found."""
    closed_skipped: int
    """Footprints of windows already closed, skipped."""
    replay_length: int
    """The replay length u = t_c - T, input positions."""
    oldest: list[Footprint]
    """The oldest footprints, oldest first."""


@dataclass(frozen=True)
class Replay:
    """The upstream tuples replayed after T."""

    __pydantic_config__ = _DOCS
    tuples: int
    """Input tuples replayed (counted exactly by a dry run)."""
    applied: int
    """Of these, tuples given to the operator."""
    batches: int
    """Upstream log records read."""
    bytes: int
    """Their size, bytes."""


@dataclass(frozen=True)
class Phase:
    """One phase of a recovery (reconcile, scan, load, replay)."""

    __pydantic_config__ = _DOCS
    name: str
    """reconcile, scan, load or replay."""
    estimated_s: float
    """Estimated wall time, seconds."""
    measured_s: float | None
    """Measured wall time, seconds (null: not run)."""
    cpu_s: float | None
    """Process CPU time of the phase, seconds (null: not run)."""

    @property
    def seconds(self) -> float:
        """The measured time if the phase ran, else the estimate."""
        return self.measured_s if self.measured_s is not None else self.estimated_s


@dataclass(frozen=True)
class Rates:
    """The rate model the estimates come from."""

    __pydantic_config__ = _DOCS
    reconcile_s: float
    """Time of a reconcile, seconds."""
    scan_records_per_s: float
    """Output records scanned per second."""
    load_windows_per_s: float
    """Windows loaded per second."""
    replay_positions_per_s: float
    """Input positions replayed per second."""


@dataclass(frozen=True)
class Recovery:
    """What a recovery of one partition found and did."""

    __pydantic_config__ = _DOCS
    fresh_start: bool
    """Nothing to recover: the operator starts from the beginning of its input."""
    reason: str
    """Why (a sentence)."""
    n_c: int | None
    """Open windows in the eventual checkpoint (N_c)."""
    t_c: int | None
    """Input position of the last output row (the checkpoint's position)."""
    t_c_ts_us: int | None
    """Event time of that row, microseconds."""
    T: int | None
    """Replay start: every input position after T is replayed."""
    next_out_seq: int
    """The output position the resumed operator writes next."""
    resume_after_seq: int | None
    """The input position the resumed operator continues after."""
    extent: Extent | None
    """The extent scanned (null for a fresh start)."""
    replay: Replay
    """The replay."""
    phases: list[Phase]
    """Each phase's time."""
    estimated_s: float
    """All phases, estimated, seconds."""
    measured_s: float
    """All phases, measured, seconds."""
    cpu_s: float
    """All phases, CPU time, seconds."""
    rates: Rates
    """The rate model of the estimates."""


def _extent(raw: dict[str, Any]) -> Extent | None:
    if not raw:
        return None
    return Extent(records=int(raw["records"]), batches=int(raw["batches"]),
                  bytes=int(raw["bytes"]), windows_found=int(raw["windows_found"]),
                  g_open_found=int(raw["g_open_found"]),
                  g_check_found=int(raw["g_check_found"]),
                  closed_skipped=int(raw["closed_skipped"]),
                  replay_length=int(raw["replay_length"]),
                  oldest=[Footprint(**f) for f in raw.get("oldest", [])])


def recovery_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The fields of :class:`Recovery` from ``RecoveryExplain.to_dict()``."""
    return {
        "fresh_start": bool(raw["fresh_start"]), "reason": str(raw["reason"]),
        "n_c": raw.get("n_c"), "t_c": raw.get("t_c"), "t_c_ts_us": raw.get("t_c_ts"),
        "T": raw.get("T"), "next_out_seq": int(raw["next_out_seq"]),
        "resume_after_seq": raw.get("resume_after_seq"),
        "extent": _extent(raw.get("extent") or {}),
        "replay": Replay(**raw["replay"]),
        "phases": [Phase(**ph) for ph in raw.get("phases", [])],
        "estimated_s": float(raw["estimated_s"]), "measured_s": float(raw["measured_s"]),
        "cpu_s": float(raw["cpu_s"]), "rates": Rates(**raw["rates"]),
    }


def recovery_of(raw: dict[str, Any] | None) -> Recovery | None:
    return None if raw is None else Recovery(**recovery_fields(raw))


# --------------------------------------------------------------------------- run


@dataclass(frozen=True)
class PartitionRun:
    """One partition's operator task, as it ended."""

    __pydantic_config__ = _DOCS
    partition: int
    """The partition."""
    pid: int | None
    """The task's process id."""
    attempt: int
    """Spark's attempt number of the task."""
    recovered: Recovery | None
    """What the task recovered when it started (null: a new partition)."""
    in_batches: int
    """Upstream records processed."""
    in_tuples: int
    """Input tuples processed."""
    in_last_seq: int | None
    """The last input position processed."""
    out_rows: int
    """Output rows written."""
    r: int
    """Results (R) written."""
    g_open: int
    """G_open rows written."""
    g_check: int
    """G_check rows written."""
    n_open: int
    """Open windows at the end."""
    q: int
    """The extent q at the end: output rows back to the oldest open window's footprint."""
    u: int
    """The replay length u at the end, input positions."""
    replay_after_seq: int | None
    """The input position a recovery would replay after (upstream retention keeps it)."""
    first_input_at_us: int | None
    """Wall clock time of the first input batch, microseconds since the epoch."""
    process_s: float
    """Time in the operator, seconds."""
    write_s: float
    """Time appending and committing output records, seconds."""
    done: bool
    """The input ended and every result was written."""
    stopped: bool
    """The task stopped early (Ctrl-C, a STOP file)."""
    waiting: str | None
    """What the task was waiting for, if anything."""
    output_segments_trimmed: int
    """Output segments deleted by output retention."""
    started_at_us: int | None
    """Wall clock time the task started, microseconds since the epoch."""
    updated_at_us: int | None
    """Wall clock time of its last counter update, microseconds since the epoch."""


def partition_run(raw: dict[str, Any]) -> PartitionRun:
    """A :class:`PartitionRun` from a task's counters (``TaskCounters.as_dict``)."""
    return PartitionRun(
        partition=int(raw["p"]), pid=raw.get("pid"), attempt=int(raw.get("attempt", 0)),
        recovered=recovery_of(raw.get("recovered")),
        in_batches=int(raw.get("in_batches", 0)), in_tuples=int(raw.get("in_tuples", 0)),
        in_last_seq=raw.get("in_last_seq"), out_rows=int(raw.get("out_rows", 0)),
        r=int(raw.get("r", 0)), g_open=int(raw.get("g_open", 0)),
        g_check=int(raw.get("g_check", 0)), n_open=int(raw.get("n_open", 0)),
        q=int(raw.get("q", 0)), u=int(raw.get("u", 0)),
        replay_after_seq=raw.get("replay_after_seq"),
        first_input_at_us=now_us(raw.get("first_input_at")),
        process_s=float(raw.get("process_s", 0.0)), write_s=float(raw.get("write_s", 0.0)),
        done=bool(raw.get("done")), stopped=bool(raw.get("stopped")),
        waiting=raw.get("waiting"),
        output_segments_trimmed=int(raw.get("output_segments_trimmed", 0)),
        started_at_us=now_us(raw.get("started")), updated_at_us=now_us(raw.get("updated")))


@dataclass(frozen=True)
class RunResult:
    """``cec run pipeline``: how the run ended."""

    __pydantic_config__ = _DOCS
    run_dir: str
    """The run directory (absolute)."""
    partitions: int
    """Number of partitions."""
    completed: bool
    """Every partition consumed its whole input (a bounded source ended)."""
    interrupted: bool
    """Stopped by Ctrl-C (exit status 130; 'cec recover' resumes)."""
    source_rows: int
    """Rows read from the source by this run."""
    ingested_tuples: int
    """Rows written to the upstream logs (after the filter)."""
    operator_tuples: int
    """Input tuples the operators processed."""
    elapsed_s: float
    """Wall time of the run, seconds (Spark start-up excluded)."""
    source_rows_per_s: float | None
    """source_rows / elapsed_s."""
    steady_s: float | None
    """From the first input batch any operator saw to the end, seconds."""
    started_at_us: int
    """Wall clock time the run started, microseconds since the epoch."""
    steady_rows_per_s: float | None
    """source_rows / steady_s."""
    resubmits: int
    """Times the operator job was resubmitted."""
    ingest_s: float | None
    """Wall time of the ingest, seconds (null: it did not finish)."""
    ingest_jobs_s: list[float]
    """Each ingest Spark job's wall time, seconds."""
    ingest_writer_s: dict[str, float]
    """The ingest writers' time by activity, seconds."""
    upstream_segments_trimmed: int
    """Upstream segments deleted by upstream retention."""
    results: int
    """Results (R) written by all partitions."""
    per_partition: list[PartitionRun]
    """Each partition's task."""
    late_rows: int = 0
    """Late rows dropped ([source] late = "drop"), all partitions, committed so far."""
    late_rows_per_partition: list[int] = field(default_factory=list)
    """Late rows dropped in each partition (committed with its upstream log)."""
    warnings: list[str] = field(default_factory=list)
    """What looked wrong about the source when the run was planned (e.g. its time unit)."""


# --------------------------------------------------------------------------- recover


@dataclass(frozen=True)
class Reconcile:
    """What a writable open of a log did to make it consistent."""

    __pydantic_config__ = _DOCS
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

    __pydantic_config__ = _DOCS
    error: str
    """The damage found."""
    reconcile: Reconcile | None
    """What the repairing open cut."""


@dataclass(frozen=True)
class UpstreamRepair:
    """A damaged upstream log cut at its first bad frame (--repair)."""

    __pydantic_config__ = _DOCS
    last_seq: int | None
    """The log's last position after the cut."""
    sealed: bool
    """Whether the log is still sealed."""
    reconcile: Reconcile | None
    """What the repairing open cut."""


@dataclass(frozen=True)
class RecoverPartition:
    """One partition of ``cec recover``: its recovery explained."""

    __pydantic_config__ = _DOCS
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
    T: int | None = None
    """Replay start: every input position after T is replayed."""
    next_out_seq: int | None = None
    """The output position the resumed operator writes next."""
    resume_after_seq: int | None = None
    """The input position the resumed operator continues after."""
    extent: Extent | None = None
    """The extent scanned (null: none)."""
    replay: Replay | None = None
    """The replay (a dry run counts it without running it)."""
    phases: list[Phase] = field(default_factory=list)
    """Each phase's time (a dry run estimates the ones it does not run)."""
    estimated_s: float | None = None
    """All phases, estimated, seconds."""
    measured_s: float | None = None
    """All phases, measured, seconds."""
    cpu_s: float | None = None
    """All phases, CPU time, seconds."""
    rates: Rates | None = None
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


@dataclass(frozen=True)
class RescalePartition:
    """What a rescale did with one partition of the old generation."""

    __pydantic_config__ = _DOCS
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

    __pydantic_config__ = _DOCS
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

    __pydantic_config__ = _DOCS
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


# --------------------------------------------------------------------------- extent


@dataclass(frozen=True)
class TupleCounts:
    """Output rows by type."""

    __pydantic_config__ = _DOCS
    R: int
    """Results."""
    G_open: int
    """G_open rows."""
    G_check: int
    """G_check rows."""


@dataclass(frozen=True)
class ExtentPartition:
    """One partition's eventual checkpoint and its extent."""

    __pydantic_config__ = _DOCS
    partition: int
    """The partition."""
    empty: bool
    """No checkpoint (no output yet, or none as of --at)."""
    reason: str
    """Why it is empty (empty string otherwise)."""
    trimmed_through_seq: int | None
    """Output retention trimmed the log through this position (--at reaches no further)."""
    counts: TupleCounts | None
    """Output rows by type (as of --at)."""
    sealed: bool | None
    """The output log is sealed."""
    n_c: int | None
    """Open windows in the eventual checkpoint (N_c)."""
    T: int | None
    """Replay start: every input position after T would be replayed."""
    t_c: int | None
    """Input position of the last output row."""
    t_c_ts_us: int | None
    """Event time of that row, microseconds."""
    q: int | None
    """The extent q: output rows from the oldest footprint to the last row."""
    u: int | None
    """The replay length u = t_c - T, input positions."""
    extent_bytes: int | None
    """In-memory (Arrow) size of the log records scanned, bytes."""
    g_open_found: int | None
    """G_open rows in the extent."""
    g_check_found: int | None
    """G_check rows in the extent."""
    oldest: list[Footprint]
    """The oldest footprints, oldest first."""
    predicted_recovery_s: float | None = None
    """Predicted recovery time of this extent, seconds: fixed cost + q / EC-load rate + u /
    replay rate (null: nothing to recover)."""
    ec_records_per_s: float | None = None
    """The EC-load rate the prediction uses: extent records read back, reconstructed and
    loaded per second (the task's measurement, else cec's default)."""
    replay_positions_per_s: float | None = None
    """The replay rate the prediction uses: input positions replayed per second."""
    rates_measured: list[str] = field(default_factory=list)
    """Which of fixed, ec, replay were measured (the others are documented defaults)."""
    within_objective: bool | None = None
    """The prediction is within the objective (null: no objective, or nothing to recover)."""
    late_rows: int = 0
    """Late rows of this partition dropped so far ([source] late = "drop")."""


@dataclass(frozen=True)
class ExtentResult:
    """``cec inspect extent``."""

    __pydantic_config__ = _DOCS
    run_dir: str
    """The run directory."""
    at_us: int | None
    """--at: as of this event time, microseconds (null: now)."""
    partitions: list[ExtentPartition]
    """Each partition asked for."""
    rto_s: float | None = None
    """The recovery-time objective ([checkpoint].rto), seconds (null: none)."""
    fixed_s: float | None = None
    """The fixed cost of a restart in the predictions, seconds."""
    fixed_how: str = ""
    """How the fixed cost was found (measured start-ups of this machine, or the default)."""
    warnings: list[str] = field(default_factory=list)
    """What looked wrong about the source when the run was planned (e.g. its time unit)."""


# --------------------------------------------------------------------------- log


@dataclass(frozen=True)
class Segment:
    """One segment file of a log's chain."""

    __pydantic_config__ = _DOCS
    name: str
    """The file name."""
    base_seq: int
    """The first position it may hold."""
    epoch: int
    """The writer epoch that created it."""
    bytes: int
    """File size, bytes."""
    fenced_at: int | None
    """Valid bytes, if a newer epoch fenced the segment there."""


@dataclass(frozen=True)
class Verify:
    """Every record's checksum checked (--verify)."""

    __pydantic_config__ = _DOCS
    ok: bool
    """Every checksum matched."""
    records: int
    """Records checked."""
    elapsed_s: float
    """Time taken, seconds."""


@dataclass(frozen=True)
class LogInfo:
    """One log."""

    __pydantic_config__ = _DOCS
    path: str
    """The log directory."""
    segments: list[Segment]
    """The segments of its chain, in order."""
    epoch: int
    """The newest writer epoch."""
    dead_segments: list[str]
    """Segment files outside the chain."""
    first_seq: int | None
    """The first position held (null: empty or damaged)."""
    last_seq: int | None
    """The last committed position."""
    last_ts_us: int | None
    """Event time of the last committed row, microseconds."""
    sealed: bool | None
    """The writer sealed the log (its input ended)."""
    token: str | None
    """The last committed record's token (the writer's resume point)."""
    schema: list[str] | None
    """The columns, 'name: type'."""
    verify: Verify | None
    """The checksums (null without --verify)."""
    damaged: str | None
    """The damage found (null: none)."""


@dataclass(frozen=True)
class LogReport:
    """``cec inspect log``."""

    __pydantic_config__ = _DOCS
    root: str
    """The run directory or log given."""
    logs: list[LogInfo]
    """Each log (upstream then output, partition by partition)."""
    damaged: list[str]
    """Every damaged log, one sentence each (exit status 3 if any)."""


# --------------------------------------------------------------------------- export


@dataclass(frozen=True)
class ExportResult:
    """``cec export``."""

    __pydantic_config__ = _DOCS
    out: str
    """The file written."""
    format: str
    """csv or parquet."""
    rows: int
    """Result rows written."""
    consumer: str | None
    """The consumer whose unacknowledged results were written, then acknowledged."""
    keys: int
    """Distinct keys among them."""
    window_end: str = "exclusive"
    """'exclusive' (time windows: [window_start, window_end)) or 'inclusive' (count
    windows: the first and last tuple's timestamps, [window_start, window_end])."""


# ---------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class ErrorReport:
    """Any command given ``--json`` that fails: one line of JSON on stderr, nothing on
    stdout, and the exit status (2, 3, 4 or 5) of the error."""

    __pydantic_config__ = _DOCS
    error: str
    """What is wrong, naming the file, offset, field, partition or host (the same
    sentence the command prints without --json)."""
    exit_code: int
    """The process exit status."""
    kind: str
    """The error's class, e.g. SpecError, CorruptLogError, RecoveryError."""


Result = RunResult | RecoverResult | ExtentResult | LogReport | ExportResult
