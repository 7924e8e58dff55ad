"""What the read commands return: ``cec inspect extent``, ``cec inspect log``, ``cec export``."""

from __future__ import annotations

from dataclasses import dataclass, field

from cec_spark.report.common import JSON_DOCS
from recovery.checkpoint import Footprint


@dataclass(frozen=True)
class TupleCounts:
    """Output rows by type."""

    __pydantic_config__ = JSON_DOCS
    R: int
    """Results."""
    G_open: int
    """G_open rows."""
    G_check: int
    """G_check rows."""


@dataclass(frozen=True)
class ExtentPartition:
    """One partition's eventual checkpoint and its extent."""

    __pydantic_config__ = JSON_DOCS
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
    replay_after_seq: int | None
    """Replay start (the paper's T): every input position after it would be replayed."""
    t_c: int | None
    """Input position of the last output row."""
    t_c_ts_us: int | None
    """Event time of that row, microseconds."""
    q: int | None
    """The extent q: output rows from the oldest footprint to the last row."""
    u: int | None
    """The replay length u = t_c - replay_after_seq, input positions."""
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
    ingest_watermark_us: int | None = None
    """The ingest's watermark W, event time, microseconds: every row of the partition
    with ts < W has been released to its upstream log (the wm of the log's last commit
    token; null: none yet, an older run, or an --at before it or the log's last row)."""
    operator_watermark_us: int | None = None
    """The event time the partition's operator has reached, microseconds: the larger of
    the last watermark it applied and its last tuple's time. Its time windows ending at
    or before it are closed, and its sessions whose last + gap is before it; count
    windows do not close on a watermark (null: none yet, or an --at before it or the
    log's last row)."""
    operator_behind_s: float | None = None
    """How far the operator's watermark is behind the ingest's, seconds (null unless
    both are known)."""
    watermark: str | None = None
    """The two watermarks as a person reads them, e.g. '2026-11-27 05:07:24.100 UTC
    (ingest), operator at 05:07:23.900, 0.2 s behind' (null: neither is known)."""


@dataclass(frozen=True)
class ExtentResult:
    """``cec inspect extent``."""

    __pydantic_config__ = JSON_DOCS
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
    standbys_ready: int = 0
    """Warm standbys (cec standby) ready to take the run over now: with one, a
    recovery's fixed cost is a takeover's, not a restart's."""
    standbys_hot: int = 0
    """Of them, hot ones: an operator task of the standby follows every output log,
    its eventual checkpoint loaded, and is released at a takeover (no job launched,
    no checkpoint rebuilt)."""
    standby_behind_records: int | None = None
    """The fewest output records a hot standby had still to read at its last report
    (about every second); null: no hot standby."""


# --------------------------------------------------------------------------- log


@dataclass(frozen=True)
class Segment:
    """One segment file of a log's chain."""

    __pydantic_config__ = JSON_DOCS
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

    __pydantic_config__ = JSON_DOCS
    ok: bool
    """Every checksum matched."""
    records: int
    """Records checked."""
    elapsed_s: float
    """Time taken, seconds."""


@dataclass(frozen=True)
class LogInfo:
    """One log."""

    __pydantic_config__ = JSON_DOCS
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

    __pydantic_config__ = JSON_DOCS
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

    __pydantic_config__ = JSON_DOCS
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
