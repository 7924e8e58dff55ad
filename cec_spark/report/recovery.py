"""What a partition's recovery did: its footprints, extent, replay, phases, rates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cec_spark.report.common import _DOCS


@dataclass(frozen=True)
class Footprint:
    """One open window's newest checkpoint row in the eventual checkpoint."""

    __pydantic_config__ = _DOCS
    key: int | str
    """The window's key."""
    win_start: int
    """The window's start, as the output log's win_start column holds it."""
    kind: str
    """G_open or G_check."""
    t_w: int
    """Input position of the footprint row."""
    out_seq: int
    """Output position of the footprint row."""
    age: int
    """t_c - t_w, in input positions."""


@dataclass(frozen=True)
class Extent:
    """What the backward scan of the output log went through."""

    __pydantic_config__ = _DOCS
    records: int
    """The extent q: output rows from the oldest footprint to the last row."""
    batches: int
    """Log records decoded."""
    bytes: int
    """Their in-memory (Arrow) size, bytes."""
    windows_found: int
    """Open windows found (N_c)."""
    g_open_found: int
    """G_open rows found."""
    g_check_found: int
    """G_check rows found."""
    closed_skipped: int
    """Footprints of windows already closed, skipped."""
    replay_length: int
    """The replay length u = t_c - T, input positions."""
    oldest: list[Footprint]
    """The oldest footprints, oldest first."""


@dataclass(frozen=True)
class Replay:
    """The upstream tuples replayed after T."""

    __pydantic_config__ = _DOCS
    tuples: int
    """Input tuples replayed (counted exactly by a dry run)."""
    applied: int
    """Of these, tuples given to the operator."""
    batches: int
    """Upstream log records read."""
    bytes: int
    """Their size, bytes."""


@dataclass(frozen=True)
class Phase:
    """One phase of a recovery (reconcile, scan, load, replay)."""

    __pydantic_config__ = _DOCS
    name: str
    """reconcile, scan, load or replay."""
    estimated_s: float
    """Estimated wall time, seconds."""
    measured_s: float | None
    """Measured wall time, seconds (null: not run)."""
    cpu_s: float | None
    """Process CPU time of the phase, seconds (null: not run)."""

    @property
    def seconds(self) -> float:
        """The measured time if the phase ran, else the estimate."""
        return self.measured_s if self.measured_s is not None else self.estimated_s


@dataclass(frozen=True)
class Rates:
    """The rate model the estimates come from."""

    __pydantic_config__ = _DOCS
    reconcile_s: float
    """Time of a reconcile, seconds."""
    scan_records_per_s: float
    """Output records scanned per second."""
    load_windows_per_s: float
    """Windows loaded per second."""
    replay_positions_per_s: float
    """Input positions replayed per second."""


@dataclass(frozen=True)
class Recovery:
    """What a recovery of one partition found and did."""

    __pydantic_config__ = _DOCS
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
    T: int | None
    """Replay start: every input position after T is replayed."""
    next_out_seq: int
    """The output position the resumed operator writes next."""
    resume_after_seq: int | None
    """The input position the resumed operator continues after."""
    extent: Extent | None
    """The extent scanned (null for a fresh start)."""
    replay: Replay
    """The replay."""
    phases: list[Phase]
    """Each phase's time."""
    estimated_s: float
    """All phases, estimated, seconds."""
    measured_s: float
    """All phases, measured, seconds."""
    cpu_s: float
    """All phases, CPU time, seconds."""
    rates: Rates
    """The rate model of the estimates."""


def _extent(raw: dict[str, Any]) -> Extent | None:
    if not raw:
        return None
    return Extent(records=int(raw["records"]), batches=int(raw["batches"]),
                  bytes=int(raw["bytes"]), windows_found=int(raw["windows_found"]),
                  g_open_found=int(raw["g_open_found"]),
                  g_check_found=int(raw["g_check_found"]),
                  closed_skipped=int(raw["closed_skipped"]),
                  replay_length=int(raw["replay_length"]),
                  oldest=[Footprint(**f) for f in raw.get("oldest", [])])


def recovery_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The fields of :class:`Recovery` from ``RecoveryExplain.to_dict()``."""
    return {
        "fresh_start": bool(raw["fresh_start"]), "reason": str(raw["reason"]),
        "n_c": raw.get("n_c"), "t_c": raw.get("t_c"), "t_c_ts_us": raw.get("t_c_ts"),
        "T": raw.get("T"), "next_out_seq": int(raw["next_out_seq"]),
        "resume_after_seq": raw.get("resume_after_seq"),
        "extent": _extent(raw.get("extent") or {}),
        "replay": Replay(**raw["replay"]),
        "phases": [Phase(**ph) for ph in raw.get("phases", [])],
        "estimated_s": float(raw["estimated_s"]), "measured_s": float(raw["measured_s"]),
        "cpu_s": float(raw["cpu_s"]), "rates": Rates(**raw["rates"]),
    }


def recovery_of(raw: dict[str, Any] | None) -> Recovery | None:
    return None if raw is None else Recovery(**recovery_fields(raw))
