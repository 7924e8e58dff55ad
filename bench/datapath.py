"""Two versions of the data path side by side: whole ``cec run pipeline`` runs in turn,
wall and CPU seconds of the whole process tree, every output compared equal.

``python bench/datapath.py --a TREE[,ingest_tasks=N] --b TREE[,ingest_tasks=N]
[--rows N] [--pairs K] [--work DIR]``

A side is a source tree of cec (``--a /tmp/wt-new``; the interpreter is this one, the
tree goes first on ``PYTHONPATH``, so a git worktree of another commit is a side) and
optionally ``[run]`` settings written into its spec (``ingest_tasks=2``; a ``spark.*`` one
goes to ``[run.spark]``, ``env:NAME=value`` to the run's environment, e.g.
``env:JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1``). The workload is
``bench/fair_spark.py``'s (parquet, 10 s tumbling ``avg(item_price)`` per ``item_id``,
``--keys`` keys). Runs alternate A B B A A B ... (``--pairs`` of each); each is timed from
outside (wall) and its process tree (driver, JVM, Python workers) is read from ``/proc``
every 0.2 s for its CPU seconds (user + system; :class:`bench.profile_run.Watch`),
which a busy machine disturbs far less than the wall time. After each run its output
is exported (``cec export --format parquet``, not timed) and compared with A's first
output, every row (:func:`bench.fair_spark.compare`): a difference is exit 1. The
1-minute load average is printed with each run.

``python bench/datapath.py open-windows --a TREE --b TREE [--open N] [--records K]
[--rows R] [--pairs K] [--window time|session]``: the operator alone, in a process per
tree: ``--records`` records of ``--rows`` rows into ``--open`` open 1-day windows or
sessions of a 1-day gap (none closing), records
per CPU second, the trees alternated (a tuple stream's small records while many windows
are open).

``python bench/datapath.py window-bytes [--keys 1000000,10000000] [--batch 1000000]``:
the operator's memory per open time window (10 s tumbling, int64 keys, the spec's
default checkpoint policy): every key opens one window (all in the same window), fed
in batches as the upstream log holds them; the bytes held by the operator's arrays
(:func:`cec.operator.memory.state_bytes`, by part) and tracemalloc's traced delta
(numpy reports its buffers to it), each over the open windows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.fair_spark import CEC_SPEC, cec_output, make_data  # noqa: E402
from bench.harness import (  # noqa: E402
    byte_compiled,
    checked,
    compare,
    load,
    measure,
    rotation,
)


def side(text: str) -> tuple[Path, dict[str, str]]:
    tree, *settings = text.split(",")
    return Path(tree).resolve(), dict(s.split("=", 1) for s in settings)


def spec_for(work: Path, name: str, data: Path, partitions: int, run: dict[str, str]) -> Path:
    window = '{ kind = "time", size = "10s" }'
    text = CEC_SPEC.format(kind="parquet", data=data, window=window, partitions=partitions)
    text += "".join(f"{k} = {v}\n" for k, v in run.items()
                    if not k.startswith(("spark.", "env:")))
    spark = {k: v for k, v in run.items() if k.startswith("spark.")}
    if spark:  # Spark settings: [run.spark]
        text += "[run.spark]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in spark.items())
    path = work / f"{name}.toml"
    path.write_text(text)
    return path


def one_run(tree: Path, spec: Path, run_dir: Path, timeout: float,
            extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree), **(extra_env or {})}
    cmd = [sys.executable, "-m", "cli.app", "run", "pipeline", str(spec), "--log-dir",
           str(run_dir), "--json"]
    err = run_dir.with_suffix(".err")
    err.unlink(missing_ok=True)
    m = measure(cmd, err, timeout=timeout, stdout=run_dir.with_suffix(".json"), env=env,
                cwd=tree, what="run pipeline's end")
    if not m.ok:
        raise SystemExit(f"{tree}: run pipeline: {m.status}; see {err}")
    wall, cpu, load = m.wall_s, m.cpu_kind, m.load_start
    parquet = run_dir.with_suffix(".parquet")
    checked([sys.executable, "-m", "cli.app", "export", str(run_dir), "--out", str(parquet),
             "--format", "parquet"], err, timeout=timeout, env=env, cwd=tree)
    summary = json.loads(run_dir.with_suffix(".json").read_text())
    return {"wall_s": wall, "cpu_s": sum(cpu.values()), "cpu": dict(cpu), "load": load,
            "output": cec_output(parquet), "warnings": summary.get("warnings"),
            "ingest_s": summary.get("ingest_s")}


def window_bytes(keys: int, batch: int) -> dict[str, Any]:
    """Open ``keys`` time windows (one per key) and measure the operator's memory."""
    import gc
    import tracemalloc

    import numpy as np
    import pyarrow as pa

    from cec.operator.base import OperatorConfig
    from cec.operator.memory import state_bytes
    from cec.operator.vector import VectorOperator
    from cec.policy import PolicyConfig
    from cec.windows import window_spec

    op = VectorOperator(OperatorConfig(window=window_spec("time", "10s"), key_type="int64",
                                       policy=PolicyConfig()))
    rng = np.random.default_rng(1)
    order = rng.permutation(keys).astype(np.int64)  # every key once, in random order
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    for lo in range(0, keys, batch):
        k = order[lo:lo + batch]
        seq = np.arange(lo, lo + len(k), dtype=np.int64)
        op.process(pa.RecordBatch.from_arrays(
            [pa.array(seq // 1000), pa.array(seq), pa.array(k), pa.array(np.ones(len(k)))],
            names=["ts", "seq", "key", "value"]))
    took = time.perf_counter() - t0
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    parts = state_bytes(op)
    n = op.n_open
    sl = op._slots
    return {"keys": keys, "open_windows": n, "process_s": round(took, 2),
            "traced_bytes_per_window": round((held - base) / n, 1),
            "traced_peak_bytes_per_window": round((peak - base) / n, 1),
            "arrays_bytes_per_window": round(sum(parts.values()) / n, 1),
            "parts_bytes_per_window": {k: round(v / n, 1) for k, v in parts.items()},
            # the slot layout: bytes per slot by array, and slots held per open window
            "slot_layout": {name: getattr(sl, name).itemsize for name, _ in sl.arrays},
            "slots_per_window": round(sl.capacity / n, 3)}


_SMALL_RECORDS = """
import json, sys, time
import numpy as np, pyarrow as pa
from cec.operator.base import OperatorConfig
from cec.operator.vector import VectorOperator
from cec.policy import PolicyConfig
from cec.windows import window_spec
n, records, rows = (int(x) for x in sys.argv[1:4])
op = VectorOperator(OperatorConfig(window=window_spec(sys.argv[4], "1d"), key_type="int64",
                                   policy=PolicyConfig(mode="open-only")))
def batch(keys, first):
    seq = np.arange(first, first + len(keys), dtype=np.int64)
    return pa.RecordBatch.from_arrays([pa.array(seq // 1000), pa.array(seq),
        pa.array(keys.astype(np.int64)), pa.array(np.ones(len(keys)))],
        names=["ts", "seq", "key", "value"])
op.process(batch(np.arange(n), 0))
rng = np.random.default_rng(1)
feed = [batch(rng.integers(0, n, rows), n + i * rows) for i in range(records)]
t, c = time.perf_counter(), time.process_time()
out = sum(op.process(b).num_rows for b in feed)
print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                  "open": op.n_open, "out_rows": out}))
"""


def small_records(argv: list[str]) -> int:
    """``open-windows``: ``--records`` records of ``--rows`` rows into an operator that
    holds ``--open`` open 1-day windows (``--window time``, or sessions of a 1-day gap:
    ``--window session``; one per key, none closing; the policy
    ``open-only``: no time-budgeted ``G_check`` rows, so the rows are the same), in a
    process per tree (its cwd and first on ``PYTHONPATH``), the trees alternated;
    records per CPU second and the output rows, which must be equal."""
    import subprocess
    sp = argparse.ArgumentParser(description="small records, many open windows")
    sp.add_argument("--a", required=True)
    sp.add_argument("--b", required=True)
    sp.add_argument("--open", type=int, default=1_000_000)
    sp.add_argument("--records", type=int, default=500)
    sp.add_argument("--rows", type=int, default=1000)
    sp.add_argument("--pairs", type=int, default=3)
    sp.add_argument("--window", choices=("time", "session"), default="time")
    args = sp.parse_args(argv)
    byte_compiled(Path(args.a).resolve(), Path(args.b).resolve())
    got: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    for i in range(args.pairs):
        for name in rotation(["A", "B"], i):
            tree = Path(getattr(args, name.lower())).resolve()
            proc = subprocess.run(
                [sys.executable, "-c", _SMALL_RECORDS, str(args.open), str(args.records),
                 str(args.rows), args.window], cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
                capture_output=True, text=True, check=True, timeout=600)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            got[name].append(r)
            print(f"{name} {i}: {args.records / r['cpu_s']:,.0f} records per CPU s "
                  f"({r['open']:,} windows open, {r['out_rows']:,} output rows), "
                  f"load {load():.2f}", flush=True)
    if len({r["out_rows"] for r in got["A"] + got["B"]}) != 1:
        print("OUTPUT ROWS DIFFER")
        return 1
    ratios = [a["cpu_s"] / b["cpu_s"] for a, b in zip(got["A"], got["B"], strict=True)]
    print(f"\nA = {args.a}\nB = {args.b}\n{args.records} records of {args.rows} rows, "
          f"{args.open:,} {args.window} windows open: CPU A/B pairwise median "
          f"{statistics.median(ratios):.3f} (records per CPU s: A "
          f"{statistics.median(args.records / r['cpu_s'] for r in got['A']):,.0f}, B "
          f"{statistics.median(args.records / r['cpu_s'] for r in got['B']):,.0f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["open-windows"]:
        return small_records(argv[1:])
    if argv[:1] == ["window-bytes"]:
        wp = argparse.ArgumentParser(description="bytes per open time window")
        wp.add_argument("--keys", default="1000000,10000000")
        wp.add_argument("--batch", type=int, default=1_000_000)
        wargs = wp.parse_args(argv[1:])
        print(f"load {load():.2f}")
        for keys in (int(k) for k in wargs.keys.split(",")):
            print(json.dumps(window_bytes(keys, wargs.batch)), flush=True)
        return 0
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
    byte_compiled(sides["A"][0], sides["B"][0])
    specs = {n: spec_for(args.work, n, data, args.partitions, run)
             for n, (_, run) in sides.items()}
    results: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    ref = None
    for i in range(args.pairs):
        for name in rotation(["A", "B"], i):
            tree = sides[name][0]
            env = {k[4:]: v for k, v in sides[name][1].items() if k.startswith("env:")}
            r = one_run(tree, specs[name], args.work / f"run-{name}", args.timeout, env)
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
