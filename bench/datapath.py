"""Two versions of the data path side by side: whole ``cec run pipeline`` runs in turn,
wall and CPU seconds of the whole process tree, every output compared equal.

``python bench/datapath.py --a TREE[,ingest_tasks=N] --b TREE[,ingest_tasks=N]
[--rows N] [--pairs K] [--work DIR]``

A side is a source tree of cec (``--a /tmp/wt-new``; the interpreter is this one, the
tree goes first on ``PYTHONPATH``, so a git worktree of another commit is a side) and
optionally ``[run]`` settings written into its spec (``ingest_tasks=2``). The workload is
``bench/fair_spark.py``'s (parquet, 10 s tumbling ``avg(item_price)`` per ``item_id``,
``--keys`` keys). Runs alternate A B B A A B ... (``--pairs`` of each); each is timed from
outside (wall) and its process tree (driver, JVM, Python workers) is read from ``/proc``
every 0.2 s for its CPU seconds (user + system; :class:`bench.profile_run.Watch`),
which a busy machine disturbs far less than the wall time. After each run its output
is exported (``cec export --format parquet``, not timed) and compared with A's first
output, every row (:func:`bench.fair_spark.compare`): a difference is exit 1. The
1-minute load average is printed with each run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.fair_spark import CEC_SPEC, cec_output, compare, make_data  # noqa: E402
from bench.profile_run import Watch  # noqa: E402


def side(text: str) -> tuple[Path, dict[str, str]]:
    tree, *settings = text.split(",")
    return Path(tree).resolve(), dict(s.split("=", 1) for s in settings)


def spec_for(work: Path, name: str, data: Path, partitions: int, run: dict[str, str]) -> Path:
    window = '{ kind = "time", size = "10s" }'
    text = CEC_SPEC.format(data=data, window=window, partitions=partitions)
    text += "".join(f"{k} = {v}\n" for k, v in run.items())
    path = work / f"{name}.toml"
    path.write_text(text)
    return path


def one_run(tree: Path, spec: Path, run_dir: Path, timeout: float) -> dict[str, Any]:
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "cli.app", "run", "pipeline", str(spec), "--log-dir",
           str(run_dir), "--json"]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with run_dir.with_suffix(".json").open("wb") as out, \
            run_dir.with_suffix(".err").open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=tree, env=env,
                                start_new_session=True)
        watch = Watch(proc.pid)
        thread = threading.Thread(target=watch.loop, daemon=True)
        thread.start()
        try:
            code = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            watch.stop.set()
            thread.join()
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"{tree}: run pipeline exited {code}; see {run_dir}.err")
    cpu: collections.Counter[str] = collections.Counter()
    for p in watch.procs.values():
        cpu[p.kind] += p.cpu
    parquet = run_dir.with_suffix(".parquet")
    subprocess.run([sys.executable, "-m", "cli.app", "export", str(run_dir), "--out",
                    str(parquet), "--format", "parquet"], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    summary = json.loads(run_dir.with_suffix(".json").read_text())
    return {"wall_s": wall, "cpu_s": sum(cpu.values()), "cpu": dict(cpu), "load": load,
            "output": cec_output(parquet), "warnings": summary.get("warnings"),
            "ingest_s": summary.get("ingest_s")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cec-datapath"))
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / f"data-{args.rows}-{args.keys}"
    if not data.exists():
        make_data(data, args.rows, args.keys, 100_000)
    sides = {"A": side(args.a), "B": side(args.b)}
    specs = {n: spec_for(args.work, n, data, args.partitions, run)
             for n, (_, run) in sides.items()}
    results: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    ref = None
    for i in range(args.pairs):
        for name in ("AB" if i % 2 == 0 else "BA"):
            tree = sides[name][0]
            r = one_run(tree, specs[name], args.work / f"run-{name}", args.timeout)
            if ref is None:
                ref = r["output"]
            diff = compare(ref, r["output"], ("A's first", f"{name} {i}"))
            if diff is not None:
                print(f"OUTPUT DIFFERS: {diff}", flush=True)
                return 1
            results[name].append(r)
            print(f"{name} {i}: wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f} s "
                  f"({', '.join(f'{k} {v:.2f}' for k, v in sorted(r['cpu'].items()))}), "
                  f"ingest_s {r['ingest_s']}, load {r['load']:.2f}, "
                  f"{r['output'].num_rows} windows equal", flush=True)
    print(f"\nA = {args.a}\nB = {args.b}\n{args.rows:,} rows, {args.keys:,} keys, "
          f"P = {args.partitions}; outputs equal in every run")
    for key in ("wall_s", "cpu_s"):
        a = [r[key] for r in results["A"]]
        b = [r[key] for r in results["B"]]
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        print(f"{key}: A median {statistics.median(a):.2f} (min {min(a):.2f} max {max(a):.2f}),"
              f" B median {statistics.median(b):.2f} (min {min(b):.2f} max {max(b):.2f}), "
              f"A/B pairwise median {statistics.median(ratios):.3f}")
    warn = results["A"][-1]["warnings"]
    if warn:
        print(f"A's warnings: {warn}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
