"""A real kill -9 of a task process (ingest + operator + logs), then recovery.

The child (tests/recovery/crash_child.py) is killed at a random moment after it has
recovered, restarted (it recovers again), killed again, and finally run to the end.
The sealed output log must hold exactly the failure-free run's R and G_open rows.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.recovery.crash_child import scenario
from tests.recovery.harness import OPERATORS, r_rows, run
from tests.recovery.logs import read_all

ROOT = Path(__file__).resolve().parents[2]


def start(run_dir: Path, seed: int, n: int, impl: str) -> subprocess.Popen[str]:
    args = [str(run_dir), str(seed), str(n), impl]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.recovery.crash_child", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seed", "impl"), [(1, "reference"), (2, "vector" if "vector" in OPERATORS else "reference")]
)
def test_kill_9_at_random_moments(tmp_path: Path, seed: int, impl: str) -> None:
    n = 6000
    rng = random.Random(seed)
    scn, inputs = scenario(seed, n, impl)
    kills = 0
    cut_points: list[int] = []  # durable output records at each kill
    for _ in range(3):
        child = start(tmp_path, seed, n, impl)
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "started", child.communicate()[1]
        target = rng.randrange(len(inputs))
        for line in child.stdout:
            if line.startswith("batch") and int(line.split()[1]) >= target:
                break
        time.sleep(rng.uniform(0.0, 0.01))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            kills += 1
        out, _ = child.communicate()
        if "done" in out:
            break
        cut_points.append(len(read_all(tmp_path / "out")))
    child = start(tmp_path, seed, n, impl)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert out.split()[0] == "started" and out.split()[-1] == "done"
    original = run(scn, inputs, keep_states=False)
    final = read_all(tmp_path / "out")
    want = [*original.outputs, original.final]
    for types in ((1,), (2,)):
        assert r_rows(final, types).equals(r_rows(want, types)), types
    assert kills >= 1
    print("durable output records at each kill:", cut_points)
