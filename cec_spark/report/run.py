"""What ``cec run pipeline`` returns (and the run that ``cec recover`` resumes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cec_spark.report.common import JSON_DOCS
from cec_spark.report.read import ExportResult
from recovery.explain import RecoveryExplain


@dataclass(frozen=True)
class PartitionRun:
    """One partition's operator task, as it ended."""

    __pydantic_config__ = JSON_DOCS
    partition: int
    """The partition."""
    pid: int | None
    """The task's process id."""
    attempt: int
    """Spark's attempt number of the task."""
    recovered: RecoveryExplain | None
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
    """The input position a recovery would replay after (the paper's T; upstream
    retention keeps it)."""
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
    watermark_us: int | None = None
    """The last watermark the operator applied (event time, microseconds; null: none
    above its own tuples' times yet). Its event time is the larger of this and the time
    of its last tuple (``cec inspect extent`` shows that)."""


@dataclass(frozen=True)
class RunResult:
    """``cec run pipeline``: how the run ended."""

    __pydantic_config__ = JSON_DOCS
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
    export: ExportResult | None = None
    """The results written by ``--out`` once the run ended (as ``cec export``); null:
    no ``--out``, or the run was interrupted."""
