"""The long-lived ingest of a stream folder: one Spark task that stays up (issue 28).

The per-poll ingest (:mod:`cec_spark.ingest.job`) runs one Spark job for every poll that
found files (~180 ms each, then queueing). Here the driver runs ONE Spark job of one task
(``spark.range(1, 1 partition).mapInArrow``) that:

1. plans the folder exactly as the per-poll ingest does (:class:`StreamDirWatcher`, from the
   run's plan: the same chunk numbers, tokens and resume point);
2. for each new chunk: :func:`read_chunk` → ``[filter].where`` compiled once by Spark on the
   driver (:class:`CompiledWhere`, Spark SQL's semantics on Arrow) → the projection of
   :func:`cec_spark.ingest.query.upstream_frame` → the key partition (Spark's
   ``pmod(xxhash64(key), G)`` then ``kg * P div G``, :mod:`recovery.rescale`, one hash per
   distinct key of a batch) → the writer of the per-poll path
   (:class:`UpstreamWriter`: append per partition, commit with the chunk's token, trim);
3. is woken by inotify on the folder (:class:`CommitWatch`: a file renamed into place),
   with the spec's ``poll_ms`` as the bound when nothing wakes it (the poll for a
   producer on another host of a shared file system); with ``[source]
   idle_close`` it commits every log with a watermark advanced by the wall clock once
   no file came for that long (:mod:`cec_spark.ingest.watermark`), every
   :data:`~cec_spark.ingest.watermark.WM_EVERY_S` while idle;
4. ends when the folder ends (``_END``; the driver then seals the logs), at a ``STOP`` file
   (returns, every log committed) or when a newer driver took the run
   (:class:`DriverSupersededError`). Spark retries it; a retry resumes from the committed
   tokens, at the first row not every log holds (:func:`~cec_spark.ingest.logs.
   resume_chunks`; a log only receives rows above its ``last_seq``).

With ``[run] ingest_tasks = N`` (N > 1) the job has N such tasks, ``min(N, P)``, fewer
when Spark has fewer free task slots beyond the P operator tasks (said once; a
long-lived task that waits for a slot would hold its logs back for ever). Task ``w``
owns the upstream logs ``p % N == w``, as a writer of the per-poll path does: it reads
every new file of the folder (each task plans the folder itself: the same chunks, as
they are made from the files alone), keeps the rows of its logs and commits them with
the chunks' tokens. Each log keeps one writer, so its rows, tokens and watermarks are
those of one task, and a task resumes from its own logs' tokens (``resume_point(...,
owned)``). Reading and parsing are repeated per task; the projection's encode, append
and commit (the ingest's per-row cost) are split. The tasks run in processes of their
own, tagged ``i<w>`` (``storage_log.faults``).

What it cannot match exactly falls back to the per-poll Spark jobs, said once on stderr
(:func:`fallback_reason`): lateness settings (``allowed_lateness``/``late``), a key that
is not int64/string, a value that is a string, a filter the evaluator does not
reproduce. One semantics either way.

The task reports where it stands in ``RUN/state/ingest.json`` (``ingest.W.json`` for
each of several; advisory, for the driver's
progress view), never what recovery depends on: that is the upstream logs' tokens. It
rewrites it only when something in it changed (not the count of polls alone): an idle
ingest writes nothing, and looks for a newer driver every
:data:`~cec_spark.rundir.lease.FENCE_LOOK_S` (docs/CLUSTER.md, "Control-plane cost").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from cec.errors import SpecError
from cec.ingest_token import decode_token
from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.ingest.logs import commit_watermark, least, resume_chunks, resume_point
from cec_spark.ingest.project import Projector, direct_reason, project_chunk
from cec_spark.ingest.query import IngestProgress, compile_filter
from cec_spark.ingest.watermark import WM_EVERY_S, IdleClock
from cec_spark.ingest.where import CompiledWhere
from cec_spark.ingest.writer import (
    PART,
    JobChunks,
    UpstreamWriter,
    WriterConfig,
    open_upstream,
)
from cec_spark.run.cluster import available_slots
from cec_spark.run.plan import RunPlan
from cec_spark.rundir.access import check_visible
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.drivers import check_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import FENCE_LOOK_S
from cec_spark.rundir.run_file import RunSettings, parse_run_text
from cec_spark.source.folder import StreamDirWatcher
from cec_spark.source.read import read_chunk
from cec_spark.source.types import Chunk, ColumnTypes, SourcePlan, TimeSpec, WatchState
from cec_spark.watchdog import say_once
from storage_log.faults import set_tag
from storage_log.log import StreamLog
from storage_log.notify import CommitWatch

FALLBACK = "cec: the stream ingest runs one Spark job per poll: {reason}"
STATE_EVERY_S = 0.5


# --------------------------------------------------------------------------- driver side


def fallback_reason(spec: PipelineSpec, settings: RunSettings) -> str | None:
    """What the long-lived tasks cannot match: the bounded ingest's direct query's
    reasons, but for several ingest tasks (they run as several long-lived tasks)."""
    return direct_reason(spec, settings, several=True)


def plan_json(plan: SourcePlan) -> str:
    """A stream folder's plan (no lateness state) as JSON for the task."""
    w = plan.watch
    assert w is not None and w.order is None
    return json.dumps({"columns": plan.columns.to_json(),
                       "chunks": [c.to_json() for c in plan.chunks], "ended": plan.ended,
                       "seen": list(w.seen), "next_seq": w.next_seq, "last_ts": w.last_ts,
                       "last_where": w.last_where})


