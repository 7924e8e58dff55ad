"""End-to-end throughput of ``cec run pipeline`` against Spark's own stateful aggregation.

Both read the same data in the same run: the paper's workload written as parquet by
:mod:`bench.workload` (``item_id`` uniform over 100 000 keys, ``item_price``,
``item_time``). cec runs the pipeline of ``examples/items.toml`` over it (filter, key
partitioning, upstream logs, P long-lived operator tasks with count windows of 10 and
``G_open``/``G_check`` checkpoints, every record fsync'ed); Spark runs
``groupBy(item_id).avg(item_price)`` as a Structured Streaming query with its state
store (:mod:`bench.spark_baseline`). The built-in generator workload
(``kind = "generator"``) is measured too.

Each run is a fresh process with its own JVM. Reported per run:

* ``rows_per_s``: source rows / wall time of the run proper (cec: from the start of
  ingest and operator jobs until every partition's output log is sealed; Spark: from
  ``start()`` until the query terminated), both after their session started;
* ``steady_rows_per_s``: without the start-up (cec: from the first input batch an
  operator task processed, i.e. after the Spark jobs and Python workers started;
  Spark: the batches after the first, as :mod:`bench.spark_baseline` reports it).

CLI::

    python -m bench.pipeline_bench --rows 4000000
    python -m bench.pipeline_bench --rows 1000000 --skip-baseline --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/pipeline_bench.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import DEFAULT_KEYS, DEFAULT_SEED, ensure_dataset

REPO = Path(__file__).resolve().parents[1]


def _spec(source: str, partitions: int, chunk_rows: int) -> str:
    return f"""
[source]
{source}
chunk_rows = {chunk_rows}

[filter]
where = "item_price >= 0"

[aggregate]
group_by = "item_id"
field = "item_price"
function = "avg"
window = {{ kind = "count", size = 10 }}

[checkpoint]
Q = "2x"
U = 1000000
CI_ms = 5
CP_ms = 100

[run]
partitions = {partitions}
"""


def run_cec(spec_text: str, work: Path, name: str, *, master: str | None = None
            ) -> dict[str, Any]:
    """One ``cec run pipeline --json`` in a fresh process; its summary plus wall times."""
    spec = work / f"{name}.toml"
    spec.write_text(spec_text)
    log_dir = work / f"run-{name}-{time.time_ns()}"
    args = [sys.executable, "-m", "cli.app", "run", "pipeline", str(spec), "--log-dir",
            str(log_dir), "--json"]
    if master:
        args += ["--master", master]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO, check=False)
    process_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"cec run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    rows = int(summary["source_rows"])
    parts = summary["per_partition"]
    return {
        "system": f"cec ({name})",
        "rows": rows,
        "partitions": summary["partitions"],
        "wall_s": summary["elapsed_s"],
        "rows_per_s": rows / summary["elapsed_s"],
        "steady_rows_per_s": summary.get("steady_rows_per_s"),
        "ingest_writer_s": summary.get("ingest_writer_s"),
        "process_s": process_s,
        "results": summary["results"],
        "g_open": sum(int(p["g_open"]) for p in parts),
        "g_check": sum(int(p["g_check"]) for p in parts),
        "operator_process_s": sum(float(p["process_s"]) for p in parts),
        "operator_write_s": sum(float(p["write_s"]) for p in parts),
        "log_dir": str(log_dir),
    }


def run_spark(data: Path, work: Path, provider: str) -> dict[str, Any]:
    from bench.spark_baseline import run_stateful

    res = run_stateful(data, work / f"spark-{provider}-{time.time_ns()}" / "checkpoint",
                       provider, isolated=True)
    return {
        "system": f"spark stateful groupBy.avg ({provider})",
        "rows": res.rows,
        "partitions": res.shuffle_partitions,
        "wall_s": res.wall_s,
        "rows_per_s": res.wall_rows_per_s,
        "steady_rows_per_s": res.steady_rows_per_s,
    }


def markdown(rows: list[dict[str, Any]], load: float) -> str:
    lines = [f"load average at start: {load:.2f}", "",
             "| system | rows | P | wall s | rows/s | steady rows/s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        steady = r.get("steady_rows_per_s")
        lines.append(f"| {r['system']} | {r['rows']:,} | {r['partitions']} | "
                     f"{r['wall_s']:.2f} | {r['rows_per_s']:,.0f} | "
                     f"{'-' if steady is None else f'{steady:,.0f}'} |")
    cec = [r for r in rows if r["system"].startswith("cec (parquet")]
    spark = [r for r in rows if r["system"].startswith("spark")]
    if cec and spark:
        best = max(s.get("steady_rows_per_s") or s["rows_per_s"] for s in spark)
        best_wall = max(s["rows_per_s"] for s in spark)
        c = cec[0]
        lines += ["", f"cec wall / Spark wall: {c['rows_per_s'] / best_wall:.2f}x; "
                  f"cec wall / Spark steady: {c['rows_per_s'] / best:.2f}x; "
                  f"cec steady / Spark steady: "
                  f"{(c.get('steady_rows_per_s') or 0) / best:.2f}x"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=1_000_000)
    parser.add_argument("--provider", choices=["rocksdb", "hdfs", "both"], default="hdfs")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--skip-generator", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cec-pipeline-bench-") as tmp:
        work = Path(args.workdir) if args.workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = work / f"data-{args.rows}-{args.keys}-{args.seed}-{args.files}"
        ensure_dataset(data, args.rows, args.keys, args.seed, args.files)
        results = []
        src = f'kind = "parquet"\npath = "{data}"\ntime_field = "item_time"'
        results.append(run_cec(_spec(src, args.partitions, args.chunk_rows), work,
                               "parquet"))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        if not args.skip_generator:
            gen = (f'kind = "generator"\nrows = {args.rows}\nkeys = {args.keys}\n'
                   f'seed = {args.seed}')
            results.append(run_cec(_spec(gen, args.partitions, args.chunk_rows), work,
                                   "generator"))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        if not args.skip_baseline:
            providers = ["rocksdb", "hdfs"] if args.provider == "both" else [args.provider]
            for provider in providers:
                results.append(run_spark(data, work, provider))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(markdown(results, load))
    if args.json:
        Path(args.json).write_text(json.dumps({"load_avg_1m": load, "runs": results},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
