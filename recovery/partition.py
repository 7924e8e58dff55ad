"""Recovery of one operator partition: reconcile, scan, load, replay (paper §II.B, §III).

``recover_partition(output_dir, upstream_dir, operator)`` brings a fresh operator back to the
exact state it had at ``t_c``, the input position of the last durable output row:

1. **reconcile**: open the output log writable; the log truncates a torn tail and
   re-indexes (the paper's recovery step 1). The writable handle is returned: the
   caller keeps appending the operator's output to it.
2. **scan**: :func:`recovery.ec.reconstruct` over ``read_backward()`` (newest first,
   large chunks): the EC, ``N_c``, ``t_c``, ``T`` (the paper's symbol; in code and in a
   run's JSON ``replay_after_seq``) and the extent metrics.
3. **load**: ``operator.load_ec(ec, t_c=, t_c_ts=, next_out_seq=)``.
4. **replay**: ``upstream.read_forward(after_seq=T, tokens=True)`` up to and
   including ``t_c`` through ``operator.process()``, which is in reconstruction mode
   for those tuples (it applies a tuple only to EC windows of its key with an older
   footprint, emits nothing), and the watermarks among them (before ``t_c``) through
   ``operator.watermark()``, which consumes them (:mod:`recovery.upstream`). The
   replay stops exactly at ``t_c``: the caller resumes normal processing with
   ``upstream.read_forward(after_seq=recovered.t_c, tokens=True)`` (the watermarks at
   ``t_c`` first) and appends the output. Input tuples and watermarks after ``t_c``
   that had been processed before the crash produced no durable output (or, for a
   watermark at ``(t_c, W <= t_c_ts)``, are consumed by the operator), so processing
   them again is exact.

The upstream must still hold the tuple at ``T`` (``first_seq <= T``; ``T`` is the seq
of a real input tuple), and everything up to ``t_c``; else
:class:`~recovery.errors.ReplayUnavailableError`. An output log with no row is a
fresh start: nothing is loaded, ``t_c`` and ``replay_after_seq`` are ``None``.

Time travel (:func:`recover_from_logs` with ``at_seq``/``at_ts``) does the same on
logs that are already open, read-only, as of an earlier output position: the operator
ends in the state it had at that ``t_c``. ``at_seq`` is first moved forward to the last
row produced by the same input tuple (:func:`boundary_seq`).

The time of each phase is estimated by :class:`recovery.explain.RateModel` and
measured (wall and CPU); :class:`recovery.explain.RecoveryExplain` carries both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from recovery.checkpoint import TYPE_G_OPEN_R
from recovery.ec import NothingToRecover, Reconstruction, reconstruct
from recovery.explain import PHASES, Phase, RateModel, RecoveryExplain
from recovery.followed import FollowedEC
from recovery.upstream import (
    RecoverableOperator,
    UpstreamLogReader,
    check_upstream,
    count_replay,
    replay,
)
from storage_log.framing import INT64_MAX
from storage_log.log import StreamLog

__all__ = [
    "OutputLogReader",
    "Recovered",
    "boundary_seq",
    "predict",
    "recover_from_logs",
    "recover_partition",
    "scan",
]


class OutputLogReader(Protocol):
    """What recovery reads from an output log (``storage_log.log.StreamLog``)."""

    def read_backward(
        self, *, before_seq: int | None = None, chunk_bytes: int = ...
    ) -> Iterator[pa.RecordBatch]: ...

    def read_forward(
        self, *, after_seq: int | None = None, from_ts: int | None = None
    ) -> Iterator[pa.RecordBatch]: ...


@dataclass
class Recovered:
    """A recovered operator, ready to resume after input position ``t_c``.

    ``output_log`` is the writable output log :func:`recover` opened (the caller
    appends to it and closes it); ``None`` from :func:`recover_from_logs`.
    """

    operator: RecoverableOperator
    reconstruction: Reconstruction
    explain: RecoveryExplain
    output_log: Any = None

    @property
    def t_c(self) -> int | None:
        """The input position of the last durable output row: the operator's state is as
        of it, and it continues with the upstream tuples after it (None: a fresh start,
        from the beginning)."""
        return self.explain.t_c

    @property
    def replay_after_seq(self) -> int | None:
        """The paper's ``T``: the recovery replayed the upstream tuples after it (None: a
        fresh start); the replay_after_seq a task reports starts from it."""
        return self.explain.replay_after_seq


def boundary_seq(output_log: OutputLogReader, at_seq: int) -> int:
    """The last output row produced by the same input tuple as row ``at_seq``.

    All rows of one input tuple share ``t_now`` and sit next to each other, so the
    state after that row is one the operator went through at a tuple boundary. A
    ``G_open+R`` row holds two output positions (``seq - 1`` and ``seq``). Returns
    ``at_seq`` itself if that position is not in the log.
    """
    t_now: int | None = None
    end = at_seq
    for batch in output_log.read_forward(after_seq=at_seq - 1):
        if not batch.num_rows:
            continue
        seq = batch.column("seq").to_numpy()
        tn = batch.column("t_now").to_numpy()
        if t_now is None:
            first = int(seq[0])
            paired = first == at_seq + 1 and int(batch.column("type")[0].as_py()) == TYPE_G_OPEN_R
            if first != at_seq and not paired:
                return at_seq
            t_now = int(tn[0])
        other = np.flatnonzero(tn != t_now)
        if other.size:
            return int(seq[other[0] - 1]) if other[0] else end
        end = int(seq[-1])
    return end


def scan(
    output_log: OutputLogReader,
    *,
    at_seq: int | None = None,
    at_ts: int | None = None,
    chunk_bytes: int = 256 << 10,
) -> Reconstruction:
    """Reconstruct the EC of an open output log (now, or as of ``at_seq``/``at_ts``).

    Time travel starts the backward read at the position (one forward lookup finds
    it), so going back far costs the extent there, not the log after it.
    """
    before: int | None = None
    if at_seq is not None:
        at_seq = boundary_seq(output_log, at_seq)
        before = at_seq + 1
    if at_ts is not None and at_ts < INT64_MAX:  # at INT64_MAX nothing is newer
        nxt = next(iter(output_log.read_forward(from_ts=at_ts + 1)), None)
        if nxt is not None and nxt.num_rows:
            first_newer = int(nxt.column("seq")[0].as_py())
            before = first_newer if before is None else min(before, first_newer)
    batches = output_log.read_backward(before_seq=before, chunk_bytes=chunk_bytes)
    return reconstruct(batches, at_seq=at_seq, at_ts=at_ts)


def _timed(fn: Any, *args: Any, **kw: Any) -> tuple[Any, float, float]:
    """``fn(*args, **kw)``, its wall time and its process CPU time."""
    t0, c0 = time.perf_counter(), time.process_time()
    res = fn(*args, **kw)
    return res, time.perf_counter() - t0, time.process_time() - c0


def recover_from_logs(
    output_log: OutputLogReader,
    upstream: UpstreamLogReader,
    operator: RecoverableOperator,
    *,
    at_seq: int | None = None,
    at_ts: int | None = None,
    rates: RateModel | None = None,
    chunk_bytes: int = 256 << 10,
    reconcile_s: float | None = None,
    reconcile_cpu: float | None = None,
    key_column: str | None = None,
    filter_replay: bool = True,
    upstream_after: int | None = None,
    followed: FollowedEC | None = None,
) -> Recovered:
    """Scan, load and replay on logs already open (no reconcile; time travel allowed).

    ``operator`` must be fresh (nothing processed). ``reconcile_s`` is the measured
    reconcile time to report, if the caller did one. ``key_column`` (default: the
    operator's ``config.key_column`` if it has one) enables the :class:`ReplayFilter`;
    ``filter_replay=False`` hands every replayed tuple to the operator.
    ``upstream_after``: the upstream log holds exactly the tuples after that seq (a
    rescaled run's generation, :func:`recovery.upstream.check_upstream`).
    ``followed``: the EC a hot standby's task kept while it followed this log
    (:class:`~recovery.followed.FollowedEC`): the records after the last one it read
    are read forward into it and it is the checkpoint (no backward scan); if the log
    now ends before that record (a cut tail), the backward scan as without it.
    """
    rates = rates or RateModel()
    if key_column is None:
        key_column = getattr(getattr(operator, "config", None), "key_column", None)
    if not filter_replay:
        key_column = None
    caught_up, scan_s, scan_cpu = _timed(_catch_up, followed, output_log)
    if caught_up is None:
        rec, scan_s, scan_cpu = _timed(
            scan, output_log, at_seq=at_seq, at_ts=at_ts, chunk_bytes=chunk_bytes
        )
    else:
        rec = caught_up
    est = rates.estimate(rec)
    if isinstance(rec, NothingToRecover):
        phases = (
            Phase("reconcile", est["reconcile"], reconcile_s, reconcile_cpu),
            Phase("scan", est["scan"], scan_s, scan_cpu),
            Phase("load", 0.0, 0.0, 0.0),
            Phase("replay", 0.0, 0.0, 0.0),
        )
        explain = RecoveryExplain.fresh(rec.reason, phases, rates)
        return Recovered(operator, rec, explain)
    check_upstream(rec, upstream, starts_after=upstream_after)
    _, load_s, load_cpu = _timed(
        operator.load_ec, rec.table, t_c=rec.t_c, t_c_ts=rec.t_c_ts, next_out_seq=rec.next_out_seq
    )
    stats, replay_s, replay_cpu = _timed(replay, rec, upstream, operator, key_column=key_column)
    phases = (
        Phase("reconcile", est["reconcile"], reconcile_s, reconcile_cpu),
        Phase("scan", est["scan"], scan_s, scan_cpu),
        Phase("load", est["load"], load_s, load_cpu),
        Phase("replay", est["replay"], replay_s, replay_cpu),
    )
    how = "" if caught_up is None else (
        f", followed by a hot standby (read forward at the takeover: "
        f"{rec.extent.batches} record(s))")
    explain = RecoveryExplain.found(
        rec,
        f"EC of {rec.n_c} open window(s) at t_c={rec.t_c}{how}",
        phases,
        rates,
        replay=stats,
    )
    return Recovered(operator, rec, explain)


def _catch_up(followed: FollowedEC | None, output_log: OutputLogReader
              ) -> Reconstruction | None:
    """``followed`` read on to the log's end: its checkpoint; None when there is none
    or the log ends before the last record it read (cut since: scan instead)."""
    if followed is None:
        return None
    last = getattr(output_log, "last_seq", None)
    if followed.last_seq > (-1 if last is None else last):
        return None
    followed.mark_read()
    after = followed.last_seq if followed.n_c is not None else None
    for batch in output_log.read_forward(after_seq=after):
        followed.see(batch)
    return followed.checkpoint()


def predict(
    output_log: OutputLogReader,
    upstream: UpstreamLogReader | None = None,
    *,
    at_seq: int | None = None,
    at_ts: int | None = None,
    rates: RateModel | None = None,
    upstream_after: int | None = None,
) -> RecoveryExplain:
    """Dry run, read-only: scan the output log, estimate the other phases' times.

    With the upstream it checks that the replay is possible and counts exactly what
    it would read (tuples, records, bytes; ``applied`` stays 0: the replay filter
    needs the loaded EC).
    """
    rates = rates or RateModel()
    rec, scan_s, scan_cpu = _timed(scan, output_log, at_seq=at_seq, at_ts=at_ts)
    est = rates.estimate(rec)
    if isinstance(rec, NothingToRecover):
        return RecoveryExplain.fresh(
            rec.reason,
            (
                Phase("reconcile", est["reconcile"], None),
                Phase("scan", 0.0, scan_s, scan_cpu),
                Phase("load", 0.0, None),
                Phase("replay", 0.0, None),
            ),
            rates,
        )
    counted = None
    if upstream is not None:
        check_upstream(rec, upstream, starts_after=upstream_after)
        counted = count_replay(rec, upstream)  # what the replay will read: exact
    return RecoveryExplain.found(
        rec,
        f"EC of {rec.n_c} open window(s) at t_c={rec.t_c} (dry run)",
        tuple(
            Phase(name, est[name], *((scan_s, scan_cpu) if name == "scan" else (None, None)))
            for name in PHASES
        ),
        rates,
        counted,
    )


class _NoUpstream:
    """Stands in for an upstream log directory that does not exist (yet)."""

    first_seq: int | None = None
    last_seq: int | None = None

    def read_forward(
        self, *, after_seq: int | None = None, from_ts: int | None = None,
        tokens: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        return iter(())


def recover_partition(
    output_dir: str | Path,
    upstream_dir: str | Path,
    operator: RecoverableOperator,
    *,
    rates: RateModel | None = None,
    chunk_bytes: int = 256 << 10,
    fsync: str = "always",
    filter_replay: bool = True,
    create: bool = True,
    segment_bytes: int = 64 << 20,
    upstream_after: int | None = None,
    followed: FollowedEC | None = None,
) -> Recovered:
    """Reconcile the output log, rebuild the EC, load it and replay up to ``t_c``
    (``followed``: a hot standby's EC instead of the rebuild, :func:`recover_from_logs`).

    Returns the operator, the reconstruction, the explain, and the output log open
    writable (the caller appends the output of the tuples after ``t_c`` and closes
    it). Raises :class:`ExtentError` or :class:`ReplayUnavailableError` (exit status 4).
    """
    out, reconcile_s, reconcile_cpu = _timed(
        StreamLog.open, output_dir, writable=True, create=create, fsync=fsync,
        segment_bytes=segment_bytes,
    )
    try:
        if Path(upstream_dir).exists():
            with StreamLog.open(upstream_dir) as up:
                res = recover_from_logs(
                    out, up, operator, rates=rates, chunk_bytes=chunk_bytes,
                    reconcile_s=reconcile_s, reconcile_cpu=reconcile_cpu,
                    filter_replay=filter_replay, upstream_after=upstream_after,
                    followed=followed,
                )  # fmt: skip
        else:
            res = recover_from_logs(
                out, _NoUpstream(), operator, rates=rates, chunk_bytes=chunk_bytes,
                reconcile_s=reconcile_s, reconcile_cpu=reconcile_cpu,
                filter_replay=filter_replay, upstream_after=upstream_after,
                followed=followed,
            )  # fmt: skip
    except BaseException:
        out.close()
        raise
    res.output_log = out
    return res
