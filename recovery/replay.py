"""Recovery of one operator partition: reconcile, scan, load, replay (paper §II.B, §III).

``recover(output_dir, upstream_dir, operator)`` brings a fresh operator back to the
exact state it had at ``t_c``, the input position of the last durable output row:

1. **reconcile**: open the output log writable; the log truncates a torn tail and
   re-indexes (the paper's recovery step 1). The writable handle is returned: the
   caller keeps appending the operator's output to it.
2. **scan**: :func:`recovery.ec.reconstruct` over ``read_backward()`` (newest first,
   large chunks): the EC, ``N_c``, ``t_c``, ``T`` and the extent metrics.
3. **load**: ``operator.load_ec(ec, t_c=, t_c_ts=, next_out_seq=)``.
4. **replay**: ``upstream.read_forward(after_seq=T)`` up to and including ``t_c``
   through ``operator.process()``, which is in reconstruction mode for those tuples
   (it applies a tuple only to EC windows of its key with an older footprint, emits
   nothing). The replay stops exactly at ``t_c``: the caller resumes normal processing
   with ``upstream.read_forward(after_seq=recovered.resume_after_seq)`` and appends
   the output. Input tuples after ``t_c`` that had been processed before the crash
   produced no durable output, so processing them again is exact.

The upstream must still hold the tuple at ``T`` (``first_seq <= T``; ``T`` is the seq
of a real input tuple), and everything up to ``t_c``; else
:class:`~recovery.errors.ReplayUnavailableError`. An output log with no row is a
fresh start: nothing is loaded, ``resume_after_seq`` is ``None``.

Time travel (:func:`recover_from_logs` with ``at_seq``/``at_ts``) does the same on
logs that are already open, read-only, as of an earlier output position: the operator
ends in the state it had at that ``t_c``. ``at_seq`` is first moved forward to the last
row produced by the same input tuple (:func:`boundary_seq`).

The estimate model (:class:`RateModel`): each phase costs a fixed part plus a size
over a rate. reconcile = ``reconcile_s``; scan = ``q / scan_records_per_s`` (``q`` the
extent in output rows); load = ``N_c / load_windows_per_s``; replay =
``u / replay_positions_per_s`` where ``u = t_c - T`` input positions (exact tuple
count for dense sequence numbers, an upper bound after a filter). The default rates
are what ``bench/recovery_bench.py`` measured on a 2-core machine; pass your own
(:meth:`RateModel.from_explain` derives them from a measured recovery).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa

from cec.errors import RecoveryError
from recovery.ec import EventualCheckpoint, NothingToRecover, Reconstruction, reconstruct
from recovery.errors import ReplayUnavailableError
from storage_log.errors import LogTrimmedError
from storage_log.log import StreamLog

PHASES = ("reconcile", "scan", "load", "replay")


class OutputLogReader(Protocol):
    """What recovery reads from an output log (``storage_log.log.StreamLog``)."""

    def read_backward(
        self, *, before_seq: int | None = None, chunk_bytes: int = ...
    ) -> Iterator[pa.RecordBatch]: ...

    def read_forward(
        self, *, after_seq: int | None = None, from_ts: int | None = None
    ) -> Iterator[pa.RecordBatch]: ...


class UpstreamLogReader(Protocol):
    """What recovery reads from an upstream (input) log."""

    @property
    def first_seq(self) -> int | None: ...

    @property
    def last_seq(self) -> int | None: ...

    def read_forward(
        self, *, after_seq: int | None = None, from_ts: int | None = None
    ) -> Iterator[pa.RecordBatch]: ...


class RecoverableOperator(Protocol):
    """The part of ``cec.operator.AggregateOperator`` recovery drives."""

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch: ...

    def load_ec(self, ec: pa.Table, *, t_c: int, t_c_ts: int, next_out_seq: int) -> None: ...


@dataclass(frozen=True)
class RateModel:
    """Fixed cost plus size over rate, per phase (see the module docstring)."""

    reconcile_s: float = 0.005
    scan_records_per_s: float = 6.0e6
    load_windows_per_s: float = 1.0e6
    replay_positions_per_s: float = 1.5e6

    def estimate(self, rec: Reconstruction) -> dict[str, float]:
        """Estimated seconds of each phase for a reconstruction result."""
        if isinstance(rec, NothingToRecover):
            return {"reconcile": self.reconcile_s, "scan": 0.0, "load": 0.0, "replay": 0.0}
        return {
            "reconcile": self.reconcile_s,
            "scan": rec.extent.records / self.scan_records_per_s,
            "load": rec.n_c / self.load_windows_per_s,
            "replay": rec.extent.replay_length / self.replay_positions_per_s,
        }

    @classmethod
    def from_explain(cls, explain: RecoveryExplain) -> RateModel:
        """Rates measured by one recovery (phases too short to time keep the default)."""
        base = cls()
        m = {p.name: p.measured_s for p in explain.phases}

        def rate(size: int, name: str, default: float) -> float:
            secs = m.get(name)
            return size / secs if secs and secs > 1e-4 and size > 0 else default

        return cls(
            reconcile_s=m.get("reconcile") or base.reconcile_s,
            scan_records_per_s=rate(explain.extent_records, "scan", base.scan_records_per_s),
            load_windows_per_s=rate(explain.n_c or 0, "load", base.load_windows_per_s),
            replay_positions_per_s=rate(
                explain.replay_length, "replay", base.replay_positions_per_s
            ),
        )

    def to_dict(self) -> dict[str, float]:
        return {
            "reconcile_s": self.reconcile_s,
            "scan_records_per_s": self.scan_records_per_s,
            "load_windows_per_s": self.load_windows_per_s,
            "replay_positions_per_s": self.replay_positions_per_s,
        }


@dataclass(frozen=True)
class Phase:
    """One recovery phase: estimated and measured wall time (None: not run).

    ``cpu_s`` is the process CPU time of the phase (all threads, e.g. the log's
    decoders): unlike wall time it does not grow when the machine is oversubscribed.
    """

    name: str
    estimated_s: float
    measured_s: float | None
    cpu_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "estimated_s": self.estimated_s,
            "measured_s": self.measured_s,
            "cpu_s": self.cpu_s,
        }


@dataclass(frozen=True)
class RecoveryExplain:
    """What a recovery found and did, and how long each phase took (JSON via to_dict)."""

    fresh_start: bool
    reason: str
    n_c: int | None
    t_c: int | None
    t_c_ts: int | None
    T: int | None
    next_out_seq: int
    resume_after_seq: int | None
    extent: dict[str, Any]
    replay_tuples: int
    replay_batches: int
    replay_bytes: int
    phases: tuple[Phase, ...]
    replay_applied: int = 0
    rates: RateModel = field(default_factory=RateModel)

    @property
    def extent_records(self) -> int:
        return int(self.extent.get("records", 0))

    @property
    def replay_length(self) -> int:
        return int(self.extent.get("replay_length", 0))

    @property
    def measured_s(self) -> float:
        return sum(p.measured_s or 0.0 for p in self.phases)

    @property
    def cpu_s(self) -> float:
        return sum(p.cpu_s or 0.0 for p in self.phases)

    @property
    def estimated_s(self) -> float:
        return sum(p.estimated_s for p in self.phases)

    def phase(self, name: str) -> Phase:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fresh_start": self.fresh_start,
            "reason": self.reason,
            "n_c": self.n_c,
            "t_c": self.t_c,
            "t_c_ts": self.t_c_ts,
            "T": self.T,
            "next_out_seq": self.next_out_seq,
            "resume_after_seq": self.resume_after_seq,
            "extent": self.extent,
            "replay": {
                "tuples": self.replay_tuples,
                "applied": self.replay_applied,
                "batches": self.replay_batches,
                "bytes": self.replay_bytes,
            },
            "phases": [p.to_dict() for p in self.phases],
            "estimated_s": self.estimated_s,
            "measured_s": self.measured_s,
            "cpu_s": self.cpu_s,
            "rates": self.rates.to_dict(),
        }


@dataclass
class Recovered:
    """A recovered operator, ready to resume after ``resume_after_seq``.

    ``output_log`` is the writable output log :func:`recover` opened (the caller
    appends to it and closes it); ``None`` from :func:`recover_from_logs`.
    """

    operator: RecoverableOperator
    reconstruction: Reconstruction
    explain: RecoveryExplain
    output_log: Any = None

    @property
    def resume_after_seq(self) -> int | None:
        return self.explain.resume_after_seq


@dataclass(frozen=True)
class ReplayStats:
    """Tuples read from the upstream, and those handed to the operator (``applied``)."""

    tuples: int = 0
    batches: int = 0
    bytes: int = 0
    applied: int = 0


#: Replayed tuples are handed to the operator in batches of at least this many rows.
REPLAY_BATCH_ROWS = 1 << 16


class ReplayFilter:
    """Which replayed tuples can change the EC: those newer than a footprint of their key.

    In reconstruction mode a tuple of key ``k`` at ``seq`` is applied to the EC windows
    of ``k`` with ``t_w < seq`` and to nothing else, so a tuple whose key has no EC
    window, or whose ``seq`` is not past the oldest footprint of its key, changes
    nothing: dropping it before the operator is exact, and saves the operator the
    work (about half of the replay for uniform keys).
    """

    def __init__(self, ec: pa.Table, key_column: str) -> None:
        self.key_column = key_column
        frame = pd.DataFrame(
            {
                "k": ec.column("key").to_numpy(zero_copy_only=False),
                "t": ec.column("t_now").to_numpy(),
            }
        )
        oldest = frame.groupby("k", sort=False)["t"].min()
        self._index = oldest.index
        self._oldest = oldest.to_numpy()

    def needed(self, batch: pa.RecordBatch) -> np.ndarray[Any, np.dtype[np.bool_]]:
        keys = batch.column(self.key_column).to_numpy(zero_copy_only=False)
        pos = np.asarray(self._index.get_indexer(keys))
        need = pos >= 0
        seq = batch.column("seq").to_numpy()
        need[need] = seq[need] > self._oldest[pos[need]]
        return need


def boundary_seq(output_log: OutputLogReader, at_seq: int) -> int:
    """The last output row produced by the same input tuple as row ``at_seq``.

    All rows of one input tuple share ``t_now`` and sit next to each other, so the
    state after that row is one the operator went through at a tuple boundary.
    Returns ``at_seq`` itself if that row is not in the log.
    """
    t_now: int | None = None
    end = at_seq
    for batch in output_log.read_forward(after_seq=at_seq - 1):
        seq = batch.column("seq").to_numpy()
        tn = batch.column("t_now").to_numpy()
        if t_now is None:
            if not len(seq) or int(seq[0]) != at_seq:
                return at_seq
            t_now = int(tn[0])
        same = np.flatnonzero(tn != t_now)
        if same.size:
            return int(seq[same[0]]) - 1
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
    if at_ts is not None:
        nxt = next(iter(output_log.read_forward(from_ts=at_ts + 1)), None)
        if nxt is not None and nxt.num_rows:
            first_newer = int(nxt.column("seq")[0].as_py())
            before = first_newer if before is None else min(before, first_newer)
    batches = output_log.read_backward(before_seq=before, chunk_bytes=chunk_bytes)
    return reconstruct(batches, at_seq=at_seq, at_ts=at_ts)


def check_upstream(rec: EventualCheckpoint, upstream: UpstreamLogReader) -> None:
    """Raise ReplayUnavailableError unless the upstream holds every tuple in (T, t_c]."""
    first, last = upstream.first_seq, upstream.last_seq
    if first is None or last is None:
        raise ReplayUnavailableError(
            f"the upstream log is empty, but recovery needs its tuples after T={rec.T} "
            f"up to t_c={rec.t_c}"
        )
    if first > rec.T:
        raise ReplayUnavailableError(
            f"the upstream log starts at seq {first}, after T={rec.T}: it was trimmed past "
            f"the oldest footprint (N_c={rec.n_c}, t_c={rec.t_c}); the state cannot be "
            "rebuilt from this log"
        )
    if last < rec.t_c:
        raise ReplayUnavailableError(
            f"the upstream log ends at seq {last}, before t_c={rec.t_c}: the output log "
            "holds results of input the upstream never made durable"
        )


def replay(
    rec: EventualCheckpoint,
    upstream: UpstreamLogReader,
    operator: RecoverableOperator,
    *,
    key_column: str | None = None,
) -> ReplayStats:
    """Feed the upstream tuples in (T, t_c] to a loaded operator (reconstruction mode).

    Upstream records are coalesced into batches of at least ``REPLAY_BATCH_ROWS``
    tuples; with ``key_column`` (the input's key column) only the tuples a
    :class:`ReplayFilter` keeps reach the operator.
    """
    if rec.t_c <= rec.T:
        return ReplayStats()
    try:
        return _replay(rec, upstream, operator, key_column)
    except LogTrimmedError as exc:
        raise ReplayUnavailableError(
            f"the upstream log no longer holds the tuples after T={rec.T}: {exc}"
        ) from exc


def _feed(
    operator: RecoverableOperator,
    parts: list[pa.RecordBatch],
    keep: ReplayFilter | None,
    t_c: int,
) -> int:
    """Concatenate, filter and process replayed batches; returns the tuples applied."""
    if not parts:
        return 0
    batch = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
    if keep is not None:
        batch = batch.filter(pa.array(keep.needed(batch)))
        if not batch.num_rows:
            return 0
    out = operator.process(batch)
    if out.num_rows:
        seq = batch.column("seq").to_numpy()
        raise RecoveryError(
            f"the operator emitted {out.num_rows} row(s) while replaying seq "
            f"{int(seq[0])}..{int(seq[-1])} <= t_c={t_c} in reconstruction mode (it must "
            "emit nothing there)"
        )
    return int(batch.num_rows)


def _replay(
    rec: EventualCheckpoint,
    upstream: UpstreamLogReader,
    operator: RecoverableOperator,
    key_column: str | None,
) -> ReplayStats:
    keep = ReplayFilter(rec.table, key_column) if key_column and rec.n_c else None
    tuples = batches = nbytes = applied = 0
    last_seen: int | None = None
    parts: list[pa.RecordBatch] = []
    rows = 0
    for batch in upstream.read_forward(after_seq=rec.T):
        if not batch.num_rows:
            continue
        seq = batch.column("seq").to_numpy()
        cut = int(np.searchsorted(seq, rec.t_c, side="right"))
        if cut == 0:
            break
        parts.append(batch if cut == batch.num_rows else batch.slice(0, cut))
        rows += cut
        tuples += cut
        batches += 1
        nbytes += batch.get_total_buffer_size() * cut // batch.num_rows
        last_seen = int(seq[cut - 1])
        if rows >= REPLAY_BATCH_ROWS:
            applied += _feed(operator, parts, keep, rec.t_c)
            parts, rows = [], 0
        if cut < batch.num_rows:
            break
    applied += _feed(operator, parts, keep, rec.t_c)
    if last_seen != rec.t_c:
        raise ReplayUnavailableError(
            f"the upstream replay after T={rec.T} ended at seq {last_seen}, but the "
            f"last durable output is at t_c={rec.t_c} (the upstream lacks seq {rec.t_c})"
        )
    return ReplayStats(tuples, batches, nbytes, applied)


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
) -> Recovered:
    """Scan, load and replay on logs already open (no reconcile; time travel allowed).

    ``operator`` must be fresh (nothing processed). ``reconcile_s`` is the measured
    reconcile time to report, if the caller did one. ``key_column`` (default: the
    operator's ``config.key_column`` if it has one) enables the :class:`ReplayFilter`;
    ``filter_replay=False`` hands every replayed tuple to the operator.
    """
    rates = rates or RateModel()
    if key_column is None:
        key_column = getattr(getattr(operator, "config", None), "key_column", None)
    if not filter_replay:
        key_column = None
    rec, scan_s, scan_cpu = _timed(
        scan, output_log, at_seq=at_seq, at_ts=at_ts, chunk_bytes=chunk_bytes
    )
    est = rates.estimate(rec)
    if isinstance(rec, NothingToRecover):
        phases = (
            Phase("reconcile", est["reconcile"], reconcile_s, reconcile_cpu),
            Phase("scan", est["scan"], scan_s, scan_cpu),
            Phase("load", 0.0, 0.0, 0.0),
            Phase("replay", 0.0, 0.0, 0.0),
        )
        explain = RecoveryExplain(
            fresh_start=True,
            reason=rec.reason,
            n_c=None,
            t_c=None,
            t_c_ts=None,
            T=None,
            next_out_seq=0,
            resume_after_seq=None,
            extent={},
            replay_tuples=0,
            replay_batches=0,
            replay_bytes=0,
            phases=phases,
            rates=rates,
        )
        return Recovered(operator, rec, explain)
    check_upstream(rec, upstream)
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
    explain = RecoveryExplain(
        fresh_start=False,
        reason=f"EC of {rec.n_c} open window(s) at t_c={rec.t_c}",
        n_c=rec.n_c,
        t_c=rec.t_c,
        t_c_ts=rec.t_c_ts,
        T=rec.T,
        next_out_seq=rec.next_out_seq,
        resume_after_seq=rec.t_c,
        extent=rec.extent.to_dict(),
        replay_tuples=stats.tuples,
        replay_batches=stats.batches,
        replay_bytes=stats.bytes,
        replay_applied=stats.applied,
        phases=phases,
        rates=rates,
    )
    return Recovered(operator, rec, explain)


def plan(
    output_log: OutputLogReader,
    upstream: UpstreamLogReader | None = None,
    *,
    at_seq: int | None = None,
    at_ts: int | None = None,
    rates: RateModel | None = None,
) -> RecoveryExplain:
    """Dry run: scan only (read-only), estimate the other phases; checks the upstream."""
    rates = rates or RateModel()
    rec, scan_s, scan_cpu = _timed(scan, output_log, at_seq=at_seq, at_ts=at_ts)
    est = rates.estimate(rec)
    if isinstance(rec, NothingToRecover):
        return RecoveryExplain(
            fresh_start=True,
            reason=rec.reason,
            n_c=None,
            t_c=None,
            t_c_ts=None,
            T=None,
            next_out_seq=0,
            resume_after_seq=None,
            extent={},
            replay_tuples=0,
            replay_batches=0,
            replay_bytes=0,
            phases=(
                Phase("reconcile", est["reconcile"], None),
                Phase("scan", 0.0, scan_s, scan_cpu),
                Phase("load", 0.0, None),
                Phase("replay", 0.0, None),
            ),
            rates=rates,
        )
    if upstream is not None:
        check_upstream(rec, upstream)
    return RecoveryExplain(
        fresh_start=False,
        reason=f"EC of {rec.n_c} open window(s) at t_c={rec.t_c} (dry run)",
        n_c=rec.n_c,
        t_c=rec.t_c,
        t_c_ts=rec.t_c_ts,
        T=rec.T,
        next_out_seq=rec.next_out_seq,
        resume_after_seq=rec.t_c,
        extent=rec.extent.to_dict(),
        replay_tuples=0,
        replay_batches=0,
        replay_bytes=0,
        phases=tuple(
            Phase(name, est[name], *((scan_s, scan_cpu) if name == "scan" else (None, None)))
            for name in PHASES
        ),
        rates=rates,
    )


class _NoUpstream:
    """Stands in for an upstream log directory that does not exist (yet)."""

    first_seq: int | None = None
    last_seq: int | None = None

    def read_forward(
        self, *, after_seq: int | None = None, from_ts: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        return iter(())


def recover(
    output_dir: str | Path,
    upstream_dir: str | Path,
    operator: RecoverableOperator,
    *,
    rates: RateModel | None = None,
    chunk_bytes: int = 256 << 10,
    fsync: str = "always",
    filter_replay: bool = True,
) -> Recovered:
    """Reconcile the output log, rebuild the EC, load it and replay up to ``t_c``.

    Returns the operator, the reconstruction, the explain, and the output log open
    writable (the caller appends the output of ``resume_after_seq`` onwards and closes
    it). Raises :class:`ExtentError` or :class:`ReplayUnavailableError` (exit status 4).
    """
    out, reconcile_s, reconcile_cpu = _timed(
        StreamLog.open, output_dir, writable=True, create=True, fsync=fsync
    )
    try:
        if Path(upstream_dir).exists():
            with StreamLog.open(upstream_dir) as up:
                res = recover_from_logs(
                    out, up, operator, rates=rates, chunk_bytes=chunk_bytes,
                    reconcile_s=reconcile_s, reconcile_cpu=reconcile_cpu,
                    filter_replay=filter_replay,
                )  # fmt: skip
        else:
            res = recover_from_logs(
                out, _NoUpstream(), operator, rates=rates, chunk_bytes=chunk_bytes,
                reconcile_s=reconcile_s, reconcile_cpu=reconcile_cpu,
                filter_replay=filter_replay,
            )  # fmt: skip
    except BaseException:
        out.close()
        raise
    res.output_log = out
    return res
