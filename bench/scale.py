"""Weak scaling past one host's driver (issue 38): what grows with the run in the driver.

``python bench/scale.py [--quick] [--only plan,recover,export] [--base TREE]
[--work DIR] [--out DIR] [--plan-sizes M,M,...]``

* **plan**: planning a new run of a CSV source (``cec_spark.run.plan.plan_new_run``,
  what ``cec run pipeline`` does before any job starts) at 1, 4 and 16 M rows in 8
  files (``--quick``: 1 and 4 M; ``--plan-sizes``: those millions), timed in a fresh
  process of its own (best of 3), with the bytes it read (``rchar``).
  Target: flat in the rows (it reads the files' metadata, not their rows).
* **recover**: the same rows per partition at P = 4, 16 and 32 (``--quick``: 4 and 16):
  ``cec run pipeline`` killed -9 once its operators processed half the input, then
  ``cec recover`` to the end, watched (:mod:`bench.harness`): the CPU seconds of its
  driver process (the ``cec`` Python process: kind ``driver``) and its JVM, and the
  wall. Target: the driver's CPU at P = 32 at most 1.5x that at P = 4. The export is
  compared with pandas' tumbling windows of the input (count equal, avg to 1e-9).
* **export**: ``cec export --format parquet`` of runs holding 1, 10 and 30 M results
  (``--quick``: 1 and 3 M; the run directories written directly, as
  :func:`bench.export_bench.make_run` does), its peak RSS (target: at most 512 MiB).
* **tail**: ``bench/latency.py`` (a stream folder, 100 ms windows, the window's closing
  row published to its line on ``cec tail``) with 1, 2 and 4 long-lived ingest tasks
  (``--ingest-tasks``) at 400 k, 800 k and 1.2 M rows/s (``--quick``: 1 and 2 tasks at
  400 k and 800 k), P = 2; 4 tasks need P = 4 (one task per partition's logs at most),
  so that row runs at P = 4. Target: tail p99 < 100 ms at 800 k rows/s.

``--base TREE`` (a git worktree of another commit) runs the plan and recover sections
with that tree first on ``PYTHONPATH`` too, side by side, the sides alternated.
The results go to ``DIR/scale.json`` and ``DIR/scale.md`` (default
``bench/results/scale``), written by this program only, with the commit, the load and
the others' CPU (:func:`bench.harness.quiet`) of each measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import harness  # noqa: E402
from bench.export_bench import Shape, make_run  # noqa: E402

WINDOW_US = 1_000_000
BASE_TS = 1_700_000_000_000_000
ROWS_PER_PARTITION = 200_000
KEYS_PER_PARTITION = 2_000
RUN_TIMEOUT_S = 1800.0
MIB = 1 << 20
SPEC = """
[source]
kind = "csv"
path = "{source}"
time_field = "item_time"

[aggregate]
group_by = "item_id"
field = "item_price"
function = "avg"
window = {{ kind = "time", size = "1s" }}

[run]
partitions = {partitions}
"""
PLAN_CHILD = """
import json, sys, time
from pathlib import Path
from cec_spark.run.plan import pipeline_spec, plan_new_run
spec, run = Path(sys.argv[1]), Path(sys.argv[2])
def rchar():
    with open("/proc/self/io") as fh:
        return next(int(x.split()[1]) for x in fh if x.startswith("rchar:"))
