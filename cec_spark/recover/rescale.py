"""Rescale on recovery: ``cec recover --from-log RUN --partitions P'``.

The driver reads only the logs' last tokens and writes only ``generations.toml``; the
partitions' state moves in Spark tasks, side by side (issue 38: nothing of the run's
state passes through the driver). ``--dry-run`` does the same steps in the driver
without writing (it loads the open windows there: it only counts them).

1. **The common cut** ``C`` (driver): every upstream log of the current generation holds
   every input row of its partition before the ``seq_end`` (``next_seq`` without
   late-row settings) of its last chunk token, so ``C = min over the logs of (seq_end -
   1)`` is a source chunk boundary that every log has passed (the ingest restarts there).
2. **Drain** (a task per old partition ``q``): its eventual checkpoint is rebuilt as for
   any recovery and the upstream replayed; if its output ends before ``C`` it
   processes its upstream rows up to ``C`` in normal mode and appends the output (its
   log's writer takes a new epoch, as a task does); if its output ran ahead of ``C``
   (its upstream log was ahead of another's), the state as of ``C`` is rebuilt by time
   travel to the last output row of input ``<= C``, and the rows after it are not
   results of the run: ``generations.toml`` records, per old partition, the last output
   seq that belongs to it (readers stop there; nothing is cut). Its open windows go by
   key group to the ``P'`` new partitions (:func:`recovery.rescale.split_windows`), one
   Arrow file each under ``RUN/handover/gNNNN/``; the task reports only counts.
3. **Handoff** (a task per new partition ``p``): the windows every old partition handed
   it become the first record of its output log (``G_check`` rows, ``t_now = C``,
   :func:`recovery.rescale.first_record`). Its upstream log starts with a token at the
   cut's chunk (sealed if the old ones were), so the resumed ingest continues the
   source after ``C``.
4. **Commit** (driver): ``RUN/generations.toml`` is written atomically after every log
   of the new generation is complete, then the hand-over files are removed. A crash
   before it leaves the old generation as the run's (a new ``cec recover
   --partitions`` drains it again to the same ``C`` and writes the new generation's
   logs again from scratch); after it, the new generation is complete.

A task retried by Spark does its step again from the start: a drain finds its output
log at or past ``C`` and rebuilds the same state; a hand-over file is replaced whole
(written aside, then renamed). Then the run resumes as any run does, with ``P'``
partitions.

Record formats (ARCHITECTURE §3): a drain appends to an old output log in the format
that log has (:func:`~cec_spark.run.operators.record_format_of`); the hand-over files
keep the columns the old operators give; each new partition's output log is new, so
its first record is written in the format of new logs, 2
(:func:`recovery.rescale.first_record` with the window kind).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import ipc

from cec.errors import CecError, CorruptionError, RecoveryError, UsageError
from cec.ingest_token import IngestToken, decode_token, encode_token
from cec.records import G_CHECK, logged_of, output_schema
from cec.spec import MAX_KEY_GROUPS, PipelineSpec
from cec.window_state import LOGGED
from cec.windows import gap_of
from cec_spark.driver.jobs import spark_error
from cec_spark.errors import DriverSupersededError
from cec_spark.report import RescalePartition as OldPartition
from cec_spark.report import RescaleResult
from cec_spark.run.operators import operator_for, record_format_of
from cec_spark.rundir.drivers import check_driver
from cec_spark.rundir.generations import Generation, store_generations
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import RunSettings, read_run_file
from recovery.partition import recover_from_logs
from recovery.rescale import first_record, split_windows
from recovery.upstream import RecoverableOperator
from storage_log.errors import LogWriteError
from storage_log.log import StreamLog


def check_rescale(settings: RunSettings, spec: PipelineSpec, partitions: int,
                  root: Path) -> None:
    """Refuse a rescale the run cannot take (UsageError, exit 2)."""
    if settings.key_groups is None:
        raise UsageError(f"{root}: this run was started before key groups (its run.toml "
                         "has no [cec] key_groups): its keys are partitioned by "
                         "pmod(xxhash64(key), P) and cannot move to another partition "
                         "count; resume it with its own partitions "
                         f"({spec.run.partitions}) or start a new run")
    if not 1 <= partitions <= settings.key_groups:
        raise UsageError(f"--partitions: {partitions} is not in 1..{settings.key_groups}: "
                         f"the run has {settings.key_groups} key groups ([cec] key_groups "
                         "in its run.toml, fixed when it was created) and a partition owns "
                         "at least one; a run that must grow further is started with "
                         f"[run] key_groups = N (up to {MAX_KEY_GROUPS})")


def common_cut(layout: RunLayout, gen: int, partitions: int
               ) -> tuple[int, IngestToken | None, bool]:
    """``(C, token, sealed)``: the last input seq every upstream log of generation
    ``gen`` holds all rows up to (its committed rows end at the token's ``seq_end``),
    the commit token that says so (of the log that is furthest behind; its ``late`` the
    sum over the logs, its watermark the one at that chunk's end; None and C = -1 when a
    log has none), and whether every log is sealed (the source was read to its end)."""
    toks: list[IngestToken | None] = []
    sealed = True
    for q in range(partitions):
        path = layout.upstream_of(gen, q)
        if not path.exists():
            return -1, None, False
        with StreamLog.open(path) as log:
            toks.append(decode_token(log.last_token()))
            sealed = sealed and bool(log.sealed)
    held = [t for t in toks if t is not None]
    if not held or len(held) < len(toks):
        return -1, None, sealed
    first = min(held, key=lambda t: (t.seq_end, t.chunk))
    # the watermark at the cut's chunk end (not one committed within the next chunk: the
    # new logs get that chunk's rows again), the largest such: an idle advance
    # committed on some logs only made rows below it late
    at_cut = [t.at_chunk_end for t in held if t.chunk == first.chunk]
    wm = max((w for w in at_cut if w is not None), default=None)
    return first.seq_end - 1, IngestToken(first.chunk, first.next_seq, first.seq_end,
                                          sum(t.late for t in held), wm), sealed


def _last_at_or_before(out: StreamLog, cut: int) -> tuple[int, int | None]:
    """The last output seq whose input position is ``<= cut`` (-1: none), and the
    ``t_now`` of the log's last row (None: empty)."""
    last_t = None
    for batch in out.read_backward():
        if not batch.num_rows:
            continue
        tn = batch.column("t_now").to_numpy()
        if last_t is None:
            last_t = int(tn[-1])
        i = int(np.searchsorted(tn, cut, side="right"))
        if i:
            return int(batch.column("seq")[i - 1].as_py()), last_t
    return -1, last_t


@dataclass
class _Drained:
    info: OldPartition
    windows: pa.Table
    last_ts: int | None  # ts of the partition's last input tuple <= C


def _drain(layout: RunLayout, gen: int, q: int, spec: PipelineSpec,
           settings: RunSettings, cut: int, write: bool) -> _Drained:
    """Partition ``q`` of generation ``gen`` brought to exactly input ``cut``."""
    empty = operator_for(spec, settings).open_windows()
    out_path, up_path = layout.output_of(gen, q), layout.upstream_of(gen, q)
    nothing = _Drained(OldPartition(q, "empty", None, -1, 0, 0), empty, None)
    if not up_path.exists():  # killed before the ingest created its logs: no input
        if out_path.exists():
            raise RecoveryError(f"{up_path}: missing, but {out_path} exists: the run "
                                "directory is damaged")
        return nothing
    if not out_path.exists():
        if not write:
            if cut >= 0:
                raise RecoveryError(f"{out_path}: missing, but its upstream holds input")
            return nothing
        StreamLog.open(out_path, writable=True, create=True, fsync=spec.run.fsync).close()
    run = spec.run
    fmt = record_format_of(out_path)  # a log goes on in the format it has
    out = (StreamLog.open(out_path, writable=True, fsync=run.fsync,
                          segment_bytes=run.segment_kb << 10) if write
           else StreamLog.open(out_path))
    try:
        end, t_c = _last_at_or_before(out, cut)
        if out.sealed:  # the whole input is processed: nothing more can reach its windows
            last = out.last_seq if out.last_seq is not None else -1
            return _Drained(OldPartition(q, "sealed", t_c, last, 0, 0), empty, None)
        ahead = t_c is not None and t_c > cut
        op = operator_for(spec, settings, fmt=fmt)
        with StreamLog.open(up_path) as up:
            after: int | None = None
            last_ts: int | None = None
            if end >= 0:
                rec = recover_from_logs(out, up, op, at_seq=end if ahead else None,
                                        upstream_after=layout.cut)
                after = rec.t_c
                last_ts = getattr(rec.reconstruction, "t_c_ts", None)
                op = rec.operator  # type: ignore[assignment]
            tuples, last_ts = _process_to_cut(
                op, up, after, cut, out if write and not ahead else None,
                check_ahead=(out_path, end) if ahead else None, last_ts=last_ts)
        if write and not ahead:
            end = out.last_seq if out.last_seq is not None else -1
        wins = op.open_windows()
        info = OldPartition(q, "ahead" if ahead else "drained", t_c, end, tuples,
                            wins.num_rows)
        return _Drained(info, wins, last_ts)
    finally:
        out.close()


def _process_to_cut(op: RecoverableOperator, up: StreamLog, after: int | None, cut: int,
                    out: StreamLog | None, *, check_ahead: tuple[Path, int] | None,
                    last_ts: int | None) -> tuple[int, int | None]:
    """The upstream tuples after ``after`` up to seq ``cut`` through ``op`` in normal
    mode: its output appended to ``out`` (None: not written). ``check_ahead``: the
    output log and its row the state was rebuilt at, when that log already holds the
    output of these tuples: they may give G_check rows only (those are not written
    again). Returns the tuples processed and the ts of the last one (``last_ts`` if
    none)."""
    tuples = 0
    for batch in up.read_forward(after_seq=after):
        if not batch.num_rows:
            continue
        seq = batch.column("seq").to_numpy()
        n = int(np.searchsorted(seq, cut, side="right"))
        if n == 0:
            break
        part = batch.slice(0, n)
        res = op.process(part)
        tuples += n
        last_ts = int(part.column("ts")[n - 1].as_py())
        if res.num_rows and check_ahead is not None:
            if not (res.column("type").to_numpy() == G_CHECK).all():
                out_path, end = check_ahead
                raise RecoveryError(
                    f"{out_path}: input seq {int(seq[0])}..{int(seq[n - 1])} gave results "
                    f"that the output log does not hold after its row {end}: the logs do "
                    "not belong together")
        elif res.num_rows and out is not None:
            out.append(res)
            out.commit()
        if n < batch.num_rows:
            break
    return tuples, last_ts


T = TypeVar("T")

#: runs ``fn(i)`` for i in 0..n-1 and returns the results in order: in Spark tasks, or
#: (a dry run, a caller without Spark) here
Mapper = Callable[[Callable[[int], T], int, str], list[T]]


def local_map(fn: Callable[[int], T], n: int, what: str) -> list[T]:
    """:data:`Mapper` in this process, one after the other (a dry run)."""
    del what
    return [fn(i) for i in range(n)]


def spark_map(spark: Any) -> Mapper[Any]:
    """:data:`Mapper` as one Spark job of ``n`` tasks (``what``: its description); a
    failed job is the error its task raised (:func:`task_error`)."""
    def run(fn: Callable[[int], Any], n: int, what: str) -> list[Any]:
        sc = spark.sparkContext
        sc.setJobDescription(f"cec rescale: {what}")
        try:
            return list(sc.parallelize(range(n), n).map(fn).collect())
        except CecError:
            raise
        except Exception as exc:
            raise task_error(exc, what) from exc
        finally:
            sc.setJobDescription(None)
    return run


#: the errors a rescale's task raises that keep their exit status in the driver
_TASK_ERRORS: dict[str, type[CecError]] = {
    "RecoveryError": RecoveryError, "CorruptionError": CorruptionError,
    "CorruptLogError": CorruptionError, "DriverSupersededError": DriverSupersededError,
    "LogWriteError": LogWriteError, "UsageError": UsageError}
_TASK_ERROR = re.compile(rf"\b({'|'.join(_TASK_ERRORS)}): (.+)")


def task_error(exc: BaseException, what: str) -> CecError:
    """The error a failed rescale job carried from its task (Spark wraps it in its own):
    that error's class and message, so the command exits as the task would have; else a
    RecoveryError saying what failed. Either way the run is the old generation still
    (``generations.toml`` is written after both jobs)."""
    m = _TASK_ERROR.search(str(exc))
    if m is not None:
        return _TASK_ERRORS[m.group(1)](m.group(2).strip())
    return RecoveryError(f"the rescale's tasks failed ({what}): {spark_error(exc)}; the "
                         "run is unchanged: run the same cec recover --partitions again")


@dataclass(frozen=True)
class _Job:
    """What the rescale's tasks need (it crosses to the executors)."""

    run_dir: str
    spec: PipelineSpec
    settings: RunSettings
    gen: int  # the old generation
    partitions: int  # P'
    cut: int
    write: bool
    driver: int | None

    @property
    def layout(self) -> RunLayout:
        return RunLayout(Path(self.run_dir))

    @property
    def new(self) -> int:
        return self.gen + 1


def rescale(layout: RunLayout, partitions: int, *, dry_run: bool = False,
            tasks: Mapper[Any] | None = None, driver: int | None = None
            ) -> RescaleResult | None:
    """Rescale the run in ``layout`` to ``partitions`` (see the module docstring).

    None when the run already has that many partitions. The caller has taken a
    driver number ``driver`` (:func:`~cec_spark.rundir.drivers.take_driver`: older
    drivers stop; the tasks check it before they write) unless ``dry_run``, which only
    reads. ``tasks`` runs the drains and hand-offs (:func:`spark_map`; default
    :func:`local_map`, in this process).
    """
    layout = RunLayout(layout.root)  # read the generations afresh
    spec, settings = read_run_file(layout)
    check_rescale(settings, spec, partitions, layout.root)
    old_p = spec.run.partitions
    if partitions == old_p:
        return None
    assert settings.key_groups is not None
    run_map = tasks or local_map
    gen = layout.generation
    cut, token, sealed = common_cut(layout, gen, old_p)
    chunk = -1 if token is None else token.chunk
    if layout.cut is not None and cut < layout.cut:
        raise RecoveryError(f"{layout.root}: the upstream logs of generation {gen} end "
                            f"before its own cut {layout.cut}: damaged")
    job = _Job(str(layout.root), spec, settings, gen, partitions, cut, not dry_run, driver)
    new = job.new
    if not dry_run:  # what a crashed rescale left of the new generation is not the run's
        for folder in (layout.upstream_dir(new), layout.output_dir(new),
                       layout.state_dir(new), layout.handover_dir(new)):
            shutil.rmtree(folder, ignore_errors=True)
        layout.handover_dir(new).mkdir(parents=True)
    drained = [_Handed.from_json(text) for text in
               run_map(lambda q: drain_partition(job, q).to_json(), old_p,
                       f"drain {old_p} old partitions to the cut {cut}")]
    if drained and all(d.info.state == "sealed" for d in drained):
        raise UsageError(f"{layout.root}: the run is complete (every partition sealed its "
                         "output): there is nothing to rescale")
    stamps = [d.last_ts for d in drained if d.last_ts is not None]
    ts = min(stamps) if stamps else 0
    _check_ends(spec, drained, ts)
    counts = [sum(d.counts[p] for d in drained) for p in range(partitions)]
    result = RescaleResult(str(layout.root), old_p, partitions, new, cut, chunk, dry_run,
                           [d.info for d in drained], counts)
    if dry_run:
        return result
    layout.state_dir(new).mkdir(parents=True)
    sources = [[q for q, d in enumerate(drained) if d.counts[p]] for p in range(partitions)]
    written = run_map(lambda p: hand_to(job, p, sources[p], ts, token, sealed),
                      partitions, f"write the {partitions} new partitions' first records")
    if written != counts:
        raise RecoveryError(f"{layout.root}: the rescale's new partitions got {written} "
                            f"open windows where the old ones handed {counts}")
    gens = layout.generations or (Generation(0, old_p),)
    store_generations(layout.generations_file, layout.generations_backup,
                      (*gens, Generation(new, partitions, cut, chunk,
                                         tuple(d.info.end_seq for d in drained), ts)))
    shutil.rmtree(layout.handover_dir(new), ignore_errors=True)
    with contextlib.suppress(OSError):
        layout.handover_dir(new).parent.rmdir()  # handover/ itself, when empty
    return result


@dataclass(frozen=True)
class _Handed:
    """What a drain task reports (JSON: it crosses back to the driver)."""

    info: OldPartition
    last_ts: int | None  # ts of the partition's last input tuple <= C
    counts: list[int]  # its open windows for each new partition
    first_end: int | None  # the smallest win_end of its open windows

    def to_json(self) -> str:
        return json.dumps({"info": asdict(self.info), "last_ts": self.last_ts,
                           "counts": self.counts, "first_end": self.first_end})

    @staticmethod
    def from_json(text: str) -> _Handed:
        d = json.loads(text)
        return _Handed(OldPartition(**d["info"]), d["last_ts"], list(d["counts"]),
                       d["first_end"])


def drain_partition(job: _Job, q: int) -> _Handed:
    """Step 2, in old partition ``q``'s task: drained to the cut, its open windows
    written for the new partitions that own them (not with ``job.write`` off)."""
    layout = job.layout
    if job.write:
        check_driver(layout, job.driver)
    d = _drain(layout, job.gen, q, job.spec, job.settings, job.cut, job.write)
    assert job.settings.key_groups is not None
    parts = split_windows(d.windows, partitions=job.partitions,
                          groups=job.settings.key_groups, key_type=job.settings.key_type)
    if job.write:
        for p, table in enumerate(parts):
            if table.num_rows:
                _write_arrow(layout.handover_file(job.new, q, p), table)
    ends = d.windows.column("win_end") if d.windows.num_rows else None
    first_end = None if ends is None else int(pc.min(ends).as_py())
    return _Handed(d.info, d.last_ts, [t.num_rows for t in parts], first_end)


def _write_arrow(path: Path, table: pa.Table) -> None:
    """``table`` as an Arrow IPC file at ``path``, whole or not at all (written aside,
    then renamed: a retried task replaces it). Not fsynced: a crash before
    ``generations.toml`` is written discards the hand-over."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(tmp, path)


def _read_arrow(path: Path) -> pa.Table:
    try:
        with pa.memory_map(str(path)) as source:
            return ipc.open_file(source).read_all()
    except (OSError, pa.ArrowInvalid) as exc:
        raise RecoveryError(f"{path}: a rescale's hand-over file cannot be read ({exc}): "
                            "run the same cec recover --partitions again") from exc


def hand_to(job: _Job, p: int, sources: list[int], ts: int, token: IngestToken | None,
            sealed: bool) -> int:
    """Step 3, in new partition ``p``'s task: its logs of the new generation, the output
    log's first record made of the windows old partitions ``sources`` handed it.
    Returns that record's rows."""
    layout = job.layout
    check_driver(layout, job.driver)
    tables = [_read_arrow(layout.handover_file(job.new, q, p)) for q in sources]
    w = job.spec.aggregate.window
    run = job.spec.run
    for path in (layout.upstream_of(job.new, p), layout.output_of(job.new, p)):
        shutil.rmtree(path, ignore_errors=True)  # a retried task starts its logs again
    # the output log is new: the format of new logs (2; 1 where cec is told to write as
    # before format 2, CEC_RECORD_FORMAT)
    fmt = record_format_of(layout.output_of(job.new, p))
    try:
        record = first_record(tables, cut=job.cut, ts=ts, function=job.spec.aggregate.function,
                              key_type=job.settings.key_type, window_kind=w.kind,
                              session_gap=gap_of(job.spec.aggregate.window),
                              logged=LOGGED if fmt == 1 else None)
    except ValueError as exc:
        raise RecoveryError(f"{layout.root}: new partition {p}: {exc}") from exc
    with StreamLog.open(layout.upstream_of(job.new, p), writable=True, create=True,
                        fsync=run.fsync, segment_bytes=run.segment_kb << 10) as up:
        if token is not None:  # the late rows the old logs counted go to partition 0's
            up.commit(encode_token(token if p == 0 else replace(token, late=0)))
        if sealed:
            up.seal()
    with StreamLog.open(layout.output_of(job.new, p), writable=True, create=True,
                        fsync=run.fsync, segment_bytes=run.segment_kb << 10) as out:
        if record.num_rows:
            out.append(record.cast(output_schema(record.schema.field("key").type,
                                                 logged_of(record.schema))))
            out.commit()
    return int(record.num_rows)


def _check_ends(spec: PipelineSpec, drained: list[_Handed], ts: int) -> None:
    """:func:`refuse_ended` with the drains' smallest ``win_end``."""
    ends = [d.first_end for d in drained if d.first_end is not None]
    refuse_ended(min(ends) if ends else None, ts, spec.aggregate.window.kind)


def check_session_ends(windows: list[pa.Table], ts: int) -> None:
    """:func:`refuse_ended` for the sessions ``windows`` (tables of open windows)."""
    ends = [int(pc.min(t.column("win_end")).as_py()) for t in windows if t.num_rows]
    refuse_ended(min(ends) if ends else None, ts, "session")


def refuse_ended(first_end: int | None, ts: int, kind: str) -> None:
    """Refuse a handoff of a window that ended before its ``ts`` (RecoveryError);
    ``first_end``: the smallest ``win_end`` of the windows handed over (None: none).

    A session takes a tuple at exactly its ``win_end`` (Spark's tie rule), so one with
    ``win_end == ts`` is still open: the check is ``win_end < ts``, where a time window
    (closed at ``win_end <= ts``) uses ``<=`` (:func:`recovery.rescale.first_record`).
    Every session open in old partition ``q`` at the cut has ``win_end >= `` the ts of
    ``q``'s last input, and ``ts`` is the smallest of those, so this holds for logs that
    belong together. Count windows have no end in time.
    """
    if first_end is None:
        return
    if kind == "session" and first_end < ts:
        raise RecoveryError(f"a session ending at {first_end} is still open at ts {ts}, "
                            "past its end: the logs do not belong together")
    if kind == "time" and first_end <= ts:
        raise RecoveryError(f"a time window ending at {first_end} is still open at ts "
                            f"{ts}: the logs do not belong together")
