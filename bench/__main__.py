"""``python -m bench``: the paper's evaluation (§IV, Figs. 5–9), cec vs Spark, latency.

Runs :mod:`bench.paper` (Fig. 5 baseline impact, Figs. 6/7 Q and U, Figs. 8/9 CP) and,
unless ``--no-spark``, :mod:`bench.fair_spark` (cec and Spark Structured Streaming on the
same event-time query, outputs compared equal, whole processes cold, Spark's best
setting, the same kill -9 and restart for recovery) and :mod:`bench.latency`. Writes,
under ``--out`` (default ``bench/results``; ``bench/results/quick`` with ``--quick``):
``results.md`` (every table of the paper's figures, the paper's numbers beside ours),
``results.json`` (every repetition), one PNG per figure, ``fair/`` and ``latency/``
(``latency.json``, and ``skewed.json``: one partition's keys quiet for 60 s); the
full run then rewrites ``BENCHMARKS.md`` from every result there (:mod:`bench.report`;
``--no-summary`` to skip, ``--summary`` to force, ``--report`` to do only that).
With ``--only``, the sections not run keep their earlier results. ``--only rto`` runs
:mod:`bench.rto` (the recovery-time objective, kills and recoveries; not in the default
set: ~10 min with ``--quick``, more in full); ``--only sessions`` runs
:mod:`bench.sessions_bench` (session windows: the operator alone, the pipeline against
Spark's ``session_window``; not in the default set either: a few minutes);
``--only standby`` runs :mod:`bench.standby_bench` (a warm standby's takeover against
``cec recover``, Spark's and Flink's restarts; not in the default set: ~30 min in full);
``--only growth`` runs :mod:`bench.growth_bench` (cost growth at 0.3 to 100 M rows, cec
against Spark and Flink, peak memory; not in the default set: hours in full, 0.3 M rows
in one round with ``--quick``); ``--only memory`` runs :mod:`bench.memory_bench` (the
Python workers' peak RSS per open window, issue 40; not in the default set: 10 M rows in
2 rounds in full, 1 M rows in one round with ``--quick``).

Presets: full (default, < 25 min on 2 cores), ``--quick`` (< 3 min, no Spark unless
``--spark``) and ``--preset tiny`` (the smoke test's sizes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import harness, paper, report
from bench.tables import (
    PAPER_OPENWINS,
    PAPER_SECTIONS,
    _paper_fig67,
    results_md,
    table_fig5,
    table_fig5_pipeline,
    table_fig67,
    table_fig89,
)

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Preset:
    name: str
    fig5_tuples: int
    fig5_batch: int
    fig5_reps: int
    fig5_passes: int  # in-memory configurations: passes per repetition (timed together)
    fig67_keys: int
    fig67_tuples: int
    fig67_reps: int
    fig89_keys: int
    fig89_warm: int
    fig89_tuples: int
    fig89_batch: int
    fig89_reps: int
    fair_rows: int
    fair_repeats: int
    latency_seconds: float


PRESETS = {
    "full": Preset("full", 2_000_000, 65_536, 9, 10, 100_000, 2_000_000, 3,
                   100_000, 1_000_000, 2_000_000, 1_000, 5, 3_000_000, 5, 20.0),
    "quick": Preset("quick", 400_000, 65_536, 3, 5, 20_000, 400_000, 1,
                    20_000, 200_000, 400_000, 1_000, 3, 400_000, 1, 10.0),
    "tiny": Preset("tiny", 20_000, 4_096, 2, 1, 2_000, 40_000, 1,
                   2_000, 20_000, 40_000, 500, 1, 100_000, 1, 5.0),
}

def _log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def _cmd(args: Sequence[str]) -> str:
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        return (p.stdout + p.stderr).strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict[str, Any]:
    import matplotlib
    import numpy
    import pyarrow

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = harness.memory_gib()
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = "not installed"
    java = _cmd(["java", "-version"]).splitlines()
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb,
        "os": platform.platform(), "python": platform.python_version(),
        "numpy": numpy.__version__, "pyarrow": pyarrow.__version__,
        "matplotlib": matplotlib.__version__, "pyspark": spark_version,
        "java": java[0] if java else "?",
        **harness.commit(REPO),
        "load_avg_start": harness.load(),
    }


# ------------------------------------------------------------------------------ tables


SECTIONS = (*PAPER_SECTIONS, "fair", "latency", "rto", "sessions", "standby", "growth",
            "memory")
#: run unless --only names others; the recovery-time objective (bench/rto.py, ~10 min of
#: kills and recoveries) and session windows (bench/sessions_bench.py, a few minutes)
#: run only when asked for: --only rto, --only sessions
DEFAULT_SECTIONS = (*PAPER_SECTIONS, "fair", "latency")


def run(args: argparse.Namespace) -> dict[str, Any]:
    preset = PRESETS[args.preset]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else set(DEFAULT_SECTIONS)
    unknown = only - set(SECTIONS)
    if unknown:
        raise SystemExit(f"python -m bench: --only: unknown section(s) {sorted(unknown)}; "
                         f"the sections are {', '.join(SECTIONS)}")
    spark = args.spark if args.spark is not None else preset.name == "full"
    res: dict[str, Any] = {"preset": asdict(preset), "machine": machine(),
                           "command": "python -m bench " + shlex.join(args.argv),
                           "started_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                           "sections_s": {}, "pngs": {}, "sections_md": {}}
    earlier = _earlier(out) if args.only else None
    if earlier is not None:  # the sections not run now keep their earlier results
        for key in PAPER_SECTIONS:
            if key not in only and key in earlier:
                res[key] = earlier[key]
                res["sections_md"][key] = earlier["sections_md"][key]
                res["pngs"][key] = earlier["pngs"].get(key, [])
                res["sections_s"][key] = earlier["sections_s"].get(key, 0.0)
        res["earlier"] = {"started_utc": earlier["started_utc"],
                          "commit": earlier["machine"]["commit"]}
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cec-bench-", dir=args.workdir) as tmp:
        work = Path(tmp)
        if "fig5" in only:
            t0 = time.perf_counter()
            rows5, runs5 = paper.fig5(tuples=preset.fig5_tuples, batch=preset.fig5_batch,
                                      reps=preset.fig5_reps, work=work, fsync=args.fsync,
                                      mem_passes=preset.fig5_passes, log=_log)
            ratios5 = paper.fig5_ratios(rows5, runs5)
            res["fig5"] = {"rows": [asdict(r) for r in rows5], "runs": [asdict(r) for r in runs5],
                           "ratios": ratios5}
            text = ("## Fig. 5: baseline impact (G_open only)\n\n"
                    f"Count windows of 1 (fast) and 1000 (slow), 2 keys, "
                    f"{preset.fig5_tuples:,} tuples in batches of {preset.fig5_batch:,}, "
                    f"the output log with fsync `{args.fsync}` and one commit per batch "
                    f"(the in-memory configurations run {preset.fig5_passes} passes per "
                    "repetition, timed together); configurations interleaved in each "
                    "repetition, medians. With fast windows a tuple's G_open and R are "
                    "one `G_open+R` row in the log (docs/ARCHITECTURE.md §3); the sink "
                    "and Real count both tuples.\n\n"
                    + table_fig5(rows5, ratios5))
            if spark:
                rows5p = paper.fig5_pipeline(tuples=preset.fig5_tuples,
                                             reps=preset.fig5_reps, work=work, log=_log)
                res["fig5"]["pipeline"] = [asdict(r) for r in rows5p]
                text += "\n" + table_fig5_pipeline(rows5p)
            res["sections_md"]["fig5"] = text
            from bench import plots

            res["pngs"]["fig5"] = [plots.fig5(rows5, out / "fig5_baseline.png").name]
            res["sections_s"]["fig5"] = time.perf_counter() - t0
            _write(out, res, t_all)
        if "fig67" in only:
            t0 = time.perf_counter()
            setup, rows67, _ = paper.fig67(keys=preset.fig67_keys, tuples=preset.fig67_tuples,
                                           reps=preset.fig67_reps, work=work, log=_log)
            res["fig67"] = {"setup": asdict(setup), "rows": [asdict(r) for r in rows67]}
            res["sections_md"]["fig67"] = (
                "## Figs. 6 and 7: effect of Q and U on recovery\n\n"
                f"Paper: about {PAPER_OPENWINS:,} open windows; its text gives the "
                "values in the last column (G_check counts only as a trend: they "
                "\"drop sharply for Q > 2x\").\n\n" + table_fig67(setup, rows67))
            from bench import plots

            num, _ = _paper_fig67(rows67)
            res["pngs"]["fig67"] = [plots.fig67(rows67, "Q", out / "fig6_q.png", num).name,
                                    plots.fig67(rows67, "U", out / "fig7_u.png", num).name]
            res["sections_s"]["fig67"] = time.perf_counter() - t0
            _write(out, res, t_all)
        if "fig89" in only:
            t0 = time.perf_counter()
            rows89, runs89 = paper.fig89(keys=preset.fig89_keys, warm=preset.fig89_warm,
                                         tuples=preset.fig89_tuples, batch=preset.fig89_batch,
                                         reps=preset.fig89_reps, log=_log)
            res["fig89"] = {"rows": [asdict(r) for r in rows89],
                            "runs": [asdict(r) for r in runs89]}
            res["sections_md"]["fig89"] = (
                "## Figs. 8 and 9: effect of the checkpoint period CP\n\n"
                f"{preset.fig89_keys:,} keys, count windows of 10, Q = 1× open "
                f"windows, U unbounded, CI = {paper.CI_MS:g} ms on the real clock, "
                "beside mode none (no CEC) and G_open only (no G_check); "
                f"{preset.fig89_warm:,} warm-up tuples, then {preset.fig89_tuples:,} "
                f"timed, batches of {preset.fig89_batch:,}, output not persisted. "
                "Response time = wall clock from the end of the batch that opened a "
                "window to the end of the batch that closed it (windows closed after "
                "the warm-up); ÷ no CEC is taken within each repetition. Paper: "
                "response times as its text states them.\n\n" + table_fig89(rows89))
            from bench import plots

            res["pngs"]["fig89"] = [plots.fig8(rows89, runs89, out / "fig8_response.png").name,
                                    plots.fig9(rows89, out / "fig9_extent.png").name]
            res["sections_s"]["fig89"] = time.perf_counter() - t0
            _write(out, res, t_all)
    if "fair" in only and spark:
        from bench import fair_spark

        t0 = time.perf_counter()
        _log("fair: cec vs Spark on the same query (bench/fair_spark.py)")
        code = fair_spark.main(["--rows", str(preset.fair_rows), "--repeats",
                                str(preset.fair_repeats), "--out", str(out / "fair")])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/fair_spark.py exited {code}")
        res["sections_s"]["fair"] = time.perf_counter() - t0
    if "latency" in only and spark:
        from bench import latency

        t0 = time.perf_counter()
        _log("latency: bench/latency.py")
        target = out / "latency" / "latency.json"
        started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        load = harness.load()
        code = latency.main(["--seconds", f"{preset.latency_seconds:g}", "--out", str(target)])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/latency.py exited {code}")
        lat = json.loads(target.read_text())
        lat.setdefault("started", started)
        lat.setdefault("commit", res["machine"]["commit"])
        lat.setdefault("load_start", load)
        target.write_text(json.dumps(lat, indent=1) + "\n")
        _log("latency: bench/latency.py --skewed (one partition's keys quiet for 60 s)")
        skewed = out / "latency" / "skewed.json"
        load = harness.load()
        code = latency.main(["--skewed", "--seconds", f"{preset.latency_seconds:g}",
                             "--out", str(skewed)])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/latency.py --skewed exited {code}")
        lat = json.loads(skewed.read_text())
        lat.setdefault("load_start", load)
        skewed.write_text(json.dumps(lat, indent=1) + "\n")
        res["sections_s"]["latency"] = time.perf_counter() - t0
    if "rto" in only and spark:
        from bench import rto

        t0 = time.perf_counter()
        _log("rto: bench/rto.py")
        code = rto.main([*(["--quick"] if preset.name != "full" else []),
                         "--out", str(out / "rto" / "rto.json")])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/rto.py exited {code}")
        res["sections_s"]["rto"] = time.perf_counter() - t0
    if "sessions" in only:
        from bench import sessions_bench

        t0 = time.perf_counter()
        _log("sessions: bench/sessions_bench.py")
        small = ["--op-rows", "1000000", "--warmup", "300000", "--rows", "200000",
                 "--repeats", "1"] if preset.name != "full" else []
        code = sessions_bench.main([*small, *([] if spark else ["--no-pipeline"]),
                                    "--out", str(out / "sessions")])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/sessions_bench.py exited {code}")
        res["sections_s"]["sessions"] = time.perf_counter() - t0
    if "standby" in only and spark:
        from bench import standby_bench

        t0 = time.perf_counter()
        _log("standby: bench/standby_bench.py")
        code = standby_bench.main([*(["--quick"] if preset.name != "full" else []),
                                   "--out", str(out / "standby")])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/standby_bench.py exited {code}")
        res["sections_s"]["standby"] = time.perf_counter() - t0
    if "growth" in only and spark:
        from bench import growth_bench

        t0 = time.perf_counter()
        _log("growth: bench/growth_bench.py")
        small = ["--sizes", "0.3", "--pairs", "1"] if preset.name != "full" else []
        code = growth_bench.main([*small, "--out", str(out / "growth")])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/growth_bench.py exited {code}")
        res["sections_s"]["growth"] = time.perf_counter() - t0
    if "memory" in only and spark:
        from bench import memory_bench

        t0 = time.perf_counter()
        _log("memory: bench/memory_bench.py")
        code = memory_bench.main([*(["--quick"] if preset.name != "full" else []),
                                  "--out", str(out / "memory")])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/memory_bench.py exited {code}")
        res["sections_s"]["memory"] = time.perf_counter() - t0
    _write(out, res, t_all)
    return res


def _earlier(out: Path) -> dict[str, Any] | None:
    """The results.json of an earlier run in ``out`` (None if absent or of an older form)."""
    try:
        data = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data.get("sections_md"), dict) else None


def _write(out: Path, res: dict[str, Any], t_all: float) -> None:
    """results.json and results.md as they stand (after every section)."""
    res["total_s"] = time.perf_counter() - t_all
    res["machine"]["load_avg_end"] = harness.load()
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "results.md").write_text(results_md(res))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, no Spark (< 3 min)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None)
    ap.add_argument("--spark", dest="spark", action="store_true", default=None,
                    help="run the Spark sections, fair and latency (default: only in the full "
                    "preset)")
    ap.add_argument("--no-spark", dest="spark", action="store_false")
    ap.add_argument("--only", default=None, help="comma list of " + ",".join(SECTIONS))
    ap.add_argument("--out", type=Path, default=None, help="results directory")
    ap.add_argument("--fsync", choices=["always", "interval", "never"], default="always",
                    help="fsync of the Fig. 5 output log (default: the pipeline's)")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: tmp)")
    ap.add_argument("--summary", dest="summary", action="store_true", default=None,
                    help="rewrite BENCHMARKS.md (default: a whole full run into "
                    "bench/results)")
    ap.add_argument("--no-summary", dest="summary", action="store_false")
    ap.add_argument("--report", action="store_true",
                    help="only rewrite BENCHMARKS.md from the results in bench/results")
    args = ap.parse_args(argv)
    args.argv = argv
    if args.report:
        _log(f"wrote {report.write()}")
        return 0
    harness.byte_compiled(None)
    if args.preset is None:
        args.preset = "quick" if args.quick else "full"
    default_out = args.out is None
    if args.out is None:
        base = REPO / "bench" / "results"
        args.out = base if args.preset == "full" else base / args.preset
    res = run(args)
    # BENCHMARKS.md summarizes bench/results: only full-size results written there
    summary = (args.summary if args.summary is not None
               else args.preset == "full" and default_out)
    if summary:
        _log(f"wrote {report.write(args.out)}")
    print((args.out / "results.md").read_text())
    _log(f"done in {res['total_s']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
