"""The ingest: source → Spark (read, filter, key partition) → one upstream log per partition.

The source is cut into chunks (:mod:`cec_spark.sources`); a Spark **job** ingests a run of
consecutive chunks (up to :data:`JOB_ROWS` source rows) with a single task, so the
order of the stream is kept without any sort. The task reads the chunks (the generator
through ``spark.range`` and deterministic expressions; files through a Python function
over the chunk numbers, :func:`_file_frame`, which yields Arrow batches), applies
``[filter].where`` in Spark SQL, computes the key partition ``pmod(xxhash64(key), P)``
in Spark SQL (:func:`partition_expr`, the only place the partition of a key is
decided) and hands Arrow batches to :func:`_chunk_writer` (``mapInArrow``). The
writer splits each batch by partition (a stable argsort, so each partition's rows
stay in ``seq`` order), appends one record per partition per batch and, as soon as it
has passed the end of a chunk, commits every one of the P logs with the token
``{"chunk": c, "next_seq": ...}`` of the last chunk it completed; then it trims the
upstream logs (:func:`trim_upstream`). With one ingest task a file source's query is
built once and run for every job (:class:`IngestQuery`): the job's chunks travel as a
Spark local property (a ``stream-dir`` source runs a job per poll that found files).

Idempotence and resumption: a restarted ingest starts at the chunk after the oldest
token of the P logs; while writing, a log only receives rows whose ``seq`` is above its
``last_seq`` (a crash between the commits of two logs leaves them at different
chunks). Nothing is read twice into a log, nothing is skipped. At the end of a bounded
source the driver seals every upstream log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cec.errors import CecError, SpecError
from cec.spec import PipelineSpec
from cec_spark.fingerprint import check_fingerprint
from cec_spark.layout import RunLayout, RunSettings
from cec_spark.sources import (
    SEQ,
    Chunk,
    ColumnTypes,
    InputError,
    SourcePlan,
    StreamDirWatcher,
    plan_source,
    read_chunk,
)
from storage_log.log import StreamLog

PART = "__cec_part"
VALUE_FALLBACK = "__cec_value"  # the value column of a `count` aggregate without field
_SPARK_TYPES = {"int64": "BIGINT", "float64": "DOUBLE", "string": "STRING", "bool": "BOOLEAN"}


# --------------------------------------------------------------------------- reading


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


def _reader_run(chunks: list[Chunk], i: int, readers: int) -> list[Chunk]:
    """Reader ``i`` of ``readers``: the ``i``-th of as many consecutive runs of chunks
    (the cut ``spark.range(0, n, 1, readers)`` makes of ``n`` chunk numbers)."""
    n = len(chunks)
    return chunks[i * n // readers:(i + 1) * n // readers]


def _chunk_reader(chunks: list[str] | None, columns: str, readers: int = 1
                  ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function that turns chunk indices into the chunks' rows, in order.

    With ``chunks`` None the indices are reader numbers (of ``readers``) and the chunks
    are the job's (:func:`_job_chunks`).
    """

    def read(indices: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cols = ColumnTypes.from_json(columns)
        job = _job_chunks() if chunks is None else None
        for batch in indices:
            for i in batch.column(0).to_pylist():
                run = (_reader_run(job, i, readers) if job is not None
                       else [Chunk.from_json(chunks[i])] if chunks is not None else [])
                for chunk in run:
                    yield from read_chunk(chunk, cols)

    return read


def _file_frame(spark: SparkSession, columns: ColumnTypes, chunks: list[Chunk] | None,
                readers: int = 1) -> DataFrame:
    """Consecutive chunks of a file source read by a Spark task, as Arrow batches.

    ``spark.range(len(chunks))`` in one partition hands the chunk numbers in order to
    a Python function (``mapInArrow``) that reads them (:func:`cec_spark.sources.read_chunk`,
    pyarrow) and yields typed Arrow batches plus ``SEQ``. The same function as a
    Python data source (``spark.read.format(...)``) started two Python planner
    processes per query: a cold run reached its first row 3–5 s later. With
    ``readers`` > 1 the chunk numbers are cut into that many consecutive runs, one
    task each. With ``chunks`` None the frame reads the chunks of whichever job runs
    it (:func:`_job_chunks`): one query serves every job.
    """
    fields = [f"`{n}` {_SPARK_TYPES[t]}" for n, t in zip(columns.names, columns.types,
                                                         strict=True)]
    schema = ", ".join([*fields, f"`{SEQ}` BIGINT"])
    if chunks is None:
        readers = max(1, readers)
        return spark.range(0, readers, 1, readers).mapInArrow(
            _chunk_reader(None, columns.to_json(), readers), schema)
    reader = _chunk_reader([c.to_json() for c in chunks], columns.to_json())
    return spark.range(0, len(chunks), 1, max(1, min(readers, len(chunks)))).mapInArrow(
        reader, schema)


# --------------------------------------------------------------------------- frames


def value_column(spec: PipelineSpec) -> str:
    """The name of the value column in the upstream logs."""
    return spec.aggregate.field if spec.aggregate.field is not None else VALUE_FALLBACK


def partition_expr(key: Column, partitions: int) -> Column:
    """The key partition of a key: ``pmod(xxhash64(key), P)`` (Spark SQL, seed 42)."""
    return F.pmod(F.xxhash64(key), F.lit(partitions)).cast("int")


def source_frame(spark: SparkSession, spec: PipelineSpec, columns: ColumnTypes,
                 chunks: list[Chunk] | None, readers: int = 1) -> DataFrame:
    """The rows of consecutive chunks with every source column plus ``SEQ``, read by
    ``readers`` tasks (each in order; with one, the whole frame is in order).

    ``chunks`` None (file sources only): the chunks of the job that runs the query."""
    if chunks is None:
        if spec.source.kind == "generator":
            raise CecError("ingest: a generator query needs its chunks")
        return _file_frame(spark, columns, None, readers)
    chunk = chunks[0]
    if chunk.fmt == "generator":
        gen = spec.source.generator
        assert gen is not None
        ids = F.col("id")
        return spark.range(chunk.start, chunks[-1].stop, 1, readers).select(
            F.pmod(F.xxhash64(F.lit(gen.seed), ids), F.lit(gen.keys)).alias("item_id"),
            (F.pmod(F.xxhash64(F.lit(gen.seed + 1), ids), F.lit(10_000)) + 1)
            .cast("double").alias("item_price"),
            (F.lit(gen.start_ts) + ids * F.lit(gen.interval_us)).alias("item_time"),
            ids.alias(SEQ),
        )
    return _file_frame(spark, columns, chunks, readers)


def upstream_frame(spark: SparkSession, spec: PipelineSpec, columns: ColumnTypes,
                   chunks: list[Chunk] | None, readers: int = 1) -> DataFrame:
    """Filtered, projected and partitioned rows: ts, seq, key, value, PART."""
    df = source_frame(spark, spec, columns, chunks, readers)
    if spec.where is not None:
        df = df.where(spec.where)
    agg = spec.aggregate
    key = F.col(f"`{agg.group_by}`")
    value = (F.col(f"`{agg.field}`").cast("double") if agg.field is not None
             else F.lit(1.0))
    return df.select(
        F.col(f"`{spec.source.time_field}`").cast("long").alias("ts"),
        F.col(SEQ).alias("seq"),
        key.alias(agg.group_by),
        value.alias(value_column(spec)),
        partition_expr(key, spec.run.partitions).alias(PART),
    )


def check_filter(spark: SparkSession, spec: PipelineSpec, plan: SourcePlan) -> None:
    """Analyse the query of the first chunk: a bad ``where`` is a SpecError, before any write."""
    if spec.where is None:  # nothing of the user's to analyse: the columns are planned
        return
    chunk = plan.chunks[0] if plan.chunks else Chunk(0, "generator", "", 0, 0, 0, 0)
    if chunk.fmt != "generator" and not plan.chunks:
        return
    try:
        upstream_frame(spark, spec, plan.columns, [chunk]).schema  # noqa: B018
    except (AnalysisException, ParseException) as exc:
        first = str(exc).strip().splitlines()[0]
        raise SpecError(f"{spec.origin}: [filter].where: {spec.where!r} is not a valid "
                        f"Spark SQL condition over the source's columns: {first}") from exc


# --------------------------------------------------------------------------- writer


def _token(chunk: Chunk) -> bytes:
    return json.dumps({"chunk": chunk.index, "next_seq": chunk.next_seq}).encode()


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
    (:class:`cec_spark.task.ReplayFloor`); a segment whose records all lie at or
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
    fixed = None if chunks is None else (chunks[0].first_seq,
                                         np.array([c.next_seq for c in chunks], np.int64),
                                         [_token(c) for c in chunks])

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        layout = RunLayout(Path(cfg.root))
        layout.check_visible(cfg.run_id)  # this host sees the run the driver created
        layout.check_driver(cfg.driver)  # and the run is still this driver's
        if fixed is None:
            job = _job_chunks()
            first, ends, tokens = (job[0].first_seq,
                                   np.array([c.next_seq for c in job], np.int64),
                                   [_token(c) for c in job])
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
                for log in logs:
                    # a sealed log holds its whole stream already (a refill after
                    # --repair cut another)
                    if log is not None and not log.sealed:
                        log.commit(tokens[nxt - 1])
                if cfg.trim:
                    trimmed[0] += trim_upstream(layout, logs)
            clock[2] += time.perf_counter() - t0

        def append(batch: pa.RecordBatch) -> None:
            nonlocal written
            t0 = time.perf_counter()
            written += _append_split(logs, batch, above, cfg.partitions)
            clock[1] += time.perf_counter() - t0

        try:
            above = [-1 if log is None or log.last_seq is None else log.last_seq
                     for log in logs]
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


# --------------------------------------------------------------------------- loop


@dataclass
class IngestProgress:
    chunks_done: int = 0
    chunks_total: int | None = None
    source_rows: int = 0  # rows of the source consumed (before the filter)
    tuples: int = 0  # rows written into upstream logs (after the filter)
    sealed: bool = False
    started: float = 0.0
    finished: float | None = None
    job_seconds: list[float] = field(default_factory=list)
    writer_s: dict[str, float] = field(default_factory=dict)  # the writer's clocks
    trimmed_segments: int = 0  # upstream segments dropped (trim_upstream)


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
JOB_ROWS = 4_000_000  # source rows per ingest job (many chunks, one commit each)


class IngestQuery:
    """The Spark query of an ingest, run once per job (a run of consecutive chunks).

    A file source's query with one ingest task does not depend on the chunks: it is
    built the first time and run again for every job, which hands the job's chunks to
    its task as a Spark local property (:data:`JOB_PROPERTY`, :func:`_job_chunks`).
    Building the query and planning it again for every job took about 0.1 s of a
    ``stream-dir`` poll's job. The generator's chunks are the query's range, and with
    ``ingest_tasks`` > 1 a shuffle sits in the query (Spark reuses the shuffle output
    of a physical plan run again, which would hand a job the previous job's rows):
    those queries are built per job.
    """

    _SCHEMA = ("rows long, started_at double, trimmed long, "
               + ", ".join(f"{c} double" for c in _CLOCKS))

    def __init__(self, spark: SparkSession, spec: PipelineSpec, settings: RunSettings,
                 layout: RunLayout, driver: int | None = None) -> None:
        self.spark, self.spec, self.settings = spark, spec, settings
        self.cfg = WriterConfig.for_run(spec, layout, settings.run_id, driver)
        self.tasks = spec.run.ingest_tasks
        self.writers = min(self.tasks, spec.run.partitions)
        self._reused: DataFrame | None = None

    def _query(self, chunks: list[Chunk] | None, readers: int) -> DataFrame:
        df = upstream_frame(self.spark, self.spec, self.settings.columns, chunks, readers)
        if readers > 1 or self.writers > 1:
            # rows to their writer through Spark's shuffle: Spark partition w holds the
            # key partitions p % writers == w, in seq order (each log keeps the source
            # order)
            df = (df.repartition(self.writers, _route(self.spark, self.writers))
                  .sortWithinPartitions("seq"))
        return df.mapInArrow(_chunk_writer(self.cfg, chunks, self.writers), self._SCHEMA)

    def run(self, chunks: list[Chunk], progress: IngestProgress) -> int:
        """Ingest consecutive chunks (one Spark job); the number of tuples written."""
        if chunks[0].fmt == "generator" or self.tasks > 1:
            # with several tasks the rows go through a shuffle, whose output Spark
            # keeps and hands again to a query run again: built per job
            readers = min(self.tasks, len(chunks)) if chunks[0].fmt != "generator" \
                else self.tasks
            out = self._query(chunks, readers).collect()
        else:
            if self._reused is None:
                self._reused = self._query(None, self.tasks)
            sc = self.spark.sparkContext
            sc.setLocalProperty(JOB_PROPERTY, json.dumps([c.to_json() for c in chunks]))
            try:
                out = self._reused.collect()
            finally:
                sc.setLocalProperty(JOB_PROPERTY, None)  # type: ignore[arg-type]
        clocks = progress.writer_s
        if "first_writer_at" not in clocks:
            clocks["first_writer_at"] = min(float(r["started_at"]) for r in out)
        for row in out:
            progress.trimmed_segments += int(row["trimmed"])
            for c in _CLOCKS:
                clocks[c] = clocks.get(c, 0.0) + float(row[c])
        return int(sum(r["rows"] for r in out))


def run_chunks(spark: SparkSession, spec: PipelineSpec, settings: RunSettings,
               layout: RunLayout, chunks: list[Chunk], progress: IngestProgress,
               driver: int | None = None) -> int:
    """Ingest consecutive chunks (one Spark job); the number of tuples written."""
    return IngestQuery(spark, spec, settings, layout, driver).run(chunks, progress)


_ROUTES: dict[int, list[int]] = {}


def _route(spark: SparkSession, writers: int) -> Column:
    """A column whose hash partitioning sends key partition ``p`` to Spark partition
    ``p % writers``: ``repartition(n, col)`` puts a row in ``pmod(murmur3(col), n)``, so
    each writer gets a value that Spark itself hashes to it (found once per process)."""
    if writers not in _ROUTES:
        rows = spark.range(0, 64 * writers).select(
            "id", F.pmod(F.hash("id"), F.lit(writers)).alias("w")).collect()
        first: dict[int, int] = {}
        for r in rows:
            first.setdefault(int(r["w"]), int(r["id"]))
        if len(first) < writers:
            raise CecError(f"ingest: no route value for {writers - len(first)} of "
                           f"{writers} writers")
        _ROUTES[writers] = [first[w] for w in range(writers)]
    values = F.array(*[F.lit(v).cast("long") for v in _ROUTES[writers]])
    return F.element_at(values, F.pmod(F.col(PART), F.lit(writers)) + 1)


def _jobs(chunks: list[Chunk], resume: int) -> Iterator[list[Chunk]]:
    """Runs of consecutive chunks after ``resume`` of at most JOB_ROWS rows each."""
    job: list[Chunk] = []
    rows = 0
    for chunk in chunks:
        if chunk.index <= resume:
            continue
        if job and rows + chunk.rows > JOB_ROWS:
            yield job
            job, rows = [], 0
        job.append(chunk)
        rows += chunk.rows
    if job:
        yield job


def ingest(spark: SparkSession, spec: PipelineSpec, settings: RunSettings, layout: RunLayout,
           progress: IngestProgress, should_stop: Callable[[], bool],
           plan: SourcePlan | None = None, *, driver: int | None = None) -> None:
    """Run the ingest from where the upstream logs' tokens say it stopped.

    Its writer tasks stop when a newer driver than ``driver`` took the run.
    """
    sc = spark.sparkContext
    sc.setJobGroup("cec-ingest", "cec ingest", interruptOnCancel=False)
    progress.started = time.monotonic()
    if upstream_sealed(layout, spec.run.partitions):  # all ingested: the source is not
        progress.sealed = True                        # needed (it may be gone)
        progress.finished = time.monotonic()
        return
    resume, resume_next = committed_chunk(layout, spec.run.partitions)
    if resume >= 0:  # a resumed ingest reads the source again: it must be the same
        check_fingerprint(spec, list(settings.source_files))
    query = IngestQuery(spark, spec, settings, layout, driver)
    if spec.source.kind == "stream-dir":
        watcher = StreamDirWatcher(spec, max_rows=settings.max_tuples)
        while not should_stop():
            new = watcher.poll()
            _check_resume(spec, new, resume, resume_next)
            _run_jobs(query, new, resume, progress, should_stop)
            if watcher.ended:
                break
            if not new:
                time.sleep(spec.source.poll_ms / 1000)
    else:
        if plan is None:
            plan = plan_source(spec, max_rows=settings.max_tuples)
        progress.chunks_total = len(plan.chunks)
        _check_resume(spec, plan.chunks, resume, resume_next)
        _run_jobs(query, plan.chunks, resume, progress, should_stop)
    if should_stop():
        return
    seal_upstream(layout, spec.run.partitions, spec.run.fsync)
    progress.sealed = True
    progress.finished = time.monotonic()


def _check_resume(spec: PipelineSpec, chunks: list[Chunk], resume: int,
                  resume_next: int | None) -> None:
    """A resumed ingest must find the source as it was: the same rows up to its token."""
    for chunk in chunks:
        if chunk.index == resume and resume_next is not None and chunk.next_seq != resume_next:
            raise InputError(
                f"{spec.source.path}: the source changed since the run started: chunk "
                f"{resume} ended at row {resume_next} then and at row {chunk.next_seq} now "
                "(a resumed run must read the same input)")


def _run_jobs(query: IngestQuery, chunks: list[Chunk], resume: int,
              progress: IngestProgress, should_stop: Callable[[], bool]) -> None:
    for job in _jobs(chunks, resume):
        if should_stop():
            return
        t0 = time.monotonic()
        progress.tuples += query.run(job, progress)
        progress.job_seconds.append(time.monotonic() - t0)
        progress.chunks_done = job[-1].index + 1
        progress.source_rows = job[-1].next_seq
    if chunks and chunks[-1].index <= resume:
        progress.chunks_done = chunks[-1].index + 1
        progress.source_rows = chunks[-1].next_seq
