"""Where each second of a whole ``cec run pipeline`` goes: per stage, per process, per core.

``python bench/profile_run.py [--rows N] [--keys K] [--partitions P] [--work DIR]
[--rate HZ] [--conf K=V]... [--out FILE.md]``

The workload is ``bench/fair_spark.py``'s: ``--rows`` rows in parquet files of 100 k
rows (``item_id`` uniform over ``--keys``), 10 s tumbling ``avg(item_price)`` per
``item_id``. One run of ``cec run pipeline SPEC --json`` (Spark's event log on through
``--conf spark.eventLog.enabled=true``, uncompressed), watched three ways at once:

* ``/proc``, every 0.2 s: every process of the run's tree (the cec driver, the JVM, the
  PySpark daemon and its workers) with its CPU seconds (user + system) and resident
  memory (``VmRSS``), and every JVM thread's CPU (by its name: task threads, GC, JIT
  compilers, the rest);
* py-spy (``--py-spy``; its own venv, e.g. ``/work/pyspy-venv/bin/py-spy``), one
  ``record --pid --nonblocking --format raw`` per Python worker as it appears, and one
  on the driver: each sample (on-CPU only) is put in a stage of the data path by the
  frames it holds (:data:`STAGES`, first match from the leaf up);
* Spark's event log: the application's start, each job's and task's times and the
  task threads' CPU time (``Executor CPU Time``), per job group (ingest / operators).

Prints (and with ``--out`` writes) the tables: the run's timeline (process start,
JVM up, session up, first ingest job, ingest end, operators end, exit), CPU seconds per
process kind and per stage of the Python workers (py-spy samples scaled to the
workers' measured CPU seconds), and the JVM's CPU by thread kind. py-spy's own CPU is
measured too and reported (it shares the 2 cores: the run is slower under it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import harness  # noqa: E402
from bench.fair_spark import cec_spec, make_data  # noqa: E402
from bench.harness import Proc, Run, Watch, thread_kind  # noqa: E402

# (stage, a frame substring): the first stage whose substring is in a frame, looking from
# the leaf frame up to the root, names the sample. Order matters within one frame only.
STAGES: list[tuple[str, str]] = [
    # ---- storage: fsync and the log's encode/write
    ("fsync", "fsync"),
    ("fsync", "fdatasync"),
    # ---- the ingest's reader (python -> JVM) and writer (JVM -> python) workers
    ("ingest: read source (pyarrow)", "cec_spark/source/read.py"),
    ("ingest: read source (pyarrow)", "read_chunk"),
    ("ingest: split by partition", "_append_split"),
    ("ingest: late rows / checks", "_count_late"),
    ("ingest: trim upstream", "trim_upstream"),
    ("ingest: log commit", "commit_through"),
    ("ingest: encode + write log", "UpstreamWriter.append"),
    ("ingest: Arrow from JVM (wait/decode)", "UpstreamWriter.write"),
    ("ingest: Arrow to JVM (encode/send)", "ingest/query.py"),
    ("ingest: other writer", "cec_spark/ingest/"),
    # ---- the operator task
    ("operator: read + decode upstream", "_tail"),
    ("operator: read + decode upstream", "PayloadCodec.decode"),
    ("worker: zip imports (invalidate_caches)", "invalidate_caches"),
    ("worker: daemon (fork loop)", "manager (daemon.py"),
    ("operator: process (windows)", "process (cec/operator"),
    ("operator: process (windows)", "cec/operator/"),
    ("operator: encode + write output", "append (storage_log"),
    ("operator: commit output", "commit (storage_log"),
    ("operator: report / state", "_PartitionLoop.report"),
    ("operator: finish + seal", "_PartitionLoop.finish"),
    ("operator: recovery at start", "_recover"),
    ("operator: other", "cec_spark/run/task.py"),
    # ---- the worker itself
    ("worker: imports / start", "_find_and_load"),
    ("worker: PySpark serializers", "pyspark/sql/pandas/serializers.py"),
    ("worker: PySpark", "pyspark/"),
]


DRIVER_STAGES: list[tuple[str, str]] = [
    ("driver: imports", "_find_and_load"),
    ("driver: plan the source", "plan_new_run"),
    ("driver: start the JVM (py4j)", "launch_gateway"),
    ("driver: Spark session", "cec_spark/run/session.py"),
    ("driver: seal / summary", "seal_upstream"),
    ("driver: py4j calls", "py4j/"),
    ("driver: progress / watch", "cec_spark/driver/"),
]


def stage_of(frames: list[str], table: list[tuple[str, str]] | None = None) -> str:
    if table is not None:
        for stage, needle in table:
            if any(needle in f for f in frames):
                return stage
        return "driver: other"
    for frame in reversed(frames):
        for stage, needle in STAGES:
            if needle in frame:
                return stage
    return "other"


def fold(path: Path, driver: bool = False) -> collections.Counter[str]:
    """A py-spy raw file (``frame;frame;... count`` lines) as samples per stage."""
    out: collections.Counter[str] = collections.Counter()
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        # a few stages are named by frames below a more general one (the writer's wait
        # for the next batch is inside UpstreamWriter.write, below pyspark's reader)
        stage = stage_of(frames, DRIVER_STAGES if driver else None)
        if stage in ("worker: PySpark serializers", "worker: PySpark") and \
                any("UpstreamWriter.write" in f for f in frames):
            stage = "ingest: Arrow from JVM (wait/decode)"
        elif stage in ("worker: PySpark serializers", "worker: PySpark") and \
                any("_chunk_reader" in f or "read (cec_spark/ingest/query.py" in f
                    for f in frames):
            stage = "ingest: Arrow to JVM (encode/send)"
        elif stage.startswith("ingest: Arrow to JVM") and \
                any("source/read.py" in f for f in frames):
            stage = "ingest: read source (pyarrow)"
        out[stage] += int(n)
    return out


# ----------------------------------------------------------------------------- event log


def read_events(folder: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith("appstatus"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    events.append(json.loads(line))
    return events


def spark_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Application start, jobs by group (first start, last end, count) and the task
    threads' run and CPU seconds per group."""
    app_start = None
    group_of_job: dict[int, str] = {}
    jobs: dict[str, dict[str, float]] = {}
    group_of_stage: dict[int, str] = {}
    tasks: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    for ev in events:
        kind = ev.get("Event")
        if kind == "SparkListenerApplicationStart":
            app_start = ev["Timestamp"] / 1000
        elif kind == "SparkListenerJobStart":
            props = ev.get("Properties") or {}
            group = props.get("spark.jobGroup.id") or props.get("spark.job.description") \
                or "other"
            group = "ingest" if "ingest" in group else ("operators" if "op" in group
                                                         else group)
            group_of_job[ev["Job ID"]] = group
            for sid in ev.get("Stage IDs", []):
                group_of_stage[sid] = group
            j = jobs.setdefault(group, {"jobs": 0, "first_start": 1e18, "last_end": 0.0})
            j["jobs"] += 1
            j["first_start"] = min(j["first_start"], ev["Submission Time"] / 1000)
        elif kind == "SparkListenerJobEnd":
            group = group_of_job.get(ev["Job ID"], "other")
            j = jobs.setdefault(group, {"jobs": 0, "first_start": 1e18, "last_end": 0.0})
            j["last_end"] = max(j["last_end"], ev["Completion Time"] / 1000)
        elif kind == "SparkListenerTaskEnd":
            group = group_of_stage.get(ev["Stage ID"], "other")
            m = ev.get("Task Metrics") or {}
            info = ev.get("Task Info") or {}
            t = tasks[group]
            t["tasks"] += 1
            t["wall_s"] += (info.get("Finish Time", 0) - info.get("Launch Time", 0)) / 1000
            t["run_s"] += m.get("Executor Run Time", 0) / 1000
            t["cpu_s"] += m.get("Executor CPU Time", 0) / 1e9
            t["gc_s"] += m.get("JVM GC Time", 0) / 1000
            t["deserialize_s"] += m.get("Executor Deserialize Time", 0) / 1000
            for acc in info.get("Accumulables", []):
                name = acc.get("Name", "")
                if isinstance(acc.get("Update"), int | str) and (
                        "Python" in name or "time" in name.lower()):
                    with contextlib.suppress(TypeError, ValueError):
                        t[f"sql: {name}"] += float(acc["Update"])
    return {"app_start": app_start, "jobs": jobs,
            "tasks": {g: dict(v) for g, v in tasks.items()}}


