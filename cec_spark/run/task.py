"""One long-lived operator task: a key partition's aggregate, from upstream log to output log.

The driver runs ONE Spark job of P tasks (``sc.parallelize(range(P), P)
.mapPartitions``, :mod:`cec_spark.driver.jobs`); task ``p`` calls :func:`run_partition`
with nothing but the run directory and ``p``. It:

1. opens its output log as the writer (which reconciles a torn tail);
2. if the output log already holds records, it is *recovering* — whatever its attempt
   number (after a whole-process ``kill -9`` attempts restart at 0, DESIGN §7): it
   rebuilds the eventual checkpoint from the output log (:mod:`recovery`), loads it
   into a fresh operator and asks the upstream log for every tuple after ``T``
   (``replay_after_seq``) up to its output's ``t_c``, then continues after ``t_c``;
3. tails the upstream log (:mod:`cec_spark.run.upstream`), one ``process`` per upstream
   record, appending the output of each input batch as one record; the records appended
   are committed together when the tail has nothing more at once, or after
   :data:`GROUP_RECORDS` records, :data:`GROUP_ROWS` rows or :data:`GROUP_S` seconds (a
   record that comes alone is committed at once), and nothing is reported as output
   before its commit (persist before forward), nor noted for the trims
   (:mod:`cec_spark.run.trim`);
4. when the upstream log is sealed and consumed: ``finish_parts()`` (the closes of the
   windows still open, :data:`FINISH_ROWS` at a time), each appended and committed; seal.

A ``STOP`` file in the run directory ends the loop at the next batch boundary (clean
Ctrl-C). Counters go to ``RUN/state/pNNNN.json`` for the progress display; the task
writes its Python worker's pid there first, which is how tests find the worker to
``kill -9``. Its operator is built by :mod:`cec_spark.run.operators`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark import TaskContext

from cec.errors import CecError
from cec.operator import VectorOperator
from cec.spec import PipelineSpec
from cec_spark.run.counters import TaskCounters, counts_of
from cec_spark.run.operators import (
    HeapBound,
    operator_for,
    record_format_of,
    release_freed,
)
from cec_spark.run.rto_task import RtoTask
from cec_spark.run.trim import OutputKeeper, ReplayAfterSeq
from cec_spark.run.upstream import (
    TAIL_IDLE_S,
    TAIL_IDLE_SHARE,
    TAIL_POLL_S,
    TAIL_SLOW_AFTER_S,
    TAIL_SLOW_S,
    idle_wait,
    upstream_tail,
    upstream_tail_watched,
)
from cec_spark.rundir.access import check_visible
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.drivers import check_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import FENCE_LOOK_S
from cec_spark.rundir.run_file import RunSettings, parse_run_text, read_run_file
from recovery.errors import ReplayUnavailableError
from recovery.followed import FollowedEC
from recovery.partition import Recovered, recover_partition
from recovery.upstream import watermark_of
from storage_log.errors import CorruptLogError
from storage_log.faults import crash_point, set_tag
from storage_log.follow import CommitToken
from storage_log.log import StreamLog

# The task's names; the trims' (cec_spark.run.trim: docs name them here); the tail's
# (cec_spark.run.upstream) that tests/cec_spark/test_idle_cost.py reads from this module,
# its loop under its former name:
__all__ = ["FINISH_ROWS", "GROUP_RECORDS", "GROUP_ROWS", "GROUP_S", "REFILL_WAIT_S",
           "STATE_EVERY_S", "TAIL_IDLE_S", "TAIL_IDLE_SHARE", "TAIL_POLL_S",
           "TAIL_SLOW_AFTER_S", "TAIL_SLOW_S", "OutputKeeper", "ReplayAfterSeq", "idle_wait",
           "run_partition"]
_tail_watched = upstream_tail_watched

REFILL_WAIT_S = 600.0
STATE_EVERY_S = 0.5
# An output commit covers at most this many upstream records, output rows or seconds
# since its first record was processed (while a backlog is worked off; a record that
# comes alone is committed at once): the output a crash may make the task redo, and how
# long a result may wait for its commit.
GROUP_RECORDS = 16
GROUP_ROWS = 1 << 20
GROUP_S = 0.05
# At the end of the input the open time windows close in output records of at most this
# many rows, each committed (VectorOperator.finish_parts; a crash between two leaves the
# rest to the recovery, as between group commits): with every window open until the
# end, one record of a million rows and its encoding were a third of a task's peak
# memory.
FINISH_ROWS = 1 << 16


def _attempt() -> int:
    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


def run_partition(run_dir: str, p: int, run_id: str | None = None, driver: int | None = None,
                  *, run_text: str | None = None,
                  followed: FollowedEC | None = None) -> TaskCounters:
    """Run partition ``p`` of the run in ``run_dir`` until its input ends or STOP.

    The driver created the run and its logs; a host that does not see them (or sees
    another run at that path) raises :class:`RunNotVisibleError` naming itself. A task
    of driver number ``driver`` stops as soon as a newer driver took the run.
    ``run_text``: the run's ``run.toml`` text the driver planned
    (:attr:`cec_spark.run.plan.RunPlan.run_text`), parsed here instead of read again.
    ``followed``: the eventual checkpoint a hot standby's task kept while it followed
    the output log (:mod:`cec_spark.standby.hot`): step 2 reads on from it instead of
    scanning the log backwards (:func:`recovery.partition.recover_partition`).
    """
    set_tag(f"p{p}")  # CEC_CRASH_AT=point%pN: this partition's task (storage_log.faults)
    layout = RunLayout(Path(run_dir))
    check_visible(layout, run_id)
    check_driver(layout, driver)
    if run_text is None:
        spec, settings = read_run_file(layout)
    else:
        spec, settings = parse_run_text(run_text, f"{layout.run_file} (from the driver)")
    counters = TaskCounters(p, attempt=_attempt())
    rto = RtoTask(layout, p, spec, lambda: operator_for(spec, settings),
                  read_advisory(layout.state_file(p)))
    rec, op = _start(layout, p, spec, settings, counters, rto, followed)
    try:
        if rec.output_log.sealed:  # the partition had ended: nothing to do
            counters.done = True
            rto.note_caught_up(counters, finished=True)
            write_advisory(layout.state_file(p), counters.to_dict())
            return counters
        if not rec.explain.fresh_start:
            counters.recovered = rec.explain.to_dict()
        _PartitionLoop(layout, p, spec, driver, counters, rto, rec, op).run()
    finally:
        rec.output_log.close()
    return counters


def _start(layout: RunLayout, p: int, spec: PipelineSpec, settings: RunSettings,
           counters: TaskCounters, rto: RtoTask, followed: FollowedEC | None = None
           ) -> tuple[Recovered, VectorOperator]:
    """Step 1 and 2: open the output log and recover from it, timing the recovery for
    the recovery-time objective. Recovery is decided by the output log's content,
    never by the attempt number."""
    counters.recover_started_at = time.time()
    write_advisory(layout.state_file(p), counters.to_dict())
    rec, op = _recover(layout, p, spec, settings, counters, followed)
    counters.recovered_at = time.time()
    rto.recovered(rec.explain, counters)
    counters.rto = rto.tick(op, counters)
    write_advisory(layout.state_file(p), counters.to_dict())
    return rec, op


class _PartitionLoop:
    """Step 3 and 4 for one task: tail the upstream log, process and commit each record
    (:meth:`consume`); at the sealed end, finish and seal the output (:meth:`finish`).
    The counters go to the state file every :data:`STATE_EVERY_S` (:meth:`report`)
    and while idle (:meth:`report_idle`)."""

    def __init__(self, layout: RunLayout, p: int, spec: PipelineSpec, driver: int | None,
                 counters: TaskCounters, rto: RtoTask, rec: Recovered,
                 op: VectorOperator) -> None:
        self.layout, self.p, self.driver = layout, p, driver
        self.counters, self.rto = counters, rto
        self.op = op  # the recovered operator
        self.out = rec.output_log
        self.t_c = rec.t_c  # the recovered state's input position: tail after it
        self.replay_after_seq = ReplayAfterSeq(spec.run.trim_lag_s, rec.replay_after_seq)
        self.keeper = OutputKeeper(layout, p, spec)
        self.reported = counters.in_batches  # in_batches at the last state report
        # output appended, not committed yet: each batch's counts (counts_of: not the
        # batch, which the log has encoded; up to GROUP_ROWS rows of it would be held),
        # its replay_after_seq and extent note
        self.pending: list[tuple[tuple[int, int, int, int], int | None, int | None]] = []
        self.pending_rows = 0
        self.pending_since = 0.0  # perf_counter of the first of them
        self.fenced_at = time.monotonic()  # the last look for a newer driver

    def run(self) -> None:
        # records decoded on this thread (threads=0): P operator tasks share a few cores,
        # and a decode thread per task only added a hand-off per record (30 M rows,
        # 2 pairs alternated, load 2-6: wall 0.79x, CPU 0.98x)
        with StreamLog.open(self.layout.upstream(self.p), threads=0) as up:
            self.consume(up)
            if self.layout.stop_file.exists():
                self.counters.stopped = True
            else:
                self.finish(up)
        self.counters.observe(self.op, self.replay_after_seq.value())
        write_advisory(self.layout.state_file(self.p), self.counters.to_dict())

    def consume(self, up: StreamLog) -> None:
        """The hot loop: per upstream record (never per row) one ``process`` and one
        append; a commit of the output when the tail has nothing more at once (or after
        :data:`GROUP_RECORDS` records, :data:`GROUP_ROWS` rows or :data:`GROUP_S`
        seconds), and a report every :data:`STATE_EVERY_S`.

        Records that are already committed upstream when the task looks (a backlog: the
        operator is behind the ingest, or catching up after a recovery) share one
        output commit, one ``fdatasync`` instead of one each; a record that comes alone
        is committed before the task waits for the next, as before. Nothing is noted
        as output (replay_after_seq, the retention extent, the counters) before it is
        committed.

        The upstream's commit tokens come among the records: one whose watermark
        (:mod:`cec.ingest_token`) is above the operator's goes to
        ``operator.watermark(W, seq)`` (``seq``: the upstream's last seq at that
        commit), and its output is appended, grouped and committed as a record's."""
        counters, op, out = self.counters, self.op, self.out
        heap = HeapBound()
        last_state = 0.0
        for item in upstream_tail(up, self.t_c, self.layout, self.report_idle):
            if item is None:  # the tail has nothing more at once: commit
                self.commit()
                continue
            t0 = time.perf_counter()
            if isinstance(item, CommitToken):  # the ingest's commit: its watermark
                w = watermark_of(item)
                applied = op.current_watermark
                if w is None or (applied is not None and w <= applied):
                    continue
                result = op.watermark(w, item.seq)
                t1 = time.perf_counter()
                counters.process_s += t1 - t0
            else:
                batch = item
                if counters.first_input_at is None:
                    counters.first_input_at = time.time()
                heap.fit(batch.num_rows)
                result = op.process(batch)
                t1 = time.perf_counter()
                counters.process_s += t1 - t0
                counters.in_batches += 1
                counters.in_tuples += batch.num_rows
                counters.in_last_seq = int(batch.column("seq")[batch.num_rows - 1].as_py())
            if result.num_rows:
                out.append(result)
                self.pending.append((counts_of(result), ReplayAfterSeq.of(op, result),
                                     self.keeper.of(op)))
                self.pending_rows += result.num_rows
                if len(self.pending) == 1:
                    self.pending_since = t1
            counters.write_s += time.perf_counter() - t1
            now = time.time()
            report = now - last_state >= STATE_EVERY_S or self.rto.reached(counters)
            if self.pending and (report or len(self.pending) >= GROUP_RECORDS or
                                 self.pending_rows >= GROUP_ROWS or
                                 t1 - self.pending_since >= GROUP_S):
                self.commit()  # (a report says only what is committed)
            if report:
                self.rto.note_caught_up(counters)
                self.report()
                last_state = now
        self.commit()

    def commit(self) -> None:
        """Commit the output appended since the last commit and note it."""
        if not self.pending:
            return
        t0 = time.perf_counter()
        crash_point("operator.before_group_commit")
        self.out.commit()
        crash_point("operator.after_group_commit")
        for counts, replay_after_seq, extent in self.pending:
            self.counters.add(counts)
            self.replay_after_seq.add(replay_after_seq)
            self.keeper.add(extent)
        self.pending, self.pending_rows = [], 0
        self.counters.write_s += time.perf_counter() - t0
        self.counters.output_commits += 1

    def report(self) -> None:
        """Check the run is still this driver's, trim the output, write the state."""
        self.check_driver()
        self.counters.output_segments_trimmed += self.keeper.trim(self.out)
        self.counters.observe(self.op, self.replay_after_seq.value())
        self.counters.rto = self.rto.tick(self.op, self.counters)
        write_advisory(self.layout.state_file(self.p), self.counters.to_dict())
        self.reported = self.counters.in_batches
        release_freed()  # the heap pages freed since the last report (operators.py)

    def check_driver(self) -> None:
        """DriverSupersededError if a newer driver took the run (one listing of
        ``RUN/drivers``)."""
        check_driver(self.layout, self.driver)
        self.fenced_at = time.monotonic()

    def report_idle(self) -> None:
        """While no record comes: write the state only if it changed (checking the
        driver first), and look for a newer driver every :data:`FENCE_LOOK_S`."""
        if self.counters.in_batches != self.reported or \
                self.replay_after_seq.value() != self.counters.replay_after_seq or \
                self.op.current_watermark != self.counters.watermark_us:
            self.check_driver()
            self.counters.observe(self.op, self.replay_after_seq.value())
            write_advisory(self.layout.state_file(self.p), self.counters.to_dict())
            self.reported = self.counters.in_batches
        elif time.monotonic() - self.fenced_at >= FENCE_LOOK_S:
            self.check_driver()

    def finish(self, up: StreamLog) -> None:
        """Step 4: the upstream log is sealed and read: ``finish_parts()``, each part
        appended and committed; seal."""
        if not up.sealed:
            raise CecError(f"partition {self.p}: the upstream tail ended before the "
                           "log was sealed")
        self.rto.note_caught_up(self.counters, finished=True)
        # the heap's free pages back first, and once the close order is made (its
        # temporaries are the end's largest): the task's peak memory is at its end when
        # windows stay open until then
        release_freed()
        for i, final in enumerate(self.op.finish_parts(FINISH_ROWS)):  # not every
            if final.num_rows:                                # window's row at once
                self.out.append(final)
                self.counters.count(final)
                self.out.commit()  # the log holds what is appended until its commit
            if i == 0:
                release_freed()
        self.out.seal()
        self.counters.done = True


