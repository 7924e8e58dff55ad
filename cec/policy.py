"""Background checkpoint policy: when to emit ``G_check`` and how much time it may take.

Shared by both operator implementations so that, for the same input batches and the
same clock readings, they emit exactly the same ``G_check`` rows.

Modes (for measurement, paper §IV):

* ``none``: no control records at all (the baseline): no ``G_open``, no ``G_check``;
* ``open-only``: ``G_open`` when a window opens, never ``G_check`` (minimum
  recovery-time guarantee, the paper's Fig. 5);
* ``targets``: ``G_open`` plus background ``G_check`` driven by the targets below.

Targets (paper §III.A): ``Q`` bounds the extent ``q`` (output records from the oldest
footprint to now: ``q = next_out_seq - oldest footprint's output seq``), either an int
or ``"Kx"`` meaning ``K`` times the current number of open windows ``N``; ``U`` bounds
the replay length ``u = t_now - oldest tau2`` (input positions since the oldest
footprint).

The background step runs only at input-batch boundaries, after the batch's foreground
output: while ``q > Q or u > U`` and the budget allows, emit a ``G_check`` for the
window with the oldest footprint (state as of now, ``t_now`` = current), which moves its
footprint to now. A step checkpoints each window at most once and never a window whose
footprint is already at ``t_now`` (it stops when the oldest footprint was written by
this very step or has ``tau2 == t_now``), so ``Q < N`` cannot loop forever and an empty
batch does not repeat the previous step's work. No clock is read unless the oldest
footprint is older than ``t_now`` and a target is exceeded.

Budget (``CI`` ms of checkpointing per ``CP`` ms), deterministic given the clock
readings: :class:`CheckpointBudget` is a token bucket of checkpoint time. Its credit
starts full at ``CI`` and is refilled by ``CI/CP`` of the time elapsed between
readings (those around a step included), capped at ``CI``. A step that wants to
checkpoint reads the clock once in :meth:`~CheckpointBudget.grant`, which returns how
many ``G_check`` rows it may emit: ``0`` unless the bucket is full (credit positive
and at ``CI``), unlimited while no cost has been measured yet, else
``max(1, floor(credit / cost_per_check))``. So while a target stays exceeded the
checkpoints come in steps of about ``CI`` once per ``CP``, the paper's model (a step
of ``CI``, then the ``CP - CI`` its debit takes to refill: ``CI`` per ``CP`` on
average), not in a step per input batch as soon as a sliver of credit is back: such a
step would be mostly fixed cost, and its cost per row, measured on one row, would
keep every later step at one row. If the grant is positive the operator reads the
clock once more in :meth:`~CheckpointBudget.spend`, after it has built the batch's
output (a step is charged for materializing its rows too), which debits the time
elapsed since the grant net of its refill (the credit may go negative: the debt is
repaid before the next step) and sets ``cost_per_check`` to that step's time per
emitted row. No other clock reads happen, so a fake clock makes the policy
reproducible.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from cec.errors import SpecError

Mode = Literal["none", "open-only", "targets"]
MODES: tuple[Mode, ...] = ("none", "open-only", "targets")
Clock = Callable[[], float]

_Q_MULT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x\s*$")


@dataclass(frozen=True)
class PolicyConfig:
    """Checkpoint policy knobs; see the module docstring for their meaning."""

    mode: Mode = "targets"
    q: int | str = "2x"
    u: int = 1_000_000
    ci_ms: float = 5.0
    cp_ms: float = 100.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"policy mode must be one of {MODES}, got {self.mode!r}")
        self.q_target(0)  # validates q
        if isinstance(self.u, bool) or not isinstance(self.u, int) or self.u < 0:
            raise SpecError(f"policy U must be an int >= 0, got {self.u!r}")
        if not (self.ci_ms >= 0 and self.cp_ms > 0):
            raise SpecError(f"policy needs CI >= 0 and CP > 0 (ms), got {self.ci_ms}/{self.cp_ms}")

    @property
    def emits_open(self) -> bool:
        return self.mode != "none"

    @property
    def emits_check(self) -> bool:
        return self.mode == "targets"

    def q_target(self, n_open: int) -> float:
        """The extent target ``Q`` for ``n_open`` open windows."""
        q = self.q
        if not isinstance(q, int | str):
            raise SpecError(f"policy Q must be an int or 'Kx' (e.g. '2x'), got {q!r}")
        fixed, per_open = _parse_q(q)
        return fixed + per_open * n_open if per_open else fixed

    def wants_check(self, q: int, u: int, n_open: int) -> bool:
        """True if the extent or the replay length exceeds its target."""
        return n_open > 0 and (q > self.q_target(n_open) or u > self.u)


@functools.lru_cache(maxsize=64, typed=True)  # typed: True == 1 must not hit
def _parse_q(q: int | str) -> tuple[float, float]:
    """``Q`` as ``(fixed, per open window)``; parsed once per value (per-batch hot path)."""
    if isinstance(q, bool):
        raise SpecError(f"policy Q must be an int or 'Kx', got {q!r}")
    if isinstance(q, int):
        if q < 0:
            raise SpecError(f"policy Q must be >= 0, got {q}")
        return float(q), 0.0
    if isinstance(q, str):
        m = _Q_MULT.match(q)
        if m:
            return 0.0, float(m.group(1))
    raise SpecError(f"policy Q must be an int or 'Kx' (e.g. '2x'), got {q!r}")


UNLIMITED = sys.maxsize


@dataclass
class CheckpointBudget:
    """Token bucket of checkpoint time: ``ci_ms`` per ``cp_ms`` (module docstring)."""

    ci_ms: float
    cp_ms: float
    clock: Clock = time.monotonic
    credit_s: float = field(init=False)
    cost_per_check_s: float = field(init=False, default=0.0)
    _last: float | None = field(init=False, default=None)
    _t0: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.credit_s = self.ci_ms / 1000.0

    def grant(self) -> int:
        """Read the clock; how many G_check rows the step may emit now (0: none, the
        bucket is not full)."""
        now = self.clock()
        if self._last is not None:
            refill = max(0.0, now - self._last) * self.ci_ms / self.cp_ms
            self.credit_s = min(self.ci_ms / 1000.0, self.credit_s + refill)
        self._last = now
        self._t0 = now
        if self.credit_s <= 0.0 or self.credit_s < self.ci_ms / 1000.0:
            return 0  # a step starts only with a full bucket (module docstring)
        if self.cost_per_check_s <= 0.0:
            return UNLIMITED
        return max(1, min(UNLIMITED, math.floor(self.credit_s / self.cost_per_check_s)))

    def spend(self, emitted: int) -> None:
        """Read the clock; debit the time since :meth:`grant` for ``emitted`` rows
        (called once the batch's output, the step's rows included, is built)."""
        now = self.clock()
        spent = max(0.0, now - self._t0)
        refill = spent * self.ci_ms / self.cp_ms  # the bucket refills during the step too
        self.credit_s = min(self.ci_ms / 1000.0, self.credit_s + refill - spent)
        self._last = now
        if emitted > 0:
            self.cost_per_check_s = spent / emitted


def budget_for(config: PolicyConfig, clock: Clock) -> CheckpointBudget:
    """The budget of an operator with this policy."""
    return CheckpointBudget(ci_ms=config.ci_ms, cp_ms=config.cp_ms, clock=clock)


# ------------------------------------------------------------------ recovery-time objective
#
# ``[checkpoint] rto = "30s"`` asks for a recovery time instead of ``Q`` and ``U``. The
# model (pure, handed measured numbers; the measuring is :mod:`cec_spark.run.rto`'s):
#
#     predicted recovery = fixed + q / ec_rate + u / replay_rate
#
# * ``fixed``: the restart's own cost, whatever the extent: process start, Spark start,
#   the operator task's start (measured by the driver as process start → the task
#   beginning its recovery, :mod:`cec_spark.run.rto`);
# * ``ec_rate``: extent records read backwards and reconstructed, plus the EC load, per
#   second (``q`` is the extent in output records);
# * ``replay_rate``: upstream input positions replayed per second (``u`` is the replay
#   length in input positions, ``t_c - T``).
#
# :func:`rto_targets` turns an objective and the rates into ``Q`` (records) and ``U``
# (positions): the budget ``B = objective * RTO_SAFETY - fixed`` is split between the
# extent and the replay (``Q = B_q * ec_rate``, ``U = B_u * replay_rate``), with the
# extent never given less than it needs for the open windows' footprints
# (``RTO_Q_OVER_N * N`` records). When even that does not fit, ``feasible`` is False
# with the reason (the caller must say so, never leave the objective silently unmet)
# and the targets use the objective without its margin, or, when the fixed cost alone
# exceeds it, the tightest sensible budget (:data:`RTO_MIN_BUDGET_S` beyond the open
# windows' footprints).

#: Until a run measures its own, the restart's fixed cost (s): the start-up of
#: ``cec recover`` on the 2-core development machine under the load of five sessions
#: (1-min load average ~5: process start to the operator tasks recovering, 17.5 s; see
#: docs/ARCHITECTURE.md "Recovery-time objective"), rounded up.
DEFAULT_FIXED_S = 20.0
#: The floor below which an objective is refused at start when this machine has no
#: measurement of its own: the quickest ``cec recover`` start-up seen on the development
#: machine, idle (Python 0.7 s, the driver JVM with its class-data archive ~4 s, the
#: operator job and its Python workers ~1.5 s).
DEFAULT_FLOOR_S = 6.0
#: With a warm standby (``cec standby``) a recovery's fixed cost is its takeover, not a
#: restart: until this machine has measured one, the detection of a death on the same
#: host (at once), the claim and the resume on the warm session to the operator tasks
#: beginning their recovery, rounded up from the development machine.
DEFAULT_TAKEOVER_S = 1.0
#: The floor with a standby until one is measured here: the quickest takeover seen on
#: the development machine (detect, claim, tasks started).
DEFAULT_TAKEOVER_FLOOR_S = 0.3
#: Conservative rates until measured: a quarter of what a single recovery reached on
#: the development machine while three others ran beside it (extent records ~0.5-0.9 M/s,
#: replay positions ~4-7 M/s).
DEFAULT_EC_RECORDS_PER_S = 150_000.0
DEFAULT_REPLAY_POSITIONS_PER_S = 1_000_000.0
#: Share of the objective the prediction may use (the rest absorbs what the model does
#: not hold: the backlog after ``t_c``, a loaded machine's noise).
RTO_SAFETY = 0.8
#: Share of the budget given to the extent (the rest goes to the replay).
RTO_EXTENT_SHARE = 0.5
#: The extent target is never below this many times the open windows (each open window
#: has a footprint in the extent: ``q >= N`` always).
RTO_Q_OVER_N = 1.25
#: The tightest budget (s) the targets are computed for when the objective cannot be met.
RTO_MIN_BUDGET_S = 0.25
#: Background pacing under an objective: ``CI`` may grow up to this share of ``CP``
#: when checkpoints cannot keep the targets.
RTO_CI_MAX_SHARE = 0.25
#: How far over a target the extent or the replay may run before the pacing steps in:
#: 1 / RTO_SAFETY, so that within it the prediction stays under the objective.
RTO_OVERSHOOT = 1.0 / RTO_SAFETY


@dataclass(frozen=True)
class RecoveryRates:
    """What a recovery costs here: its fixed part and the two rates (module notes)."""

    fixed_s: float = DEFAULT_FIXED_S
    ec_records_per_s: float = DEFAULT_EC_RECORDS_PER_S
    replay_positions_per_s: float = DEFAULT_REPLAY_POSITIONS_PER_S
    #: which of ``fixed``, ``ec``, ``replay`` were measured (the others are defaults)
    measured: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("fixed_s", "ec_records_per_s", "replay_positions_per_s"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise SpecError(f"recovery rates: {name} must be a finite number >= 0, "
                                f"got {v!r}")
        if self.ec_records_per_s <= 0 or self.replay_positions_per_s <= 0:
            raise SpecError("recovery rates must be positive")

    def predict_s(self, q: int, u: int) -> float:
        """Predicted recovery time (s) of an extent of ``q`` records and a replay of ``u``
        input positions."""
        return (self.fixed_s + max(q, 0) / self.ec_records_per_s
                + max(u, 0) / self.replay_positions_per_s)

    def to_dict(self) -> dict[str, object]:
        return {"fixed_s": self.fixed_s, "ec_records_per_s": self.ec_records_per_s,
                "replay_positions_per_s": self.replay_positions_per_s,
                "measured": list(self.measured)}

    @classmethod
    def from_dict(cls, d: object) -> RecoveryRates:
        """Rates stored by :meth:`to_dict`; defaults for anything missing or bad (a state
        file is advisory)."""
        base = cls()
        if not isinstance(d, dict):
            return base

        def num(key: str, default: float) -> float:
            v = d.get(key)
            if isinstance(v, bool) or not isinstance(v, int | float):
                return default
            return float(v) if math.isfinite(v) and v > 0 else default

        measured = d.get("measured")
        return cls(num("fixed_s", base.fixed_s),
                   num("ec_records_per_s", base.ec_records_per_s),
                   num("replay_positions_per_s", base.replay_positions_per_s),
                   tuple(str(m) for m in measured if m in ("fixed", "ec", "replay"))
                   if isinstance(measured, list) else ())


@dataclass(frozen=True)
class RateSample:
    """One measurement of the two rates: ``size`` units in ``seconds``."""

    ec_records: int
    ec_s: float
    replay_positions: int
    replay_s: float

    #: a phase shorter than this is not timed well enough to give a rate
    MIN_S = 0.02


def merge_rates(rates: RecoveryRates, samples: list[RateSample]) -> RecoveryRates:
    """``rates`` with the rates of the samples that timed enough work: the slowest of
    them (the prediction is a bound, not an average)."""
    ec = [s.ec_records / s.ec_s for s in samples
          if s.ec_s >= RateSample.MIN_S and s.ec_records > 0]
    rp = [s.replay_positions / s.replay_s for s in samples
          if s.replay_s >= RateSample.MIN_S and s.replay_positions > 0]
    measured = set(rates.measured)
    ec_rate, rp_rate = rates.ec_records_per_s, rates.replay_positions_per_s
    if ec:
        ec_rate = min(ec)
        measured.add("ec")
    if rp:
        rp_rate = min(rp)
        measured.add("replay")
    return RecoveryRates(rates.fixed_s, ec_rate, rp_rate,
                         tuple(m for m in ("fixed", "ec", "replay") if m in measured))


@dataclass(frozen=True)
class RtoTargets:
    """The targets an objective asks for, and what they predict."""

    q: int  # extent target, output records
    u: int  # replay target, input positions
    predicted_s: float  # the prediction at exactly these targets
    feasible: bool
    note: str  # why not feasible ("" if it is)


def rto_targets(objective_s: float, rates: RecoveryRates, n_open: int) -> RtoTargets:
    """``Q`` and ``U`` that keep the predicted recovery under ``objective_s`` (notes above)."""
    if not objective_s > 0:
        raise SpecError(f"rto must be positive, got {objective_s!r}")
    budget = objective_s * RTO_SAFETY - rates.fixed_s
    q_min = max(1, math.ceil(RTO_Q_OVER_N * max(n_open, 0)))
    need_q_s = q_min / rates.ec_records_per_s
    feasible, note = True, ""
    if budget <= need_q_s:
        feasible = False
        note = (f"the objective {objective_s:g} s is below the fixed cost of a restart "
                f"({rates.fixed_s:.1f} s{'' if 'fixed' in rates.measured else ', default'}) "
                f"plus the open windows' footprints ({need_q_s:.2f} s for {n_open} windows)"
                f" with {int(100 * (1 - RTO_SAFETY))} % margin")
        # the best it can do: the objective without the margin, or the tightest targets
        budget = max(objective_s - rates.fixed_s, need_q_s + RTO_MIN_BUDGET_S)
    q_s = max(budget * RTO_EXTENT_SHARE, need_q_s)
    u_s = max(budget - q_s, 0.0)
    q = max(q_min, int(q_s * rates.ec_records_per_s))
    u = max(1, int(u_s * rates.replay_positions_per_s))
    return RtoTargets(q=q, u=u, predicted_s=rates.predict_s(q, u), feasible=feasible,
                      note=note)


def rto_pacing(ci_ms: float, base_ci_ms: float, cp_ms: float, q: int, u: int,
               targets: RtoTargets) -> float:
    """The background budget ``CI`` (ms per ``CP``) to use next: doubled (up to
    :data:`RTO_CI_MAX_SHARE` of ``CP``) while the extent or the replay runs more than
    :data:`RTO_OVERSHOOT` over its target (the checkpoints cannot keep up), halved back
    toward the spec's ``CI`` once both are under half their targets. (Within the
    overshoot the prediction stays under the objective: ``fixed + 1.25 * (0.8 * rto -
    fixed) <= rto``.)"""
    if q > RTO_OVERSHOOT * targets.q or u > RTO_OVERSHOOT * targets.u:
        return max(base_ci_ms, min(ci_ms * 2.0, cp_ms * RTO_CI_MAX_SHARE))
    if q < 0.5 * targets.q and u < 0.5 * targets.u:
        return max(base_ci_ms, ci_ms / 2.0)
    return ci_ms
