"""Peak memory per open window, as a user sees it (issue 40).

``python bench/memory_bench.py [--rows N] [--keys K] [--partitions P] [--rounds R]
[--base TREE] [--quick] [--work DIR] [--out DIR] [--timeout S]``
(also ``python -m bench --only memory``).

The measure of issue 40: with every window open until the end, how many bytes the Python
workers hold per open window. The input (:class:`Layout`): ``--rows`` rows (default 10 M)
in parquet files of 1 M rows, ``item_id, item_price, item_time``; row i has the key i for
i < ``--keys`` (default 5 M: every key in the first K rows), a seeded random key below K
after; its time is 2026-01-01T00:00:00Z + 10 µs × i, so every row lies inside one day.
The query: 1-day tumbling ``avg(item_price)`` per ``item_id``, P = ``--partitions``
(default 4). No window closes before the end (the watermark never passes the day), so
the open windows at their peak are the distinct (key, window) pairs of the input, counted
from the data as it is written (:func:`open_windows_of`): K.

Each round, for each side: the small run (10 k rows, the keys scaled alike: 5 k for
10 M / 5 M, the same spec) and then the big run, each a whole ``cec run pipeline`` (it
completes; ``finish`` closes every window at the end), watched from ``/proc`` every
0.2 s (:class:`bench.harness.Run`): the Python workers' peak RSS is
``peak_rss_kind["py-worker"]``, the peak over the looks of the **sum** of ``VmRSS`` over
the ``py-worker`` processes. cec's worker daemon (``python -m cec_spark.driver.daemon
pyspark.worker``, the JVM's child) is among them: :func:`bench.harness.kind_of` names a
process by its command line, and the daemon's names ``pyspark.worker``; the workers it
forks are ``py-worker`` too (a stock ``pyspark.daemon`` would be kind ``py-daemon`` and
out of the sum). The daemon holds about the same in both runs, so it cancels in the
difference; it is told apart by its parent (not a Python worker) and its own peak
recorded beside, with the forked workers' number and the largest one's peak. Pages a
worker shares with the daemon count in each process, in both runs alike. Then

    bytes per open window = (big run's workers' peak − small run's) / open windows

(the big run's open windows). Beside it, not the issue's measure: the same difference
with each worker's ``Pss`` summed (``peak_pss_kind``, :func:`bench.harness.pss`), which
counts a page a forked worker shares with the daemon once, so that one idle worker more
or less in a run (5 or 6 are forked) adds only its own pages. ``--rounds`` rounds
(default 2); ``--base TREE`` (a git worktree of another commit) runs that tree side by
side, first on ``PYTHONPATH`` and the working directory of its processes, the sides'
order rotated every round (:func:`bench.harness.order`).

Exactness (cheap, outside the measured runs): every run's own summary (``--json``):
completed, every row through the operators, no late row, ``results`` (windows closed) =
the open windows (and the windows opened, ``g_open`` summed over the tasks, alike); each
side's small runs and its first big run are also exported (``cec export --format
parquet``): one row per open window, one key each, every window the day, the counts
summing to the rows, and count and avg equal to pandas' over the input on a sample of
1,000 keys (avg to 1e-9 relative). A run that failed or is not exact makes the exit code 1.

Results: ``DIR/memory.json`` and ``DIR/memory.md`` (default ``bench/results/memory``),
written by this program only (after every round), with the commit and dirty flag of
each side, the 1-minute load, the cores other processes used during each run
(:func:`bench.harness.quiet`) and the command line. Target (issue 40): ≤ 64 bytes per
open window (the median of this tree's rounds), judged only when no run of it saw other
processes use more than :data:`bench.harness.OTHERS_LIMIT` cores on average.

Exit codes: 0 every run finished and exact, 1 a run failed or was not exact, 2 bad
arguments or not enough disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import harness  # noqa: E402
from bench.fair_spark import CEC_SPEC  # noqa: E402

OUT = REPO / "bench" / "results" / "memory"
WORK = Path("/tmp/cec-memory")
ROWS = 10_000_000
KEYS = 5_000_000
QUICK_ROWS = 1_000_000
QUICK_KEYS = 500_000
PARTITIONS = 4
ROUNDS = 2
SMALL_ROWS = 10_000
FILE_ROWS = 1_000_000
SEED = 40
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z: a day's start
STEP_US = 10  # 100 k rows per second of event time: 10 M rows span 100 s
DAY_US = 86_400_000_000
TIMEOUT_S = 1800.0
TARGET_BYTES = 64.0
SAMPLE_KEYS = 1_000
WORKERS = "py-worker"
PYTHON_KINDS = ("py-daemon", "py-worker")
MIB = 1 << 20
# disk per row of the big input: the parquet files (kept) and one run directory (removed
# after its run) with its export
DISK_PER_ROW = 120
LAYOUT_VERSION = 1

CEC = [sys.executable, "-m", "cli.app"]
#: the query: fair_spark's spec (parquet, avg(item_price) per item_id) over 1-day windows
WINDOW = '{ kind = "time", size = "1d" }'


# ----------------------------------------------------------------------------- the input

@dataclass(frozen=True)
class Layout:
    """The input's rows: row i has the key i for i < ``keys`` (every key in the first
    ``keys`` rows), a seeded random key below ``keys`` after; its time is ``start_us +
    step_us × i`` (all inside one window of ``window_us``: checked); its price a seeded
    random integer in [1, 10 000). In files of ``file_rows`` rows, each file's random
    numbers seeded by (``seed``, its number): the same layout makes the same rows."""

    rows: int
    keys: int
    file_rows: int = FILE_ROWS
    seed: int = SEED
    start_us: int = START_US
    step_us: int = STEP_US
    window_us: int = DAY_US

    def __post_init__(self) -> None:
        if self.rows < 1 or self.file_rows < 1:
            raise ValueError(f"{self.rows:,} rows in files of {self.file_rows:,}: both must "
                             "be at least 1")
        if not 1 <= self.keys <= self.rows:
            raise ValueError(f"{self.keys:,} keys for {self.rows:,} rows: every key must be "
                             "in the rows (1 <= keys <= rows)")
        last = self.start_us + (self.rows - 1) * self.step_us
        if self.start_us // self.window_us != last // self.window_us:
            raise ValueError(f"{self.rows:,} rows {self.step_us} µs apart do not fit in one "
                             "window: windows would close before the end")

    @property
    def files(self) -> int:
        return -(-self.rows // self.file_rows)

    @property
    def open_windows(self) -> int:
        """The windows the layout keeps open until the end: every row inside one window,
        so one per key."""
        return self.keys

    @property
    def window_start_us(self) -> int:
        return self.start_us // self.window_us * self.window_us

    def columns(self, i: int) -> dict[str, npt.NDArray[np.int64]]:
        """File ``i``'s columns."""
        lo = i * self.file_rows
        hi = min(self.rows, lo + self.file_rows)
        if not 0 <= lo < hi:
            raise IndexError(f"file {i} of {self.files}")
        seq = np.arange(lo, hi, dtype=np.int64)
        rng = np.random.default_rng([self.seed, i])
        ids = seq.copy()
        later = seq >= self.keys
        ids[later] = rng.integers(0, self.keys, int(later.sum()), dtype=np.int64)
        price = rng.integers(1, 10_000, hi - lo, dtype=np.int64)
        return {"item_id": ids, "item_price": price,
                "item_time": self.start_us + seq * self.step_us}


