"""The ingest's writer: the ``mapInArrow`` function that appends a job's rows to the
upstream logs and commits them with chunk tokens (:class:`~cec.ingest_token.IngestToken`);
the logs' creation, seal, trim and resume point are in :mod:`cec_spark.ingest.logs`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark import TaskContext

from cec.errors import CecError, InputOrderError
from cec.ingest_token import IngestToken, decode_token, encode_token
from cec.order import stable_order
from cec.spec import PipelineSpec
from cec_spark.ingest.feeder import Feeder
from cec_spark.ingest.logs import first_read, renumbered, trim_upstream
from cec_spark.ingest.watermark import WM_EVERY_S, later
from cec_spark.rundir.access import check_visible
from cec_spark.rundir.drivers import check_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import value_column
from cec_spark.source.chunk_report import Reports
from cec_spark.source.order import LATE
from cec_spark.source.types import Chunk
from storage_log.faults import armed, crash_point, set_tag
from storage_log.log import StreamLog

PART = "__cec_part"

JOB_PROPERTY = "cec.ingest.chunks"  # the chunks of the running ingest job (JSON)
# set ("1") for the job holding a bounded source's last chunk: its writers seal their
# logs once every row is committed (else the driver seals them, P writable opens)
SEAL_PROPERTY = "cec.ingest.seal"


def seal_asked() -> bool:
    """On an executor: this task's job ends the source (:data:`SEAL_PROPERTY`)."""
    ctx = TaskContext.get()
    return ctx is not None and ctx.getLocalProperty(SEAL_PROPERTY) == "1"


def job_chunks() -> list[Chunk]:
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


@dataclass(frozen=True)
class WriterConfig:
    """What an ingest writer task needs of the run (it crosses to the executors)."""

    run_dir: str
    partitions: int
    fsync: str
    key_column: str
    value_column: str
    segment_bytes: int = 64 << 20
    trim: bool = True
    run_id: str | None = None
    driver: int | None = None
    late: str = "error"  # [source] late: what a row below a log's watermark does
    level: int = 1  # the records' zstd level; 0: none (a cache of a replayable source)

    def reports(self) -> Reports:
        """Where a chunk's reader reports it (RunLayout.source_chunk_report): synced as
        the upstream logs are (:mod:`cec_spark.source.chunk_report`)."""
        return Reports(RunLayout(Path(self.run_dir)).source_chunk_report,
                       sync=self.fsync != "never")

    @classmethod
    def for_run(cls, spec: PipelineSpec, layout: RunLayout, run_id: str | None,
                driver: int | None = None) -> WriterConfig:
        return cls(str(layout.root), spec.run.partitions, spec.upstream_fsync,
                   spec.aggregate.group_by, value_column(spec),
                   segment_bytes=spec.run.segment_kb << 10, run_id=run_id, driver=driver,
                   # a committed output record may vanish in a machine crash without
                   # fsync; recovery would then replay from before the trimmed point
                   trim=spec.run.trim_upstream and spec.run.fsync == "always",
                   late=spec.source.late, level=0 if spec.upstream_cache else 1)


def open_upstream(cfg: WriterConfig, p: int) -> StreamLog:
    """Partition ``p``'s upstream log for writing (its commits as ``cfg.fsync``, its
    records at zstd level ``cfg.level``); only the driver creates logs."""
    return StreamLog.open(RunLayout(Path(cfg.run_dir)).upstream(p), writable=True,
                          create=False, fsync=cfg.fsync, segment_bytes=cfg.segment_bytes,
                          compression_level=cfg.level)


@dataclass(frozen=True)
class JobChunks:
    """The chunks of one ingest job as the writer needs them: the first row's seq (after
    the rows a resumed ingest skips, :attr:`Chunk.skip`), each chunk's end
    (``emit_end``, ascending), the chunks (for their tokens) and whether a seq is a
    source row (``rows``: no chunk renumbered, so a commit within a chunk can say up
    to which row it holds, the token's ``row``)."""

    first: int
    ends: np.ndarray
    chunks: list[Chunk]
    rows: bool = True

    @classmethod
    def of(cls, chunks: list[Chunk]) -> JobChunks:
        return cls(first_read(chunks), np.array([c.emit_end for c in chunks], np.int64), chunks,
                   not any(renumbered(c) for c in chunks))