def _recover(layout: RunLayout, p: int, spec: PipelineSpec, settings: RunSettings,
             counters: TaskCounters, followed: FollowedEC | None = None
             ) -> tuple[Recovered, VectorOperator]:
    """Recover partition ``p`` into a fresh operator (returned with the recovery); when its
    upstream log does not yet reach the output's ``t_c`` (``cec recover --repair`` cut it
    and the ingest is reading the rows cut again), wait for the ingest, up to
    :data:`REFILL_WAIT_S`, and recover into another fresh one."""
    deadline = time.monotonic() + REFILL_WAIT_S
    repaired = False
    fmt = record_format_of(layout.output(p))  # a log goes on in the format it has
    while True:
        op = operator_for(spec, settings, partition=p, fmt=fmt)
        try:
            rec = recover_partition(layout.output(p), layout.upstream(p), op, fsync=spec.run.fsync,
                          create=False, segment_bytes=spec.run.segment_kb << 10,
                          upstream_after=layout.cut, followed=followed)
            counters.waiting = None
            return rec, op
        except CorruptLogError:
            # a damaged record inside the extent, which the driver's reconcile (the log's
            # tail only) does not see: the output log is derived data, cut at its first
            # bad record and rebuilt from what is left and the upstream replay, as `cec
            # recover` did in the driver before the tasks rebuilt (once; damage that the
            # cut does not remove is elsewhere, the upstream log: raised, exit 3)
            if repaired or not _cut_damaged_output(layout.output(p), spec.run.fsync):
                raise
            repaired = True
        except ReplayUnavailableError as exc:
            if exc.short_of is None or time.monotonic() > deadline:
                raise
            counters.waiting = f"the ingest to refill the upstream log up to seq {exc.short_of}"
            write_advisory(layout.state_file(p), counters.to_dict())
            with StreamLog.open(layout.upstream(p)) as up:
                for _ in up.tail(after_seq=up.last_seq, timeout=2.0):
                    break
                if up.sealed and (up.last_seq or -1) < exc.short_of:
                    raise


def _cut_damaged_output(path: Path, fsync: str) -> bool:
    """The output log at ``path`` scanned in full and cut at its first bad record
    (``repair``); whether anything was cut. Says what on the task's standard error."""
    with StreamLog.open(path, writable=True, repair=True, fsync=fsync) as log:
        cut = log.reconcile_report
    if cut is None or not (cut.bytes_cut or cut.segments_removed):
        return False
    print(f"cec: {path}: damaged output log cut at {cut.cut_at} ({cut.cut_reason}); "
          "its eventual checkpoint is rebuilt from what is left", file=sys.stderr, flush=True)
    return True