def small_layout(big: Layout, rows: int = SMALL_ROWS) -> Layout:
    """The small run's input: ``rows`` rows, the keys scaled as the big run's (at least
    1), the same layout otherwise."""
    keys = max(1, round(big.keys * rows / big.rows))
    return Layout(rows, keys, big.file_rows, big.seed, big.start_us, big.step_us,
                  big.window_us)


def open_windows_of(ids: npt.NDArray[np.int64], ts: npt.NDArray[np.int64],
                    window_us: int) -> int:
    """The distinct (key, tumbling window of ``window_us``) pairs of these rows."""
    if len(ids) == 0:
        return 0
    win = ts // window_us
    if int(win.min()) == int(win.max()):
        return len(np.unique(ids))
    return len(np.unique(np.stack([ids, win], axis=1), axis=0))


def make_data(folder: Path, layout: Layout) -> int:
    """The input files ``folder/part-NNNNN.parquet``; the open windows counted from the
    rows written (:func:`open_windows_of`)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ids, ts = [], []
    for i in range(layout.files):
        cols = layout.columns(i)
        pq.write_table(pa.table(cols), folder / f"part-{i:05d}.parquet")
        ids.append(cols["item_id"])
        ts.append(cols["item_time"])
    return open_windows_of(np.concatenate(ids), np.concatenate(ts), layout.window_us)


def manifest_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".json")  # beside the source folder, not in it


def ensure_data(folder: Path, layout: Layout) -> int:
    """:func:`make_data` unless ``folder`` already holds this layout's files (its
    manifest beside it says so); the open windows counted when they were written."""
    want = {"version": LAYOUT_VERSION, "layout": asdict(layout)}
    try:
        have = json.loads(manifest_path(folder).read_text())
        files = sorted(folder.glob("part-*.parquet"))
        if ({k: have.get(k) for k in want} == want and len(files) == layout.files
                and isinstance(have.get("open_windows"), int)):
            return int(have["open_windows"])
    except (OSError, ValueError):
        pass
    manifest_path(folder).unlink(missing_ok=True)
    t0 = time.perf_counter()
    print(f"# making {layout.rows:,} rows, {layout.keys:,} keys in {folder} ...", flush=True)
    n = make_data(folder, layout)
    manifest_path(folder).write_text(json.dumps({**want, "open_windows": n}) + "\n")
    print(f"#   made in {time.perf_counter() - t0:.0f} s: {n:,} open windows", flush=True)
    return n


# ----------------------------------------------------------------------------- exactness

def counter_problems(summary: dict[str, Any], rows: int, open_windows: int) -> list[str]:
    """What the run's own summary (``cec run pipeline --json``) says against the input:
    nothing when it completed, every row went through the operators, none late, and it
    closed (``results``) and opened (``g_open``) one window per open window."""
    out = []
    if summary.get("completed") is not True:
        out.append("the run did not complete")
    if summary.get("operator_tuples") != rows:
        out.append(f"{summary.get('operator_tuples')} rows through the operators, "
                   f"not {rows:,}")
    if summary.get("late_rows", 0) != 0:
        out.append(f"{summary.get('late_rows')} late rows")
    if summary.get("results") != open_windows:
        out.append(f"{summary.get('results')} results, not the {open_windows:,} open "
                   "windows")
    parts = summary.get("per_partition") or []
    opened = [p.get("g_open") for p in parts]
    if parts and all(isinstance(x, int) for x in opened) and sum(opened) != open_windows:
        out.append(f"{sum(opened):,} windows opened (g_open), not {open_windows:,}")
    return out


def sample_keys(keys: int, n: int = SAMPLE_KEYS, seed: int = SEED) -> list[int]:
    """Up to ``n`` keys below ``keys``, the first and the last among them."""
    rng = np.random.default_rng(seed)
    picked = rng.choice(keys, size=min(n, keys), replace=False)
    return sorted({0, keys - 1, *(int(x) for x in picked)})


def reference(folder: Path, keys: Sequence[int]) -> pd.DataFrame:
    """pandas' count and mean of ``item_price`` per ``item_id`` in ``keys`` (the one
    window every row is in), indexed by the key."""
    t = pq.read_table(folder, columns=["item_id", "item_price"],
                      filters=[("item_id", "in", list(keys))])
    g = t.to_pandas().groupby("item_id")["item_price"]
    return pd.DataFrame({"count": g.count(), "avg": g.mean()})


def export_problems(export: pd.DataFrame, ref: pd.DataFrame, rows: int,
                    open_windows: int, window_start_us: int) -> list[str]:
    """An export (``key, window_start, window_end, count, value``; ``window_start`` as
    µs) against the input: one row per open window, one key each, every window the
    one day, counts summing to the rows, and on ``ref``'s keys count equal and avg to
    1e-9 relative."""
    out = []
    if len(export) != open_windows:
        out.append(f"{len(export):,} windows exported, not {open_windows:,}")
    if export["key"].nunique() != len(export):
        out.append("a key has more than one window")
    starts = export["window_start"].astype("int64").to_numpy()
    if len(starts) and not (starts == window_start_us).all():
        out.append(f"{int((starts != window_start_us).sum()):,} windows do not start at "
                   f"{window_start_us} µs")
    total = int(export["count"].sum())
    if total != rows:
        out.append(f"the counts sum to {total:,}, not {rows:,} rows")
    got = export.set_index("key").reindex(ref.index)
    missing = int(got["count"].isna().sum())
    if missing:
        out.append(f"{missing} of the {len(ref)} sampled keys not exported")
        return out
    bad_n = int((got["count"].to_numpy(dtype=np.int64)
                 != ref["count"].to_numpy(dtype=np.int64)).sum())
    if bad_n:
        out.append(f"{bad_n} of the {len(ref)} sampled keys' counts differ from pandas'")
    close = np.isclose(got["value"].to_numpy(dtype=np.float64),
                       ref["avg"].to_numpy(dtype=np.float64), rtol=1e-9, atol=0.0)
    if not close.all():
        out.append(f"{int((~close).sum())} of the {len(ref)} sampled keys' averages "
                   "differ from pandas'")
    return out


def read_export(path: Path) -> pd.DataFrame:
    frame = pq.read_table(path).to_pandas()
    frame["window_start"] = frame["window_start"].astype("int64")  # µs since 1970
    return frame


# ----------------------------------------------------------------------------- arithmetic

def bytes_per_window(big_peak: int, small_peak: int, open_windows: int) -> float:
    """(big run's workers' peak − small run's) / the big run's open windows."""
    if open_windows <= 0:
        raise ValueError("no open window")
    return (big_peak - small_peak) / open_windows


def per_round(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (side, round) whose small and big runs both finished: the workers' peak
    growth and the bytes per open window."""
    by: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for r in runs:
        by.setdefault((r["side"], r["round"]), {})[r["run"]] = r
    out = []
    for (side, rnd), pair in sorted(by.items(), key=lambda x: (x[0][1], x[0][0])):
        small, big = pair.get("small"), pair.get("big")
        if small is None or big is None or small["status"] != "ok" or big["status"] != "ok":
            continue
        grow = big["workers_peak"] - small["workers_peak"]
        pss_b, pss_s = big.get("workers_peak_pss"), small.get("workers_peak_pss")
        by_pss = None if not pss_b or not pss_s else round(
            bytes_per_window(pss_b, pss_s, big["open_windows"]), 1)
        out.append({"side": side, "round": rnd, "growth": grow,
                    "bytes_per_window_pss": by_pss,
                    "open_windows": big["open_windows"],
                    "bytes_per_window": round(bytes_per_window(
                        big["workers_peak"], small["workers_peak"], big["open_windows"]), 1),
                    "exact": big.get("exact") is not False and small.get("exact") is not False,
                    "others_cores": max_or_none([small.get("others_cores"),
                                                 big.get("others_cores")])})
    return out


def this_over_base(rounds: Sequence[dict[str, Any]], key: str) -> list[float]:
    """``key`` of this side over the base's, for each round both have it (the base's
    above 0), in round order."""
    a = {x["round"]: x.get(key) for x in rounds if x["side"] == "this"}
    b = {x["round"]: x.get(key) for x in rounds if x["side"] == "base"}
    pairs = [(a[i], b[i]) for i in sorted(set(a) & set(b))]
    return [float(x) / y for x, y in pairs if x is not None and y is not None and y > 0]


def max_or_none(xs: Sequence[float | None]) -> float | None:
    return None if not xs or any(x is None for x in xs) else max(
        x for x in xs if x is not None)


def judge(rounds: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]],
          side: str = "this", target: float = TARGET_BYTES) -> dict[str, Any]:
    """The target for ``side``: met, missed, not judged (other processes busy during one
    of its runs) or not measured; ``text`` gives the numbers."""
    name = f"≤ {target:g} bytes per open window (the Python workers' peak RSS growth)"
    mine = [r for r in rounds if r["side"] == side and r["exact"]]
    if not mine:
        return {"target": name, "state": "not measured",
                "text": "no round whose small and big runs both finished exact"}
    xs = [r["bytes_per_window"] for r in mine]
    med = statistics.median(xs)
    text = (f"{med:.0f} bytes per open window (median of {len(xs)} round(s): "
            + ", ".join(f"{x:.0f}" for x in xs) + f") at {mine[0]['open_windows']:,} "
            "open windows")
    state = "met" if med <= target else "missed"
    others = max_or_none([r.get("others_cores") for r in runs if r["side"] == side])
    if others is None:
        text += "; other processes' CPU not measured"
    elif not harness.quiet(others):
        state = "not judged"
        text += (f"; other processes used up to {others:.2f} cores during a run "
                 f"(> {harness.OTHERS_LIMIT:g})")
    else:
        text += f"; other processes used at most {others:.2f} cores during a run"
    return {"target": name, "state": state, "text": text}


