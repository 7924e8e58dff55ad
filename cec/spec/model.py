"""The parsed spec: frozen dataclasses, what the rest of cec reads.

These are the values a run uses (paths absolute, durations in microseconds, every
default filled in); the TOML a user writes is validated into them by
:mod:`cec.spec.tables` and :mod:`cec.spec.parse`, and written back by
:mod:`cec.spec.dump`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from cec.durations import parse_duration_us
from cec.errors import SpecError, UsageError
from cec.windows import WindowSpec
from storage_log import FSYNC_MODES, FsyncMode

SOURCE_KINDS = ("csv", "parquet", "jsonl", "generator", "stream-dir")
FILE_FORMATS = ("csv", "parquet", "jsonl")
FUNCTIONS = ("count", "sum", "min", "max", "avg")
TIME_UNITS = ("s", "ms", "us", "ns")  # of an integer time field (epoch)
LATE_POLICIES = ("error", "drop")
UPSTREAM_MODES = ("cache", "durable")  # [run] upstream
WINDOW_KINDS = ("count", "time", "session")
MODES = ("none", "open-only", "targets")  # cec.policy.MODES
RESERVED_COLUMNS = ("ts", "seq")
GENERATOR_COLUMNS = ("item_id", "item_price", "item_time")
# key groups (Flink's max parallelism): a key goes to group pmod(xxhash64(key), G), a
# partition owns a range of groups, so a run can be rescaled to at most G partitions.
# Without [run] key_groups a new run takes max(DEFAULT_KEY_GROUPS, partitions).
DEFAULT_KEY_GROUPS = 128
MAX_KEY_GROUPS = 32_768

SourceKind = Literal["csv", "parquet", "jsonl", "generator", "stream-dir"]
FileFormat = Literal["csv", "parquet", "jsonl"]
Function = Literal["count", "sum", "min", "max", "avg"]
Mode = Literal["none", "open-only", "targets"]
TimeUnit = Literal["s", "ms", "us", "ns"]
LatePolicy = Literal["error", "drop"]
UpstreamMode = Literal["cache", "durable"]

__all__ = [
    "DEFAULT_KEY_GROUPS",
    "FILE_FORMATS",
    "FSYNC_MODES",
    "FUNCTIONS",
    "GENERATOR_COLUMNS",
    "LATE_POLICIES",
    "MAX_KEY_GROUPS",
    "MODES",
    "RESERVED_COLUMNS",
    "SOURCE_KINDS",
    "TIME_UNITS",
    "UPSTREAM_MODES",
    "WINDOW_KINDS",
    "AggregateSpec",
    "CheckpointSpec",
    "FileFormat",
    "FsyncMode",
    "Function",
    "GeneratorSpec",
    "LatePolicy",
    "Mode",
    "PipelineSpec",
    "RunSpec",
    "SourceKind",
    "SourceSpec",
    "TimeUnit",
    "UpstreamMode",
    "WindowSpec",
    "default_master",
    "is_local_master",
    "parse_conf",
]


@dataclass(frozen=True)
class GeneratorSpec:
    """The paper's workload: ``item_id`` (uniform over ``keys``), ``item_price``, ``item_time``.

    Row ``i`` is a pure function of ``(seed, i)``: ``item_time = start_ts + i * interval_us``.
    """

    rows: int = 2_000_000
    keys: int = 100_000
    seed: int = 42
    start_ts: int = 1_700_000_000_000_000
    interval_us: int = 10


@dataclass(frozen=True)
class SourceSpec:
    kind: SourceKind
    time_field: str
    path: Path | None = None  # absolute; None for the generator
    format: FileFormat | None = None  # stream-dir: the format of its files
    poll_ms: int = 200  # stream-dir: how often the folder is listed
    chunk_rows: int = 1_000_000  # rows per ingest chunk (a commit with its token)
    generator: GeneratorSpec | None = None
    # an integer time field counts this unit since the epoch (a TIMESTAMP column or
    # ISO-8601 text needs none); every time becomes int64 microseconds at ingest
    time_unit: TimeUnit = "us"
    # a row more than this far (microseconds) behind the largest time of the rows before
    # it in the source is late; rows within it are put back in time order
    allowed_lateness_us: int = 0
    late: LatePolicy = "error"  # what a late row does: stop the run, or is dropped
    # stream-dir: when no new file has arrived for this long (microseconds), the ingest
    # advances the watermark by the wall time passed since the newest row arrived
    # (cec_spark.ingest.watermark); None: off
    idle_close_us: int | None = None

    @property
    def reorders(self) -> bool:
        """The ingest sorts rows within allowed_lateness or drops late ones."""
        return self.allowed_lateness_us > 0 or self.late == "drop"

    @property
    def bounded(self) -> bool:
        return self.kind != "stream-dir"


@dataclass(frozen=True)
class AggregateSpec:
    group_by: str
    field: str | None  # None only for function = "count"
    function: Function
    window: WindowSpec  # cec.windows.CountWindow | TimeWindow (kind, size, slide)


@dataclass(frozen=True)
class CheckpointSpec:
    q_records: int | None = None  # Q as a number of output records
    q_factor: float | None = 2.0  # Q as a multiple of the open windows ("2x")
    u: int = 1_000_000  # replay target: input tuples
    ci_ms: float = 5.0
    cp_ms: float = 100.0
    mode: str = "targets"  # one of MODES (str: cec.policy takes its own Literal)
    # recovery-time objective (us): Q and U are then set by cec.policy.rto_targets from
    # measured recovery rates, and the two fields above are not used
    rto_us: int | None = None
    # Q or U were written in the spec (an objective from the command line may not
    # replace them); not part of the value: run.toml writes every default explicitly
    targets_given: bool = field(default=False, compare=False)

    @property
    def rto_s(self) -> float | None:
        return None if self.rto_us is None else self.rto_us / 1e6

    @property
    def q_text(self) -> str:
        if self.q_records is not None:
            return str(self.q_records)
        return f"{self.q_factor:g}x"


@dataclass(frozen=True)
class RunSpec:
    partitions: int = 4
    master: str | None = None  # None: local[P+2,3] (see default_master)
    fsync: FsyncMode = "always"  # storage_log.FSYNC_MODES
    segment_kb: int = 64 * 1024  # segment size of the logs: the unit of trimming
    trim_upstream: bool = True  # drop upstream segments no recovery can replay again
    trim_lag_s: float = 30.0  # ... as of this long ago (an output tail lost since heals)
    # Spark settings ([run.spark] and --conf), applied over cec's defaults
    spark: tuple[tuple[str, str], ...] = ()
    executor_wait_s: float = 30.0  # how long the start waits for executors to register
    slot_timeout_s: float = 300.0  # how long a run waits for lost task slots to come back
    # output log retention (None: keep everything); never past what recovery needs or a
    # registered consumer (cec export --consumer) has acknowledged
    output_keep_mb: float | None = None
    output_keep_s: float | None = None
    # Spark tasks that read the source and write the upstream logs (1: one task reads
    # and writes all P logs, no shuffle; N > 1: N readers, a shuffle by key partition,
    # min(N, P) writers each owning its logs)
    ingest_tasks: int = 1
    # ingest_tasks was written in the spec; else the run chooses it from the task slots
    # (cec_spark.run.plan.choose_ingest_tasks); not part of the value, like targets_given
    ingest_tasks_given: bool = field(default=False, compare=False)
    # the key groups a new run hashes keys into (None: max(DEFAULT_KEY_GROUPS,
    # partitions)); fixed at creation ([cec] key_groups in run.toml), the largest
    # partition count a rescale may reach. 1..MAX_KEY_GROUPS, >= partitions
    key_groups: int | None = None
    # the upstream logs of a replayable source (every kind but a stream folder): "cache"
    # (written without zstd and, on one host, committed without fsync: a host crash's
    # loss is read again from the source, ARCHITECTURE §5 "Replay") or "durable"
    upstream: UpstreamMode = "cache"

    @property
    def effective_master(self) -> str:
        return self.master or default_master(self.partitions)

    @property
    def new_run_key_groups(self) -> int:
        """The key groups a run created with this spec gets: ``key_groups``, else
        ``max(DEFAULT_KEY_GROUPS, partitions)``. A run reads its own from its run.toml
        (``RunSettings.key_groups``), never this: a rescale changes ``partitions``."""
        return self.key_groups if self.key_groups is not None else \
            max(DEFAULT_KEY_GROUPS, self.partitions)

    @property
    def spark_conf(self) -> dict[str, str]:
        return dict(self.spark)


@dataclass(frozen=True)
class PipelineSpec:
    source: SourceSpec
    aggregate: AggregateSpec
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    run: RunSpec = field(default_factory=RunSpec)
    where: str | None = None
    origin: str = "<spec>"  # the file it was read from, for messages

    @property
    def upstream_cache(self) -> bool:
        """The upstream logs are a cache of a replayable source (``[run] upstream =
        "cache"`` and a source that can be read again: every kind but a stream folder,
        whose files may be removed once read): their records are written without zstd,
        and a damaged or lost part of them is read again from the source."""
        return self.run.upstream == "cache" and self.source.kind != "stream-dir"

    @property
    def upstream_fsync(self) -> FsyncMode:
        """How the ingest commits the upstream logs: a cache on one host (a local master)
        without fsync (every process of the run reads the host's page cache, which only a
        crash of the host loses), else the run's ``fsync`` (on a cluster a commit's fsync
        is also what shows it to the other hosts through the shared file system)."""
        if self.upstream_cache and is_local_master(self.run.effective_master):
            return "never"
        return self.run.fsync

    def with_rto(self, rto: str | None) -> PipelineSpec:
        """The spec with ``--rto`` applied (None: unchanged); SpecError if the spec sets
        ``Q``/``U`` itself or a mode that writes no ``G_check``."""
        if rto is None:
            return self
        us = parse_duration_us(rto)
        if us is None:
            raise SpecError(f"--rto: {rto!r} is not a positive duration like '30s' or '1m'")
        cp = self.checkpoint
        if cp.targets_given:
            raise SpecError(f"--rto: {self.origin}: [checkpoint] sets Q or U; a recovery-time "
                            "objective sets them from the measured recovery rates (remove "
                            "Q and U from the spec, or leave out --rto)")
        if cp.mode != "targets":
            raise SpecError(f"--rto: {self.origin}: [checkpoint].mode = {cp.mode!r} writes no "
                            'G_check, so nothing could keep the recovery time (use "targets")')
        return replace(self, checkpoint=replace(cp, rto_us=us))

    def with_run(self, *, partitions: int | None = None, master: str | None = None,
                 conf: Mapping[str, str] | None = None) -> PipelineSpec:
        """The spec with command-line overrides of ``[run]`` applied (``--conf`` over
        ``[run.spark]``)."""
        run = self.run
        if conf:
            run = replace(run, spark=tuple({**run.spark_conf, **conf}.items()))
        if partitions is not None:
            if partitions < 1:
                raise SpecError(f"--partitions: must be >= 1, got {partitions}")
            if run.key_groups is not None and partitions > run.key_groups:
                raise SpecError(f"--partitions: {partitions} is more than {self.origin}'s "
                                f"[run].key_groups ({run.key_groups}): a partition owns at "
                                "least one key group (raise key_groups, up to "
                                f"{MAX_KEY_GROUPS})")
            if partitions > MAX_KEY_GROUPS:
                raise SpecError(f"--partitions: must be <= {MAX_KEY_GROUPS} (the most key "
                                f"groups a run can have), got {partitions}")
            run = replace(run, partitions=partitions)
        if master is not None:
            run = replace(run, master=master)
        return replace(self, run=run)


def parse_conf(pairs: list[str] | tuple[str, ...], option: str = "--conf") -> dict[str, str]:
    """``key=value`` pairs of a repeatable ``--conf`` option (Spark settings)."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{option}: expected key=value (e.g. spark.driver.memory=4g), "
                             f"got {pair!r}")
        if not key.startswith("spark."):
            raise UsageError(f"{option}: {key!r} is not a Spark setting (they start with "
                             "'spark.')")
        conf[key] = value
    return conf


def is_local_master(master: str) -> bool:
    """A Spark master that runs every task on this host (``local``, ``local[...]``)."""
    return master.strip() == "local" or master.strip().startswith("local[")


def default_master(partitions: int) -> str:
    """``local[P+2,3]``: P slots for the long-lived operator tasks, 2 for the ingest.

    A slot count that does not cover P + ingest starves the ingest (Spark's fair
    scheduler does not preempt); 3 attempts per task before the job aborts, after which
    the driver resubmits (DESIGN §7).
    """
    return f"local[{partitions + 2},3]"