def plan_from_json(text: str) -> SourcePlan:
    raw = json.loads(text)
    return SourcePlan(ColumnTypes.from_json(raw["columns"]),
                      tuple(Chunk.from_json(c) for c in raw["chunks"]), bool(raw["ended"]),
                      WatchState(tuple(raw["seen"]), int(raw["next_seq"]), raw["last_ts"],
                                 str(raw["last_where"])))


@dataclass(frozen=True)
class StreamTask:
    """What the long-lived ingest task needs (JSON text only crosses to the executor)."""

    run_dir: str
    run_id: str | None
    driver: int | None
    run_text: str
    start: str  # plan_json
    where: str | None  # CompiledWhere.to_json
    writers: int = 1  # the long-lived tasks; task w owns the logs p % writers == w


def state_path(layout: RunLayout, w: int = 0, writers: int = 1) -> Path:
    return layout.ingest_writer_state_file(w, writers)


def run_stream_ingest(spark: SparkSession, plan: RunPlan, task: StreamTask,
                      progress: IngestProgress) -> bool:
    """Run the long-lived tasks (one Spark job, ``task.writers`` tasks) until they
    return; progress is read from their state files meanwhile. True: the folder ended
    (seal it)."""
    layout, n = plan.layout, task.writers
    out: list[Any] = []
    failure: list[BaseException] = []

    def job() -> None:  # a thread of its own: Spark's job group is per thread
        spark.sparkContext.setJobGroup(
            "cec-ingest", f"cec stream ingest ({n} long-lived task{'s' * (n > 1)})",
            interruptOnCancel=True)
        try:
            out.extend(spark.range(0, n, 1, n).mapInArrow(stream_entry(task), "result string")
                       .collect())
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=job, name="cec-stream-ingest", daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.5)
        _progress_from(merge_states([read_advisory(state_path(layout, w, n))
                                     for w in range(n)]), progress)
    if failure:
        raise failure[0]
    results = [json.loads(row["result"]) for row in out]
    _progress_from(merge_states(results), progress)
    return len(results) == n and all(bool(r.get("ended")) for r in results)


