"""End-to-end throughput of ``cec run pipeline``, cold and warm, in one process each.

The paper's workload written as parquet by :mod:`bench.workload` (``item_id`` uniform
over 100 000 keys, ``item_price``, ``item_time``), and the built-in generator workload
(``kind = "generator"``): cec runs the pipeline of ``cli/examples/items.toml`` over it
(filter, key partitioning, upstream logs, P long-lived operator tasks with count
windows of 10 and ``G_open``/``G_check`` checkpoints, every record fsync'ed).

Each run is a fresh process with its own JVM, which runs the workload
``--session-runs`` times (default 2) into new directories: run 0 is the session's first
(cold JVM, no Python worker yet: what ``cec run pipeline`` pays in a new process), the
others run warm, as in a long-lived Spark application. Reported per run:

* ``rows_per_s``: source rows / wall time of the run proper (from the start of the
  ingest and operator jobs until every partition's output log is sealed), after the
  session started;
* ``steady_rows_per_s``: without the start-up (from the first input batch an operator
  task processed, i.e. after the Spark jobs and Python workers started).

The comparison with Spark Structured Streaming on the same query, whole processes, is
:mod:`bench.fair_spark`.

CLI::

    python -m bench.pipeline_bench --rows 4000000
    python -m bench.pipeline_bench --rows 1000000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/pipeline_bench.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import harness
from bench.workload import DEFAULT_KEYS, DEFAULT_SEED, ensure_dataset

REPO = Path(__file__).resolve().parents[1]
SESSION_TIMEOUT_S = 3600.0  # one session of pipeline runs


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


def _cec_summary(summary: dict[str, Any], name: str, log_dir: Path, session_run: int
                 ) -> dict[str, Any]:
    rows = int(summary["source_rows"])
    parts = summary["per_partition"]
    return {
        "system": f"cec ({name})",
        "session_run": session_run,
        "rows": rows,
        "partitions": summary["partitions"],
        "wall_s": summary["elapsed_s"],
        "rows_per_s": rows / summary["elapsed_s"],
        "steady_rows_per_s": summary.get("steady_rows_per_s"),
        "ingest_writer_s": summary.get("ingest_writer_s"),
        "results": summary["results"],
        "g_open": sum(int(p["g_open"]) for p in parts),
        "g_check": sum(int(p["g_check"]) for p in parts),
        "operator_process_s": sum(float(p["process_s"]) for p in parts),
        "operator_write_s": sum(float(p["write_s"]) for p in parts),
        "log_dir": str(log_dir),
    }


def run_cec_session(spec_text: str, work: Path, name: str, *, runs: int = 2
                    ) -> list[dict[str, Any]]:
    """``runs`` pipeline runs of the same spec, one after the other in ONE fresh process.

    The first run is what ``cec run pipeline`` does in a new process (cold JVM, no
    Python worker yet: the session start itself is not counted, as for Spark); the next
    ones run in the session the first left warm (JIT-compiled JVM, started worker
    daemon), as a long-lived Spark application would. Each run writes a new log dir.
    Entry ``i`` has ``session_run = i``.
    """
    return run_cec_specs([(name, spec_text)] * runs, work)


def run_cec_specs(specs: Sequence[tuple[str, str]], work: Path) -> list[dict[str, Any]]:
    """Pipeline runs of ``(name, spec text)`` in order, in ONE fresh process and session.

    Entry ``i`` of the result is run ``i`` of the session (``session_run``): 0 is cold.
    """
    tag = time.time_ns()
    runs = []
    for i, (name, text) in enumerate(specs):
        spec = work / f"{name}-{tag}-{i}.toml"
        spec.write_text(text)
        runs.append({"spec": str(spec), "log_dir": str(work / f"run-{name}-{tag}-{i}")})
    cfg = work / f"session-{tag}.json"
    result = work / f"session-{tag}.result.json"
    cfg.write_text(json.dumps({"runs": runs, "result": str(result)}))
    log = work / f"session-{tag}.log"
    m = harness.measure([sys.executable, "-m", "bench.pipeline_bench", "_session", str(cfg)],
                        log, timeout=SESSION_TIMEOUT_S, watch=False,
                        what="the session's runs to end")
    if not m.ok:
        raise RuntimeError(f"cec session run failed ({m.status}):\n"
                           f"{log.read_text(errors='replace')[-3000:]}")
    out = json.loads(result.read_text())
    return [_cec_summary(summary, name, Path(run["log_dir"]), i)
            for i, (summary, run, (name, _)) in enumerate(zip(out, runs, specs, strict=True))]


def _session_main(cfg_path: str) -> int:
    """Child of :func:`run_cec_specs`: one SparkSession, several pipeline runs."""
    import dataclasses

    from cec.spec import load_spec
    from cec_spark.driver.runner import run_pipeline
    from cec_spark.run.session import build_session

    cfg = json.loads(Path(cfg_path).read_text())
    runs = cfg["runs"]
    first = load_spec(Path(runs[0]["spec"]))
    spark = build_session(first.run.effective_master, first.run.partitions)
    try:
        out = [dataclasses.asdict(run_pipeline(r["spec"], r["log_dir"], progress=False))
               for r in runs]
    finally:
        spark.stop()
    Path(cfg["result"]).write_text(json.dumps(out, default=str))
    return 0


def markdown(rows: list[dict[str, Any]], load: float) -> str:
    lines = [f"load average at start: {load:.2f}", "",
             "| system | session run | rows | P | wall s | rows/s | steady rows/s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        steady = r.get("steady_rows_per_s")
        lines.append(f"| {r['system']} | {r['session_run']} | {r['rows']:,} "
                     f"| {r['partitions']} | {r['wall_s']:.2f} | {r['rows_per_s']:,.0f} "
                     f"| {'-' if steady is None else f'{steady:,.0f}'} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["_session"]:
        return _session_main(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=1_000_000)
    parser.add_argument("--session-runs", type=int, default=2,
                        help="runs per process: the first cold, the others warm")
    parser.add_argument("--skip-generator", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    harness.byte_compiled(None)

    load = harness.load()
    with tempfile.TemporaryDirectory(prefix="cec-pipeline-bench-") as tmp:
        work = Path(args.workdir) if args.workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = work / f"data-{args.rows}-{args.keys}-{args.seed}-{args.files}"
        ensure_dataset(data, args.rows, args.keys, args.seed, args.files)
        results = []
        src = f'kind = "parquet"\npath = "{data}"\ntime_field = "item_time"'
        results += run_cec_session(_spec(src, args.partitions, args.chunk_rows), work,
                                   "parquet", runs=args.session_runs)
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        if not args.skip_generator:
            gen = (f'kind = "generator"\nrows = {args.rows}\nkeys = {args.keys}\n'
                   f'seed = {args.seed}')
            results += run_cec_session(_spec(gen, args.partitions, args.chunk_rows), work,
                                       "generator", runs=args.session_runs)
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(markdown(results, load))
    if args.json:
        Path(args.json).write_text(json.dumps({"load_avg_1m": load, "runs": results},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
