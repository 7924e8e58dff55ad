"""Rescale on recovery: ``cec recover --from-log RUN --partitions P'``.

Offline, in the driver, before Spark runs anything (no Spark is needed):

1. **The common cut** ``C``: every upstream log of the current generation holds every
   input row of its partition before the ``seq_end`` (``next_seq`` without late-row
   settings) of its last chunk token, so ``C = min over the logs of (seq_end - 1)``
   is a source chunk boundary that every log has passed (the ingest restarts there).
2. **Drain** each old partition ``q`` to exactly ``C``: its eventual checkpoint is
   rebuilt as for any recovery and the upstream replayed; if its output ends before
   ``C`` it processes its upstream rows up to ``C`` in normal mode and appends the
   output (its log's writer takes a new epoch, as a task does); if its output ran
   ahead of ``C`` (its upstream log was ahead of another's), the state as of ``C`` is
   rebuilt by time travel to the last output row of input ``<= C``, and the rows after
   it are not results of the run: ``generations.toml`` records, per old partition,
   the last output seq that belongs to it (readers stop there; nothing is cut).
3. **Handoff** (:func:`recovery.rescale.handoff`): the open windows of every old
   partition, as of ``C``, go by key group to the ``P'`` new partitions as the first
   record of each new output log (``G_check`` rows, ``t_now = C``). The new upstream
   logs start with a token at the cut's chunk (sealed if the old ones were), so the
   resumed ingest continues the source after ``C``.
4. **Commit**: ``RUN/generations.toml`` is written atomically after every log of the
   new generation is complete. A crash before it leaves the old generation as the
   run's (a new ``cec recover --partitions`` drains it again to the same ``C`` and
   writes the new generation's logs again from scratch); after it, the new
   generation is complete.

Then the run resumes as any run does, with ``P'`` partitions.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import RecoveryError, UsageError
from cec.ingest_token import IngestToken, decode_token, encode_token
from cec.records import G_CHECK, output_schema
from cec.spec import MAX_KEY_GROUPS, PipelineSpec
from cec_spark.report import RescalePartition as OldPartition
from cec_spark.report import RescaleResult
from cec_spark.run.task import operator_for
from cec_spark.rundir.generations import Generation, store_generations
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import RunSettings, read_run_file
from recovery.partition import recover_from_logs
from recovery.rescale import handoff
from recovery.upstream import RecoverableOperator
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
    out = (StreamLog.open(out_path, writable=True, fsync=run.fsync,
                          segment_bytes=run.segment_kb << 10) if write
           else StreamLog.open(out_path))
    try:
        end, t_c = _last_at_or_before(out, cut)
        if out.sealed:  # the whole input is processed: nothing more can reach its windows
            last = out.last_seq if out.last_seq is not None else -1
            return _Drained(OldPartition(q, "sealed", t_c, last, 0, 0), empty, None)
        ahead = t_c is not None and t_c > cut
        op = operator_for(spec, settings)
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


def rescale(layout: RunLayout, partitions: int, *, dry_run: bool = False
            ) -> RescaleResult | None:
    """Rescale the run in ``layout`` to ``partitions`` (see the module docstring).

    None when the run already has that many partitions. The caller has taken a
    driver number (:func:`~cec_spark.rundir.drivers.take_driver`: older drivers stop) unless
    ``dry_run``, which only reads.
    """
    layout = RunLayout(layout.root)  # read the generations afresh
    spec, settings = read_run_file(layout)
    check_rescale(settings, spec, partitions, layout.root)
    old_p = spec.run.partitions
    if partitions == old_p:
        return None
    assert settings.key_groups is not None
    gen = layout.generation
    cut, token, sealed = common_cut(layout, gen, old_p)
    chunk = -1 if token is None else token.chunk
    if layout.cut is not None and cut < layout.cut:
        raise RecoveryError(f"{layout.root}: the upstream logs of generation {gen} end "
                            f"before its own cut {layout.cut}: damaged")
    drained = [_drain(layout, gen, q, spec, settings, cut, not dry_run)
               for q in range(old_p)]
    if drained and all(d.info.state == "sealed" for d in drained):
        raise UsageError(f"{layout.root}: the run is complete (every partition sealed its "
                         "output): there is nothing to rescale")
    stamps = [d.last_ts for d in drained if d.last_ts is not None]
    ts = min(stamps) if stamps else 0
    w = spec.aggregate.window
    if w.kind == "session":
        check_session_ends([d.windows for d in drained], ts)
    records = handoff([d.windows for d in drained], cut=cut, ts=ts, partitions=partitions,
                      groups=settings.key_groups, function=spec.aggregate.function,
                      key_type=settings.key_type, time_windows=w.kind == "time")
    new = gen + 1
    result = RescaleResult(str(layout.root), old_p, partitions, new, cut, chunk, dry_run,
                           [d.info for d in drained], [r.num_rows for r in records])
    if dry_run:
        return result
    _write_generation(layout, new, records, spec, token, sealed)
    gens = layout.generations or (Generation(0, old_p),)
    store_generations(layout.generations_file, layout.generations_backup,
                      (*gens, Generation(new, partitions, cut, chunk,
                                         tuple(d.info.end_seq for d in drained), ts)))
    return result


def check_session_ends(windows: list[pa.Table], ts: int) -> None:
    """Refuse a handoff of a session that ended before its ``ts`` (RecoveryError).

    A session takes a tuple at exactly its ``win_end`` (Spark's tie rule), so one with
    ``win_end == ts`` is still open: the check is ``win_end < ts``, where a time window
    (closed at ``win_end <= ts``) uses ``<=`` (:func:`recovery.rescale.handoff`). Every
    session open in old partition ``q`` at the cut has ``win_end >= `` the ts of ``q``'s
    last input, and ``ts`` is the smallest of those, so this holds for logs that belong
    together.
    """
    ends = [int(pc.min(t.column("win_end")).as_py()) for t in windows if t.num_rows]
    if ends and min(ends) < ts:
        raise RecoveryError(f"a session ending at {min(ends)} is still open at ts {ts}, "
                            "past its end: the logs do not belong together")


def _write_generation(layout: RunLayout, gen: int, records: list[pa.RecordBatch],
                      spec: PipelineSpec, token: IngestToken | None, sealed: bool) -> None:
    """Every log of generation ``gen``, from scratch (what a crashed rescale left of
    it is not part of the run: generations.toml does not name it yet). Each upstream
    log starts with a commit of the cut's token (the ingest resumes after its chunk);
    the late rows the old logs counted go to partition 0's, so the run's total
    stays."""
    for folder in (layout.upstream_dir(gen), layout.output_dir(gen), layout.state_dir(gen)):
        shutil.rmtree(folder, ignore_errors=True)
    layout.state_dir(gen).mkdir(parents=True)
    run = spec.run
    for p, record in enumerate(records):
        with StreamLog.open(layout.upstream_of(gen, p), writable=True, create=True,
                            fsync=run.fsync, segment_bytes=run.segment_kb << 10) as up:
            if token is not None:
                up.commit(encode_token(token if p == 0 else replace(token, late=0)))
            if sealed:
                up.seal()
        with StreamLog.open(layout.output_of(gen, p), writable=True, create=True,
                            fsync=run.fsync, segment_bytes=run.segment_kb << 10) as out:
            if record.num_rows:
                out.append(record.cast(output_schema(record.schema.field("key").type)))
                out.commit()
