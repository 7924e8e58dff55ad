"""Session windows (issue 31): the operator alone, and the pipeline against Spark.

``python -m bench.sessions_bench`` (or ``python -m bench --only sessions``):

* **Operator alone**: the vectorized operator on the paper's workload
  (:mod:`bench.workload`: 100 000 keys, 100 000 tuples per second of event time,
  ``avg`` of ``item_price``), the paper's checkpoint settings (``targets``: Q = 2x open
  windows, U = 1 000 000, CI/CP = 5/100 ms), batches of 65 536, a warm-up of
  ``--warmup`` tuples (10 s of event time: the windows are filled) then the rest timed,
  in one process. Session windows with ``--gap`` (default 2.5 s: about as many sessions
  open as the 10 s tumbling time windows keep open; both counts are printed, the mean
  over the timed batches) are run alternately with those 10 s time windows,
  ``--reps`` times each. Rate = input tuples per second of this process's CPU time (one
  core; the machine is shared), median and best; target >= 3 M tuples/s.
* **Pipeline**: the same workload (``--rows``) as 16 parquet files. cec: ``cec run
  pipeline`` (P = ``--partitions``, session window, ``avg``) and then ``cec export
  --format parquet``, two whole processes; Spark: one whole process (interpreter, JVM,
  query, exit) running a batch query, ``spark.read.parquet`` ->
  ``groupBy(item_id, session_window(ts, gap)).avg(item_price)`` -> parquet, ``local[*]``,
  shuffle partitions = P: Spark's own ``session_window`` on a bounded input. Every run
  is cold (a new process); cec and Spark alternate (Spark first every other pair), and
  every output is compared with the first cec output: (key, start, end, avg), every
  row, avg to 1e-9 relative (exit 1 on any difference). Printed: each run, the medians
  and Spark ÷ cec (median and pair by pair), the 1-minute load with each run.

Writes ``--out`` (default ``bench/results/sessions``) ``sessions.json`` and
``sessions.md``; ``bench/report.py`` renders its section of BENCHMARKS.md from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/sessions_bench.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from bench import harness
from bench.fair_spark import CEC, cec_output, normalize
from bench.harness import alternate, checked, compare, summary
from bench.workload import WorkloadSpec, generate_columns, write_dataset
from cec.durations import parse_duration
from cec.operator import OperatorConfig, VectorOperator
from cec.policy import PolicyConfig
from cec.windows import WindowSpec, session_window, time_window

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "sessions"
TARGET = 3_000_000  # tuples/s per core, the operator alone (issue 31)
DEFINITION = 1

CEC_SPEC = """[source]
kind = "parquet"
path = "{data}"
time_field = "item_time"

[aggregate]
group_by = "item_id"
field = "item_price"
function = "avg"
window = {{ kind = "session", gap = "{gap}" }}

[checkpoint]
Q = "2x"
U = 1000000
CI_ms = 5
CP_ms = 100

