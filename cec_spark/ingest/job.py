"""The ingest: source → Spark (read, filter, key partition) → one upstream log per partition.

The source is cut into chunks (:mod:`cec_spark.source.planner`); a Spark **job** ingests a run of
consecutive chunks (up to :data:`JOB_ROWS` source rows) with a single task, so the
order of the stream is kept without any sort. The task reads the chunks (the generator
through ``spark.range`` and deterministic expressions; files through a Python function
over the chunk numbers, :func:`_file_frame`, which yields Arrow batches), applies
``[filter].where`` in Spark SQL, computes the key partition (key group
``kg = pmod(xxhash64(key), G)``, partition ``kg * P div G``) in Spark SQL
(:func:`partition_expr`, the only place the partition of a key is decided) and
hands Arrow batches to :func:`chunk_writer` (``mapInArrow``). A file source whose rows
Python can filter, project and partition exactly so (:mod:`cec_spark.ingest.project`)
runs the *direct* query instead: the one task reads the chunks and writes the logs, no
row enters the JVM (:class:`IngestQuery`). The
writer splits each batch by partition (a stable argsort, so each partition's rows
stay in ``seq`` order), appends one record per partition per batch and, as soon as it
has passed the end of a chunk, commits every one of the P logs with the token
of the last chunk it completed and its watermark (:mod:`cec.ingest_token`,
:mod:`cec_spark.ingest.watermark`); then it trims the
upstream logs (:func:`trim_upstream`). With one ingest task a file source's query is
built once and run for every job (:class:`IngestQuery`): the job's chunks travel as a
Spark local property (a ``stream-dir`` source runs a job per poll that found files).

The parts: :mod:`cec_spark.ingest.query` (the Spark query, :class:`IngestQuery`),
:mod:`cec_spark.ingest.writer` (the writer, the upstream logs' tokens),
:mod:`cec_spark.ingest.logs` (their creation, trim, seal, resume point);
this module runs the loop over a run's chunks and re-exports their public names.

Idempotence and resumption: a restarted ingest starts at the chunk after the oldest
token of the P logs, and within it at the first row not every log holds (the tokens'
``row``, committed within a chunk: :func:`~cec_spark.ingest.logs.resume_point`; the
rows before it are not read, :func:`~cec_spark.ingest.logs.resume_chunks`); while
writing, a log only receives rows whose ``seq`` is above its ``last_seq`` (a crash
between the commits of two logs leaves them at different rows). Nothing is read twice
into a log, nothing is skipped. At the end of a bounded source every upstream log is
sealed: by the writers of the job that holds its last chunk, once they committed it
(:data:`~cec_spark.ingest.writer.SEAL_PROPERTY`; a retried writer leaves a log already
sealed as it is), and the driver seals any they did not (a crash between that commit
and the seal, a stream folder's end). Where it started and what its writers received
are in the ingest's advisory state file (``RUN/state/ingest.json``, as the stream
folder's task writes it: ``resumed_at``, ``rows_received``, ``first_received``,
``sealed_by_writers``), after each job.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from cec_spark.errors import InputError
from cec_spark.ingest.logs import (
    ResumePoint,
    commit_watermark,
    committed_chunk,
    least,
    resume_chunks,
    resume_point,
    seal_upstream,
    upstream_sealed,
    watermarks,
)
from cec_spark.ingest.query import (
    IngestProgress,
    IngestQuery,
)
from cec_spark.ingest.stream import (
    FALLBACK,
    StreamTask,
    check_resume,
    prepare,
    run_stream_ingest,
)
from cec_spark.ingest.watermark import WM_EVERY_S, IdleClock
from cec_spark.ingest.writer import SEAL_PROPERTY, open_upstream
from cec_spark.run.plan import RunPlan
from cec_spark.rundir.advisory import write_advisory
from cec_spark.rundir.drivers import check_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.chunk_report import counted_rows
from cec_spark.source.fingerprint import (
    check_fingerprint,
    fingerprint,
    record,
    stored_fingerprint,
)
from cec_spark.source.folder import StreamDirWatcher
from cec_spark.source.planner import plan_source
from cec_spark.source.stored import load_plan, planned_with_stats, store_plan
from cec_spark.source.types import Chunk, SourcePlan, WatchState
from cec_spark.watchdog import say_once
from storage_log.errors import LogLockedError
from storage_log.log import StreamLog

JOB_ROWS = 4_000_000  # source rows per ingest job (many chunks, one commit each)
# ... of the direct query (cec_spark.ingest.query.IngestQuery.direct), whose writer ends
# its job at the next chunk on a stop or a newer driver: a job boundary costs ~0.4 s
# (the task, the logs opened again, a new segment each); 30 M rows in jobs of 16 M
# instead of 4 M took 0.92x the wall (2 pairs, load 2-5, bench/datapath.py)
DIRECT_JOB_ROWS = 16_000_000




_TASK_INPUT_ERROR = re.compile(r"\bcec_spark\.errors\.InputError: ([^\n]+)")


def task_input_error(exc: BaseException) -> InputError | None:
    """The InputError a failed Spark job carries from its task (a bad row the task
    found, :attr:`cec_spark.source.types.Chunk.check`): the same error in the driver
    (exit 2, the message naming file, line or row, field), not a failed job retried."""
    found = _TASK_INPUT_ERROR.findall(str(exc))
    return InputError(found[-1].strip()) if found else None


def _jobs(chunks: Sequence[Chunk], resume: ResumePoint, job_rows: int = JOB_ROWS,
          chunk_rows: int = 0) -> Iterator[list[Chunk]]:
    """Runs of consecutive chunks after ``resume`` (:func:`resume_chunks`: the rows every
    log holds skipped) of at most ``job_rows`` rows to read each (a chunk cut by bytes,
    whose rows are not counted: ``chunk_rows``, what it was cut to hold)."""
    job: list[Chunk] = []
    rows = 0
    for chunk in resume_chunks(chunks, resume):
        size = chunk_rows if chunk.sparse else chunk.rows - chunk.skip
        if job and rows + size > job_rows:
            yield job
            job, rows = [], 0
        job.append(chunk)
        rows += size
    if job:
        yield job


def ingest(spark: SparkSession, plan: RunPlan, progress: IngestProgress,
           should_stop: Callable[[], bool], *, driver: int | None = None) -> None:
    """Run the ingest of ``plan``'s run from where the upstream logs' tokens say it stopped.

    A bounded source's chunks are the plan's (planned here only for a resumed run,
    whose plan has none: a completed ingest never reads its source). A stream folder's
    watcher goes on from the plan's files, typed by the run's column types. Its writer
    tasks stop when a newer driver than ``driver`` took the run.
    """
    spec, layout = plan.spec, plan.layout
    sc = spark.sparkContext
    sc.setJobGroup("cec-ingest", "cec ingest", interruptOnCancel=False)
    progress.started = time.monotonic()
    if upstream_sealed(layout, spec.run.partitions):  # all ingested: the source is not
        progress.sealed = True                        # needed (it may be gone)
        progress.finished = time.monotonic()
        return
    point = resume_point(layout, spec.run.partitions)
    resume, resume_next = point.chunk, point.next_seq
    progress.resumed_at = point.row
    if spec.source.kind == "stream-dir":
        if not _ingest_folder(spark, plan, progress, should_stop, driver, point):
            return  # stopped before the folder's end: nothing to seal
    else:
        source, progress.plan_from = _bounded_source(plan, resume)
        progress.chunks_total = len(source.chunks)
        check_resume(spec, source.chunks, resume, resume_next)
        _run_jobs(IngestQuery(spark, plan, driver), source.chunks, point, progress,
                  should_stop, ends_source=True)
    if should_stop():
        return
    if progress.logs_sealed < spec.run.partitions:  # else the last job's writers did
        seal_upstream(layout, spec.run.partitions, spec.upstream_fsync)
    progress.sealed = True
    progress.finished = time.monotonic()


def _bounded_source(plan: RunPlan, resume: int) -> tuple[SourcePlan, str]:
    """The chunks of a bounded source's ingest, the run's plan stored for a resume.

    A new run's were planned by the driver (:attr:`RunPlan.source`): they are stored
    (:mod:`cec_spark.source.stored`). A resumed run takes the stored plan when the
    source's files have the sizes and times it was made from (no byte read: the cost
    does not grow with the rows); else it plans from the files' metadata (the tasks
    check the rows they read), checks that what the run read is unchanged
    (:func:`_check_source`: a bad row fixed after its tokens is accepted) and stores
    the new plan. Also where they came from (:attr:`IngestProgress.plan_from`)."""
    spec, settings, layout = plan.spec, plan.settings, plan.layout
    if plan.source is not None:
        if spec.source.kind != "generator":
            store_plan(layout.source_plan_file, spec, settings.max_tuples, plan.source,
                       plan.source_stats)
        return plan.source, "run"
    if spec.source.kind == "generator":
        return plan_source(spec, max_rows=settings.max_tuples, validate=False), "files"
    stored = load_plan(layout.source_plan_file, spec, settings.max_tuples)
    if stored is not None:
        return stored, "stored"
    source, stats = planned_with_stats(spec, settings.max_tuples, settings.chunk_bytes,
                                       settings.source_reports)
    if resume >= 0:  # a resumed ingest reads the source again: the same up to its
        _check_source(plan, source, resume)  # tokens (a bad row fixed after them)
    store_plan(layout.source_plan_file, spec, settings.max_tuples, source, stats)
    return source, "files"


def _check_source(plan: RunPlan, source: SourcePlan, resume: int) -> None:
    """A resumed ingest's source is what the run read up to chunk ``resume``, its last
    committed one (:func:`check_fingerprint`); from there on it may differ (a bad row
    fixed). The fingerprint of what it reads now is recorded before it reads it."""
    spec, path = plan.spec, plan.layout.source_files_file
    stored = stored_fingerprint(path, list(plan.settings.source_files))
    upto: tuple[str, int | None] | None = None
    if resume < len(source.chunks):
        last = source.chunks[resume]
        upto = (last.file, None if last.fmt == "parquet" else last.stop)
    check_fingerprint(spec, stored, read_upto=upto, now=list(source.files),
                      chunks=source.chunks, reports=plan.layout.source_chunk_report,
                      upto_chunk=resume)
    files = list(source.files) or fingerprint(spec)
    if files and files != stored:
        record(path, files)


def _ingest_folder(spark: SparkSession, plan: RunPlan, progress: IngestProgress,
                   should_stop: Callable[[], bool], driver: int | None,
                   resumed: ResumePoint) -> bool:
    """A stream folder's ingest until it ends (or a stop): the long-lived task
    (:mod:`cec_spark.ingest.stream`) or, for what it cannot match, a Spark job per poll
    (said once on stderr). True: the folder ended, every chunk is committed."""
    spec, settings = plan.spec, plan.settings
    start = plan.source
    if start is None or start.watch is None:  # nothing planned: no file seen yet
        start = SourcePlan(settings.columns, (), False, WatchState((), 0, None, ""))
    task = prepare(spark, plan, driver, start)
    if isinstance(task, StreamTask):  # one long-lived Spark task (issue 28)
        return run_stream_ingest(spark, plan, task, progress)
    say_once(FALLBACK.format(reason=task).removeprefix("cec: "))
    query = IngestQuery(spark, plan, driver)
    watcher = StreamDirWatcher(spec, max_rows=settings.max_tuples, start=start)
    planned: Sequence[Chunk] | None = start.chunks or None  # not ingested yet
    idle = _IdleLogs(plan, query) if spec.source.idle_close_us is not None else None
    try:
        while not should_stop():
            new = planned if planned is not None else watcher.poll()
            planned = None
            check_resume(spec, new, resumed.chunk, resumed.next_seq)
            if new and idle is not None:
                idle.close()  # the job's task opens the logs
            _run_jobs(query, new, resumed, progress, should_stop)
            if watcher.ended:
                return True
            wait = spec.source.poll_ms / 1000
            if idle is not None:
                idle.after_poll(bool(new), watcher)
                wait = min(wait, WM_EVERY_S)
            if not new:
                time.sleep(wait)
    finally:
        if idle is not None:
            idle.close()
    return False


class _IdleLogs:
    """``[source] idle_close`` in the per-poll ingest: after a poll that found no file,
    once the folder has been idle that long, the driver commits every upstream log with
    the watermark the wall clock advanced (:mod:`cec_spark.ingest.watermark`; capped at
    the smallest time of a row ``allowed_lateness`` still holds). It keeps the logs open
    while the folder stays idle (one writer epoch per idle period, not per commit) and
    closes them before the next job's task opens them."""

    def __init__(self, plan: RunPlan, query: IngestQuery) -> None:
        assert plan.spec.source.idle_close_us is not None
        self.plan, self.query = plan, query
        self.clock = IdleClock(plan.spec.source.idle_close_us)
        self.logs: list[StreamLog | None] | None = None
        self.clock.arrived(time.monotonic(), self._committed())

    def _committed(self) -> int | None:
        return least(watermarks(self.plan.layout, self.plan.spec.run.partitions))

    def after_poll(self, found: bool, watcher: StreamDirWatcher) -> None:
        if found:
            self.clock.arrived(time.monotonic(), self._committed())
            return
        w = self.clock.watermark(time.monotonic())
        if w is None:
            return
        watch = watcher.plan.watch if self.plan.spec.source.reorders else None
        held = None if watch is None or watch.order is None else watch.order.held_min()
        w = w if held is None else min(w, held)
        if self.logs is None:
            check_driver(self.plan.layout, self.query.cfg.driver)
            logs: list[StreamLog | None] = []
            try:
                for p in range(self.plan.spec.run.partitions):
                    logs.append(open_upstream(self.query.cfg, p))
            except LogLockedError:  # a task of the last job still ends: the next poll
                self.logs = logs
                self.close()
                return
            self.logs = logs
        commit_watermark(self.logs, w)  # before any operator can see it

    def close(self) -> None:
        for log in self.logs or []:
            if log is not None:
                log.close()
        self.logs = None


