"""The ingest's Spark query: the source's chunks read in a Spark task, filtered,
projected, key-partitioned and handed to the writer (:mod:`cec_spark.ingest.writer`);
built once per ingest and run once per job (:class:`IngestQuery`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import RDD, TaskContext
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cec.errors import CecError, SpecError
from cec.spec import PipelineSpec
from cec.spec.parse import field_error
from cec_spark.ingest.logs import first_read
from cec_spark.ingest.project import Projector, direct_reason, project_chunk
from cec_spark.ingest.where import CompiledWhere, compile_where
from cec_spark.ingest.writer import (
    CLOCKS,
    JOB_PROPERTY,
    PART,
    WriterConfig,
    chunk_writer,
    job_chunks,
)
from cec_spark.run.lazy_session import sql_setting
from cec_spark.run.operators import release_freed
from cec_spark.run.plan import RunPlan
from cec_spark.rundir.run_file import value_column
from cec_spark.source.order import LATE
from cec_spark.source.read import read_chunk
from cec_spark.source.types import SEQ, Chunk, ColumnTypes, TimeSpec

# a time field (kind int64, timestamp or iso) reaches Spark as int64 microseconds
_SPARK_TYPES = {"int64": "BIGINT", "float64": "DOUBLE", "string": "STRING", "bool": "BOOLEAN",
                "timestamp": "BIGINT", "iso": "BIGINT"}


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
    # where this ingest started reading (a resumed one: the row below which every
    # upstream log held all its rows, cec_spark.ingest.logs.resume_point), and what its
    # writers received from there: rows (after the filter) and the first one's seq
    resumed_at: int = 0
    rows_received: int = 0
    first_received: int | None = None
    # where a bounded source's chunks came from: "run" (planned by this run's driver at
    # its start), "stored" (a resume's: the plan kept in the run directory, no byte of
    # the source read), "files" (a resume's: planned again from the files)
    plan_from: str = ""
    # upstream logs the writers of the job ending a bounded source sealed (all P: the
    # driver seals none, :data:`cec_spark.ingest.writer.SEAL_PROPERTY`)
    logs_sealed: int = 0


def _reader_run(chunks: list[Chunk], i: int, readers: int) -> list[Chunk]:
    """Reader ``i`` of ``readers``: the ``i``-th of as many consecutive runs of chunks
    (the cut ``spark.range(0, n, 1, readers)`` makes of ``n`` chunk numbers)."""
    n = len(chunks)
    return chunks[i * n // readers:(i + 1) * n // readers]


def _chunk_reader(chunks: list[str] | None, columns: str, time: str, readers: int = 1,
                  report: WriterConfig | None = None
                  ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function that turns chunk indices into the chunks' rows, in order.

    With ``chunks`` None the indices are reader numbers (of ``readers``) and the chunks
    are the job's (:func:`job_chunks`). ``report``: the run's writers' settings, where
    the chunks are reported (:meth:`WriterConfig.reports`,
    :func:`cec_spark.source.read.read_chunk`).
    """

    def read(indices: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cols = ColumnTypes.from_json(columns)
        tspec = TimeSpec.from_json(time)
        job = job_chunks() if chunks is None else None
        where = report.reports() if report is not None else None
        for batch in indices:
            for i in batch.column(0).to_pylist():
                run = (_reader_run(job, i, readers) if job is not None
                       else [Chunk.from_json(chunks[i])] if chunks is not None else [])
                for chunk in run:
                    yield from read_chunk(chunk, cols, tspec, report=where)

    return read


def _file_frame(spark: SparkSession, columns: ColumnTypes, time: TimeSpec,
                chunks: list[Chunk] | None, readers: int = 1,
                report: WriterConfig | None = None) -> DataFrame:
    """Consecutive chunks of a file source read by a Spark task, as Arrow batches.

    ``spark.range(len(chunks))`` in one partition hands the chunk numbers in order to
    a Python function (``mapInArrow``) that reads them (:func:`cec_spark.source.planner.read_chunk`,
    pyarrow) and yields typed Arrow batches plus ``SEQ``. The same function as a
    Python data source (``spark.read.format(...)``) started two Python planner
    processes per query: a cold run reached its first row 3–5 s later. With
    ``readers`` > 1 the chunk numbers are cut into that many consecutive runs, one
    task each. With ``chunks`` None the frame reads the chunks of whichever job runs
    it (:func:`job_chunks`): one query serves every job.
    """
    fields = [f"`{n}` {_SPARK_TYPES[t]}" for n, t in zip(columns.names, columns.types,
                                                         strict=True)]
    schema = ", ".join([*fields, f"`{SEQ}` BIGINT"]
                       + ([f"`{LATE}` BOOLEAN"] if time.reorders else []))
    if chunks is None:
        readers = max(1, readers)
        return spark.range(0, readers, 1, readers).mapInArrow(
            _chunk_reader(None, columns.to_json(), time.to_json(), readers, report), schema)
    reader = _chunk_reader([c.to_json() for c in chunks], columns.to_json(), time.to_json(),
                           report=report)
    return spark.range(0, len(chunks), 1, max(1, min(readers, len(chunks)))).mapInArrow(
        reader, schema)


# --------------------------------------------------------------------------- frames


def partition_expr(key: Column, partitions: int, key_groups: int | None = None) -> Column:
    """The key partition of a key (Spark SQL's ``xxhash64``, seed 42).

    With key groups (new runs, ``run.toml`` ``[cec] key_groups = G``): the group
    ``kg = pmod(xxhash64(key), G)``, owned by partition ``kg * P div G``
    (:mod:`recovery.rescale` computes the same in Python). Without (a run from before
    key groups): ``pmod(xxhash64(key), P)``.
    """
    if key_groups is None:
        return F.pmod(F.xxhash64(key), F.lit(partitions)).cast("int")
    kg = F.pmod(F.xxhash64(key), F.lit(key_groups))
    # kg * P < G * P <= 2^30 (P <= G <= MAX_KEY_GROUPS = 2^15, any G: no power of two
    # needed) and the quotient's distance to an integer is >= 1/G: exact in double
    return F.floor(kg * F.lit(partitions) / F.lit(key_groups)).cast("int")


def source_frame(spark: SparkSession, spec: PipelineSpec, columns: ColumnTypes,
                 chunks: list[Chunk] | None, readers: int = 1,
                 report: WriterConfig | None = None) -> DataFrame:
    """The rows of consecutive chunks with every source column plus ``SEQ``, read by
    ``readers`` tasks (each in order; with one, the whole frame is in order).

    ``chunks`` None (file sources only): the chunks of the job that runs the query.
    ``report``: the run's writers' settings, where chunks are reported."""
    if chunks is None:
        if spec.source.kind == "generator":
            raise CecError("ingest: a generator query needs its chunks")
        return _file_frame(spark, columns, TimeSpec.of(spec), None, readers, report)
    chunk = chunks[0]
    if chunk.fmt == "generator":
        gen = spec.source.generator
        assert gen is not None
        ids = F.col("id")
        # a resumed ingest starts at the first row a log may lack (seq = row here)
        return spark.range(first_read(chunks), chunks[-1].stop, 1, readers).select(
            F.pmod(F.xxhash64(F.lit(gen.seed), ids), F.lit(gen.keys)).alias("item_id"),
            (F.pmod(F.xxhash64(F.lit(gen.seed + 1), ids), F.lit(10_000)) + 1)
            .cast("double").alias("item_price"),
            (F.lit(gen.start_ts) + ids * F.lit(gen.interval_us)).alias("item_time"),
            ids.alias(SEQ),
        )
    return _file_frame(spark, columns, TimeSpec.of(spec), chunks, readers, report)


def upstream_frame(spark: SparkSession, spec: PipelineSpec, columns: ColumnTypes,
                   chunks: list[Chunk] | None, readers: int = 1,
                   key_groups: int | None = None, report: WriterConfig | None = None) -> DataFrame:
    """Filtered, projected and partitioned rows: ts, seq, key, value, PART
    (:func:`partition_expr` with the run's ``key_groups``)."""
    df = source_frame(spark, spec, columns, chunks, readers, report)
    if spec.where is not None:
        df = df.where(spec.where)
    agg = spec.aggregate
    key = F.col(f"`{agg.group_by}`")
    value = (F.col(f"`{agg.field}`").cast("double") if agg.field is not None
             else F.lit(1.0))
    late = [F.col(LATE)] if spec.source.reorders and spec.source.kind != "generator" else []
    return df.select(
        F.col(f"`{spec.source.time_field}`").cast("long").alias("ts"),
        F.col(SEQ).alias("seq"),
        key.alias(agg.group_by),
        value.alias(value_column(spec)),
        partition_expr(key, spec.run.partitions, key_groups).alias(PART),
        *late,  # a late row (source_order): the writer counts it, never appends it
    )


def compile_filter(spark: SparkSession, spec: PipelineSpec, columns: ColumnTypes
                   ) -> CompiledWhere | None:
    """``[filter].where`` analysed by Spark over the source frame's schema (None: no
    filter); a SpecError naming the part the Python evaluator cannot evaluate."""
    if spec.where is None:
        return None
    ddl = ", ".join(f"`{n}` {_SPARK_TYPES[t]}" for n, t in zip(columns.names, columns.types,
                                                               strict=True))
    return compile_where(spark, spec.where, ddl, origin=spec.origin)


def check_filter(spark: SparkSession, plan: RunPlan) -> None:
    """Analyse the query of the plan's first chunk: a bad ``where`` is a SpecError, before
    any write (a plan without a planned source: nothing to analyse)."""
    spec, source = plan.spec, plan.source
    if spec.where is None or source is None:  # nothing of the user's to analyse
        return
    chunk = source.chunks[0] if source.chunks else Chunk(0, "generator", "", 0, 0, 0, 0)
    if chunk.fmt != "generator" and not source.chunks:
        return
    try:
        upstream_frame(spark, spec, source.columns, [chunk]).schema  # noqa: B018
    except (AnalysisException, ParseException) as exc:
        first = str(exc).strip().splitlines()[0]
        raise field_error(spec.origin, ("filter", "where"), f"{spec.where!r} is not a valid "
                          f"Spark SQL condition over the source's columns: {first}") from exc


# --------------------------------------------------------------------------- query


class IngestQuery:
    """The Spark query of an ingest, run once per job (a run of consecutive chunks).

    A file source's query with one ingest task does not depend on the chunks: it is
    built the first time and run again for every job, which hands the job's chunks to
    its task as a Spark local property (:data:`JOB_PROPERTY`, :func:`job_chunks`).
    Building the query and planning it again for every job took about 0.1 s of a
    ``stream-dir`` poll's job. The generator's chunks are the query's range, and with
    ``ingest_tasks`` > 1 a shuffle sits in the query (Spark reuses the shuffle output
    of a physical plan run again, which would hand a job the previous job's rows):
    those queries are built per job.

    A file source with one ingest task whose rows Python can filter, project and
    partition exactly as the Spark query does (:func:`cec_spark.ingest.project.
    direct_reason`, the filter compiled by :func:`compile_filter`) runs the **direct**
    query instead: one task that reads the job's chunks, makes the upstream rows
    (:class:`~cec_spark.ingest.project.Projector`) and writes them; no row enters the
    JVM (the Spark query crossed Python → JVM → Python with every batch).
    ``direct_off`` says why a run does not (None: it does).
    """

    _SCHEMA = ("rows long, started_at double, trimmed long, received long, first_seq long, "
               + ", ".join(f"{c} double" for c in CLOCKS) + ", sealed long")

    def __init__(self, spark: SparkSession, plan: RunPlan, driver: int | None = None) -> None:
        self.spark, self.spec, self.settings = spark, plan.spec, plan.settings
        self.cfg = WriterConfig.for_run(plan.spec, plan.layout, plan.settings.run_id, driver)
        self.tasks = plan.spec.run.ingest_tasks
        self.writers = min(self.tasks, plan.partitions)
        self._reused: DataFrame | RDD[dict[str, Any]] | None = None
        self.direct: Projector | None = None
        self.direct_off, where = _direct_off(spark, plan)
        if self.direct_off is None:
            self.direct = Projector(plan.spec, plan.settings.key_groups, where)

    def _query(self, chunks: list[Chunk] | None, readers: int) -> DataFrame:
        df = upstream_frame(self.spark, self.spec, self.settings.columns, chunks, readers,
                            self.settings.key_groups, self.cfg)
        if readers > 1 or self.writers > 1:
            # rows to their writer through Spark's shuffle: Spark partition w holds the
            # key partitions p % writers == w, in seq order (each log keeps the source
            # order)
            df = (df.repartition(self.writers, _route(self.spark, self.writers))
                  .sortWithinPartitions("seq"))
        return df.mapInArrow(chunk_writer(self.cfg, chunks, self.writers), self._SCHEMA)

    def run(self, chunks: list[Chunk], progress: IngestProgress) -> int:
        """Ingest consecutive chunks (one Spark job); the number of tuples written."""
        if self.direct is not None:
            if self._reused is None:  # an RDD job: no SQL planning (cec_spark.driver.jobs)
                self._reused = self.spark.sparkContext.parallelize([0], 1).mapPartitions(
                    _direct_writer(self.cfg, self.settings.columns.to_json(),
                                   TimeSpec.of(self.spec).to_json(), self.direct))
            # the batches the reader makes: Spark's Arrow batch size, as the Spark query's
            key = "spark.sql.execution.arrow.maxRecordsPerBatch"
            sc = self.spark.sparkContext
            sc.setLocalProperty(BATCH_PROPERTY, str(sql_setting(self.spark, key) or 1 << 18))
            try:
                out = self._run_reused(chunks)
            finally:
                sc.setLocalProperty(BATCH_PROPERTY, None)  # type: ignore[arg-type]
        elif chunks[0].fmt == "generator" or self.tasks > 1:
            # with several tasks the rows go through a shuffle, whose output Spark
            # keeps and hands again to a query run again: built per job
            readers = min(self.tasks, len(chunks)) if chunks[0].fmt != "generator" \
                else self.tasks
            out = self._query(chunks, readers).collect()
        else:
            if self._reused is None:
                self._reused = self._query(None, self.tasks)
            out = self._run_reused(chunks)
        clocks = progress.writer_s
        if "first_writer_at" not in clocks:
            clocks["first_writer_at"] = min(float(r["started_at"]) for r in out)
        for row in out:
            progress.logs_sealed += int(row["sealed"])
            progress.trimmed_segments += int(row["trimmed"])
            progress.rows_received += int(row["received"])
            first = int(row["first_seq"])
            if first >= 0 and (progress.first_received is None
                               or first < progress.first_received):
                progress.first_received = first
            for c in CLOCKS:
                clocks[c] = clocks.get(c, 0.0) + float(row[c])
        return int(sum(r["rows"] for r in out))


    def _run_reused(self, chunks: list[Chunk]) -> list[Any]:
        """The query built once, run for ``chunks`` (a Spark local property)."""
        assert self._reused is not None
        sc = self.spark.sparkContext
        sc.setLocalProperty(JOB_PROPERTY, json.dumps([c.to_json() for c in chunks]))
        try:
            return self._reused.collect()
        finally:
            sc.setLocalProperty(JOB_PROPERTY, None)  # type: ignore[arg-type]


def _direct_off(spark: SparkSession, plan: RunPlan) -> tuple[str | None, CompiledWhere | None]:
    """Why ``plan``'s ingest runs the Spark query, not the direct one (None: direct),
    and the compiled filter of a direct one."""
    spec = plan.spec
    if spec.source.kind == "generator":
        return "the generator's rows are made by Spark", None
    reason = direct_reason(spec, plan.settings)
    if reason is not None:
        return reason, None
    try:
        return None, compile_filter(spark, spec, plan.settings.columns)
    except SpecError as exc:
        return f"the filter does not compile for Python ({exc})", None


def _direct_writer(cfg: WriterConfig, columns: str, time: str, project: Projector
                   ) -> Callable[[Iterable[int]], Iterator[dict[str, Any]]]:
    """The direct query's function (an RDD job of one task, its one element 0): the
    task reads the job's chunks (:func:`job_chunks`), makes the upstream rows and
    writes them (:func:`chunk_writer`); it yields the writer's one row of figures."""

    def run(indices: Iterable[int]) -> Iterator[dict[str, Any]]:
        for _ in indices:  # the one element: nothing to read from the JVM
            pass
        chunks = job_chunks()
        cols, tspec = ColumnTypes.from_json(columns), TimeSpec.from_json(time)
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty(BATCH_PROPERTY) if ctx is not None else None
        size = int(raw) if raw and raw.isdigit() and int(raw) > 0 else 1 << 18
        reports = cfg.reports()
        rows = _chunk_rows(chunks, lambda c: list(read_chunk(
            c, cols, tspec, batch_rows=size, report=reports)), project, tspec.reorders)
        done: list[dict[str, Any]] = []
        for figures in chunk_writer(cfg, chunks)(rows):
            done.extend(figures.to_pylist())
        del rows
        # the task is done, its worker stays: what it held (the chunks, their splits;
        # about 150 MiB at 1 M-row chunks) goes back to the system, not kept idle beside
        # the operators until the run ends
        release_freed()
        yield from done

    return run


def _chunk_rows(chunks: list[Chunk], read: Callable[[Chunk], list[pa.RecordBatch]],
                project: Projector, reordered: bool) -> Iterator[pa.RecordBatch]:
    """The projected rows of ``chunks``, read ahead (:func:`read_ahead`); after each
    chunk the heap's free pages go back to the system: a chunk's splits and encodings
    are freed into glibc's heap, which kept them (measured on the memory benchmark's
    1 M-row parquet chunks: the ingest task's RSS 250-290 MiB while it runs, against
    300-320; about 3 ms a chunk). Arrow's pool is released once, at the end: the next
    chunk takes its pages again."""
    for chunk, batches in read_ahead(chunks, read):
        yield from project_chunk(project, chunk, batches, reordered=reordered)
        del batches
        release_freed(arrow=False)


def read_ahead(chunks: list[Chunk], read: Callable[[Chunk], list[pa.RecordBatch]]
               ) -> Iterator[tuple[Chunk, list[pa.RecordBatch]]]:
    """``(chunk, read(chunk))`` in order, the next chunk read on a thread while the
    caller works on this one (the direct ingest: pyarrow parses and checks the next
    chunk, without the GIL, while the task projects, splits and appends this one).

    A chunk's error (a bad row) is raised when the caller reaches that chunk, after
    the chunks before it. A caller that stops early waits for the read under way."""
    if not chunks:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cec-read-ahead") as pool:
        pending = pool.submit(read, chunks[0])
        try:
            for i, chunk in enumerate(chunks):
                batches = pending.result()
                if i + 1 < len(chunks):
                    pending = pool.submit(read, chunks[i + 1])
                yield chunk, batches
        finally:
            pending.cancel()


BATCH_PROPERTY = "cec.ingest.batch_rows"  # the direct query's batch size (rows)

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