# ----------------------------------------------------------------------------- markdown

def _mib(n: int | None) -> str:
    return "–" if n is None else f"{n / MIB:,.1f}"


def markdown(res: dict[str, Any]) -> str:
    lay, small = res["layout"], res["small_layout"]
    sides = {s["name"]: s for s in res["sides"]}
    lines = [
        "# Peak memory per open window, as a user sees it (issue 40): "
        "bench/memory_bench.py", "",
        f"{lay['rows']:,} rows, {lay['keys']:,} keys (every key in the first "
        f"{lay['keys']:,} rows, every row's time inside one day: **{res['open_windows']:,} "
        f"windows open until the end**), 1-day tumbling avg(item_price) per item_id, "
        f"P = {res['partitions']}, parquet files of {lay['file_rows']:,} rows; the small "
        f"run: {small['rows']:,} rows, {small['keys']:,} keys, the same spec. Each run a "
        "whole `cec run pipeline`, watched from /proc every 0.2 s (bench/harness.py): the "
        "Python workers' peak is the peak over the looks of the sum of VmRSS over the "
        "`py-worker` processes, cec's daemon among them (its command line names "
        "pyspark.worker; pages shared with it count in each process). Bytes per "
        "open window = (big run's workers' peak − small run's) / open windows. "
        f"{res['cpus']} CPUs, {res['memory_gib']} GiB; {res['started']}; 1-min load "
        f"{res['load_start']} at the start, {res.get('load_end', '–')} at the end; "
        f"{res['rounds']} round(s), the sides' order rotated each round.", "",
        "Sides: " + "; ".join(f"{s['name']}: {harness.commit_text(s)}"
                              + (f" ({s['tree']})" if s.get("tree") else "")
                              for s in res["sides"]) + ".", "",
        f"Command: `{res['command']}`", "",
        "| side | round | run | open windows | status | wall s | workers' peak MiB | "
        "forked workers | largest worker MiB | daemon MiB | others' cores | load | "
        "exact |", "|---|--:|---|--:|---|--:|--:|--:|--:|--:|--:|---|---|"]
    for r in res["runs"]:
        exact = {True: "yes", False: "**NO**: " + "; ".join(r.get("problems", [])),
                 None: "–"}[r.get("exact")]
        lines.append(
            f"| {r['side']} | {r['round']} | {r['run']} | {r['open_windows']:,} | "
            f"{r['status']} | {r['wall_s']:.1f} | {_mib(r.get('workers_peak'))} | "
            f"{r.get('worker_processes', '–')} | {_mib(r.get('largest_worker_peak'))} | "
            f"{_mib(r.get('daemon_peak'))} | {r.get('others_cores')} | "
            f"{r['load_start']}→{r['load_end']} | {exact} ({r.get('checked', '–')}) |")
    lines += ["", "## Bytes per open window", "",
              "| side | round | workers' peak growth, MiB | open windows | bytes per open "
              "window | by Pss |", "|---|--:|--:|--:|--:|--:|"]
    for x in res["per_round"]:
        by_pss = x.get("bytes_per_window_pss")
        lines.append(f"| {x['side']} | {x['round']} | {_mib(x['growth'])} | "
                     f"{x['open_windows']:,} | **{x['bytes_per_window']:.0f}** | "
                     f"{'–' if by_pss is None else f'{by_pss:.0f}'} |")
    if not res["per_round"]:
        lines.append("| (no round finished) | | | | | |")
    lines += ["", "\"By Pss\": the same difference of peaks with each worker's `Pss` "
              "(/proc/PID/smaps_rollup: a page shared by n processes counts 1/n in each) "
              "summed instead of its VmRSS: pages a forked worker shares with the daemon "
              "count once, so an idle worker more or less in a run adds its own pages only. "
              "Not the issue's measure; shown beside it.", ""]
    for name, side in sides.items():
        xs = [x["bytes_per_window"] for x in res["per_round"] if x["side"] == name]
        if xs:
            ps = [x["bytes_per_window_pss"] for x in res["per_round"]
                  if x["side"] == name and x.get("bytes_per_window_pss") is not None]
            by_pss = "" if not ps else (
                f"; by Pss {statistics.median(ps):.0f} ({min(ps):.0f}–{max(ps):.0f})")
            lines.append(f"- {name} ({harness.commit_text(side)}): median "
                         f"**{statistics.median(xs):.0f}** bytes per open window "
                         f"({min(xs):.0f}–{max(xs):.0f} over {len(xs)} round(s)){by_pss}")
    if "base" in sides:
        rs = this_over_base(res["per_round"], "bytes_per_window")
        if rs:
            lines.append(f"- this ÷ base, round by round: **{statistics.median(rs):.2f}** "
                         f"(rounds: {', '.join(f'{x:.2f}' for x in rs)})")
        prs = this_over_base(res["per_round"], "bytes_per_window_pss")
        if prs:
            lines.append(f"- by Pss, this ÷ base, round by round: "
                         f"{statistics.median(prs):.2f} "
                         f"(rounds: {', '.join(f'{x:.2f}' for x in prs)})")
    j = res["judgement"]
    lines += ["", "## Target (issue 40)", "",
              f"- {j['target']}: **{j['state']}** — {j['text']}"]
    if res.get("failures"):
        lines += ["", "## RUNS FAILED OR NOT EXACT", "", *[f"- {f}" for f in res["failures"]]]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the runs