[run]
partitions = {partitions}
"""

SPARK_CHILD = r'''
import sys, json
from pyspark.sql import SparkSession, functions as F
cfg = json.loads(sys.argv[1])
spark = (SparkSession.builder.master("local[*]").appName("sessions")
         .config("spark.sql.shuffle.partitions", str(cfg["partitions"]))
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = spark.read.parquet(cfg["data"]).withColumn("ts", F.timestamp_micros("item_time"))
out = (df.groupBy("item_id", F.session_window("ts", cfg["gap"]).alias("w"))
       .agg(F.avg("item_price").alias("avg"))
       .select(F.col("item_id").alias("key"), F.unix_micros("w.start").alias("window_start"),
               F.unix_micros("w.end").alias("window_end"), "avg"))
out.write.mode("overwrite").parquet(cfg["out"])
spark.stop()
'''


# ------------------------------------------------------------------------ operator


def _batches(rows: int, batch_rows: int) -> list[pa.RecordBatch]:
    cols = generate_columns(WorkloadSpec(n_rows=rows))
    table = pa.table({"ts": cols["item_time"], "seq": np.arange(rows, dtype=np.int64),
                      "item_id": cols["item_id"], "item_price": cols["item_price"]})
    out: list[pa.RecordBatch] = table.to_batches(max_chunksize=batch_rows)
    return out


def operator_pass(window: WindowSpec, warm: Sequence[pa.RecordBatch],
                  timed: Sequence[pa.RecordBatch]) -> dict[str, float]:
    """One fresh operator: the warm-up, then the timed batches (CPU and wall time, the
    mean number of open windows after each timed batch)."""
    op = VectorOperator(OperatorConfig(
        window=window, function="avg", key_column="item_id", value_column="item_price",
        policy=PolicyConfig(mode="targets", q="2x", u=1_000_000, ci_ms=5.0, cp_ms=100.0),
        clock=time.monotonic))
    for b in warm:
        op.process(b)
    opens = []
    n = sum(b.num_rows for b in timed)
    w0, c0 = time.perf_counter(), time.process_time()
    for b in timed:
        op.process(b)
        opens.append(op.n_open)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"tuples": n, "cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
            "cpu_rate": round(n / cpu), "wall_rate": round(n / wall),
            "mean_open": round(float(np.mean(opens))), "load": harness.load()}


def bench_operator(rows: int, warmup: int, gap: str, reps: int, batch_rows: int = 65_536
                   ) -> dict[str, Any]:
    batches = _batches(rows, batch_rows)
    k = warmup // batch_rows
    warm, timed = batches[:k], batches[k:]
    windows: dict[str, WindowSpec] = {"session": session_window(gap),
                                      "time": time_window("10s")}
    runs: dict[str, list[dict[str, float]]] = {"session": [], "time": []}
    for i in range(reps):
        for kind in harness.rotation(["session", "time"], i):
            r = operator_pass(windows[kind], warm, timed)
            runs[kind].append(r)
            print(f"operator {kind}: {r['cpu_rate'] / 1e6:.2f} M tuples/s per core "
                  f"({r['wall_rate'] / 1e6:.2f} M/s wall), {r['mean_open']:,} open, "
                  f"load {r['load']}", flush=True)
    res: dict[str, Any] = {"rows": rows, "warmup": k * batch_rows, "batch_rows": batch_rows,
                           "gap": gap, "time_window": "10s tumbling", "reps": reps,
                           "runs": runs}
    for kind, rs in runs.items():
        res[kind] = {"cpu_rate_median": statistics.median(r["cpu_rate"] for r in rs),
                     "cpu_rate_best": max(r["cpu_rate"] for r in rs),
                     "mean_open": statistics.median(r["mean_open"] for r in rs)}
    res["open_ratio"] = round(res["session"]["mean_open"] / res["time"]["mean_open"], 3)
    res["target"] = TARGET
    res["met"] = res["session"]["cpu_rate_median"] >= TARGET
    return res


# ------------------------------------------------------------------------ pipeline


def run_cec(spec: Path, run: Path, log: Path) -> dict[str, Any]:
    shutil.rmtree(run, ignore_errors=True)
    load = harness.load()
    summary_file = run.with_suffix(".json")
    wall = checked([*CEC, "run", "pipeline", str(spec), "--log-dir", str(run), "--json"], log,
                   stdout=summary_file).wall_s
    out = run.with_suffix(".parquet")
    export_s = checked([*CEC, "export", str(run), "--out", str(out), "--format", "parquet"],
                       log).wall_s
    return {"wall_s": round(wall, 2), "export_s": round(export_s, 2),
            "total_s": round(wall + export_s, 2), "load": load, "output": cec_output(out)}


def run_spark(cfg: dict[str, Any], log: Path) -> dict[str, Any]:
    shutil.rmtree(cfg["out"], ignore_errors=True)
    load = harness.load()
    wall = checked([sys.executable, "-c", SPARK_CHILD, json.dumps(cfg)], log).wall_s
    import pyarrow.parquet as pq

    files = sorted(Path(cfg["out"]).glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in files])
    return {"wall_s": round(wall, 2), "load": load, "output": normalize(table)}


def bench_pipeline(rows: int, gap: str, partitions: int, repeats: int, work: Path
                   ) -> dict[str, Any]:
    data = work / "data"
    if not data.exists():
        write_dataset(data, rows, files=16)
    spec = work / "sessions.toml"
    spec.write_text(CEC_SPEC.format(data=data, gap=gap, partitions=partitions))
    log = work / "runs.log"
    cfg = {"data": str(data), "out": str(work / "spark-out"), "partitions": partitions,
           "gap": f"{parse_duration(gap)} microseconds"}
    cec_runs: list[dict[str, Any]] = []
    spark_runs: list[dict[str, Any]] = []
    first: list[pa.Table] = []

    def check(out: pa.Table, what: str) -> None:
        if not first:
            first.append(out)
            return
        diff = compare(first[0], out, ("cec", what))
        if diff is not None:
            raise SystemExit(f"OUTPUTS DIFFER ({what}): {diff}")

    def one_cec(i: int) -> None:
        r = run_cec(spec, work / "cec-run", log)
        check(r.pop("output"), f"cec run {i}")
        cec_runs.append(r)
        print(f"cec {i}: run {r['wall_s']} s + export {r['export_s']} s (load {r['load']})",
              flush=True)

    def one_spark(i: int) -> None:
        r = run_spark(cfg, log)
        check(r.pop("output"), f"spark run {i}")
        spark_runs.append(r)
        print(f"spark {i}: {r['wall_s']} s (load {r['load']})", flush=True)

    alternate(repeats, one_cec, one_spark)
    res: dict[str, Any] = {"rows": rows, "gap": gap, "partitions": partitions,
                           "repeats": repeats, "windows": first[0].num_rows,
                           "cec_runs": cec_runs, "spark_runs": spark_runs,
                           "cec": summary([r["total_s"] for r in cec_runs]),
                           "cec_run_only": summary([r["wall_s"] for r in cec_runs]),
                           "spark": summary([r["wall_s"] for r in spark_runs])}
    res["speedup_median"] = round(res["spark"]["median"] / res["cec"]["median"], 2)
    res["speedup_pairs"] = summary([s["wall_s"] / c["total_s"]
                                    for c, s in zip(cec_runs, spark_runs, strict=True)])
    return res


# ------------------------------------------------------------------------ report


def report(res: dict[str, Any]) -> str:
    """The Markdown section (also BENCHMARKS.md's, through bench/report.py)."""
    lines = ["## Session windows: the operator alone, and the pipeline against Spark's "
             "`session_window`", "",
             f"`python -m bench.sessions_bench`; measured {res['started']}, commit "
             f"{harness.commit_text(res)}, {res['cpus']} CPUs, 1-min load average "
             f"{res['load_start']} at the start, {res.get('load_end')} at the end (the "
             "machine is shared: every run records its load).", ""]
    op = res.get("operator")
    if op:
        s, t = op["session"], op["time"]
        lines += [
            f"Operator alone (vectorized, the paper's workload: 100 000 keys, "
            f"{op['rows']:,} tuples of which {op['warmup']:,} warm-up, batches of "
            f"{op['batch_rows']:,}, `targets` Q = 2x, U = 1 000 000, CI/CP = 5/100 ms), "
            f"{op['reps']} alternating passes each, tuples per second of CPU time (one "
            "core):", "",
            "| window | open windows (mean) | median M tuples/s | best M tuples/s |",
            "|---|--:|--:|--:|",
            f"| session, gap {op['gap']} | {s['mean_open']:,} | "
            f"{s['cpu_rate_median'] / 1e6:.2f} | {s['cpu_rate_best'] / 1e6:.2f} |",
            f"| time, {op['time_window']} | {t['mean_open']:,} | "
            f"{t['cpu_rate_median'] / 1e6:.2f} | {t['cpu_rate_best'] / 1e6:.2f} |", "",
            f"Sessions open ÷ time windows open: {op['open_ratio']}. Target ≥ "
            f"{op['target'] / 1e6:g} M tuples/s per core (median): "
            f"{'met' if op['met'] else '**missed**'}.", ""]
    pl = res.get("pipeline")
    if pl:
        c, cr, s = pl["cec"], pl["cec_run_only"], pl["spark"]
        lines += [
            f"Pipeline, {pl['rows']:,} rows (16 parquet files), gap {pl['gap']}, average "
            f"per key, P = {pl['partitions']}, {pl['windows']:,} sessions (every output "
            "equal to the first cec output); whole processes, cold, "
            f"{pl['repeats']} alternating pairs; Spark: a batch query with "
            "`session_window`, written as parquet:", "",
            "| system | median s | min s | max s |", "|---|--:|--:|--:|",
            f"| cec run pipeline | {cr['median']} | {cr['min']} | {cr['max']} |",
            f"| cec run pipeline + cec export | {c['median']} | {c['min']} | {c['max']} |",
            f"| Spark session_window | {s['median']} | {s['min']} | {s['max']} |", "",
            f"Spark ÷ (cec run + export): **{pl['speedup_median']}×** (medians); pair by "
            f"pair {pl['speedup_pairs']['median']}× (min {pl['speedup_pairs']['min']}×, "
            f"max {pl['speedup_pairs']['max']}×). Loads: cec "
            f"{[r['load'] for r in pl['cec_runs']]}, Spark "
            f"{[r['load'] for r in pl['spark_runs']]}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gap", default="2500ms")
    ap.add_argument("--op-rows", type=int, default=3_000_000)
    ap.add_argument("--warmup", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000, help="pipeline input rows")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="pipeline pairs")
    ap.add_argument("--no-operator", action="store_true")
    ap.add_argument("--no-pipeline", action="store_true")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    harness.byte_compiled(None)
    res: dict[str, Any] = {"definition": DEFINITION, **harness.commit(),
                           "cpus": os.cpu_count(), "load_start": harness.load(),
                           "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if not args.no_operator:
        res["operator"] = bench_operator(args.op_rows, args.warmup, args.gap, args.reps)
    if not args.no_pipeline:
        work = args.work or Path(tempfile.mkdtemp(prefix="cec-sessions-"))
        work.mkdir(parents=True, exist_ok=True)
        print(f"# pipeline: {args.rows:,} rows, gap {args.gap}, work dir {work}", flush=True)
        res["pipeline"] = bench_pipeline(args.rows, args.gap, args.partitions, args.repeats,
                                         work)
    res["load_end"] = harness.load()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sessions.json").write_text(json.dumps(res, indent=1) + "\n")
    md = report(res)
    (args.out / "sessions.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
