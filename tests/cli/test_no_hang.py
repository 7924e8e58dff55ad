"""Issue 14: no run and no recovery may hang. Many tiny runs, each under a hard timeout.

``cec run pipeline`` hung forever in about 1 run in 7 (two threads of the driver
opened one log's LMDB index at once; see ``storage_log.index``). These tests run the
tiny pipeline of the report (300 rows, 10 ms time windows, 2 partitions) again and
again: 15 times in one process through the CLI's entry point (one Spark session; the
progress table drawn as on a terminal, which is where the hang was), 4 more as
separate ``cec`` processes two at a time, and 4 kill -9 of a whole ``cec run`` at a
random moment (from JVM start-up to after the end) followed by ``cec recover``, each
saying where it landed (before the run existed, mid-run, after the end). A hang of 1 run
in 7 is seen by 15 runs with probability 0.90 (30 runs: 0.99, at twice the time). Every
export must equal the independent pandas computation; a process that does not end
in time fails the test with its output.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.cec_spark.helpers import (
    REPO,
    read_export_csv,
    reference_time_windows,
    spec_text,
    write_items_csv,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 300
WINDOW_US = 10_000
TINY = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"'
HARD_TIMEOUT_S = 300  # one cec process (a tiny run takes 10-20 s here)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """(spec, expected export as CSV bytes) of the tiny pipeline."""
    d = tmp_path_factory.mktemp("tiny")
    df = write_items_csv(d / "items.csv", ROWS, keys=40, seed=3, negative=False)
    spec = d / "tiny.toml"
    spec.write_text(spec_text(TINY, where=None, function="avg", partitions=2,
                              window='{ kind = "time", size = "10ms" }'))
    ref = reference_time_windows(df, WINDOW_US, WINDOW_US, "mean")
    assert len(ref) > 100
    return spec, _csv(ref)


def _csv(df: pd.DataFrame) -> bytes:
    return df.sort_values(["key", "window_start"]).to_csv(index=False).encode()


def _export(path: Path) -> bytes:
    got = read_export_csv(path)[["key", "window_start", "window_end", "count", "value"]]
    return _csv(got.sort_values(["key", "window_start"]).reset_index(drop=True))


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)


def _wait(proc: subprocess.Popen[str], timeout: float = HARD_TIMEOUT_S) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} hung (killed after {timeout} s)\n{out[-3000:]}\n"
                    f"{err[-6000:]}")
    assert proc.returncode == 0, f"{proc.args} -> {proc.returncode}\n{out}\n{err[-6000:]}"
    return out


def test_fifteen_runs_in_one_process(tiny: tuple[Path, bytes], tmp_path: Path) -> None:
    spec, expected = tiny
    n = 15
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "120"}  # draw the live table
    out = _wait(_run(["-m", "tests.cli.many_runs", str(spec), str(tmp_path), str(n)], env),
                timeout=HARD_TIMEOUT_S + 30 * n)
    times = [float(line.split()[2]) for line in out.splitlines() if line.startswith("run ")]
    assert len(times) == n, out
    for i in range(n):
        assert _export(tmp_path / f"export{i}.csv") == expected, f"run {i}"
    print(f"{n} runs in one process: {min(times):.1f}-{max(times):.1f} s each")


def test_separate_processes_two_at_a_time(tiny: tuple[Path, bytes], tmp_path: Path) -> None:
    spec, expected = tiny
    for pair in range(2):
        runs = [tmp_path / f"run{pair}{j}" for j in range(2)]
        procs = [_run(["-m", "cli.app", "run", "pipeline", str(spec), "--log-dir", str(r)])
                 for r in runs]
        for proc in procs:
            _wait(proc)
        for r in runs:
            _wait(_run(["-m", "cli.app", "export", str(r), "--out", str(r) + ".csv"]))
            assert _export(Path(str(r) + ".csv")) == expected, r


def _kill_then_recover(spec: Path, run: Path, delay: float) -> str:
    proc = _run(["-m", "cli.app", "run", "pipeline", str(spec), "--log-dir", str(run)])
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    if not (run / "run.toml").exists():
        return "killed before the run existed"
    return "recovered"


def _until_ended(proc: subprocess.Popen[str], seconds: float) -> None:
    """Wait ``seconds``, or less if the process ends first: a kill after its end is the
    same moment whenever it comes."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(max(0.0, seconds))


def test_kill9_at_any_moment_then_recover(tiny: tuple[Path, bytes], tmp_path: Path) -> None:
    """kill -9 of the whole process group at a random moment, then `cec recover`."""
    spec, expected = tiny
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    landed: list[str] = []
    for pair in range(2):
        runs = [tmp_path / f"run{pair}{j}" for j in range(2)]
        delays = [rng.uniform(0.5, 16.0) for _ in runs]
        procs = [_run(["-m", "cli.app", "run", "pipeline", str(spec), "--log-dir", str(r)])
                 for r in runs]
        started = time.monotonic()
        for r, proc, d in sorted(zip(runs, procs, delays, strict=True), key=lambda x: x[2]):
            _until_ended(proc, started + d - time.monotonic())
            ended = proc.poll() is not None
            with contextlib.suppress(ProcessLookupError):  # it ended: the group may be gone
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            landed.append(_where_landed(r, ended))
        recs = []
        for r in runs:
            if (r / "run.toml").exists():
                recs.append((r, _run(["-m", "cli.app", "recover", "--from-log", str(r)])))
            else:  # killed before the run existed: a new run must be accepted there
                recs.append((r, _run(["-m", "cli.app", "run", "pipeline", str(spec),
                                      "--log-dir", str(r)])))
        for r, proc in recs:
            _wait(proc)
            _wait(_run(["-m", "cli.app", "export", str(r), "--out", str(r) + ".csv"]))
            assert _export(Path(str(r) + ".csv")) == expected, (seed, r, delays, landed)
    assert all(landed), landed
    print(f"seed {seed}: the kills landed {landed}")


def _where_landed(run: Path, ended: bool) -> str:
    """Where a kill of the run in ``run`` landed: after the run had ended by itself,
    before its run directory existed, or mid-run (with how far its output logs got)."""
    if ended:
        return "after the end"
    if not (run / "run.toml").exists():
        return "before the run existed"
    sizes = sum(f.stat().st_size for f in (run / "output").rglob("*") if f.is_file()) \
        if (run / "output").exists() else 0
    return f"mid-run ({sizes:,} bytes of output logs)"
