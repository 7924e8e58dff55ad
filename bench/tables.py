"""The Markdown of ``python -m bench``: the paper's figures as tables, with the paper's
numbers beside ours, the headline and the environment (:mod:`bench.__main__` runs the
experiments; :mod:`bench.report` composes BENCHMARKS.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bench import paper

PAPER_SECTIONS = ("fig5", "fig67", "fig89")

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
