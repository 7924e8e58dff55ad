"""Shared helpers of the pipeline and CLI tests: input files, specs, pandas references."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]


def write_items_csv(path: Path, rows: int, *, keys: int = 50, seed: int = 7,
                    negative: bool = True) -> pd.DataFrame:
    """The paper's workload as a CSV with non-decreasing int64 microsecond times."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "item_id": rng.integers(0, keys, rows),
        "item_price": np.round(rng.uniform(-5.0 if negative else 0.0, 100.0, rows), 2),
        "item_time": 1_700_000_000_000_000 + np.cumsum(rng.integers(0, 20_000, rows)),
    })
    df.to_csv(path, index=False)
    return df


def spec_text(source: str, *, where: str | None = "item_price >= 0",
              window: str = '{ kind = "count", size = 10 }', function: str = "avg",
              partitions: int = 3, extra_run: str = "", q: str = '"2x"') -> str:
    filt = f'[filter]\nwhere = "{where}"\n' if where else ""
    return f"""
[source]
{source}
{filt}
[aggregate]
group_by = "item_id"
field = "item_price"
function = "{function}"
window = {window}

[checkpoint]
Q = {q}
U = 1000000
CI_ms = 5
CP_ms = 100

[run]
partitions = {partitions}
{extra_run}
"""


def reference_count_windows(df: pd.DataFrame, size: int, where_nonneg: bool = True,
                            function: str = "mean") -> pd.DataFrame:
    """Closed tumbling count windows of ``size`` per key, ``function`` of the prices
    (a pandas aggregation: mean, min, max, ...): the export's columns."""
    if where_nonneg:
        df = df[df.item_price >= 0]
    df = df.reset_index(drop=True).copy()
    df["w"] = df.groupby("item_id").cumcount() // size
    g = df.groupby(["item_id", "w"], sort=False)
    out = pd.DataFrame({
        "key": g.item_id.first(), "window_start": g.item_time.first(),
        "window_end": g.item_time.last(), "count": g.item_price.size(),
        "value": g.item_price.agg(function)}).reset_index(drop=True)
    out = out[out["count"] == size]
    return out.sort_values(["key", "window_start", "window_end"]).reset_index(drop=True)


RESULT_COLUMNS = ["key", "window_start", "window_end", "count", "value"]


def assert_results_equal(run: Path, want: pd.DataFrame) -> None:
    """The run's results (every generation's output logs, as ``cec export`` reads them),
    sorted by key and window, equal ``want`` (a reference of the export's columns) row
    for row and column for column, exactly."""
    from cec_spark.read.export import results_table

    got = results_table(run).to_pandas()[RESULT_COLUMNS]
    got = got.sort_values(RESULT_COLUMNS[:3]).reset_index(drop=True)
    assert len(got) == len(want)
    for col in RESULT_COLUMNS:
        assert np.array_equal(got[col].to_numpy(), want[col].to_numpy()), col


def reference_time_windows(df: pd.DataFrame, size_us: int, slide_us: int,
                           function: str = "sum") -> pd.DataFrame:
    """Sliding time windows per key (all flushed at the end of the input)."""
    df = df[df.item_price >= 0]
    ts = df.item_time.to_numpy()
    lo = (ts - size_us) // slide_us + 1
    hi = ts // slide_us
    reps = (hi - lo + 1).astype(int)
    idx = np.repeat(np.arange(len(df)), reps)
    offs = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
    starts = (np.repeat(lo, reps) + offs) * slide_us
    ex = pd.DataFrame({"key": df.item_id.to_numpy()[idx], "window_start": starts,
                       "v": df.item_price.to_numpy()[idx]})
    g = ex.groupby(["key", "window_start"])
    out = g.v.agg(["size", function]).reset_index()
    out.columns = ["key", "window_start", "count", "value"]
    out["window_end"] = out.window_start + size_us
    out = out[["key", "window_start", "window_end", "count", "value"]]
    return out.sort_values(["key", "window_start"]).reset_index(drop=True)


