"""What one operator task reports: its counters, declared once (:class:`TaskCounters`).

The task keeps them, writes them to ``RUN/state/pNNNN.json`` for the progress view and
returns them as JSON through Spark; the driver parses them once (:meth:`from_json`)
into the type and builds the run's report from it. Its own module because the task
(:mod:`cec_spark.run.task`) and the recovery-time objective's per-task model
(:mod:`cec_spark.run.rto`), which the task calls, both take it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cec.errors import CecError
from cec.records import tuple_counts
from cec_spark.report import PartitionRun, now_us, recovery_of

if TYPE_CHECKING:
    from cec.operator import VectorOperator


@dataclass
class TaskCounters:
    """One operator task's counters: its state file ``RUN/state/pNNNN.json`` while it
    runs (:meth:`to_dict`, read by the progress view, the metrics, the upstream trim
    and ``cec inspect``) and, as it ends, its result: :func:`run_partition` returns it,
    the operator job carries it to the driver as JSON (:meth:`to_json`), and the driver
    parses it once (:meth:`from_json`) into the run's
    :class:`cec_spark.report.PartitionRun` (:meth:`partition_run`).

    Times are wall clock seconds since the epoch (``time.time()``) unless said.
    """

    p: int
    """The partition."""
    pid: int = field(default_factory=os.getpid)
    """The Python worker's process id (tests ``kill -9`` it)."""
    attempt: int = 0
    """Spark's attempt number of the task."""
    recovered: dict[str, Any] | None = None
    """What the task recovered as it started (``RecoveryExplain.to_dict``); None: a new
    partition."""
    in_batches: int = 0
    """Upstream records processed."""
    in_tuples: int = 0
    """Input tuples processed."""
    in_last_seq: int | None = None
    """The last input position processed."""
    out_rows: int = 0
    """Output rows written."""
    r: int = 0
    """Results (R) written."""
    g_open: int = 0
    """G_open rows written."""
    g_check: int = 0
    """G_check rows written."""
    n_open: int = 0
    """Open windows at the last report."""
    q: int = 0
    """The extent q at the last report."""
    u: int = 0
    """The replay length u at the last report, input positions."""
    replay_after_seq: int | None = None
    """The upstream position every recovery of this partition resumes after, as of
    ``trim_lag_s`` ago (or since): the ingest may drop upstream segments up to it."""
    watermark_us: int | None = None
    """The operator's watermark at the last report: the last ``W`` it applied, µs of
    event time (windows ending at or before it are closed); None: none yet."""
    first_input_at: float | None = None
    """When the first input batch came."""
    process_s: float = 0.0
    """Seconds inside ``operator.process``/``finish``."""
    write_s: float = 0.0
    """Seconds appending and committing output records."""
    output_commits: int = 0
    """Output commits (one per upstream record, or fewer while a backlog is worked off)."""
    done: bool = False
    """The input ended and every result was written (the output log is sealed)."""
    stopped: bool = False
    """The task ended at a STOP file (Ctrl-C, or the ingest or a newer driver)."""
    waiting: str | None = None
    """What the task waits for before it can run (None: nothing)."""
    output_segments_trimmed: int = 0
    """Output segments deleted by output retention (``[run].output_keep_mb``/``_s``)."""
    recover_started_at: float | None = None
    """When the task began its recovery (:mod:`cec_spark.run.rto`'s start-up)."""
    recovered_at: float | None = None
    """When it ended its recovery."""
    caught_up_at: float | None = None
    """When it had processed again what its upstream log held at the restart."""
    rto: dict[str, Any] | None = None
    """The recovery-time prediction, rates and targets (:meth:`RtoTask.tick`)."""
    started: float = field(default_factory=time.time)
    """When the task started."""
    updated: float = field(default_factory=time.time)
    """When the counters last changed (:meth:`observe`)."""

    def count(self, out: pa.RecordBatch) -> None:
        self.add(counts_of(out))

    def add(self, counts: tuple[int, int, int, int]) -> None:
        """Count output of :func:`counts_of`."""
        rows, r, g_open, g_check = counts
        self.out_rows += rows
        self.r += r
        self.g_open += g_open
        self.g_check += g_check

    def observe(self, op: VectorOperator, replay_after_seq: int | None) -> None:
        """The operator's N, q, u and watermark now and ``replay_after_seq`` (``T``: a
        recovery now would replay the upstream tuples after it)."""
        self.n_open, self.q, self.u = op.n_open, op.q, op.u
        self.watermark_us = op.current_watermark
        self.replay_after_seq = replay_after_seq
        self.updated = time.time()

    def to_dict(self) -> dict[str, Any]:
        """The counters as the state file's JSON object."""
        return dict(self.__dict__)

    def to_json(self) -> str:
        """The task's result as the operator job carries it to the driver."""
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> TaskCounters:
        """:meth:`to_json`'s text as counters (on the driver: once per task)."""
        raw = json.loads(text)
        names = {f.name for f in fields(cls)}
        if not isinstance(raw, dict) or "p" not in raw or not set(raw) <= names:
            raise CecError(f"an operator task returned a result that is not its counters: "
                           f"{text[:200]!r}")
        return cls(**raw)

    def partition_run(self) -> PartitionRun:
        """The task as it ended, in the run's report (wall clocks as microseconds)."""
        return PartitionRun(
            partition=self.p, pid=self.pid, attempt=self.attempt,
            recovered=recovery_of(self.recovered),
            in_batches=self.in_batches, in_tuples=self.in_tuples,
            in_last_seq=self.in_last_seq, out_rows=self.out_rows, r=self.r,
            g_open=self.g_open, g_check=self.g_check, n_open=self.n_open, q=self.q,
            u=self.u, replay_after_seq=self.replay_after_seq,
            first_input_at_us=now_us(self.first_input_at), process_s=self.process_s,
            write_s=self.write_s, done=self.done, stopped=self.stopped,
            waiting=self.waiting, output_segments_trimmed=self.output_segments_trimmed,
            started_at_us=now_us(self.started), updated_at_us=now_us(self.updated),
            watermark_us=self.watermark_us)


def counts_of(out: pa.RecordBatch) -> tuple[int, int, int, int]:
    """An output batch's rows, and the R, G_open and G_check tuples among them (what
    :meth:`TaskCounters.add` counts): a task keeps these, not the batch, until the
    batch is committed."""
    if not out.num_rows:
        return 0, 0, 0, 0
    return (out.num_rows, *tuple_counts(out.column("type").to_numpy()))