r0, t0 = rchar(), time.perf_counter()
plan_new_run(pipeline_spec(spec), spec, run)
print(json.dumps({"plan_s": time.perf_counter() - t0, "read_bytes": rchar() - r0}))
"""


def write_csv(path: Path, rows: int, keys: int, files: int = 1, seed: int = 1) -> list[Path]:
    """``rows`` rows of ``item_id,item_price,item_time`` (µs, ascending) in ``files``
    files ``path``-N.csv (one file: ``path`` itself)."""
    rng = np.random.default_rng(seed)
    ts = BASE_TS + np.sort(rng.integers(0, max(1, rows) * 50, rows))  # ~20 k rows/s
    ids = rng.integers(0, keys, rows)
    price = np.round(rng.uniform(1, 100, rows), 2)
    out = []
    bounds = np.linspace(0, rows, files + 1).astype(int)
    path.parent.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        f = path if files == 1 else path.with_name(f"{path.stem}-{i:03d}.csv")
        a, b = bounds[i], bounds[i + 1]
        frame = pd.DataFrame({"item_id": ids[a:b], "item_price": price[a:b],
                              "item_time": ts[a:b]})
        frame.to_csv(f, index=False)
        out.append(f)
    return out


def _env(tree: Path | None) -> dict[str, str]:
    env = harness.default_env()
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
    return env


CEC = [sys.executable, "-m", "cli.app"]


def _cwd(tree: Path | None) -> Path:
    """Where a side's processes start: its own tree (``-m`` and ``-c`` put the working
    directory first on ``sys.path``, before ``PYTHONPATH``)."""
    return REPO if tree is None else tree


def _sides(base: Path | None) -> list[tuple[str, Path | None]]:
    return [("this", None)] + ([("base", base)] if base is not None else [])


# ------------------------------------------------------------------------------ plan

def plan_section(work: Path, sizes_m: list[int], base: Path | None) -> list[dict[str, Any]]:
    out = []
    for m in sizes_m:
        src = work / f"plan{m}m" / "items" / "items.csv"  # a folder of 8 files
        files = write_csv(src, m * 1_000_000, keys=100_000, files=8)
        spec = src.parent.parent / "spec.toml"
        spec.write_text(SPEC.format(source=src.parent, partitions=4))
        row: dict[str, Any] = {"rows": m * 1_000_000, "files": len(files),
                               "bytes": sum(f.stat().st_size for f in files)}
        for rnd in range(3):
            for name, tree in harness.order(_sides(base), rnd):
                run = spec.parent / f"run-{name}-{rnd}"
                shutil.rmtree(run, ignore_errors=True)
                log = work / "plan.log"
                r = harness.Run([sys.executable, "-c", PLAN_CHILD, str(spec), str(run)], log,
                                env=_env(tree), cwd=_cwd(tree), stdout_pipe=True)
                got = r.stdout.read() if r.stdout is not None else b""
                m_ = r.check(600, "the plan")
                out_ = json.loads(got.decode().strip().splitlines()[-1])
                plan_s = out_["plan_s"]
                row.setdefault(name, []).append({"plan_s": round(plan_s, 3),
                                                 "read_mb": round(out_["read_bytes"] / 1e6, 1),
                                                 "process_s": round(m_.wall_s, 3),
                                                 "load": m_.load_start,
                                                 "others_cores": m_.others_cores})
                shutil.rmtree(run, ignore_errors=True)
        for name, _ in _sides(base):
            row[f"{name}_best_s"] = min(x["plan_s"] for x in row[name])
        print(f"plan {m} M rows: " + ", ".join(
            f"{name} {row[f'{name}_best_s']:.3f} s" for name, _ in _sides(base)), flush=True)
        for f in files:
            f.unlink()
        out.append(row)
    return out


# ------------------------------------------------------------------------------ recover

def _processed(run: Path) -> int:
    return sum(int(s.get("in_tuples", 0)) for s in harness.task_states(run))


def _reference(frame: pd.DataFrame) -> pd.DataFrame:
    ws = frame["item_time"] // WINDOW_US * WINDOW_US
    g = frame.assign(window_start=ws).groupby(["item_id", "window_start"])["item_price"]
    ref = g.agg(["count", "mean"]).reset_index()
    return ref.rename(columns={"item_id": "key", "mean": "value"}).sort_values(
        ["key", "window_start"]).reset_index(drop=True)


def _exact(export: Path, ref: pd.DataFrame) -> bool:
    got = pq.read_table(export).to_pandas()
    got["window_start"] = got["window_start"].astype("int64")  # µs since 1970
    got = got.sort_values(["key", "window_start"]).reset_index(drop=True)
    if len(got) != len(ref):
        return False
    same_keys = (got["key"].to_numpy() == ref["key"].to_numpy()).all()
    same_ws = (got["window_start"].to_numpy() == ref["window_start"].to_numpy()).all()
    same_n = (got["count"].to_numpy() == ref["count"].to_numpy()).all()
    close = np.allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9)
    return bool(same_keys and same_ws and same_n and close)


def recover_once(work: Path, p: int, tree: Path | None, name: str, src: Path,
                 ref: pd.DataFrame, rows: int) -> dict[str, Any]:
    spec = work / f"spec-p{p}.toml"
    spec.write_text(SPEC.format(source=src, partitions=p))
    run = work / f"run-p{p}-{name}"
    shutil.rmtree(run, ignore_errors=True)
    log = work / f"recover-p{p}-{name}.log"
    env, cwd = _env(tree), _cwd(tree)
    harness.Run([*CEC, "run", "pipeline", str(spec), "--log-dir", str(run)], log,
                env=env, cwd=cwd).kill_when(lambda: _processed(run) >= rows // 2,
                                          f"{rows // 2:,} rows processed", RUN_TIMEOUT_S)
    killed_at = _processed(run)
    rec = harness.Run([*CEC, "recover", "--from-log", str(run)], log, env=env, cwd=cwd,
                      watch=True).check(RUN_TIMEOUT_S, "cec recover to the end")
    export = run.with_suffix(".parquet")
    harness.checked([*CEC, "export", str(run), "--out", str(export), "--format", "parquet"],
                    log, env=env, cwd=cwd)
    exact = _exact(export, ref)
    shutil.rmtree(run, ignore_errors=True)
    export.unlink(missing_ok=True)
    return {"killed_at_rows": killed_at, "wall_s": round(rec.wall_s, 2),
            "driver_cpu_s": round(rec.cpu_kind.get("driver", 0.0), 2),
            "jvm_cpu_s": round(rec.cpu_kind.get("jvm", 0.0), 2),
            "workers_cpu_s": round(rec.cpu_kind.get("py-worker", 0.0)
                                   + rec.cpu_kind.get("py-daemon", 0.0), 2),
            "driver_peak_rss_mib": round(rec.peak_rss_kind.get("driver", 0) / MIB, 1),
            "load": rec.load_start, "others_cores": rec.others_cores, "exact": exact}


def recover_section(work: Path, ps: list[int], per_partition: int, base: Path | None
                    ) -> list[dict[str, Any]]:
    out = []
    for p in ps:
        rows = per_partition * p
        src = work / f"recover-p{p}.csv"
        write_csv(src, rows, keys=KEYS_PER_PARTITION * p, seed=p)
        ref = _reference(pd.read_csv(src))
        row: dict[str, Any] = {"partitions": p, "rows": rows}
        for name, tree in _sides(base):
            row[name] = recover_once(work, p, tree, name, src, ref, rows)
            r = row[name]
            print(f"recover P={p} {name}: driver CPU {r['driver_cpu_s']} s, JVM "
                  f"{r['jvm_cpu_s']} s, wall {r['wall_s']} s, exact {r['exact']}", flush=True)
        src.unlink()
        out.append(row)
    return out


# ------------------------------------------------------------------------------ export

def export_section(work: Path, sizes_m: list[int]) -> list[dict[str, Any]]:
    out = []
    for m in sizes_m:
        root = work / f"export{m}m" / "run"
        shutil.rmtree(root.parent, ignore_errors=True)
        make_run(root, Shape(results=m * 1_000_000, partitions=8))
        target = root.parent / "out.parquet"
        got = harness.Run([*CEC, "export", str(root), "--out", str(target),
                           "--format", "parquet"], work / "export.log",
                          watch=True).check(RUN_TIMEOUT_S, "cec export")
        rows = pq.ParquetFile(target).metadata.num_rows
        out.append({"results": m * 1_000_000, "rows_written": rows,
                    "wall_s": round(got.wall_s, 2),
                    "peak_rss_mib": round(got.peak_rss_total / MIB, 1),
                    "load": got.load_start, "others_cores": got.others_cores})
        print(f"export {m} M results: {out[-1]['peak_rss_mib']} MiB peak, "
              f"{out[-1]['wall_s']} s", flush=True)
        shutil.rmtree(root.parent, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------ tail

def tail_section(rates: list[int], tasks: list[int], seconds: float) -> list[dict[str, Any]]:
    """The tail's p99 per (ingest tasks, rate), each a ``bench/latency.py`` run of its own
    (a fresh process: its results written by it, read back here)."""
    out = []
    for n in tasks:
        for rate in rates:
            target = Path(tempfile.mkdtemp(prefix="cec-scale-tail-")) / "latency.json"
            parts = max(2, n)
            harness.checked([sys.executable, str(REPO / "bench" / "latency.py"),
                             "--rates", "", "--rate", str(rate), "--seconds", f"{seconds:g}",
                             "--partitions", str(parts), "--ingest-tasks", str(n),
                             "--out", str(target)], target.parent / "latency.log",
                            timeout=RUN_TIMEOUT_S, env=dict(os.environ))
            r = json.loads(target.read_text())
            shutil.rmtree(target.parent, ignore_errors=True)
            lat = r["tail_latency"]
            row = {"ingest_tasks": n, "partitions": parts, "rate_rows_per_s": rate,
                   "p50_ms": lat.get("p50_ms"), "p99_ms": lat.get("p99_ms"),
                   "windows": lat.get("n"), "tail_equals_export": r["tail_equals_export"],
                   "ingest_mode": r["ingest_mode"], "note": r.get("ingest_tasks_note"),
                   "others_cores": r.get("others_cores"), "load": r.get("load_avg_1m")}
            print(f"tail: {n} ingest task(s), P={parts}, {rate:,} rows/s: p99 "
                  f"{row['p99_ms']} ms, exact {row['tail_equals_export']}, others' cores "
                  f"{row['others_cores']}", flush=True)
            out.append(row)
    return out


# ------------------------------------------------------------------------------ report

def _best_read(runs: list[dict[str, Any]]) -> str:
    best = min(runs, key=lambda x: x["plan_s"])
    return "" if "read_mb" not in best else f"{best['read_mb']:,.1f}"


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# Weak scaling (issue 38): bench/scale.py{' --quick' if res['quick'] else ''}",
             "", f"{harness.commit_text(res)}; started {res['started']}, load "
             f"{res['load_start']} at the start, {res['load_end']} at the end.", ""]
    if res.get("plan"):
        lines += ["## Planning a CSV source (in its own process, best of 3)", "",
                  "MB read: what the planning process read (`rchar`), in its best run.", "",
                  "| rows | files | MB | " + " | ".join(
                      f"{n} s | {n} MB read" for n in res["sides"]) + " |",
                  "|---|---|---|" + "---|---|" * len(res["sides"])]
        for r in res["plan"]:
            lines.append(f"| {r['rows']:,} | {r['files']} | {r['bytes'] / 1e6:,.0f} | "
                         + " | ".join(f"{r[f'{n}_best_s']:.3f} | {_best_read(r[n])}"
                                      for n in res["sides"]) + " |")
        lines.append("")
    if res.get("recover"):
        lines += ["## `cec recover` after a kill -9 at half the input, same rows per "
                  "partition", "",
                  "| P | rows | side | driver CPU s | JVM CPU s | workers CPU s | wall s | "
                  "driver peak MiB | others' cores | exact |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in res["recover"]:
            for n in res["sides"]:
                x = r[n]
                lines.append(f"| {r['partitions']} | {r['rows']:,} | {n} | "
                             f"{x['driver_cpu_s']} | {x['jvm_cpu_s']} | {x['workers_cpu_s']}"
                             f" | {x['wall_s']} | {x['driver_peak_rss_mib']} | "
                             f"{x['others_cores']} | {x['exact']} |")
        rec = res["recover"]
        for n in res["sides"]:
            lo, hi = rec[0][n]["driver_cpu_s"], rec[-1][n]["driver_cpu_s"]
            ratio = hi / lo if lo else float("nan")
            lines.append(f"\n{n}: driver CPU at P = {rec[-1]['partitions']} / at P = "
                         f"{rec[0]['partitions']}: **{ratio:.2f}** (target <= 1.5 at 32 / 4)")
        lines.append("")
    if res.get("export"):
        lines += ["## `cec export --format parquet`", "",
                  "| results | wall s | peak RSS MiB | others' cores |", "|---|---|---|---|"]
        for r in res["export"]:
            lines.append(f"| {r['results']:,} | {r['wall_s']} | {r['peak_rss_mib']} | "
                         f"{r['others_cores']} |")
        lines.append("\nTarget: peak RSS <= 512 MiB whatever the number of results.\n")
    if res.get("tail"):
        lines += ["## The tail's p99 with several long-lived stream ingest tasks", "",
                  "A window's closing row published into the stream folder to its line on "
                  "`cec tail` (bench/latency.py; 100 ms windows, 100 ms files).", "",
                  "| ingest tasks | P | rows/s | p50 ms | p99 ms | windows | tail = export "
                  "| others' cores |", "|---|---|---|---|---|---|---|---|"]
        for r in res["tail"]:
            lines.append(f"| {r['ingest_tasks']} | {r['partitions']} | "
                         f"{r['rate_rows_per_s']:,} | {r['p50_ms']} | {r['p99_ms']} | "
                         f"{r['windows']} | {r['tail_equals_export']} | {r['others_cores']} |")
        notes = sorted({r["note"] for r in res["tail"] if r.get("note")})
        lines += [f"\ncec said: {n}" for n in notes]
        lines.append("\nTarget: p99 < 100 ms at 800,000 rows/s on a quiet machine.\n")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="plan,recover,export,tail")
    ap.add_argument("--base", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cec-scale"))
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scale")
    ap.add_argument("--plan-sizes", default=None,
                    help="the plan section's sizes, millions of rows (default 1,4,16)")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"quick": args.quick, "started": time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime()), "load_start": harness.load(),
        "cpus": os.cpu_count(), **harness.commit(),
        "sides": [n for n, _ in _sides(args.base)],
        "base": None if args.base is None else str(args.base)}
    harness.byte_compiled(None, args.base)
    if "plan" in only:
        sizes = [int(m) for m in args.plan_sizes.split(",")] if args.plan_sizes \
            else [1, 4] if args.quick else [1, 4, 16]
        res["plan"] = plan_section(args.work, sizes, args.base)
    if "recover" in only:
        per = ROWS_PER_PARTITION // (4 if args.quick else 1)
        res["recover"] = recover_section(args.work, [4, 16] if args.quick else [4, 16, 32],
                                         per, args.base)
    if "export" in only:
        res["export"] = export_section(args.work, [1, 3] if args.quick else [1, 10, 30])
    if "tail" in only:
        res["tail"] = tail_section([400_000, 800_000] if args.quick else
                                   [400_000, 800_000, 1_200_000],
                                   [1, 2] if args.quick else [1, 2, 4],
                                   8.0 if args.quick else 20.0)
    res["load_end"] = harness.load()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "scale.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