# ----------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict[str, Any]:
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.spec is not None:  # a spec of the user's, e.g. the growth benchmark's CSV one
        spec = args.spec
    else:
        data = work / f"data-{args.rows}"
        if not data.exists():
            make_data(data, args.rows, args.keys, 100_000)
        spec = cec_spec(work, data, False, args.partitions)
    run_dir, evdir, stacks = work / "run", work / "events", work / "stacks"
    for d in (run_dir, evdir, stacks):
        shutil.rmtree(d, ignore_errors=True)
    evdir.mkdir()
    stacks.mkdir()
    conf = ["spark.eventLog.enabled=true", f"spark.eventLog.dir=file://{evdir}",
            "spark.eventLog.compress=false", "spark.eventLog.rolling.enabled=false",
            *args.conf]
    cmd = [sys.executable, "-m", "cli.app", "run", "pipeline", str(spec), "--log-dir",
           str(run_dir), "--json", *[x for c in conf for x in ("--conf", c)]]
    load0 = harness.load()
    spies: list[subprocess.Popen[bytes]] = []

    def spy(p: Proc) -> None:
        if args.py_spy and p.kind in ("py-worker", "driver"):
            spies.append(subprocess.Popen(
                [args.py_spy, "record", "--pid", str(p.pid), "--nonblocking", "--rate",
                 str(args.rate), "--format", "raw", "-o", str(stacks / f"{p.kind}-{p.pid}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True))

    proc = Run(cmd, work / "run.err", stdout=work / "run.json", watch=True, on_new=spy,
               threads=True)
    m = proc.wait(args.timeout, "cec run pipeline's end")
    assert proc.watch is not None
    watch = proc.watch
    t0, t_end = proc.started_at, proc.started_at + m.wall_s
    # the spies' CPU: what the children this process waited for used after the run (the
    # run itself, reaped by then, is in RUSAGE_CHILDREN too)
    before_spies = _children_cpu()
    for s in spies:  # each ends with its process; py-spy then writes its file
        try:
            s.wait(30)
        except subprocess.TimeoutExpired:
            s.send_signal(signal.SIGINT)
            s.wait(10)
    spy_cpu = _children_cpu() - before_spies
    (work / "procs.json").write_text(json.dumps(
        [{"pid": p.pid, "kind": p.kind, "cpu": p.cpu, "cmd": p.cmd[:300],
          "first": p.first_seen - t0, "last": p.last_seen - t0} for p in watch.procs.values()],
        indent=1))
    if not m.ok:
        raise SystemExit(harness.failure(cmd, m, work / "run.err", args.timeout))
    return {"t0": t0, "t_end": t_end, "load_start": load0, "load_end": harness.load(),
            "watch": watch, "summary": json.loads((work / "run.json").read_text()),
            "events": spark_summary(read_events(evdir)), "stacks": stacks,
            "spy_cpu": spy_cpu, "cmd": cmd}


def _children_cpu() -> float:
    ru = __import__("resource").getrusage(__import__("resource").RUSAGE_CHILDREN)
    return float(ru.ru_utime + ru.ru_stime)


# ----------------------------------------------------------------------------- report


def _most(d: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(d.items(), key=lambda kv: -kv[1])


def report(res: dict[str, Any], args: argparse.Namespace) -> str:
    w: Watch = res["watch"]
    t0, t_end = res["t0"], res["t_end"]
    wall = t_end - t0
    s, ev = res["summary"], res["events"]
    by_kind: dict[str, float] = collections.defaultdict(float)
    for p in w.procs.values():
        by_kind[p.kind] += p.cpu
    jvm_first = min((p.first_seen for p in w.procs.values() if p.kind == "jvm"), default=t0)
    ing, ops = ev["jobs"].get("ingest", {}), ev["jobs"].get("operators", {})
    ingest_end = ing.get("last_end", 0.0)
    ops_end = ops.get("last_end", 0.0)
    app = ev["app_start"] or jvm_first
    spy_rate = f"at {args.rate} Hz per Python process" if args.py_spy else "off"
    command = " ".join(["python", *res["cmd"][1:]])
    what = (f"spec {args.spec}" if args.spec is not None else
            f"{args.rows:,} rows, {args.keys:,} keys, P = {args.partitions}, 10 s tumbling avg")
    lines = [f"# profile: cec run pipeline, {what}",
             "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}; {os.cpu_count()} CPUs; "
             f"load (1 min) {res['load_start']:.2f} at start, {res['load_end']:.2f} at end; "
             f"py-spy {spy_rate}", "", f"command: `{command}`",
             "", "## Timeline (wall seconds from the process start)", "",
             "| point | at s | stage before it | s |", "|---|--:|---|--:|"]
    points = [("JVM process seen", jvm_first, "Python start, imports, plan, launch JVM"),
              ("Spark application started", app, "JVM start to SparkContext"),
              ("first ingest job", ing.get("first_start", app),
               "session, logs, operator jobs submitted"),
              ("last ingest job ended", ingest_end or app, "ingest (operators run alongside)"),
              ("operator job ended", ops_end or ingest_end or app,
               "operators' tail after the ingest"),
              ("process exit", t_end, "seal, summary, Spark stop, JVM exit")]
    prev = t0
    for name, at, what in points:
        lines.append(f"| {name} | {at - t0:.2f} | {what} | {at - prev:.2f} |")
        prev = at
    lines += ["", f"Whole process: {wall:.2f} s; cec's own elapsed_s {s.get('elapsed_s')}, "
              f"ingest_s {s.get('ingest_s')}, steady_s {s.get('steady_s')}.", ""]

    cores = os.cpu_count() or 1
    lines += ["## CPU seconds per process kind (/proc, user + system)", "",
              f"Wall {wall:.2f} s x {cores} cores = {wall * cores:.2f} core-seconds.", "",
              "| process | CPU s | share of the core-seconds |", "|---|--:|--:|"]
    for kind, cpu in _most(by_kind):
        lines.append(f"| {kind} | {cpu:.2f} | {cpu / (wall * cores):.0%} |")
    lines.append(f"| py-spy (all samplers) | {res['spy_cpu']:.2f} | "
                 f"{res['spy_cpu'] / (wall * cores):.0%} |")
    idle = wall * cores - sum(by_kind.values()) - res["spy_cpu"]
    lines += [f"| idle or other processes | {idle:.2f} | {idle / (wall * cores):.0%} |", ""]

    threads: dict[str, float] = collections.defaultdict(float)
    for name, cpu in w.jvm_threads.values():
        threads[thread_kind(name)] += cpu
    lines += ["## JVM CPU by thread kind (/proc/JVM/task)", "", "| threads | CPU s |",
              "|---|--:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in _most(threads)]
    names: dict[str, float] = collections.defaultdict(float)
    for name, cpu in w.jvm_threads.values():
        names[re.sub(r"[0-9]+", "N", name)] += cpu
    lines += ["", "Busiest JVM threads (digits as N): " + "; ".join(
        f"{k} {v:.2f} s" for k, v in _most(names)[:10])]
    lines += ["", "## Spark tasks (event log)", "",
              "| job group | jobs | tasks | task wall s | run s | JVM task-thread CPU s | GC s |",
              "|---|--:|--:|--:|--:|--:|--:|"]
    for g, t in sorted(ev["tasks"].items()):
        lines.append(f"| {g} | {int(ev['jobs'].get(g, {}).get('jobs', 0))} | "
                     f"{int(t['tasks'])} | {t['wall_s']:.2f} | {t['run_s']:.2f} | "
                     f"{t['cpu_s']:.2f} | {t['gc_s']:.2f} |")
    extra = sorted({k for t in ev["tasks"].values() for k in t if k.startswith("sql: ")})
    if extra:
        lines += ["", "SQL metrics summed over the ingest's tasks: " + "; ".join(
            f"{k[5:]} {ev['tasks'].get('ingest', {}).get(k, 0):,.0f}" for k in extra)]

    # py-spy: samples per stage, scaled to each worker's measured CPU
    per_stage: dict[str, float] = collections.defaultdict(float)
    samples_total = 0
    for path in sorted(res["stacks"].glob("*.txt")):
        pid = int(path.stem.split("-")[-1])
        folded = fold(path, driver=path.stem.startswith("driver"))
        n = sum(folded.values())
        samples_total += n
        cpu = w.procs[pid].cpu if pid in w.procs else 0.0
        if not n:
            continue
        for stage, k in folded.items():
            per_stage[stage] += cpu * k / n
    if samples_total:
        lines += ["", "## Python CPU seconds per stage (py-spy samples x each process's "
                  "measured CPU)", "", "| stage | CPU s | share of Python CPU |", "|---|--:|--:|"]
        total = sum(per_stage.values())
        for stage, cpu in sorted(per_stage.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {stage} | {cpu:.2f} | {cpu / total:.0%} |")
    clocks = s.get("ingest_writer_s") or {}
    parts = s.get("per_partition") or []
    lines += ["", "## cec's own clocks (run summary)", "",
              f"ingest writer: waiting for Spark's next batch {clocks.get('wait_s', 0):.2f} s, "
              f"split + encode + write {clocks.get('append_s', 0):.2f} s, commit (fsync) "
              f"{clocks.get('commit_s', 0):.2f} s; operators (sum over P): process "
              f"{sum(p.get('process_s', 0) for p in parts):.2f} s, output write + commit "
              f"{sum(p.get('write_s', 0) for p in parts):.2f} s.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cec-profile"))
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "")
    ap.add_argument("--rate", type=int, default=40)
    ap.add_argument("--conf", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--spec", type=Path, default=None,
                    help="profile this pipeline spec instead of making parquet data "
                         "(--rows, --keys and --partitions are then the spec's)")
    args = ap.parse_args(argv)
    harness.byte_compiled(None)
    res = run(args)
    text = report(res, args)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