def chunk_writer(cfg: WriterConfig, chunks: list[Chunk] | None, writers: int = 1
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function that writes consecutive chunks into upstream logs.

    With one writer it writes all P logs; with ``writers`` > 1, Spark partition ``w``
    (the task's partition id) owns the logs ``p`` with ``p % writers == w`` and must
    receive exactly their rows, in ``seq`` order (:class:`IngestQuery` routes and
    sorts). With ``chunks`` None they are the job's (:func:`job_chunks`). The writing
    is :class:`UpstreamWriter`'s; the function yields one row of its figures.
    """
    fixed = None if chunks is None else JobChunks.of(chunks)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        layout = RunLayout(Path(cfg.run_dir))
        check_visible(layout, cfg.run_id)  # this host sees the run the driver created
        check_driver(layout, cfg.driver)  # and the run is still this driver's
        job = fixed if fixed is not None else JobChunks.of(job_chunks())
        w = _writer_index(writers)
        logs: list[StreamLog | None] = [
            open_upstream(cfg, p) if p % writers == w else None
            for p in range(cfg.partitions)]
        set_tag(f"i{w}")  # this writer's crash points (storage_log.faults): %i<w>
        try:
            writer = UpstreamWriter(cfg, layout, logs, job)
            writer.write(batches)
            if not writer.stopped and seal_asked():  # the source's end
                writer.seal()
        finally:
            for log in logs:
                if log is not None:
                    log.close()
            set_tag("")
        yield writer.figures()

    return write


def _writer_index(writers: int) -> int:
    """This task's writer number: its Spark partition id (0 with one writer)."""
    if writers == 1:
        return 0
    ctx = TaskContext.get()
    assert ctx is not None
    return ctx.partitionId()


class UpstreamWriter:
    """One ingest task's writing of one job into the upstream logs it owns.

    The chunks a batch completes (a row at or past a chunk's end is in it) are
    committed together, once, with the token of the last of them (:meth:`commit_through`):
    the logs then hold every row of those chunks, exactly as a commit per chunk would
    have left them. When the job has at most :data:`COMMIT_AT_END_ROWS` source rows
    left, that commit is the job's last one. A log only receives rows above its
    ``last_seq`` (a resumed ingest); late rows are counted per partition and dropped
    (:meth:`append`). The work is per batch, never per row.

    The commits run on threads of their own, one per log, while this thread reads and
    projects the next batch (:meth:`_settle` waits for them before a log is touched
    again, and :meth:`write` before it returns): a commit is an ``fdatasync`` per log,
    which releases the GIL, and the logs' fsyncs overlap each other and the reading
    instead of following one another (issue 30: 9.0 of the ingest's 23.4 s per 30 M rows
    were its commits, one log after the other). A log is used by one thread at a time;
    its commits stay in order and each one still precedes the log's next append.

    Every commit carries the log's watermark (:mod:`cec_spark.ingest.watermark`): a
    chunk's commit the plan's W for the chunk, to every log this writer owns whether or
    not it got a row; while a chunk's rows flow, :meth:`commit_watermark` commits the
    time of the last row received at least every :data:`WM_EVERY_S`, and the row up to
    which the log now holds its partition (the token's ``row``: a resumed ingest starts
    reading there, not at the chunk's start). W never goes back along a log (it starts
    from the log's last token), and a row above the log's ``last_seq`` below its
    committed W (an idle advance) is late (:meth:`_below`).
    """

    def __init__(self, cfg: WriterConfig, layout: RunLayout, logs: list[StreamLog | None],
                 job: JobChunks) -> None:
        self.cfg, self.layout, self.logs, self.job = cfg, layout, logs, job
        self.started_at = time.time()
        self.written = 0  # rows appended
        self.received = 0  # rows received (read from the source, after the filter)
        self.first_seq: int | None = None  # the seq of the first row received
        self.nxt = 0  # the next chunk to commit
        self.clock = [0.0, 0.0, 0.0]  # seconds waiting for Spark, appending, committing
        self.trimmed = 0  # upstream segments dropped (trim_upstream)
        self.above = [-1 if log is None or log.last_seq is None else log.last_seq
                      for log in logs]
        held = [None if log is None else decode_token(log.last_token()) for log in logs]
        counted = [(0, 0) if t is None else t.late_through for t in held]
        self.late = [n for n, _ in counted]  # late rows so far
        # late rows at or above this seq are not counted in the log's last token yet
        self.late_from = np.array([s for _, s in counted], np.int64)
        self.tokens = held  # each log's last committed token (a mid-chunk commit's base)
        self.wm = [None if t is None else t.watermark for t in held]  # committed W per log
        self.seen: int | None = None  # the time of the last row received (released)
        self._wm_at = time.monotonic()  # the last commit (of a chunk or of a W)
        self._pool: ThreadPoolExecutor | None = None
        self._commits: list[Future[None]] = []  # the logs' commits in flight
        self.stopped = False  # the job ended early: a STOP file (a stop of the run)
        self._looked = time.monotonic()  # the last look for a stop or a newer driver
        self.feeder = Feeder.find()  # the JVM that feeds this worker (its input's end)
        self.sealed = 0  # logs sealed at the source's end (:meth:`seal`), for figures

    def write(self, batches: Iterator[pa.RecordBatch]) -> None:
        """Every batch of the job, then the commit of its last chunks (done when this
        returns)."""
        try:
            self._write(batches)
            self._settle()
        finally:
            self._close_pool()

    def seal(self) -> None:
        """Seal the logs this writer owns, once :meth:`write` committed every row of a
        bounded source's last job (a log sealed already, by an earlier attempt of the
        job or before a refill after ``--repair``, is left as it is)."""
        for log in self.logs:
            if log is not None:
                log.seal()  # a no-op on a sealed log
                self.sealed += 1

    def _stop_here(self) -> bool:
        """After a chunk's commit began (every :data:`LOOK_EVERY_S` at most): True when
        the run is to stop (its STOP file); DriverSupersededError when a newer driver took
        the run. A job may run for many seconds (:data:`cec_spark.ingest.job.
        DIRECT_JOB_ROWS`): it ends at the next chunk, not at its end."""
        now = time.monotonic()
        if now - self._looked < LOOK_EVERY_S:
            return False
        self._looked = now
        check_driver(self.layout, self.cfg.driver)
        return self.layout.stop_file.exists()

    def _close_pool(self) -> None:
        """Wait for the commits in flight (a failure is raised by :meth:`_settle`, or
        was already) and end the threads."""
        for f in self._commits:
            f.exception()  # waits; what it raised was, or will be, raised elsewhere
        self._commits = []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _settle(self) -> None:
        """Wait for the commits in flight; raise what one of them raised; then trim."""
        if not self._commits:
            return
        t0 = time.perf_counter()
        commits, self._commits = self._commits, []
        errors = [e for e in (f.exception() for f in commits) if e is not None]
        if errors:
            raise errors[0]
        crash_point("ingest.after_token")
        if self.cfg.trim:
            self.trimmed += trim_upstream(self.layout, self.logs)
        self.clock[2] += time.perf_counter() - t0

    def _write(self, batches: Iterator[pa.RecordBatch]) -> None:
        ends, clock = self.job.ends, self.clock
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
            self._check_range(int(seqs[0]), int(seqs[-1]))
            self.received += batch.num_rows
            if self.first_seq is None:
                self.first_seq = int(seqs[0])
            # the chunks this batch completes: those ending at or before its last row,
            # or right after it (a batch that ends with its chunk's last row completes
            # the chunk, so its commit overlaps the reading of the next batch)
            cut = 0
            last = int(np.searchsorted(ends, int(seqs[-1]) + 1, "right"))
            if last > self.nxt:
                end = int(ends[last - 1])
                cut = int(np.searchsorted(seqs, end, "left"))
                if cut:
                    self.append(batch.slice(0, cut))
                if int(ends[-1]) - int(seqs[-1]) > COMMIT_AT_END_ROWS:
                    self.commit_through(end)
                    if self._stop_here():  # the rows after ``cut`` are not committed
                        self.stopped = True
                        return
                # else the job ends within a few rows: its last commit covers
                # these chunks too (one fsync per log for a stream-dir poll's job)
            if cut < batch.num_rows:  # rows of the chunk after: committed later
                self.append(batch.slice(cut))
                # every row up to this batch's last is received (in seq order)
                self.commit_watermark(int(seqs[-1]) + 1)
        # the input ended: the job's end, unless the JVM that fed it exited (then the
        # stream was cut, not ended: its last chunks are not complete, never committed)
        if not self.feeder.alive():
            raise CecError(f"ingest: the input of this writer ended because the JVM that "
                           f"fed it (pid {self.feeder.pid}) exited; the job's last chunks "
                           "are not committed (a resumed ingest reads them again)")
        self.commit_through(int(ends[-1]))

    def _check_range(self, lo: int, hi: int) -> None:
        first, end = self.job.first, int(self.job.ends[-1])
        if hi >= end or lo < first:
            raise CecError(f"ingest: row seq {hi if hi >= end else lo} is outside the job's "
                           f"chunks (rows {first} to {end - 1}): the source was not read "
                           "in order, or Spark handed the writer another job's rows")

    def commit_through(self, upto: int) -> None:
        """Start the commit of every chunk ending at or before ``upto`` (an
        ``emit_end``: each log on a thread; :meth:`_settle` waits for them and trims)."""
        done = int(np.searchsorted(self.job.ends, upto, "right"))
        if done <= self.nxt:
            return
        self._settle()
        t0 = time.perf_counter()
        self.nxt = done
        chunk = self.job.chunks[done - 1]
        w = later(chunk.wm, self.seen)  # the plan's (every writer's); else the rows'
        todo = []
        for p, log in enumerate(self.logs):
            # a sealed log holds its whole stream already (a refill after --repair cut
            # another)
            if log is not None and not log.sealed:
                self.wm[p] = later(self.wm[p], w)
                tok = IngestToken(chunk.index, chunk.next_seq, chunk.emit_end, self.late[p],
                                  self.wm[p])
                self.tokens[p] = tok
                todo.append((log, encode_token(tok)))
        self._submit(todo)
        self.clock[2] += time.perf_counter() - t0

    def commit_watermark(self, upto: int | None = None) -> None:
        """Within a chunk, :data:`WM_EVERY_S` after the last commit: commit every log
        with its last chunk token and the time of the last row received as W (the rows
        appended since are committed with it; a log with none gets a TOKEN frame), and
        ``upto`` as its ``row``: every row this writer received is below it, so the log
        holds every row of its partition below it but the late ones, which its ``rl``
        counts (``late`` stays the count below the chunk's end). A log without a token
        yet waits for its first chunk's commit. No ``row`` where a seq is not a source
        row (a resumed writer then reads the chunk again from its start and counts its
        late rows from ``seq_end``)."""
        if self.seen is None or time.monotonic() - self._wm_at < WM_EVERY_S:
            return
        self._settle()
        t0 = time.perf_counter()
        todo = []
        for p, log in enumerate(self.logs):
            tok = self.tokens[p]
            if log is None or log.sealed or tok is None:
                continue
            w = later(self.wm[p], self.seen)
            row = tok.row  # a log ahead of the rows received (a resumed ingest's) keeps it
            if self.job.rows and upto is not None and upto > tok.holds_below:
                row = upto
            if w != self.wm[p] or row != tok.row:
                self.wm[p] = w
                # the W at the chunk's end stays known (a rescale starts new logs there)
                tok = self.tokens[p] = replace(
                    tok, watermark=w, chunk_watermark=tok.at_chunk_end, row=row,
                    row_late=None if row is None or self.late[p] == tok.late
                    else self.late[p])
                todo.append((log, encode_token(tok)))
        self._submit(todo)
        self.clock[2] += time.perf_counter() - t0

    def _submit(self, todo: list[tuple[StreamLog, bytes]]) -> None:
        """Start the logs' commits with their tokens, each on a thread."""
        self._wm_at = time.monotonic()
        if len(todo) > 1 and armed("ingest.between_logs"):  # (a test) one log, then the rest
            log, token = todo.pop(0)
            log.commit(token)
            crash_point("ingest.between_logs")
        if todo:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(len(todo), "cec-ingest-commit")
            self._commits = [self._pool.submit(log.commit, token) for log, token in todo]

    def append(self, batch: pa.RecordBatch) -> None:
        """Append a batch's rows to their logs; late rows (``source_order``) are counted
        and skipped."""
        self._settle()  # the logs' commits in flight end before they are written again
        t0 = time.perf_counter()
        if LATE in batch.schema.names:
            flags = batch.column(LATE).to_numpy(zero_copy_only=False)
            if flags.any():
                self._count_late(batch, flags)
                batch = batch.filter(pa.array(~flags))
            batch = batch.drop_columns([LATE])
        if batch.num_rows:  # rows reach the writer in time order: the last is the latest
            self.seen = later(self.seen, batch.column(0)[batch.num_rows - 1].as_py())
        self.written += _append_split(self.logs, batch, self.above, self.cfg.partitions,
                                      self.wm, self._below)
        self.clock[1] += time.perf_counter() - t0

    def _below(self, p: int, rows: pa.RecordBatch) -> None:
        """Rows of partition ``p`` below its committed W (only after an idle advance,
        :mod:`cec_spark.ingest.watermark`): late, as ``late`` says (dropped and counted,
        or an InputOrderError: a Spark retry cannot help)."""
        seqs = rows.column(1).to_numpy()
        if self.cfg.late == "error":
            raise InputOrderError(
                f"ingest: row seq {int(seqs[0])} (partition {p}) has time "
                f"{rows.column(0)[0].as_py()}, before the watermark {self.wm[p]} the ingest "
                "committed when the stream folder was idle for [source] idle_close: a late "
                "row (late = \"error\"; late = \"drop\" drops such rows)")
        self.late[p] += int((seqs >= self.late_from[p]).sum())

    def _count_late(self, batch: pa.RecordBatch, flags: np.ndarray) -> None:
        part = batch.column(PART).to_numpy()[flags]
        seqs = batch.column(1).to_numpy()[flags]
        new = seqs >= self.late_from[part]  # not counted in the log's last token
        for p, n in enumerate(np.bincount(part[new], minlength=self.cfg.partitions)):
            if n and self.logs[p] is not None:
                self.late[p] += int(n)

    def figures(self) -> pa.RecordBatch:
        """The task's one result row (:attr:`IngestQuery._SCHEMA`)."""
        return pa.RecordBatch.from_pydict({
            "rows": pa.array([self.written], pa.int64()),
            "started_at": pa.array([self.started_at], pa.float64()),
            "trimmed": pa.array([self.trimmed], pa.int64()),
            "received": pa.array([self.received], pa.int64()),
            "first_seq": pa.array([-1 if self.first_seq is None else self.first_seq],
                                  pa.int64()),
            **{name: pa.array([v], pa.float64()) for name, v in zip(CLOCKS, self.clock,
                                                                      strict=True)},
            "sealed": pa.array([self.sealed], pa.int64())})


def _append_split(logs: list[StreamLog | None], batch: pa.RecordBatch, above: list[int],
                  partitions: int, wm: list[int | None] | None = None,
                  below: Callable[[int, pa.RecordBatch], None] | None = None) -> int:
    """Append the rows of ``batch`` to their partitions' logs (one record each); a row
    of a log this writer does not own is a routing error, never written. Rows at or
    below ``above[p]`` are in the log already; of the others, those with a time below
    ``wm[p]`` (the watermark W log ``p`` committed) go to ``below`` instead."""
    part = batch.column(PART).to_numpy()
    order = stable_order(part)  # by counting: 256 k rows 1.8 ms, not 10 (a merge sort)
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
            w = None if wm is None else wm[p]
            if w is not None and sub.num_rows and sub.column(0)[0].as_py() < w:
                # rows are in time order: those below W come first
                n_below = int(np.searchsorted(sub.column(0).to_numpy(), w, "left"))
                assert below is not None
                below(p, sub.slice(0, n_below))
                sub = sub.slice(n_below)
            if sub.num_rows:
                log.append(sub)
                written += sub.num_rows
        offset += n
    return written


CLOCKS = ("wait_s", "append_s", "commit_s")
LOOK_EVERY_S = 0.25  # a writer looks for a stop or a newer driver this often (at most)
# A batch that completes chunks when fewer source rows than this remain in the job
# leaves their commit to the job's last one.
COMMIT_AT_END_ROWS = 1 << 16
