"""PNG plots of the paper's figures from :mod:`bench.paper` results (matplotlib, Agg).

One function per figure; each takes the result rows, writes one PNG and returns its path.
Where the paper's text gives a number, it is drawn beside ours (hollow markers, "paper").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.paper import Fig5Row, Fig67Row, Fig89Row, Fig89Run

DPI = 110


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def fig5(rows: Sequence[Fig5Row], path: Path) -> Path:
    """Bars per workload: R rows/s at the sink per configuration, plus "Real"."""
    workloads = list(dict.fromkeys(r.workload for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.2 * len(workloads), 4.2),
                             squeeze=False)
    for ax, name in zip(axes[0], workloads, strict=True):
        mine = {r.config: r for r in rows if r.workload == name}
        labels = ["none", "Gopen/Net", "Gopen/Disk", "Real\n(Gopen/Disk)", "none/Disk"]
        vals = [mine["none"].r_rate, mine["Gopen/Net"].r_rate, mine["Gopen/Disk"].r_rate,
                mine["Gopen/Disk"].real_rate, mine["none/Disk"].r_rate]
        colors = ["#555555", "#4c72b0", "#dd8452", "#c44e52", "#aaaaaa"]
        bars = ax.bar(range(len(vals)), vals, color=colors)
        ax.set_xticks(range(len(vals)), labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("output rows/s at the sink (log scale)")
        size = "1" if name == "fast" else "1000"
        ax.set_title(f"{name} windows (size {size}, 2 keys)")
        for b, r in zip(bars, [mine["none"], mine["Gopen/Net"], mine["Gopen/Disk"], None,
                               mine["none/Disk"]], strict=True):
            text = "" if r is None else f"{r.vs_none:.2f}×"
            if r is None:
                text = f"{mine['Gopen/Disk'].real_rate / mine['Gopen/Disk'].r_rate:.2f}× data"
            ax.annotate(text, (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=8)
    fig.suptitle("Fig. 5: baseline impact of G_open (ratios: R rate vs none, same rep)",
                 fontsize=10)
    return _save(fig, path)


def fig67(rows: Sequence[Fig67Row], experiment: str, path: Path,
          paper: dict[str, dict[str, float]] | None = None) -> Path:
    """Four panels as in the paper: G_check count, extent, EC-load time, replayed MB."""
    mine = [r for r in rows if r.experiment == experiment]
    xs = list(range(len(mine)))
    labels = [r.target for r in mine]
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.4))
    panels = [
        ("G_check emitted", [r.g_check for r in mine], None),
        ("extent size q (records)", [r.extent for r in mine], "extent"),
        ("EC-load s (reconstruct + load)", [r.ec_load_s for r in mine], "ec_load_s"),
        ("replayed MB", [r.replay_bytes / 1e6 for r in mine], "replay_mb"),
    ]
    for ax, (title, vals, key) in zip(axes.flat, panels, strict=True):
        ax.plot(xs, vals, "o-", color="#4c72b0", label="cec (this machine)")
        if paper and key:
            pts = [(i, paper[r.target][key]) for i, r in enumerate(mine)
                   if key in paper.get(r.target, {})]
            if pts:
                ax2 = ax.twinx()
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], "s", mfc="none", ms=8,
                         color="#c44e52", label="paper (text)")
                ax2.set_ylabel("paper", color="#c44e52", fontsize=8)
                ax2.tick_params(axis="y", labelcolor="#c44e52", labelsize=8)
                ax2.set_ylim(bottom=0)
                ax2.legend(loc="lower right", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(xs, labels, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.tick_params(axis="y", labelsize=8)
        ax.legend(loc="upper left", fontsize=7)
    name = "Q (× open windows)" if experiment == "Q" else "U (input tuples)"
    num = 6 if experiment == "Q" else 7
    fig.suptitle(f"Fig. {num}: effect of {name}", fontsize=10)
    return _save(fig, path)


def fig8(rows: Sequence[Fig89Row], runs: Sequence[Fig89Run], path: Path) -> Path:
    """Response time over wall clock (median repetition's series) and per CP."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for row in rows:
        rs = sorted((r for r in runs if r.config == row.config),
                    key=lambda r: r.response_mean_s)
        run = rs[len(rs) // 2]
        if run.series:
            ax1.plot([t for t, _ in run.series], [v for _, v in run.series], ".-",
                     label=row.config)
    ax1.set_xlabel("wall clock since warm-up (s)")
    ax1.set_ylabel("mean window response time (s)")
    ax1.set_title("window open → close, binned by closing time", fontsize=9)
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize=8)
    labels = [r.config.replace(" only", "\nonly") for r in rows]
    bars = ax2.bar(range(len(rows)), [r.response_mean_s for r in rows], color="#4c72b0")
    for b, r in zip(bars, rows, strict=True):
        ax2.annotate(f"{r.vs_none:.2f}×", (b.get_x() + b.get_width() / 2, b.get_height()),
                     ha="center", va="bottom", fontsize=8)
    ax2.set_xticks(range(len(rows)), labels, fontsize=8)
    ax2.set_ylabel("mean response time (s), median of reps")
    ax2.set_title("response time per CP (CI 10 ms; ratio vs no CEC)", fontsize=9)
    fig.suptitle("Fig. 8: operator response time for different checkpoint periods",
                 fontsize=10)
    return _save(fig, path)


def fig9(rows: Sequence[Fig89Row], path: Path) -> Path:
    cec = [r for r in rows if r.cp_ms is not None]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    xs = [float(r.cp_ms or 0.0) for r in cec]
    ax.plot(xs, [r.extent_mean for r in cec], "o-", label="mean over the run")
    ax.plot(xs, [r.extent_end for r in cec], "s--", label="at the end")
    for r in rows:
        if r.cp_ms is None and r.extent_mean > 0:
            ax.axhline(r.extent_mean, color="#999999", ls=":",
                       label=f"{r.config} (no G_check), mean")
    ax.set_xlabel("CP (ms), CI = 10 ms")
    ax.set_ylabel("extent size q (output records)")
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title("Fig. 9: extent size for different checkpoint periods", fontsize=10)
    return _save(fig, path)


def bars(left: Sequence[tuple[str, float]], right: Sequence[tuple[str, float]], path: Path,
         left_title: str, right_title: str, title: str) -> Path:
    """Two bar charts side by side (cec's bars blue, the others orange)."""
    fig, axes = plt.subplots(1, 2 if right else 1, figsize=(12 if right else 7, 4),
                             squeeze=False,
                             gridspec_kw={"width_ratios": [max(len(left), 1), max(len(right), 2)]
                                          if right else [1]})
    panels = [(axes[0][0], left, left_title)]
    if right:
        panels.append((axes[0][1], right, right_title))
    for ax, data, sub in panels:
        b = ax.bar(range(len(data)), [v for _, v in data],
                   color=["#4c72b0" if n.startswith("cec") else "#dd8452" for n, _ in data])
        for bar, (_, v) in zip(b, data, strict=True):
            ax.annotate(f"{v:,.2f}" if v < 100 else f"{v:,.0f}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(data)), [n for n, _ in data], fontsize=7)
        ax.set_title(sub, fontsize=9)
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)


def growth(series: dict[str, list[tuple[int, float]]], path: Path, title: str) -> Path:
    """Wall seconds against input rows, log-log, one line per system (cec blue)."""
    fig, ax = plt.subplots(figsize=(7, 4.6))
    colors = {"cec": "#4c72b0", "Spark": "#dd8452"}
    for name, points in series.items():
        if not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.plot(xs, ys, marker="o", label=name,
                color=colors.get(name.split(" ")[0], "#55a868"))
        for x, y in points:
            ax.annotate(f"{y:.1f} s", (x, y), textcoords="offset points", xytext=(4, -10),
                        fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("input rows")
    ax.set_ylabel("wall seconds, whole processes (median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=8, wrap=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, path)
