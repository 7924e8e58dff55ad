"""The recovery explain: what a recovery found and did, and what each phase cost.

The estimate model (:class:`RateModel`): each phase costs a fixed part plus a size
over a rate. reconcile = ``reconcile_s``; scan = ``q / scan_records_per_s`` (``q`` the
extent in output rows); load = ``N_c / load_windows_per_s``; replay =
``u / replay_positions_per_s`` where ``u = t_c - T`` input positions (exact tuple
count for dense sequence numbers, an upper bound after a filter). The default rates
are what ``bench/recovery_bench.py`` measured on the shared 2-core development
machine (100 000 keys, window 10; the scan rate includes decoding the log records,
the replay rate the replay filter, which hands the operator about a third of the
tuples); pass your own (:meth:`RateModel.from_explain` derives them from a measured
recovery).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recovery.checkpoint import EventualCheckpoint
from recovery.ec import NothingToRecover, Reconstruction

PHASES = ("reconcile", "scan", "load", "replay")


@dataclass(frozen=True)
class RateModel:
    """Fixed cost plus size over rate, per phase (see the module docstring)."""

    reconcile_s: float = 0.005
    scan_records_per_s: float = 2.5e6
    load_windows_per_s: float = 3.0e6
    replay_positions_per_s: float = 2.5e6

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

    @classmethod
    def fresh(cls, reason: str, phases: tuple[Phase, ...], rates: RateModel) -> RecoveryExplain:
        """The explain of a log with nothing to recover: the operator starts fresh."""
        return cls(
            fresh_start=True,
            reason=reason,
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

    @classmethod
    def found(
        cls,
        ec: EventualCheckpoint,
        reason: str,
        phases: tuple[Phase, ...],
        rates: RateModel,
        replay: tuple[int, int, int, int] = (0, 0, 0, 0),
    ) -> RecoveryExplain:
        """The explain of a reconstructed EC; ``replay`` is (tuples, batches, bytes, applied)."""
        tuples, batches, nbytes, applied = replay
        return cls(
            fresh_start=False,
            reason=reason,
            n_c=ec.n_c,
            t_c=ec.t_c,
            t_c_ts=ec.t_c_ts,
            T=ec.T,
            next_out_seq=ec.next_out_seq,
            resume_after_seq=ec.t_c,
            extent=ec.extent.to_dict(),
            replay_tuples=tuples,
            replay_batches=batches,
            replay_bytes=nbytes,
            replay_applied=applied,
            phases=phases,
            rates=rates,
        )

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
