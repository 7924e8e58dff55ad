"""The ingest's writer: the ``mapInArrow`` function that appends a job's rows to the
upstream logs and commits them with chunk tokens; the upstream logs' creation, seal,
trim and the resume point their tokens give (:mod:`cec_spark.ingest.job`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark import TaskContext

from cec.errors import CecError
from cec.spec import PipelineSpec
from cec_spark.rundir.layout import RunLayout, value_column
from cec_spark.source.order import LATE
from cec_spark.source.types import Chunk
from storage_log.log import StreamLog

PART = "__cec_part"

JOB_PROPERTY = "cec.ingest.chunks"  # the chunks of the running ingest job (JSON)


def _job_chunks() -> list[Chunk]:
    """On an executor: the chunks of the ingest job this task belongs to.

    A file source's query is built once per ingest and run once per job
    (:class:`IngestQuery`); the job's chunks travel as a Spark local property of the
    driver thread, which Spark hands to every task (and every retry) of that job.
    """
    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(JOB_PROPERTY) if ctx is not None else None
    if not raw:
        raise CecError(f"ingest: the task carries no chunk list (Spark local property "
                       f"{JOB_PROPERTY} unset): a query of this ingest was run outside "
                       "IngestQuery.run")
    return [Chunk.from_json(text) for text in json.loads(raw)]


def _token(chunk: Chunk, late: int = 0) -> bytes:
    """A log's commit token after ``chunk``: the chunk, the source rows through it, the
    seq its emitted rows end at, and the late rows of this log's partition so far
    (committed with the rows, so the count is exact after a crash)."""
    return json.dumps({"chunk": chunk.index, "next_seq": chunk.next_seq,
                       "seq_end": chunk.emit_end, "late": late}).encode()


def token_fields(raw: bytes | None) -> dict[str, int]:
    """A token's fields (empty for none or an unreadable one)."""
    if not raw:
        return {}
    try:
        got = json.loads(raw.decode())
        return {k: int(v) for k, v in got.items() if isinstance(v, int)}
    except (ValueError, AttributeError, UnicodeDecodeError):
        return {}


def late_rows(layout: RunLayout, partitions: int) -> list[int]:
    """The late rows dropped in each partition so far (committed; 0 before any commit)."""
    out = []
    for p in range(partitions):
        path = layout.upstream(p)
        if not path.exists():
            out.append(0)
            continue
        with StreamLog.open(path) as log:
            out.append(token_fields(log.last_token()).get("late", 0))
    return out


