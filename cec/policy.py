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