@dataclass(frozen=True)
class Side:
    name: str  # this, base
    tree: Path | None  # None: this repository

    @property
    def cwd(self) -> Path:
        """Where its processes start: its own tree (``-m`` puts the working directory
        first on ``sys.path``, before ``PYTHONPATH``)."""
        return REPO if self.tree is None else self.tree

    def env(self) -> dict[str, str]:
        env = harness.default_env()
        if self.tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.tree), env.get("PYTHONPATH", "")])
        return env


def sides_of(base: Path | None) -> list[Side]:
    return [Side("this", None)] + ([Side("base", base)] if base is not None else [])


def split_daemons(python: Sequence[harness.Proc], parents: dict[tuple[int, int], int]
                  ) -> tuple[list[harness.Proc], list[harness.Proc]]:
    """The Python worker processes as (daemons: their parent is not one of them, the
    workers they forked); a process whose parent was not seen counts as a daemon."""
    pids = {p.pid for p in python}
    daemons: list[harness.Proc] = []
    workers: list[harness.Proc] = []
    for p in python:
        (workers if parents.get((p.pid, p.start)) in pids else daemons).append(p)
    return daemons, workers


@dataclass(frozen=True)
class Input:
    which: str  # small, big
    layout: Layout
    data: Path
    open_windows: int