def read_token(raw: bytes | None) -> int:
    """The last chunk a token says was committed, -1 for none."""
    if not raw:
        return -1
    try:
        return int(json.loads(raw.decode())["chunk"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return -1


@dataclass(frozen=True)
class WriterConfig:
    root: str
    partitions: int
    fsync: str
    key_column: str
    value_column: str
    segment_bytes: int = 64 << 20
    trim: bool = True
    run_id: str | None = None
    driver: int | None = None

    @classmethod
    def for_run(cls, spec: PipelineSpec, layout: RunLayout, run_id: str | None,
                driver: int | None = None) -> WriterConfig:
        return cls(str(layout.root), spec.run.partitions, spec.run.fsync,
                   spec.aggregate.group_by, value_column(spec),
                   segment_bytes=spec.run.segment_kb << 10, run_id=run_id, driver=driver,
                   # a committed output record may vanish in a machine crash without
                   # fsync; recovery would then replay from before the trimmed point
                   trim=spec.run.trim_upstream and spec.run.fsync == "always")


def open_upstream(cfg: WriterConfig, p: int) -> StreamLog:
    """Partition ``p``'s upstream log for writing; only the driver creates logs."""
    return StreamLog.open(RunLayout(Path(cfg.root)).upstream(p), writable=True,
                          create=False, fsync=cfg.fsync, segment_bytes=cfg.segment_bytes)


def trim_upstream(layout: RunLayout, logs: list[StreamLog | None]) -> int:
    """Drop upstream segments below what every recovery of their partition replays.

    Each operator task reports ``replay_after_seq`` in its state file
    (:class:`cec_spark.run.task.ReplayFloor`); a segment whose records all lie at or
    before it is never read again. A missing or unreadable report trims nothing.
    Returns the number of segments deleted.
    """
    dropped = 0
    for p, log in enumerate(logs):
        if log is None:  # another writer's log
            continue
        floor = layout.read_state(p).get("replay_after_seq")
        if isinstance(floor, int) and not isinstance(floor, bool) and floor >= 0:
            dropped += log.trim(before_seq=floor + 1)
    return dropped


def _chunk_writer(cfg: WriterConfig, chunks: list[Chunk] | None, writers: int = 1
                  ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function that writes consecutive chunks into upstream logs.

    With one writer it writes all P logs; with ``writers`` > 1, Spark partition ``w``
    (the task's partition id) owns the logs ``p`` with ``p % writers == w`` and must
    receive exactly their rows, in ``seq`` order (:func:`run_chunks` routes and sorts).
    With ``chunks`` None they are the job's (:func:`_job_chunks`).

    The chunks a batch completes (a row at or past a chunk's end is in it) are
    committed together, once, with the token of the last of them: the logs then hold
    every row of those chunks, exactly as a commit per chunk would have left them.
    When the job has at most :data:`COMMIT_AT_END_ROWS` source rows left, that
    commit is the job's last one.
    """
    fixed = None if chunks is None else (chunks[0].emit_base,
                                         np.array([c.emit_end for c in chunks], np.int64),
                                         chunks)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        layout = RunLayout(Path(cfg.root))
        layout.check_visible(cfg.run_id)  # this host sees the run the driver created
        layout.check_driver(cfg.driver)  # and the run is still this driver's
        if fixed is None:
            job = _job_chunks()
            first, ends, tokens = (job[0].emit_base,
                                   np.array([c.emit_end for c in job], np.int64), job)
        else:
            first, ends, tokens = fixed
        w = 0
        if writers > 1:
            ctx = TaskContext.get()
            assert ctx is not None
            w = ctx.partitionId()
        logs: list[StreamLog | None] = [
            open_upstream(cfg, p) if p % writers == w else None
            for p in range(cfg.partitions)]
        written = 0
        started_at = time.time()
        nxt = 0  # the next chunk to commit
        clock = [0.0, 0.0, 0.0]  # seconds waiting for Spark, appending, committing
        trimmed = [0]  # upstream segments dropped (trim_upstream)

        def commit_through(upto: int) -> None:  # commit every chunk ending at or before
            nonlocal nxt
            t0 = time.perf_counter()
            done = int(np.searchsorted(ends, upto, "right"))
            if done > nxt:
                nxt = done
                for p, log in enumerate(logs):
                    # a sealed log holds its whole stream already (a refill after
                    # --repair cut another)
                    if log is not None and not log.sealed:
                        log.commit(_token(tokens[nxt - 1], late[p]))
                if cfg.trim:
                    trimmed[0] += trim_upstream(layout, logs)
            clock[2] += time.perf_counter() - t0

        def append(batch: pa.RecordBatch) -> None:
            nonlocal written
            t0 = time.perf_counter()
            if LATE in batch.schema.names:  # late rows (source_order): count, skip
                flags = batch.column(LATE).to_numpy(zero_copy_only=False)
                if flags.any():
                    part = batch.column(PART).to_numpy()[flags]
                    seqs = batch.column(1).to_numpy()[flags]
                    new = seqs >= late_from[part]  # not counted in the log's last token
                    for p, n in enumerate(np.bincount(part[new], minlength=cfg.partitions)):
                        if n and logs[p] is not None:
                            late[p] += int(n)
                    batch = batch.filter(pa.array(~flags))
                batch = batch.drop_columns([LATE])
            written += _append_split(logs, batch, above, cfg.partitions)
            clock[1] += time.perf_counter() - t0

        try:
            above = [-1 if log is None or log.last_seq is None else log.last_seq
                     for log in logs]
            held = [token_fields(None if log is None else log.last_token()) for log in logs]
            late = [t.get("late", 0) for t in held]
            late_from = np.array([t.get("seq_end", t.get("next_seq", 0)) for t in held],
                                 np.int64)
            it = iter(batches)
            while True:
                t0 = time.perf_counter()
                batch = next(it, None)
                clock[0] += time.perf_counter() - t0
                if batch is None:
                    break
                if batch.num_rows == 0:
                    continue
                seqs = batch.column(1).to_numpy()
                if int(seqs[-1]) >= ends[-1] or int(seqs[0]) < first:
                    bad = int(seqs[-1]) if int(seqs[-1]) >= ends[-1] else int(seqs[0])
                    raise CecError(f"ingest: row seq {bad} is outside the job's chunks "
                                   f"(rows {first} to {int(ends[-1]) - 1}): the source was "
                                   "not read in order, or Spark handed the writer another "
                                   "job's rows")
                # the chunks this batch completes: those ending at or before its last row
                cut = 0
                last = int(np.searchsorted(ends, seqs[-1], "right"))
                if last > nxt:
                    cut = int(np.searchsorted(seqs, ends[last - 1], "left"))
                    if cut:
                        append(batch.slice(0, cut))
                    if int(ends[-1]) - int(seqs[-1]) > COMMIT_AT_END_ROWS:
                        commit_through(int(seqs[cut]))
                    # else the job ends within a few rows: its last commit covers
                    # these chunks too (one fsync per log for a stream-dir poll's job)
                if cut < batch.num_rows:  # rows of the chunk after: committed later
                    append(batch.slice(cut))
            commit_through(int(ends[-1]))
        finally:
            for log in logs:
                if log is not None:
                    log.close()
        yield pa.RecordBatch.from_pydict({
            "rows": pa.array([written], pa.int64()),
            "started_at": pa.array([started_at], pa.float64()),
            "trimmed": pa.array([trimmed[0]], pa.int64()),
            **{name: pa.array([v], pa.float64()) for name, v in zip(_CLOCKS, clock,
                                                                      strict=True)}})

    return write


def _append_split(logs: list[StreamLog | None], batch: pa.RecordBatch, above: list[int],
                  partitions: int) -> int:
    """Append the rows of ``batch`` to their partitions' logs (one record each); a row
    of a log this writer does not own is a routing error, never written."""
    part = batch.column(PART).to_numpy()
    order = np.argsort(part, kind="stable")
    counts = np.bincount(part, minlength=partitions)
    body = batch.drop_columns([PART]).take(pa.array(order))
    offset = written = 0
    for p, n in enumerate(counts.tolist()):
        if n:
            log = logs[p]
            if log is None:
                raise CecError(f"ingest: a writer received {n} rows of partition {p}, "
                               "which another writer owns (the shuffle routed them wrong)")
            sub = body.slice(offset, n)
            if above[p] >= 0 and sub.column(1)[0].as_py() <= above[p]:
                seqs = sub.column(1).to_numpy()
                sub = sub.slice(int(np.searchsorted(seqs, above[p], "right")))
            if sub.num_rows:
                log.append(sub)
                written += sub.num_rows
        offset += n
    return written


def committed_chunk(layout: RunLayout, partitions: int) -> tuple[int, int | None]:
    """The last chunk every upstream log has committed (-1 for none) and its ``next_seq``."""
    done: list[tuple[int, int | None]] = []
    for p in range(partitions):
        path = layout.upstream(p)
        if not path.exists():
            return -1, None
        with StreamLog.open(path) as log:
            raw = log.last_token()
        chunk = read_token(raw)
        nxt = int(json.loads(raw.decode())["next_seq"]) if chunk >= 0 and raw else None
        done.append((chunk, nxt))
    return min(done, key=lambda d: d[0]) if done else (-1, None)


def upstream_sealed(layout: RunLayout, partitions: int) -> bool:
    """Every upstream log is sealed: the ingest of the run is complete."""
    for p in range(partitions):
        path = layout.upstream(p)
        if not path.exists():
            return False
        with StreamLog.open(path) as log:
            if not log.sealed:
                return False
    return True


def create_logs(layout: RunLayout, partitions: int, fsync: str) -> None:
    """On the driver: every upstream and output log of the run (executors only open)."""
    for p in range(partitions):
        for path in (layout.upstream(p), layout.output(p)):
            StreamLog.open(path, writable=True, create=True, fsync=fsync).close()


def seal_upstream(layout: RunLayout, partitions: int, fsync: str) -> None:
    for p in range(partitions):
        with StreamLog.open(layout.upstream(p), writable=True, create=True,
                            fsync=fsync) as log:
            if not log.sealed:
                log.seal()


_CLOCKS = ("wait_s", "append_s", "commit_s")
# A batch that completes chunks when fewer source rows than this remain in the job
# leaves their commit to the job's last one.
COMMIT_AT_END_ROWS = 1 << 16