def merge_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several long-lived tasks as one task's (pure): where the ingest
    stands is where its slowest task stands (chunks, source rows, the resume row);
    rows and seconds add up. Empty until every task has reported."""
    if not states or any(not s for s in states):
        return {}
    if len(states) == 1:
        return dict(states[0])
    out: dict[str, Any] = {}
    for k in ("chunks_done", "source_rows", "resumed_at"):
        out[k] = min(int(s.get(k, 0)) for s in states)
    for k in ("tuples", "trimmed", "rows_received", "polls"):
        out[k] = sum(int(s.get(k, 0)) for s in states)
    firsts = [s.get("first_received") for s in states]
    held = [f for f in firsts if isinstance(f, int)]
    out["first_received"] = min(held) if held else None
    out["ended"] = all(bool(s.get("ended")) for s in states)
    out["stopped"] = any(bool(s.get("stopped")) for s in states)
    clocks: dict[str, float] = {}
    for s in states:
        c = s.get("writer_s")
        if isinstance(c, dict):
            for name, v in c.items():
                clocks[name] = clocks.get(name, 0.0) + float(v)
    out["writer_s"] = clocks
    return out


def _progress_from(state: dict[str, Any], progress: IngestProgress) -> None:
    if not state:
        return
    progress.chunks_done = int(state.get("chunks_done", progress.chunks_done))
    progress.source_rows = int(state.get("source_rows", progress.source_rows))
    progress.tuples = int(state.get("tuples", progress.tuples))
    progress.trimmed_segments = int(state.get("trimmed", progress.trimmed_segments))
    progress.resumed_at = int(state.get("resumed_at", progress.resumed_at))
    progress.rows_received = int(state.get("rows_received", progress.rows_received))
    first = state.get("first_received")
    progress.first_received = first if isinstance(first, int) else progress.first_received
    clocks = state.get("writer_s")
    if isinstance(clocks, dict):
        progress.writer_s.update({k: float(v) for k, v in clocks.items()})


def check_resume(spec: PipelineSpec, chunks: Sequence[Chunk], resume: int,
                 resume_next: int | None) -> None:
    """A resumed ingest must find the source as it was: the same rows up to its token."""
    for chunk in chunks:
        if chunk.index == resume and resume_next is not None and chunk.next_seq != resume_next:
            raise InputError(
                f"{spec.source.path}: the source changed since the run started: chunk "
                f"{resume} ended at row {resume_next} then and at row {chunk.next_seq} now "
                "(a resumed run must read the same input)")


# --------------------------------------------------------------------------- executor side


def stream_entry(task: StreamTask
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The job's function: the task of row ``w`` (``spark.range``'s) runs
    :func:`run_stream_task` as writer ``w``."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for w in batch.column(0).to_pylist():
                result = run_stream_task(task, int(w))
                yield pa.RecordBatch.from_pydict({"result": pa.array([json.dumps(result)])})

    return run


@dataclass
class _State:
    chunks_done: int = 0
    source_rows: int = 0
    tuples: int = 0
    trimmed: int = 0
    polls: int = 0
    ended: bool = False
    stopped: bool = False
    started_at: float = 0.0
    updated: float = 0.0
    # where this task started reading (the resume point's row) and what its writers
    # received since: rows (after the filter), the first one's seq (None: none yet)
    resumed_at: int = 0
    rows_received: int = 0
    first_received: int | None = None


class _StreamIngest:
    """The long-lived task's loop (:func:`run_stream_task`)."""

    def __init__(self, task: StreamTask, w: int = 0) -> None:
        self.w, self.writers = w, task.writers
        self.layout = RunLayout(Path(task.run_dir))
        check_visible(self.layout, task.run_id)
        check_driver(self.layout, task.driver)
        self.driver = task.driver
        self.spec, self.settings = parse_run_text(task.run_text,
                                                  f"{self.layout.run_file} (from the driver)")
        self.cfg = WriterConfig.for_run(self.spec, self.layout, task.run_id, task.driver)
        self.where = None if task.where is None else CompiledWhere.from_json(task.where)
        self.start = plan_from_json(task.start)
        self.columns = self.settings.columns
        self.time = TimeSpec.of(self.spec)
        self.projector = Projector(self.spec, self.settings.key_groups, self.where)
        self.state = _State(started_at=time.time())
        self.clock = [0.0, 0.0, 0.0]
        self._reported = 0.0
        self._fenced = time.monotonic()  # the last look for a newer driver
        self._written: dict[str, Any] | None = None  # the state file's figures

    def project(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``upstream_frame``'s rows: ts, seq, key, value, PART (filtered first); of
        several tasks, only the rows of this one's logs."""
        rows = self.projector(batch)
        if self.writers == 1:
            return rows
        part = rows.column(PART).to_numpy(zero_copy_only=False)
        return rows.filter(pa.array(part % self.writers == self.w))

    def rows(self, chunks: list[Chunk]) -> Iterator[pa.RecordBatch]:
        for chunk in chunks:
            yield from project_chunk(self.project, chunk,
                                     read_chunk(chunk, self.columns, self.time),
                                     reordered=self.time.reorders)

    def write(self, logs: list[StreamLog | None], chunks: list[Chunk]) -> None:
        """Chunks into the logs with the per-poll path's writer (one job's worth)."""
        writer = UpstreamWriter(self.cfg, self.layout, logs, JobChunks.of(chunks))
        writer.write(self.rows(chunks))
        st = self.state
        st.tuples += writer.written
        st.trimmed += writer.trimmed
        st.rows_received += writer.received
        if st.first_received is None:
            st.first_received = writer.first_seq
        st.chunks_done, st.source_rows = chunks[-1].index + 1, chunks[-1].next_seq
        for i, v in enumerate(writer.clock):
            self.clock[i] += v

    def report(self, force: bool = False) -> None:
        """The state file, at most every :data:`STATE_EVERY_S` (``force``: now), and
        only when it changed (:func:`_figures`); first a look for a newer driver, which
        an idle ingest also takes every :data:`FENCE_LOOK_S`."""
        now = time.monotonic()
        if not force and now - self._reported < STATE_EVERY_S:
            return
        self._reported = now
        figures = _figures(self.result())
        if not force and figures == self._written:
            if now - self._fenced >= FENCE_LOOK_S:
                check_driver(self.layout, self.driver)
                self._fenced = now
            return
        check_driver(self.layout, self.driver)
        self._fenced = now
        self.state.updated = time.time()
        write_advisory(state_path(self.layout, self.w, self.writers), self.result())
        self._written = figures

    def result(self) -> dict[str, Any]:
        return {**asdict(self.state), "writer_s": dict(zip(("wait_s", "append_s", "commit_s"),
                                                           self.clock, strict=True))}

    def stop_now(self) -> bool:
        return self.layout.stop_file.exists()

    def run(self) -> dict[str, Any]:
        spec, layout = self.spec, self.layout
        parts = spec.run.partitions
        owned = [p for p in range(parts) if p % self.writers == self.w]
        point = resume_point(layout, parts, owned)
        self.state.resumed_at = point.row
        watcher = StreamDirWatcher(spec, max_rows=self.settings.max_tuples, start=self.start)
        planned: list[Chunk] | None = list(self.start.chunks) or None
        logs: list[StreamLog | None] = [
            open_upstream(self.cfg, p) if p % self.writers == self.w else None
            for p in range(parts)]
        assert spec.source.path is not None
        wait_s = spec.source.poll_ms / 1000
        idle = _idle_clock(spec, logs)
        try:
            with CommitWatch([Path(spec.source.path)], fallback_s=wait_s) as watch:
                while not self.stop_now():
                    new = planned if planned is not None else watcher.poll()
                    planned = None
                    self.state.polls += 1
                    check_resume(spec, new, point.chunk, point.next_seq)
                    todo = resume_chunks(new, point)
                    if todo:
                        self.write(logs, todo)
                        if idle is not None:
                            idle.arrived(time.monotonic(), _committed_w(logs))
                    elif new:
                        self.state.chunks_done = new[-1].index + 1
                        self.state.source_rows = new[-1].next_seq
                    if watcher.ended:
                        self.state.ended = True
                        break
                    self.report(force=bool(todo))
                    if not new:
                        w = None if idle is None else idle.watermark(time.monotonic())
                        if w is not None:  # committed before any operator can see it
                            commit_watermark(logs, w)
                        watch.wait(wait_s if idle is None else min(wait_s, WM_EVERY_S))
        finally:
            for log in logs:
                if log is not None:
                    log.close()
        self.state.stopped = not self.state.ended
        self.report(force=True)
        return self.result()


def _figures(state: dict[str, Any]) -> dict[str, Any]:
    """What a state report says, but for what changes at every poll of an idle folder
    (the count of polls, the time of the report)."""
    return {k: v for k, v in state.items() if k not in ("polls", "updated")}


def _committed_w(logs: list[StreamLog | None]) -> int | None:
    """The smallest watermark the open logs have committed (None: none)."""
    toks = [None if log is None else decode_token(log.last_token()) for log in logs]
    return least([None if t is None else t.watermark for t in toks])


def _idle_clock(spec: PipelineSpec, logs: list[StreamLog | None]) -> IdleClock | None:
    """The idle clock of ``[source] idle_close`` (None: off), started now from the
    logs' committed watermark (a resumed ingest does not know when its newest row
    arrived: it waits ``idle_close`` again)."""
    if spec.source.idle_close_us is None:
        return None
    clock = IdleClock(spec.source.idle_close_us)
    clock.arrived(time.monotonic(), _committed_w(logs))
    return clock


def run_stream_task(task: StreamTask, w: int = 0) -> dict[str, Any]:
    """On an executor: ingest the stream folder into writer ``w``'s logs until it ends
    or STOP; the task's figures (``ended``: the folder ended and every chunk is
    committed). Of several tasks, each is tagged ``i<w>`` (crash points)."""
    if task.writers > 1:
        set_tag(f"i{w}")
    try:
        return _StreamIngest(task, w).run()
    finally:
        if task.writers > 1:
            set_tag("")


def prepare(spark: SparkSession, plan: RunPlan, driver: int | None, start: SourcePlan
            ) -> StreamTask | str:
    """The long-lived task of ``plan``'s stream folder, or why it cannot run (the text of
    the fallback: the per-poll jobs)."""
    reason = fallback_reason(plan.spec, plan.settings)
    if reason is not None:
        return reason
    try:
        where = compile_filter(spark, plan.spec, plan.settings.columns)
    except SpecError as exc:
        return f"the filter does not compile for the long-lived ingest ({exc})"
    writers, why = stream_writers(plan.spec.run.ingest_tasks, plan.partitions,
                                  available_slots(spark.sparkContext))
    if why is not None:
        say_once(why)
    return StreamTask(str(plan.layout.root), plan.settings.run_id, driver, plan.run_text,
                      plan_json(start), None if where is None else where.to_json(), writers)


def stream_writers(tasks: int, partitions: int, slots: int) -> tuple[int, str | None]:
    """The long-lived ingest tasks of ``[run] ingest_tasks = tasks`` (pure): at most one
    per partition, and no more than the ``slots`` Spark has beyond the operator tasks
    (each holds its slot for the whole run); the sentence that says why fewer (None:
    as many as asked)."""
    want = max(1, min(tasks, partitions))
    n = max(1, min(want, slots - partitions))
    if n == want:
        return n, None
    return n, (f"the stream ingest runs {n} long-lived task{'s' * (n > 1)}, not {want}: "
               f"Spark has {slots} task slots and the {partitions} operator tasks hold "
               f"{partitions} (give it {partitions + want} for [run] ingest_tasks = {tasks})")
