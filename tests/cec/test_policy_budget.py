"""The checkpoint policy: the CI/CP budget (a token bucket, on fake clocks) and Q."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cec.errors import SpecError
from cec.operator import OperatorConfig, ReferenceOperator, VectorOperator
from cec.policy import UNLIMITED, CheckpointBudget, PolicyConfig
from cec.records import G_CHECK
from cec.windows import CountWindow

from .helpers import FakeClock, batch, rows


class Clock:
    """A clock set by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_full_bucket_unlimited_until_a_cost_is_measured() -> None:
    c = Clock()
    b = CheckpointBudget(ci_ms=10.0, cp_ms=100.0, clock=c)
    assert b.grant() == UNLIMITED
    c.now += 0.002
    b.spend(100)  # 2 ms for 100 rows: 20 us per row; 0.2 ms refilled meanwhile
    assert b.credit_s == pytest.approx(0.0082)
    assert b.cost_per_check_s == pytest.approx(2e-5)
    assert c.reads == 2


def test_a_step_waits_for_a_full_bucket() -> None:
    c = Clock()
    b = CheckpointBudget(ci_ms=10.0, cp_ms=100.0, clock=c)
    b.grant()
    c.now += 0.002
    b.spend(100)  # credit 8.2 ms, 20 us per row
    # 1.8 ms are missing: CP/CI * 1.8 ms = 18 ms of refill; until then no step, even
    # though the credit stays positive (no one-row steps on a sliver of credit)
    for _ in range(17):
        c.now += 0.001
        assert b.grant() == 0
    c.now += 0.0011
    assert b.grant() in (499, 500)  # full again: 10 ms / 20 us (float rounding)
    c.now += 0.012
    b.spend(500)  # overspent: 12 ms, 1.2 ms of it refilled: 0.8 ms of debt
    assert b.credit_s == pytest.approx(-0.0008)
    c.now += 0.107  # debt and a full CI: 10.8 ms of credit take 108 ms
    assert b.grant() == 0
    c.now += 0.0011
    assert b.grant() in (416, 417)  # 10 ms / 24 us


def test_no_credit_no_step() -> None:
    c = Clock()
    b = CheckpointBudget(ci_ms=0.0, cp_ms=100.0, clock=c)
    c.now += 10.0
    assert b.grant() == 0


@pytest.mark.parametrize("impl", [ReferenceOperator, VectorOperator])
def test_operator_checkpoints_once_the_bucket_is_full_again(impl: Any) -> None:
    """Q = 0 wants a checkpoint after every batch; with 0.5 ms per clock reading a step
    costs 0.5 ms of the 1 ms bucket less the 0.05 ms refilled meanwhile, and each later
    reading refills 0.05 ms, so the next step comes nine or ten batches later (not at
    the next batch, as soon as the credit is positive)."""
    clock = FakeClock(0.0005)
    pol = PolicyConfig(mode="targets", q=0, ci_ms=1.0, cp_ms=10.0)
    op = impl(OperatorConfig(window=CountWindow(100, 100), function="sum", policy=pol,
                             clock=clock))
    steps = []
    for i in range(40):
        out = op.process(batch([(i, i, i % 3, 1.0)]))
        steps.append(sum(1 for (t,) in rows(out, "type") if t == G_CHECK))
    at = [i for i, n in enumerate(steps) if n]
    assert at[0] == 1 and len(at) >= 3  # batch 0: its window opened at t_now
    gaps = {b - a for a, b in itertools.pairwise(at)}
    assert gaps <= {9, 10}
    # a grant per batch but the first (nothing to checkpoint), a spend per step
    assert clock.reads == len(steps) - 1 + len(at)


@pytest.mark.parametrize("q", [True, False, -1, "x", "2", 1.5, [1], None])
def test_q_is_validated_though_parsed_once(q: Any) -> None:
    PolicyConfig(q=1)  # cached values must not answer for True (== 1) and the like
    PolicyConfig(q=0)
    with pytest.raises(SpecError):
        PolicyConfig(q=q)


def test_q_target() -> None:
    assert PolicyConfig(q=7).q_target(100) == 7.0
    assert PolicyConfig(q="1x").q_target(90_000) == 90_000.0
    assert PolicyConfig(q=" 2.5 x").q_target(4) == 10.0
    assert PolicyConfig(q="0x").q_target(4) == 0.0
