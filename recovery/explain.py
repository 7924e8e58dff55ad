"""The recovery explain: what a recovery found and did, and what each phase cost.

The estimate model (:class:`RateModel`): each phase costs a fixed part plus a size
over a rate. reconcile = ``reconcile_s``; scan = ``q / scan_records_per_s`` (``q`` the
extent in output rows); load = ``N_c / load_windows_per_s``; replay =
``u / replay_positions_per_s`` where ``u = t_c - replay_after_seq`` input positions
(the paper's ``u = t_c - T``; exact tuple count for dense sequence numbers, an upper
bound after a filter). The default rates
are what ``bench/recovery_bench.py`` measured on the shared 2-core development
machine (100 000 keys, window 10; the scan rate includes decoding the log records,
the replay rate the replay filter, which hands the operator about a third of the
tuples); pass your own (:meth:`RateModel.from_explain` derives them from a measured
recovery).

The explain is also what the commands report (``cec recover``'s partitions, the
``recovered`` part of a run's partitions): ``--json`` is ``dataclasses.asdict`` of
these classes, ``docs/JSON.md`` is generated from the docstring under each field
(``cli/schema.py``), and :meth:`RecoveryExplain.from_dict` reads the JSON back (a
task's explain crosses from the executor to the driver in its state file).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from recovery.checkpoint import JSON_DOCS, EventualCheckpoint, ExtentMetrics
from recovery.ec import NothingToRecover, Reconstruction
from recovery.upstream import ReplayStats

PHASES = ("reconcile", "scan", "load", "replay")


@dataclass(frozen=True)
class RateModel:
    """The rate model the estimates come from: fixed cost plus size over rate, per phase."""

    __pydantic_config__ = JSON_DOCS
    reconcile_s: float = 0.005
    """Time of a reconcile, seconds."""
    scan_records_per_s: float = 2.5e6
    """Output records scanned per second."""
    load_windows_per_s: float = 3.0e6
    """Windows loaded per second."""
    replay_positions_per_s: float = 2.5e6
    """Input positions replayed per second."""

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


@dataclass(frozen=True)
class Phase:
    """One phase of a recovery (reconcile, scan, load, replay): its estimated and
    measured time."""

    __pydantic_config__ = JSON_DOCS
    name: str
    """reconcile, scan, load or replay."""
    estimated_s: float
    """Estimated wall time, seconds."""
    measured_s: float | None
    """Measured wall time, seconds (null: not run)."""
    cpu_s: float | None = None
    """Process CPU time of the phase (all threads, e.g. the log's decoders), seconds
    (null: not run); unlike wall time it does not grow on an oversubscribed machine."""

    @property
    def seconds(self) -> float:
        """The measured time if the phase ran, else the estimate."""
        return self.measured_s if self.measured_s is not None else self.estimated_s


def _totals(phases: tuple[Phase, ...]) -> dict[str, float]:
    """The explain's ``estimated_s``, ``measured_s`` and ``cpu_s``: sums over its phases."""
    return {"estimated_s": sum(p.estimated_s for p in phases),
            "measured_s": sum(p.measured_s or 0.0 for p in phases),
            "cpu_s": sum(p.cpu_s or 0.0 for p in phases)}


@dataclass(frozen=True)
class RecoveryExplain:
    """What a recovery of one partition found and did, and what each phase cost."""

    __pydantic_config__ = JSON_DOCS
    fresh_start: bool
    """Nothing to recover: the operator starts from the beginning of its input."""
    reason: str
    """Why (a sentence)."""
    n_c: int | None
    """Open windows in the eventual checkpoint (N_c)."""
    t_c: int | None
    """Input position of the last output row (the checkpoint's position)."""
    t_c_ts_us: int | None
    """Event time of that row, microseconds."""
    replay_after_seq: int | None
    """Replay start (the paper's T): every input position after it is replayed."""
    next_out_seq: int
    """The output position the resumed operator writes next (it continues with the
    input positions after t_c)."""
    extent: ExtentMetrics | None
    """The extent scanned (null for a fresh start)."""
    replay: ReplayStats
    """The replay."""
    phases: tuple[Phase, ...]
    """Each phase's time."""
    estimated_s: float
    """All phases, estimated, seconds."""
    measured_s: float
    """All phases, measured, seconds."""
    cpu_s: float
    """All phases, CPU time, seconds."""
    rates: RateModel = field(default_factory=RateModel)
    """The rate model of the estimates."""

    @classmethod
    def fresh(cls, reason: str, phases: tuple[Phase, ...], rates: RateModel) -> RecoveryExplain:
        """The explain of a log with nothing to recover: the operator starts fresh."""
        return cls(fresh_start=True, reason=reason, n_c=None, t_c=None, t_c_ts_us=None,
                   replay_after_seq=None, next_out_seq=0, extent=None,
                   replay=ReplayStats(), phases=phases, rates=rates, **_totals(phases))

    @classmethod
    def found(
        cls,
        ec: EventualCheckpoint,
        reason: str,
        phases: tuple[Phase, ...],
        rates: RateModel,
        replay: ReplayStats | None = None,
    ) -> RecoveryExplain:
        """The explain of a reconstructed EC and its replay (None: nothing replayed)."""
        return cls(fresh_start=False, reason=reason, n_c=ec.n_c, t_c=ec.t_c,
                   t_c_ts_us=ec.t_c_ts, replay_after_seq=ec.replay_after_seq,
                   next_out_seq=ec.next_out_seq, extent=ec.extent,
                   replay=replay or ReplayStats(), phases=phases, rates=rates,
                   **_totals(phases))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RecoveryExplain:
        """An explain from its JSON (:meth:`to_dict`)."""
        phases = tuple(Phase(**ph) for ph in raw["phases"])
        extent = raw.get("extent")
        return cls(
            fresh_start=raw["fresh_start"], reason=raw["reason"], n_c=raw["n_c"],
            t_c=raw["t_c"], t_c_ts_us=raw["t_c_ts_us"],
            replay_after_seq=raw["replay_after_seq"], next_out_seq=raw["next_out_seq"],
            extent=ExtentMetrics.from_dict(extent) if extent else None,
            replay=ReplayStats(**raw["replay"]), phases=phases,
            rates=RateModel(**raw["rates"]), **_totals(phases))

    def to_dict(self) -> dict[str, Any]:
        """The explain as JSON (``dataclasses.asdict``; what ``--json`` shows)."""
        return asdict(self)

    @property
    def extent_records(self) -> int:
        """The extent q (0 for a fresh start)."""
        return 0 if self.extent is None else self.extent.records

    @property
    def replay_length(self) -> int:
        """The replay length u (0 for a fresh start)."""
        return 0 if self.extent is None else self.extent.replay_length

    def phase(self, name: str) -> Phase:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)
