"""One long-lived operator task: a key partition's aggregate, from upstream log to output log.

The driver runs ONE Spark job of P tasks (``spark.range(P, P partitions)
.mapInArrow``); task ``p`` calls :func:`run_partition` with nothing but
the run directory and ``p``. It:

1. opens its output log as the writer (which reconciles a torn tail);
2. if the output log already holds records, it is *recovering* — whatever its attempt
   number (after a whole-process ``kill -9`` attempts restart at 0, DESIGN §7): it
   rebuilds the eventual checkpoint from the output log (:mod:`recovery`), loads it
   into a fresh operator and asks the upstream log for every tuple after ``T``;
3. tails the upstream log, one ``process`` per upstream record, appending the output
   of each input batch as one record and committing it (persist before forward);
4. when the upstream log is sealed and consumed: ``finish()``, append, commit, seal.

A ``STOP`` file in the run directory ends the loop at the next batch boundary (clean
Ctrl-C). Counters go to ``RUN/state/pNNNN.json`` for the progress display; the task
writes its Python worker's pid there first, which is how tests find the worker to
``kill -9``.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from cec.errors import CecError
from cec.operator import OperatorConfig, VectorOperator
from cec.policy import PolicyConfig
from cec.records import tuple_counts
from cec.spec import PipelineSpec
from cec.windows import window_spec
from cec_spark.run.rto import RtoTask
from cec_spark.rundir.layout import RunLayout, RunSettings, value_column
from cec_spark.rundir.retention import Lagged, retention_before
from cec_spark.rundir.run_file import parse_run_text
from recovery.errors import ReplayUnavailableError
from recovery.partition import recover_partition
from storage_log.epoch import read_chain
from storage_log.log import StreamLog
from storage_log.segment import segment_path, sid_base

TAIL_TIMEOUT_S = 0.25  # idle this long: report state, check the driver (on_idle)
# How often the task looks for new upstream commits while the stream flows: a look
# costs ~1 ms of CPU (StreamLog.tail's own wait backs off to 50 ms between looks and
# starts at 1 ms after each record, most looks where no commit comes). Every 15 ms a
# commit of the ingest is seen within 15 ms of landing, for about the same CPU; after
# TAIL_SLOW_AFTER_S without input the look is every TAIL_SLOW_S (issue 16 item 4).
TAIL_POLL_S = 0.015
TAIL_SLOW_S = 0.05
TAIL_SLOW_AFTER_S = 2.0
REFILL_WAIT_S = 600.0
STATE_EVERY_S = 0.5


def operator_for(spec: PipelineSpec, settings: RunSettings) -> VectorOperator:
    """A fresh vectorized operator for the spec."""
    w = spec.aggregate.window
    cp = spec.checkpoint
    q: int | str = cp.q_records if cp.q_records is not None else cp.q_text
    config = OperatorConfig(
        window=window_spec(w.kind, w.size, w.slide),
        function=spec.aggregate.function,
        key_column=spec.aggregate.group_by,
        value_column=value_column(spec),
        key_type=settings.key_type,
        policy=PolicyConfig(mode=cp.mode, q=q, u=cp.u,  # type: ignore[arg-type]
                            ci_ms=cp.ci_ms, cp_ms=cp.cp_ms),
    )
    return VectorOperator(config)


@dataclass
class TaskCounters:
    p: int
    pid: int = field(default_factory=os.getpid)
    attempt: int = 0
    recovered: dict[str, Any] | None = None
    in_batches: int = 0
    in_tuples: int = 0
    in_last_seq: int | None = None
    out_rows: int = 0
    r: int = 0
    g_open: int = 0
    g_check: int = 0
    n_open: int = 0
    q: int = 0
    u: int = 0
    # the upstream position every recovery of this partition resumes after, as of
    # trim_lag_s ago (or since): the ingest may drop upstream segments up to it
    replay_after_seq: int | None = None
    first_input_at: float | None = None  # wall time of the first input batch
    process_s: float = 0.0  # time inside operator.process/finish
    write_s: float = 0.0  # time appending + committing output records
    done: bool = False
    stopped: bool = False
    waiting: str | None = None  # what the task waits for before it can run
    output_segments_trimmed: int = 0  # output retention ([run].output_keep_mb/_s)
    # recovery-time objective (cec_spark.run.rto): when this task began and ended its
    # recovery, when it had processed again what its upstream held at the restart
    # (wall clock), and the prediction, rates and targets
    recover_started_at: float | None = None
    recovered_at: float | None = None
    caught_up_at: float | None = None
    rto: dict[str, Any] | None = None
    started: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    def count(self, out: pa.RecordBatch) -> None:
        self.out_rows += out.num_rows
        if out.num_rows:
            r, g_open, g_check = tuple_counts(out.column("type").to_numpy())
            self.r += r
            self.g_open += g_open
            self.g_check += g_check

    def observe(self, op: VectorOperator, floor: ReplayFloor) -> None:
        self.n_open, self.q, self.u = op.n_open, op.q, op.u
        self.replay_after_seq = floor.value()
        self.updated = time.time()

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ReplayFloor:
    """The oldest upstream position a recovery of the partition may still replay after.

    Recovery rebuilds the EC from the *committed* output log and replays the upstream
    after its ``T`` (the oldest footprint's input position, ``t_c`` with no open
    window). After each committed output record the task notes ``min(T, t_c)`` of its
    state: ``T = t_now - u`` in memory equals the recovered one (every open window has
    a ``G`` row), and ``t_c`` (the last committed row's ``t_now``) bounds it when no
    window is open and the last tuples produced no row. Both only grow. :meth:`value`
    is the newest note at least ``lag_s`` old, so an output tail lost since (a cut
    corrupted record) can still be regenerated by replay.
    """

    def __init__(self, lag_s: float, start: int | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lag_s = lag_s
        self.clock = clock
        self._notes: deque[tuple[float, int]] = deque()
        self._floor = start  # the recovered T (not t_c: recovery replays (T, t_c])

    def note(self, op: VectorOperator, out: pa.RecordBatch) -> None:
        if op.t_now is None or not out.num_rows:
            return
        t_c = int(pc.max(out.column("t_now")).as_py())
        self._notes.append((self.clock(), min(op.t_now - op.u, t_c)))

    def value(self) -> int | None:
        horizon = self.clock() - self.lag_s
        while self._notes and self._notes[0][0] <= horizon:
            self._floor = self._notes.popleft()[1]
        return self._floor


def _attempt() -> int:
    ctx = TaskContext.get()
    return ctx.attemptNumber() if ctx is not None else 0


def run_partition(root: str, p: int, run_id: str | None = None, driver: int | None = None,
                  *, run_text: str | None = None) -> dict[str, Any]:
    """Run partition ``p`` of the run in ``root`` until its input ends or STOP.

    The driver created the run and its logs; a host that does not see them (or sees
    another run at that path) raises :class:`RunNotVisibleError` naming itself. A task
    of driver number ``driver`` stops as soon as a newer driver took the run.
    ``run_text``: the run's ``run.toml`` text the driver planned
    (:attr:`cec_spark.run.plan.RunPlan.run_text`), parsed here instead of read again.
    """
    layout = RunLayout(Path(root))
    layout.check_visible(run_id)
    layout.check_driver(driver)
    if run_text is None:
        spec, settings = layout.read_run_file()
    else:
        spec, settings = parse_run_text(run_text, f"{layout.run_file} (from the driver)")
    counters = TaskCounters(p, attempt=_attempt())
    rto = RtoTask(layout, p, spec, lambda: operator_for(spec, settings), layout.read_state(p))
    counters.recover_started_at = time.time()
    layout.write_state(p, counters.as_dict())
    op = operator_for(spec, settings)
    # Recovery is decided by the output log's content, never by the attempt number.
    rec = _recover(layout, p, op, spec, settings, counters)
    op = rec.operator  # a fresh one if the first attempt had to wait
    out = rec.output_log
    counters.recovered_at = time.time()
    rto.recovered(rec.explain, counters)
    counters.rto = rto.tick(op, counters)
    layout.write_state(p, counters.as_dict())
    try:
        if out.sealed:
            counters.done = True
            rto.note_caught_up(counters, finished=True)
            layout.write_state(p, counters.as_dict())
            return counters.as_dict()
        if not rec.explain.fresh_start:
            counters.recovered = rec.explain.to_dict()
        floor = ReplayFloor(spec.run.trim_lag_s, rec.explain.T)
        keeper = OutputKeeper(layout, p, spec)
        with StreamLog.open(layout.upstream(p)) as up:
            last_state = 0.0

            def flush_state() -> None:  # while idle: report the last batches too
                layout.check_driver(driver)
                if counters.in_batches != reported[0] or floor.value() != \
                        counters.replay_after_seq:
                    counters.observe(op, floor)
                    layout.write_state(p, counters.as_dict())
                    reported[0] = counters.in_batches

            reported = [counters.in_batches]
            for batch in _tail(up, rec.resume_after_seq, layout, flush_state):
                if counters.first_input_at is None:
                    counters.first_input_at = time.time()
                t0 = time.perf_counter()
                result = op.process(batch)
                t1 = time.perf_counter()
                counters.process_s += t1 - t0
                counters.in_batches += 1
                counters.in_tuples += batch.num_rows
                counters.in_last_seq = int(batch.column("seq")[batch.num_rows - 1].as_py())
                if result.num_rows:
                    out.append(result)
                    out.commit()
                    counters.count(result)
                    floor.note(op, result)
                    keeper.note(op)
                counters.write_s += time.perf_counter() - t1
                now = time.time()
                caught_up = rto.note_caught_up(counters)
                if now - last_state >= STATE_EVERY_S or caught_up:
                    layout.check_driver(driver)
                    counters.output_segments_trimmed += keeper.trim(out)
                    counters.observe(op, floor)
                    counters.rto = rto.tick(op, counters)
                    layout.write_state(p, counters.as_dict())
                    reported[0] = counters.in_batches
                    last_state = now
            if layout.stop_file.exists():
                counters.stopped = True
            else:
                if not _sealed(up):
                    raise CecError(f"partition {p}: the upstream tail ended before the "
                                   "log was sealed")
                rto.note_caught_up(counters, finished=True)
                final = op.finish()
                if final.num_rows:
                    out.append(final)
                    counters.count(final)
                out.commit()
                out.seal()
                counters.done = True
        counters.observe(op, floor)
        layout.write_state(p, counters.as_dict())
    finally:
        out.close()
    return counters.as_dict()


def _recover(layout: RunLayout, p: int, op: VectorOperator, spec: PipelineSpec,
             settings: RunSettings, counters: TaskCounters) -> Any:
    """Recover partition ``p``; when its upstream log does not yet reach the output's
    ``t_c`` (``cec recover --repair`` cut it and the ingest is reading the rows cut
    again), wait for the ingest, up to :data:`REFILL_WAIT_S`."""
    deadline = time.monotonic() + REFILL_WAIT_S
    while True:
        try:
            rec = recover_partition(layout.output(p), layout.upstream(p), op, fsync=spec.run.fsync,
                          create=False, segment_bytes=spec.run.segment_kb << 10,
                          upstream_after=layout.cut)
            counters.waiting = None
            return rec
        except ReplayUnavailableError as exc:
            if exc.short_of is None or time.monotonic() > deadline:
                raise
            counters.waiting = f"the ingest to refill the upstream log up to seq {exc.short_of}"
            layout.write_state(p, counters.as_dict())
            with StreamLog.open(layout.upstream(p)) as up:
                for _ in up.tail(after_seq=up.last_seq, timeout=2.0):
                    break
                if up.sealed and (up.last_seq or -1) < exc.short_of:
                    raise
            op = operator_for(spec, settings)  # the last one is half-loaded


class OutputKeeper:
    """Output retention for one task (:mod:`cec_spark.rundir.retention`): notes where the
    eventual checkpoint's extent starts after each commit, and every so often deletes
    the whole segments no recovery (as of ``trim_lag_s`` ago) and no registered
    consumer needs, beyond ``[run].output_keep_mb`` / ``output_keep_s``."""

    EVERY_S = 1.0

    def __init__(self, layout: RunLayout, p: int, spec: PipelineSpec,
                 clock: Callable[[], float] = time.time) -> None:
        self.layout, self.p, self.clock = layout, p, clock
        run = spec.run
        self.keep_bytes = None if run.output_keep_mb is None else run.output_keep_mb * (1 << 20)
        self.keep_s = run.output_keep_s
        self.on = self.keep_bytes is not None or self.keep_s is not None
        self.extent = Lagged(run.trim_lag_s)
        self._next = 0.0

    def note(self, op: VectorOperator) -> None:
        if self.on:
            start = op.next_out_seq - op.q if op.n_open else op.next_out_seq
            self.extent.note(self.clock(), start)

    def trim(self, out: StreamLog) -> int:
        now = self.clock()
        if not self.on or now < self._next:
            return 0
        self._next = now + self.EVERY_S
        chain = read_chain(out.path)
        segs = []
        for sid in chain.segments:
            try:
                st = segment_path(out.path, sid).stat()
            except FileNotFoundError:
                return 0  # trimmed meanwhile: next time
            segs.append((sid_base(sid), st.st_size, st.st_mtime))
        before = retention_before(segs, keep_bytes=self.keep_bytes, keep_s=self.keep_s,
                                  now=now, floors=[self.extent.value(now),
                                                   *(a + 1 for a in
                                                     self.layout.consumer_acks(self.p))])
        return 0 if before is None else out.trim(before_seq=before)


def _sealed(log: Any) -> bool:
    return bool(log.sealed)


def _tail(up: Any, after: int | None, layout: RunLayout, on_idle: Callable[[], None]
          ) -> Iterator[pa.RecordBatch]:
    """Upstream records after ``after`` until the log is sealed and read, or STOP.

    Looks every :data:`TAIL_POLL_S` (:data:`TAIL_SLOW_S` once idle for a while);
    ``on_idle`` is called whenever no new record came for :data:`TAIL_TIMEOUT_S`.
    """
    last = after
    got_at = reported_at = time.monotonic()
    while True:
        got = False
        for batch in up.tail(after_seq=last, timeout=0):  # one look (more while records come)
            if batch.num_rows == 0:
                continue
            got = True
            yield batch
            last = int(batch.column("seq")[batch.num_rows - 1].as_py())
            if layout.stop_file.exists():
                return
        if layout.stop_file.exists():
            return
        if not got and _sealed(up) and (up.last_seq is None or
                                        (last is not None and last >= up.last_seq)):
            return
        now = time.monotonic()
        if got:
            got_at = reported_at = now
            continue
        if now - reported_at >= TAIL_TIMEOUT_S:
            on_idle()
            reported_at = now
        time.sleep(TAIL_POLL_S if now - got_at < TAIL_SLOW_AFTER_S else TAIL_SLOW_S)
