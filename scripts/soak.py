"""Soak: the tiny pipeline of issue 14, run and killed again and again, as processes.

``python scripts/soak.py --runs 30 --kills 30 [--dir DIR]`` runs ``cec run pipeline``
on a 300-row CSV (10 ms time windows, 2 partitions) ``--runs`` times, then
``--kills`` times starts one, kill -9s its whole process group at a random moment
(0.5-16 s: JVM start-up to after the end) and runs ``cec recover`` (or, if it died
before ``run.toml`` existed, ``cec run`` again). Every process has a hard timeout;
every export is compared with the first run's. Prints one line per trial and a summary;
exit 1 on any hang, failure or difference.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300
SPEC = """[source]
kind = "csv"
path = "items.csv"
time_field = "item_time"

[aggregate]
group_by = "item_id"
field = "item_price"
function = "avg"
window = { kind = "time", size = "10ms" }

[run]
partitions = 2
"""


def cec(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "cli.app", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def finish(proc: subprocess.Popen[bytes], what: str) -> float:
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(f"HANG: {what} did not end in {TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise SystemExit(f"FAIL: {what} exit {proc.returncode}: {err.decode()[-2000:]}")
    return time.monotonic() - t0


def export(run: Path) -> bytes:
    out = run.with_suffix(".csv")
    finish(cec("export", str(run), "--out", str(out)), f"export {run}")
    df = pd.read_csv(out).sort_values(["key", "window_start"])
    return df.to_csv(index=False).encode()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    base = a.dir or Path(tempfile.mkdtemp(prefix="cec-soak-"))
    rng = np.random.default_rng(3)
    n = 300
    pd.DataFrame({"item_id": rng.integers(0, 40, n),
                  "item_price": np.round(rng.uniform(0, 100, n), 2),
                  "item_time": 1_700_000_000_000_000 + np.cumsum(rng.integers(0, 20_000, n)),
                  }).to_csv(base / "items.csv", index=False)
    spec = base / "tiny.toml"
    spec.write_text(SPEC)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    pick = random.Random(seed)
    expected = None
    times = []
    for i in range(a.runs):
        run = base / f"run{i}"
        times.append(finish(cec("run", "pipeline", str(spec), "--log-dir", str(run)),
                            f"run {i}"))
        got = export(run)
        expected = expected or got
        assert got == expected, f"run {i}: export differs"
        print(f"run {i}: {times[-1]:.1f} s", flush=True)
    recovered = rerun = 0
    for i in range(a.kills):
        run = base / f"kill{i}"
        delay = pick.uniform(0.5, 16.0)
        proc = cec("run", "pipeline", str(spec), "--log-dir", str(run))
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        how = "recover" if (run / "run.toml").exists() else "rerun"
        if how == "recover":
            took = finish(cec("recover", "--from-log", str(run)), f"recover {i}")
            recovered += 1
        else:  # died before the run existed: a new run is accepted there
            took = finish(cec("run", "pipeline", str(spec), "--log-dir", str(run)),
                          f"rerun {i}")
            rerun += 1
        got = export(run)
        if expected is None:
            expected = got
        assert got == expected, f"kill {i} (delay {delay:.1f} s): export differs"
        print(f"kill {i} at {delay:.1f} s: {how} {took:.1f} s, exact", flush=True)
    print(f"summary: {a.runs} runs (max {max(times, default=0):.1f} s), {a.kills} kills "
          f"({recovered} recovered, {rerun} rerun), seed {seed}, no hang, all exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