def _run_jobs(query: IngestQuery, chunks: Sequence[Chunk], resume: ResumePoint,
              progress: IngestProgress, should_stop: Callable[[], bool], *,
              ends_source: bool = False) -> None:
    """The jobs of ``chunks`` after ``resume``, in order. ``ends_source``: the chunks
    end a bounded source, and the writers of the job holding the last one seal their
    logs once its rows are committed (:data:`SEAL_PROPERTY`; not a stream folder's
    poll, after which more files may come)."""
    job_rows = DIRECT_JOB_ROWS if query.direct is not None else JOB_ROWS
    layout = RunLayout(Path(query.cfg.run_dir))
    sc = query.spark.sparkContext
    for job in _jobs(chunks, resume, job_rows, query.spec.source.chunk_rows):
        if should_stop():
            return
        t0 = time.monotonic()
        last = ends_source and job[-1].index == chunks[-1].index  # writers seal
        try:
            if last:
                sc.setLocalProperty(SEAL_PROPERTY, "1")
            progress.tuples += query.run(job, progress)
        except Exception as exc:
            bad = task_input_error(exc)
            if bad is None:
                raise
            raise bad from None
        finally:
            if last:
                sc.setLocalProperty(SEAL_PROPERTY, None)  # type: ignore[arg-type]
        progress.job_seconds.append(time.monotonic() - t0)
        if should_stop():  # the job may have ended at a chunk before its last
            chunk, nxt = committed_chunk(layout, query.cfg.partitions)
            if chunk >= 0 and nxt is not None:
                progress.chunks_done = chunk + 1
                progress.source_rows = counted_rows(layout.source_chunk_report, chunks, chunk)
            _report(layout, progress)
            return
        progress.chunks_done = job[-1].index + 1
        progress.source_rows = counted_rows(layout.source_chunk_report, chunks, job[-1].index)
        _report(layout, progress)
    if chunks and chunks[-1].index <= resume.chunk:
        progress.chunks_done = chunks[-1].index + 1
        progress.source_rows = counted_rows(layout.source_chunk_report, chunks,
                                            chunks[-1].index)


def _report(layout: RunLayout, progress: IngestProgress) -> None:
    """The ingest's advisory state file after a job (the stream folder's task writes
    the same file, :mod:`cec_spark.ingest.stream`): where it stands, where it started
    reading and what its writers received since."""
    write_advisory(layout.ingest_state_file, {
        "chunks_done": progress.chunks_done, "source_rows": progress.source_rows,
        "tuples": progress.tuples, "trimmed": progress.trimmed_segments,
        "resumed_at": progress.resumed_at, "rows_received": progress.rows_received,
        "first_received": progress.first_received, "plan_from": progress.plan_from,
        "sealed_by_writers": progress.logs_sealed})
