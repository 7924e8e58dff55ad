"""Session windows through real logs: a crash at every record boundary and torn output
logs are recovered exactly (backward scan, EC load, replay without duplicates)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cec.policy import PolicyConfig
from cec.windows import SessionWindow
from tests.recovery.harness import OPERATORS, Scenario, make_stream
from tests.recovery.test_real_logs import crash_at, setup_run


def session_scenario(rng: random.Random, impl: str) -> Scenario:
    q: int | str = rng.choice([0, 3, 10, 1000, "1x", "2x"])
    policy = PolicyConfig(mode=rng.choice(["targets", "targets", "open-only"]),  # type: ignore[arg-type]
                          q=q, u=rng.choice([0, 5, 50, 10**6]),
                          ci_ms=rng.choice([1.0, 5.0]), cp_ms=rng.choice([10.0, 100.0]))
    # a gap of 1..30 over ts steps of 0..3 (or 0..12): long sessions and many closes
    return Scenario(SessionWindow(rng.randint(1, 30)), policy,
                    key_type=rng.choice(["int64", "int64", "string"]),
                    function=rng.choice(["avg", "sum", "count", "min", "max"]),
                    clock_step=rng.choice([0.0005, 0.002]), impl=impl)


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("seed", range(4))
def test_crash_at_every_record_boundary(tmp_path: Path, seed: int, impl: str) -> None:
    rng = random.Random(300 + seed)
    scn = session_scenario(rng, impl)
    inputs = make_stream(rng.randint(40, 80), rng.randint(2, 6), seed, key_type=scn.key_type,
                         ts_step=rng.choice([3, 12]))
    logged = setup_run(tmp_path, scn, inputs)
    for j, offset in enumerate([0, *logged.boundaries]):
        crash_at(scn, logged, tmp_path / "up", tmp_path / "out", offset, tmp_path / f"c{j}")


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("seed", range(3))
def test_torn_tails(tmp_path: Path, seed: int, impl: str) -> None:
    rng = random.Random(400 + seed)
    scn = session_scenario(rng, impl)
    inputs = make_stream(600, rng.randint(5, 40), seed, key_type=scn.key_type, max_batch=12)
    logged = setup_run(tmp_path, scn, inputs)
    end = logged.boundaries[-1]
    for j in range(8):
        offset = rng.randrange(1, end)
        crash_at(scn, logged, tmp_path / "up", tmp_path / "out", offset, tmp_path / f"t{j}")