def cec(args: Sequence[str], *, timeout: float = 300, check: bool = False
        ) -> subprocess.CompletedProcess[str]:
    """Run the ``cec`` command in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "cli.app", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"cec {' '.join(args)} -> {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def start_cec(args: Sequence[str], log: Path, env: dict[str, str] | None = None
              ) -> subprocess.Popen[bytes]:
    """Start ``cec`` in its own process group (so the test can kill -9 all of it);
    ``env``: more environment variables."""
    fh = log.open("wb")
    return subprocess.Popen([sys.executable, "-m", "cli.app", *args], stdout=fh,
                            stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def alive(pid: int) -> bool:
    """The process ``pid`` exists and is not a zombie (dead for a test's purposes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(cond: object, timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def task_states(run: Path, partitions: int) -> list[dict[str, object]]:
    """Each operator task's state file (``RUN/state/pNNNN.json``), {} where it is
    missing or being replaced."""
    out: list[dict[str, object]] = []
    for p in range(partitions):
        try:
            out.append(json.loads((run / "state" / f"p{p:04d}.json").read_text()))
        except (OSError, ValueError):
            out.append({})
    return out


def read_export_csv(path: Path) -> pd.DataFrame:
    """A ``cec export`` CSV with its ISO-8601 window bounds as int64 microseconds."""
    df = pd.read_csv(path)
    for col in ("window_start", "window_end"):
        when = pd.to_datetime(df[col], utc=True, format="ISO8601")
        df[col] = (when - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(1, "us")
    return df


def operate_partitions(layout: Any, upto: int | None = None, only: set[int] | None = None,
                       fmt: int | None = None) -> None:
    """Every operator of the run's current generation (``only`` those), as a task runs
    it, in this process: recover, then its upstream (up to seq ``upto``), finish and
    seal at a sealed end. ``fmt``: the record format the operators write (an old run's:
    1), else (None) their logs' (:func:`cec_spark.run.operators.record_format_of`)."""
    from cec_spark.run.operators import operator_for, record_format_of
    from cec_spark.rundir.run_file import read_run_file
    from recovery.partition import recover_partition
    from storage_log.log import StreamLog

    spec, settings = read_run_file(layout)
    for p in range(spec.run.partitions):
        if only is not None and p not in only:
            continue
        op = operator_for(spec, settings, fmt=fmt or record_format_of(layout.output(p)))
        rec = recover_partition(layout.output(p), layout.upstream(p), op, fsync="never",
                                create=False, upstream_after=layout.cut)
        out = rec.output_log
        try:
            with StreamLog.open(layout.upstream(p)) as up:
                for batch in up.read_forward(after_seq=rec.t_c):
                    seq = batch.column("seq").to_numpy()
                    n = len(seq) if upto is None else int(np.searchsorted(seq, upto, "right"))
                    if n:
                        res = rec.operator.process(batch.slice(0, n))
                        if res.num_rows:
                            out.append(res)
                            out.commit()
                    if n < len(seq):
                        break
                if up.sealed and upto is None and not out.sealed:
                    fin = rec.operator.finish()
                    if fin.num_rows:
                        out.append(fin)
                    out.commit()
                    out.seal()
        finally:
            out.close()


def killed_after_first_file(tmp_path: Path, df: pd.DataFrame, *, function: str,
                            partitions: int, env: dict[str, str] | None = None) -> Path:
    """A stream-folder run (``cec run pipeline`` in its own process group, ``env`` added
    to its environment) of ``df``'s first half, killed -9 once its operators have
    processed that file (its open windows in its output logs) and its Python workers
    have exited; then the second half and ``_END`` arrive in the folder. Returns the
    run directory, to be recovered."""
    import signal

    folder = tmp_path / "in"
    folder.mkdir()
    half = len(df) // 2
    df.iloc[:half].to_csv(folder / "f-000.csv", index=False)
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text('kind = "stream-dir"\npath = "in"\ntime_field = "item_time"\n'
                              "poll_ms = 50", function=function, partitions=partitions))
    run = tmp_path / "run"
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                     tmp_path / "run.log", env=env)
    first = int((df.iloc[:half].item_price >= 0).sum())
    try:
        wait_for(lambda: sum(int(s.get("in_tuples", 0))  # type: ignore[call-overload]
                             for s in task_states(run, partitions)) >= first
                 or proc.poll() is not None, 180, "the first file processed")
    finally:
        pids = [int(s["pid"]) for s in task_states(run, partitions)  # type: ignore[call-overload]
                if "pid" in s]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "run.log").read_text()[-3000:]
    # Spark's Python workers leave with their JVM (SIGHUP from the worker daemon)
    wait_for(lambda: not any(alive(pid) for pid in pids), 60, "orphaned workers to exit")
    df.iloc[half:].to_csv(folder / ".f-001.tmp", index=False)
    (folder / ".f-001.tmp").rename(folder / "f-001.csv")
    (folder / "_END").touch()
    return run
