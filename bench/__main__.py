"""``python -m bench``: the paper's evaluation (§IV, Figs. 5–9), cec vs Spark, latency.

Runs :mod:`bench.paper` (Fig. 5 baseline impact, Figs. 6/7 Q and U, Figs. 8/9 CP) and,
unless ``--no-spark``, :mod:`bench.fair_spark` (cec and Spark Structured Streaming on the
same event-time query, outputs compared equal, whole processes cold, Spark's best
setting, the same kill -9 and restart for recovery) and :mod:`bench.latency`. Writes,
under ``--out`` (default ``bench/results``; ``bench/results/quick`` with ``--quick``):
``results.md`` (every table of the paper's figures, the paper's numbers beside ours),
``results.json`` (every repetition), one PNG per figure, ``fair/`` and ``latency/``; the
full run then rewrites ``BENCHMARKS.md`` from every result there (:mod:`bench.report`;
``--no-summary`` to skip, ``--summary`` to force, ``--report`` to do only that).
With ``--only``, the sections not run keep their earlier results.

Presets: full (default, < 25 min on 2 cores), ``--quick`` (< 3 min, no Spark unless
``--spark``) and ``--preset tiny`` (the smoke test's sizes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
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

from bench import paper, report

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

# The paper's numbers, as its text states them (§IV; the figures themselves are not in
# the text we have). Fig. 6 ranges are read in order of Q (extent grows with Q).
PAPER_FIG5 = {
    "net_vs_none": "≥ 0.90 (\"drops by less than 10%\")",
    "disk_vs_net": "≈ 1 (\"nearly identical\")",
    "real_vs_data": "≈ 2 (\"twice the throughput of data tuples\")",
}
PAPER_FIG6 = {  # by Q multiple
    "1x": {"extent": 120_000, "ec_load_s": 3.5, "replay_mb": 25.0},
    "2x": {"extent": 180_000, "ec_load_s": 5.0, "replay_mb": 50.0},
    "4x": {"ec_load_s": 14.0},
    "8x": {"extent": 500_000, "ec_load_s": 27.0},
}
PAPER_FIG6_TEXT = {
    "1x": "≈120,000 · 3.5 s · 25 MB", "2x": "≈180,000 · 5 s · 50 MB",
    "4x": "– · 14 s · > 200 MB", "8x": "500,000 (target 720,000) · 27 s · > 200 MB",
}
PAPER_FIG7_ENDS = (  # smallest and largest U
    {"extent": 120_000, "ec_load_s": 2.5, "replay_mb": 20.0},
    {"extent": 230_000, "ec_load_s": 6.7, "replay_mb": 90.0},
)
PAPER_FIG7_TEXT = ("120,000 · 2.5 s · 20 MB (200,000 tuples)",
                   "230,000 · 6.7 s · 90 MB (900,000 tuples)")
PAPER_FIG8 = {paper.NO_CEC: 16.5, "CP 100 ms": 18.5, "CP 50 ms": 21.5,
              "CP 25 ms": 32.5}  # response time as the text states it
PAPER_OPENWINS = 90_000


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
    mem_gb = float("nan")
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem_gb = kb / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = "not installed"
    java = _cmd(["java", "-version"]).splitlines()
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem_gb, 1),
        "os": platform.platform(), "python": platform.python_version(),
        "numpy": numpy.__version__, "pyarrow": pyarrow.__version__,
        "matplotlib": matplotlib.__version__, "pyspark": spark_version,
        "java": java[0] if java else "?",
        "commit": _cmd(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "dirty": bool(_cmd(["git", "-C", str(REPO), "status", "--porcelain"])),
        "load_avg_start": os.getloadavg()[0],
    }


# ------------------------------------------------------------------------------ tables


def _f(x: float, fmt: str = ",.0f") -> str:
    return "–" if math.isnan(x) else format(x, fmt)


def table_fig5(rows: Sequence[paper.Fig5Row], ratios: dict[str, dict[str, float]]) -> str:
    head = ("| workload | config | tuples per pass | reps | input M tuples/s | R rows/s at sink "
            "| R+G rows/s (Real) | vs none (R rate) | log B/tuple |\n"
            "|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
    body = "".join(
        f"| {r.workload} | {r.config} | {r.tuples:,} | {r.reps} | {r.in_rate / 1e6:.2f} "
        f"| {_f(r.r_rate)} | {_f(r.real_rate)} | {r.vs_none:.3f} "
        f"| {r.log_bytes_per_tuple:.2f} |\n" for r in rows)
    comp = ("\n| ratio (median over reps, same rep) | " + " | ".join(ratios) + " | paper |\n"
            "|---|" + "--:|" * len(ratios) + "---|\n")
    names = [("Gopen/Net ÷ none", "net_vs_none", PAPER_FIG5["net_vs_none"]),
             ("Gopen/Disk ÷ none", "disk_vs_none", "–"),
             ("Gopen/Disk ÷ Gopen/Net", "disk_vs_net", PAPER_FIG5["disk_vs_net"]),
             ("Gopen/Disk ÷ none/Disk", "disk_vs_none_disk", "–"),
             ("Real ÷ data (Gopen/Disk)", "real_vs_data", PAPER_FIG5["real_vs_data"])]
    for label, key, pap in names:
        comp += f"| {label} | " + " | ".join(f"{ratios[w][key]:.3f}" for w in ratios)
        comp += f" | {pap} |\n"
    return head + body + comp


def table_fig5_pipeline(rows: Sequence[paper.Fig5PipelineRow]) -> str:
    head = ("### Fig. 5 end to end: at the sink of `cec run pipeline`\n\n"
            "Where the paper measured it: the whole pipeline (generator → Spark filter and "
            "key partition → upstream log → one operator task → output log, every record "
            "fsync'ed), 2 keys, one key partition, mode `none` against `open-only`, one "
            "warm session, configurations interleaved in each repetition (in reverse order "
            "every other one). R rate = R rows in the output log per second of the run. "
            "Fast windows store each tuple's G_open and R as one `G_open+R` row "
            "(docs/ARCHITECTURE.md §3).\n\n"
            "| workload | mode | tuples | reps | input rows/s | R rows/s at sink "
            "| R+G rows/s (Real) | ÷ none (R rate, same rep) | paper |\n"
            "|---|---|--:|--:|--:|--:|--:|--:|---|\n")
    return head + "".join(
        f"| {r.workload} | {r.mode} | {r.tuples:,} | {r.reps} | {_f(r.rows_per_s)} "
        f"| {_f(r.r_per_s)} | {_f(r.real_per_s)} | {r.vs_none:.3f} "
        f"| {PAPER_FIG5['net_vs_none'] if r.mode != 'none' else '–'} |\n" for r in rows) + "\n"


def _paper_fig67(rows: Sequence[paper.Fig67Row]) -> tuple[dict[str, dict[str, float]],
                                                          dict[str, str]]:
    num: dict[str, dict[str, float]] = {}
    text: dict[str, str] = {}
    for r in rows:
        if r.experiment == "Q":
            num[r.target] = PAPER_FIG6.get(r.target, {})
            text[f"Q{r.target}"] = PAPER_FIG6_TEXT.get(r.target, "–")
    us = [r for r in rows if r.experiment == "U"]
    for i, r in enumerate(us):
        end = 0 if i == 0 else 1 if i == len(us) - 1 else None
        num[r.target] = {} if end is None else PAPER_FIG7_ENDS[end]
        text[f"U{r.target}"] = "–" if end is None else PAPER_FIG7_TEXT[end]
    return num, text


def table_fig67(setup: Any, rows: Sequence[paper.Fig67Row]) -> str:
    _, text = _paper_fig67(rows)
    head = (f"{setup.keys:,} keys, count windows of 10, crash after {setup.tuples:,} tuples "
            f"(batches of {setup.batch}), CI/CP 5/100 ms on the cost-model clock of "
            "`bench/recovery_bench.py`; U targets scaled by keys/100,000. Counts are "
            "deterministic; times are medians.\n\n"
            "| exp | target | reps | G_check | open windows N_c | extent q | EC-load s "
            "(CPU) | replay tuples | replay MB | replay s | recovery s | ok "
            "| paper: extent · EC-load · replay |\n"
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
    body = "".join(
        f"| {r.experiment} | {r.target} | {r.reps} | {r.g_check:,} | {r.n_c:,} "
        f"| {r.extent:,} | {r.ec_load_s:.3f} ({r.ec_load_cpu_s:.3f}) | {r.replay_tuples:,} "
        f"| {r.replay_bytes / 1e6:.1f} | {r.replay_s:.3f} | {r.total_s:.3f} "
        f"| {'yes' if r.verified and r.deterministic else 'NO'} "
        f"| {text.get(r.experiment + r.target, '–')} |\n" for r in rows)
    return head + body


def table_fig89(rows: Sequence[paper.Fig89Row]) -> str:
    head = ("| config | reps | mean response s | median response s | ÷ no CEC "
            "| ÷ G_open only | paper s (÷ no CEC) | input tuples/s | G_check "
            "| mean extent q | extent at end |\n"
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
    body = ""
    for r in rows:
        pap = PAPER_FIG8.get(r.config)
        ptxt = "≈ no CEC" if r.config == "CP 250 ms" else (
            "–" if pap is None else f"{pap} ({pap / PAPER_FIG8[paper.NO_CEC]:.2f})")
        body += (f"| {r.config} | {r.reps} | {r.response_mean_s:.3f} "
                 f"| {r.response_median_s:.3f} | {r.vs_none:.3f} | {r.vs_open:.3f} | {ptxt} "
                 f"| {_f(r.throughput)} | {r.g_check:,} | {_f(r.extent_mean)} "
                 f"| {_f(r.extent_end)} |\n")
    return head + body


# ------------------------------------------------------------------------------ runner


PAPER_SECTIONS = ("fig5", "fig67", "fig89")
SECTIONS = (*PAPER_SECTIONS, "fair", "latency")


def run(args: argparse.Namespace) -> dict[str, Any]:
    preset = PRESETS[args.preset]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else set(SECTIONS)
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
        load = os.getloadavg()[0]
        code = latency.main(["--seconds", f"{preset.latency_seconds:g}", "--out", str(target)])
        if code != 0:
            raise SystemExit(f"python -m bench: bench/latency.py exited {code}")
        lat = json.loads(target.read_text())
        lat.setdefault("started", started)
        lat.setdefault("commit", res["machine"]["commit"])
        lat.setdefault("load_start", load)
        target.write_text(json.dumps(lat, indent=1) + "\n")
        res["sections_s"]["latency"] = time.perf_counter() - t0
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
    res["machine"]["load_avg_end"] = os.getloadavg()[0]
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "results.md").write_text(results_md(res))


def headline(res: dict[str, Any]) -> str:
    lines = []
    if "fig5" in res:
        for r in res["fig5"].get("pipeline", []):
            if r["mode"] != "none":
                lines.append(f"- Fig. 5 {r['workload']} windows end to end (`cec run "
                             f"pipeline`, at the sink): {r['mode']} ÷ none = "
                             f"{r['vs_none']:.3f} (overhead {100 * (1 - r['vs_none']):.1f} %; "
                             "target ≤ 5 %, paper < 10 %).")
        for w, r in res["fig5"]["ratios"].items():
            lines.append(f"- Fig. 5 {w} windows, operator alone: Gopen/Net ÷ none = "
                         f"{r['net_vs_none']:.3f} (overhead "
                         f"{100 * (1 - r['net_vs_none']):.1f} %; target ≤ 5 %, "
                         f"paper < 10 %), Gopen/Disk ÷ Gopen/Net = {r['disk_vs_net']:.3f}, "
                         f"Gopen/Disk ÷ none/Disk = {r['disk_vs_none_disk']:.3f}, "
                         f"Real ÷ data = {r['real_vs_data']:.2f}.")
    if "fig67" in res:
        for fig, exp in (("6", "Q"), ("7", "U")):
            rs = [r for r in res["fig67"]["rows"] if r["experiment"] == exp]
            if rs:
                lines.append(f"- Fig. {fig} ({exp} " + " / ".join(r["target"] for r in rs)
                             + "): G_check " + " / ".join(f"{r['g_check']:,}" for r in rs)
                             + ", extent " + " / ".join(f"{r['extent']:,}" for r in rs)
                             + ", EC-load " + " / ".join(f"{r['ec_load_s']:.2f}" for r in rs)
                             + " s, replay "
                             + " / ".join(f"{r['replay_bytes'] / 1e6:.0f}" for r in rs)
                             + " MB.")
    if "fig89" in res:
        rows = res["fig89"]["rows"]
        cps = [r for r in rows if r["cp_ms"] is not None]
        open_only = [r for r in rows if r["config"] == paper.OPEN_ONLY]
        lines.append("- Figs. 8/9: response time ÷ no CEC at CP "
                     + ", ".join(f"{r['cp_ms']:g} ms = {r['vs_none']:.2f}" for r in cps)
                     + " (paper: 25 ms 1.97, 50 ms 1.30, 100 ms 1.12, 250 ms ≈ 1)"
                     + (f"; G_open only = {open_only[0]['vs_none']:.2f}" if open_only else "")
                     + "; ÷ G_open only: "
                     + ", ".join(f"{r['cp_ms']:g} ms = {r['vs_open']:.2f}" for r in cps)
                     + "; mean extent " + ", ".join(f"{r['extent_mean']:,.0f}" for r in cps)
                     + " records.")
    return "\n".join(lines) + "\n"


def environment_md(res: dict[str, Any]) -> str:
    m = res["machine"]
    p = res["preset"]
    return (
        f"- Date: {res['started_utc']}; command: `{res['command'].strip()}`; preset "
        f"`{p['name']}`; total {res['total_s'] / 60:.1f} min "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in res['sections_s'].items())}).\n"
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GiB; {m['os']}; "
        f"1-min load average {m['load_avg_start']:.1f} at the start, "
        f"{m['load_avg_end']:.1f} at the end.\n"
        f"- Versions: Python {m['python']}, numpy {m['numpy']}, pyarrow {m['pyarrow']}, "
        f"matplotlib {m['matplotlib']}, pyspark {m['pyspark']}, {m['java']}; cec commit "
        f"{m['commit']}{' (work tree had uncommitted changes)' if m['dirty'] else ''}.\n"
        f"- Repetitions: Fig. 5 {p['fig5_reps']}, Figs. 6/7 {p['fig67_reps']}, Figs. 8/9 "
        f"{p['fig89_reps']}; every number is a median over "
        "them and every ratio is taken within one repetition.\n"
    )


def results_md(res: dict[str, Any]) -> str:
    sections = [res["sections_md"][k] for k in PAPER_SECTIONS if k in res["sections_md"]]
    pngs = "".join(f"![{n}]({n})\n" for k in PAPER_SECTIONS for n in res["pngs"].get(k, []))
    kept = res.get("earlier")
    note = ""
    if kept:
        note = (f"- Sections not run by this command are kept from the run of "
                f"{kept['started_utc']} (commit {kept['commit']}).\n")
    return ("# cec benchmarks: the paper's evaluation on this machine\n\n"
            + environment_md(res) + note + "\n## Headline\n\n" + headline(res) + "\n"
            + "\n".join(sections) + "\n## Plots\n\n" + pngs)


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