def run_once(work: Path, inp: Input, side: Side, round_i: int, partitions: int,
             timeout: float, export: bool) -> dict[str, Any]:
    """One watched ``cec run pipeline`` of ``inp`` by ``side``, its counters checked (and,
    with ``export``, its export against pandas); its run directory removed after."""
    spec = work / f"{inp.which}-{side.name}.toml"
    spec.write_text(CEC_SPEC.format(kind="parquet", data=inp.data, window=WINDOW,
                                    partitions=partitions))
    run = work / f"run-{inp.which}-{side.name}"
    shutil.rmtree(run, ignore_errors=True)
    summary = run.with_name(run.name + ".summary.json")
    log = work / "logs" / f"{inp.which}-{side.name}.log"
    parents: dict[tuple[int, int], int] = {}  # (pid, start) -> parent pid, when first seen

    def seen(proc: harness.Proc) -> None:
        st = harness.stat(proc.pid)
        if st is not None:
            parents.setdefault((proc.pid, proc.start), st.ppid)

    r = harness.Run([*CEC, "run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                    log, stdout=summary, env=side.env(), cwd=side.cwd, watch=True,
                    on_new=seen, pss=frozenset({WORKERS}))
    m = r.wait(timeout, "the run's end")
    procs = [] if r.watch is None else [*r.watch.procs.values(), *r.watch.gone]
    python = [p for p in procs if p.kind in PYTHON_KINDS]
    daemons, workers = split_daemons(python, parents)
    rec: dict[str, Any] = {
        "side": side.name, "round": round_i, "run": inp.which, "rows": inp.layout.rows,
        "keys": inp.layout.keys, "open_windows": inp.open_windows, "status": m.status,
        "wall_s": m.wall_s, "cpu_s": m.cpu_s, "cpu_kind": m.cpu_kind,
        "peak_rss_kind": m.peak_rss_kind, "peak_rss_total": m.peak_rss_total,
        "workers_peak": m.peak_rss_kind.get(WORKERS, 0),
        "workers_peak_pss": m.peak_pss_kind.get(WORKERS),
        "daemon_peak": sum(p.peak_rss for p in daemons) if daemons else None,
        "daemons": len(daemons), "worker_processes": len(workers),
        "largest_worker_peak": max((p.peak_rss for p in workers), default=None),
        "load_start": m.load_start, "load_end": m.load_end,
        "others_cores": m.others_cores, "exact": None, "problems": [], "checked": "–"}
    if m.ok:
        try:
            own = json.loads(summary.read_text())
        except (OSError, ValueError) as e:
            own = {}
            rec["problems"].append(f"no run summary: {e}")
        rec["problems"] += counter_problems(own, inp.layout.rows, inp.open_windows)
        rec["checked"] = "counters"
        rec["elapsed_s"] = own.get("elapsed_s")
        if export and not rec["problems"]:
            out = run.with_name(run.name + ".parquet")
            out.unlink(missing_ok=True)
            keys = sample_keys(inp.layout.keys)
            rec["checked"] = f"counters, export, {len(keys):,} keys against pandas"
            try:
                harness.checked([*CEC, "export", str(run), "--out", str(out), "--format",
                                 "parquet"], log, timeout=timeout, env=side.env(),
                                cwd=side.cwd)
            except harness.Failed as e:
                rec["problems"].append(f"the export failed: {e}")
            else:
                rec["problems"] += export_problems(
                    read_export(out), reference(inp.data, keys), inp.layout.rows,
                    inp.open_windows, inp.layout.window_start_us)
            out.unlink(missing_ok=True)
        rec["exact"] = not rec["problems"]
    shutil.rmtree(run, ignore_errors=True)
    print(f"{side.name:<5} round {round_i} {inp.which:<5} {m.status:<10} wall {m.wall_s:7.1f} s"
          f"  workers' peak {_mib(rec['workers_peak'])} MiB ({len(workers)} forked, the "
          f"largest {_mib(rec['largest_worker_peak'])})  daemon "
          f"{_mib(rec['daemon_peak'])} MiB  exact {rec['exact']} ({rec['checked']})  load "
          f"{m.load_start}→{m.load_end}, others {m.others_cores} cores"
          + (f"  PROBLEMS: {'; '.join(rec['problems'])}" if rec["problems"] else ""),
          flush=True)
    return rec


def _write(out: Path, res: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "memory.md").write_text(markdown(res))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python bench/memory_bench.py",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rows", type=int, default=None,
                    help=f"rows of the big run (default {ROWS:,}; --quick {QUICK_ROWS:,})")
    ap.add_argument("--keys", type=int, default=None,
                    help=f"keys = open windows (default {KEYS:,}; --quick {QUICK_KEYS:,})")
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--rounds", type=int, default=None,
                    help=f"rounds, each a small and a big run per side (default {ROUNDS}; "
                    "--quick 1)")
    ap.add_argument("--base", type=Path, default=None,
                    help="a git worktree of another commit, run side by side")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_ROWS:,} rows, {QUICK_KEYS:,} keys, 1 round")
    ap.add_argument("--work", type=Path, default=WORK,
                    help="the inputs (kept and reused) and the runs (removed after each)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per process")
    args = ap.parse_args(argv)
    rows = args.rows if args.rows is not None else (QUICK_ROWS if args.quick else ROWS)
    keys = args.keys if args.keys is not None else (QUICK_KEYS if args.quick else KEYS)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else ROUNDS)
    try:
        if rows <= SMALL_ROWS:
            raise ValueError(f"--rows {rows:,}: more than the small run's {SMALL_ROWS:,}")
        if args.partitions < 1 or rounds < 1:
            raise ValueError("--partitions and --rounds must be at least 1")
        big = Layout(rows, keys)
        small = small_layout(big)
    except ValueError as e:
        print(f"python bench/memory_bench.py: {e}", file=sys.stderr)
        return 2
    if args.base is not None and not (args.base / "cli" / "app.py").exists():
        print(f"python bench/memory_bench.py: --base {args.base}: not a source tree of cec "
              "(no cli/app.py)", file=sys.stderr)
        return 2
    harness.byte_compiled(None, args.base)
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    big_data, small_data = work / f"data-{rows}-{keys}", work / f"data-{small.rows}-{small.keys}"
    have = manifest_path(big_data).exists()
    need = DISK_PER_ROW * rows // (2 if have else 1)
    free = shutil.disk_usage(work).free
    if free < need:
        print(f"python bench/memory_bench.py: {free / 2**30:.1f} GiB free under {work}, "
              f"{need / 2**30:.1f} GiB needed", file=sys.stderr)
        return 2
    sides = sides_of(args.base)
    res: dict[str, Any] = {
        "command": "python bench/memory_bench.py " + shlex.join(argv),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(), "memory_gib": harness.memory_gib(),
        "load_start": harness.load(), **harness.commit(),
        "sides": [{"name": s.name, "tree": None if s.tree is None else str(s.tree),
                   **harness.commit(s.cwd)} for s in sides],
        "partitions": args.partitions, "rounds": rounds, "quick": args.quick,
        "layout": asdict(big), "small_layout": asdict(small),
        "target_bytes": TARGET_BYTES, "others_limit": harness.OTHERS_LIMIT,
        "runs": [], "per_round": [], "failures": []}
    inputs = [Input("small", small, small_data, ensure_data(small_data, small)),
              Input("big", big, big_data, ensure_data(big_data, big))]
    for inp in inputs:
        if inp.open_windows != inp.layout.open_windows:  # the layout's own arithmetic
            print(f"python bench/memory_bench.py: {inp.data} holds {inp.open_windows:,} "
                  f"open windows, the layout says {inp.layout.open_windows:,}",
                  file=sys.stderr)
            return 1
    res["open_windows"] = inputs[1].open_windows
    exported: set[str] = set()
    for rnd in range(rounds):
        for side in harness.order(sides, rnd):
            for inp in inputs:
                first_big = inp.which == "big" and side.name not in exported
                rec = run_once(work, inp, side, rnd, args.partitions, args.timeout,
                               export=inp.which == "small" or first_big)
                if first_big and rec["status"] == "ok":
                    exported.add(side.name)
                res["runs"].append(rec)
                if rec["status"] != "ok" or rec["exact"] is False:
                    res["failures"].append(
                        f"{side.name}, round {rnd}, {inp.which} run: {rec['status']}"
                        + (f": {'; '.join(rec['problems'])}" if rec["problems"] else "")
                        + f"; see {work / 'logs'}")
        res["per_round"] = per_round(res["runs"])
        res["judgement"] = judge(res["per_round"], res["runs"])
        res["load_end"] = harness.load()
        _write(args.out, res)
    text = markdown(res)
    print(text)
    print(f"# results in {args.out / 'memory.json'} and memory.md", file=sys.stderr)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
