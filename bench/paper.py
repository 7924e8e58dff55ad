"""The paper's evaluation (CEC, DSN 2011, §IV) on this machine: Figs. 5–9.

Every experiment reuses the benchmark modules next to it: the workload of
:mod:`bench.workload`, the operator configurations of :mod:`bench.operator_bench`, the
recovery experiment of :mod:`bench.recovery_bench` and the ``cec run pipeline`` runner
of :mod:`bench.pipeline_bench`. Each function returns plain dataclasses; the runner
(``python -m bench``) turns them into tables and plots.

* **Fig. 5, baseline impact** (:func:`fig5`): count windows of size 1 (``fast``) and
  1000 (``slow``) over 2 keys. Configurations, interleaved in every repetition: ``none``
  (no control records: the paper's native Borealis), ``Gopen/Net`` (``G_open`` produced
  and handed to the sink, not persisted), ``Gopen/Disk`` (the same output appended to a
  real :class:`~storage_log.log.StreamLog`, one commit per input batch, ``fsync`` as
  the pipeline's default) and, as an extra reference, ``none/Disk`` (the native output
  persisted the same way). The sink drops control rows and counts ``R`` rows; the
  "Real" rate is ``R + G_open`` rows per second of ``Gopen/Disk``. Ratios are taken
  between the configurations of one repetition and their median reported.
* **Figs. 6 and 7, Q and U** (:func:`fig67`): :func:`bench.recovery_bench.one` for
  every configuration of :func:`bench.recovery_bench.configs`, repeated; counts are
  deterministic (the cost-model clock), times are medians. EC-load = EC reconstruction
  (backward scan) + load into the operator.
* **Figs. 8 and 9, CP** (:func:`fig89`): 100 000 keys, count windows of 10, ``Q`` = 1×
  open windows, ``U`` unbounded, ``CI`` = 10 ms, ``CP`` ∈ {25, 50, 100, 250} ms, with
  mode ``none`` (no CEC, the paper's reference) and ``open-only`` (``G_open`` without
  ``G_check``: what remains is the cost of the checkpoints alone); the operator's
  budget reads the real clock (as in the paper), input runs at full speed in batches.
  Response time of a window = wall clock from the end of the batch that opened it to
  the end of the batch that closed it, for windows closing after the warm-up. The
  extent ``q`` is sampled at 16 points of the timed part.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench import operator_bench, recovery_bench
from bench.util import Log, _quiet, median
from bench.workload import DEFAULT_SEED
from cec.operator import VectorOperator
from cec.records import tuple_counts
from storage_log.log import StreamLog

# ----------------------------------------------------------------------------- Fig. 5

FIG5_CONFIGS = ("none", "Gopen/Net", "Gopen/Disk", "none/Disk")
_FIG5_MODE = {"none": "none", "Gopen/Net": "open-only", "Gopen/Disk": "open-only",
              "none/Disk": "none"}


@dataclass
class Fig5Run:
    workload: str
    config: str
    rep: int
    tuples: int
    wall_s: float
    cpu_s: float
    r_rows: int
    g_rows: int
    log_bytes: int

    @property
    def in_rate(self) -> float:
        return self.tuples / self.wall_s

    @property
    def r_rate(self) -> float:
        """R rows per second at the sink (control rows dropped): the paper's bars."""
        return self.r_rows / self.wall_s

    @property
    def real_rate(self) -> float:
        """All rows the receiver sees (R + control) per second: the paper's "Real"."""
        return (self.r_rows + self.g_rows) / self.wall_s


@dataclass
class Fig5Row:
    workload: str
    config: str
    reps: int
    tuples: int
    in_rate: float  # median input tuples/s
    r_rate: float  # median R rows/s at the sink
    real_rate: float  # median (R + G) rows/s
    cpu_rate: float  # median input tuples per CPU second
    vs_none: float  # median over reps of (this R rate / none R rate, same rep)
    log_bytes_per_tuple: float


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.suffix == ".seg")


def fig5_once(workload: str, config: str, batches: Sequence[pa.RecordBatch], work: Path,
              rep: int, fsync: str = "always", passes: int = 1) -> Fig5Run:
    """One configuration over ``batches``; ``passes`` > 1 runs it that many times with a
    fresh operator (and log) each and sums, so that short in-memory runs are timed over
    a longer interval."""
    w = operator_bench.WORKLOADS[workload]
    disk = config.endswith("/Disk")
    r_rows = g_rows = nbytes = 0
    wall = cpu = 0.0
    for k in range(passes):
        op = VectorOperator(operator_bench.config(w, _FIG5_MODE[config]))
        log_dir = work / f"fig5-{workload}-{config.replace('/', '-')}-{rep}-{k}"
        log = StreamLog.open(log_dir, writable=True, create=True, fsync=fsync) if disk else None
        t0, c0 = time.perf_counter(), time.process_time()
        for b in batches:
            out = op.process(b)
            if log is not None:
                log.append(out)
                log.commit()
            n_r, n_open, n_check = tuple_counts(out.column("type").to_numpy())  # the sink
            r_rows += n_r
            g_rows += n_open + n_check
        if log is not None:
            log.close()
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        if disk:
            nbytes += _dir_bytes(log_dir)
            shutil.rmtree(log_dir, ignore_errors=True)
    return Fig5Run(workload, config, rep, passes * sum(b.num_rows for b in batches), wall, cpu,
                   r_rows, g_rows, nbytes)


def fig5(*, tuples: int, batch: int, reps: int, work: Path, fsync: str = "always",
         mem_passes: int = 1, workloads: Sequence[str] = ("fast", "slow"), log: Log = _quiet
         ) -> tuple[list[Fig5Row], list[Fig5Run]]:
    rows: list[Fig5Row] = []
    runs: list[Fig5Run] = []
    for name in workloads:
        w = operator_bench.WORKLOADS[name]
        batches = operator_bench.make_batches(w, tuples, batch)
        fig5_once(name, "Gopen/Disk", batches[:2], work, -1, fsync)  # warm imports, caches
        mine: list[Fig5Run] = []
        for rep in range(reps):
            for config in FIG5_CONFIGS:  # interleaved: load drift hits every config alike
                passes = 1 if config.endswith("/Disk") else mem_passes
                r = fig5_once(name, config, batches, work, rep, fsync, passes)
                mine.append(r)
                log(f"fig5 {name} {config} rep {rep}: {r.in_rate / 1e6:.2f} M tuples/s, "
                    f"{r.r_rate / 1e6:.3f} M R/s")
        runs += mine
        by = {(r.config, r.rep): r for r in mine}
        for config in FIG5_CONFIGS:
            rs = [by[config, i] for i in range(reps)]
            rows.append(Fig5Row(
                workload=name, config=config, reps=reps, tuples=tuples,
                in_rate=median([r.in_rate for r in rs]),
                r_rate=median([r.r_rate for r in rs]),
                real_rate=median([r.real_rate for r in rs]),
                cpu_rate=median([r.tuples / r.cpu_s for r in rs]),
                vs_none=median([by[config, i].r_rate / by["none", i].r_rate
                                for i in range(reps)]),
                log_bytes_per_tuple=median([r.log_bytes / r.tuples for r in rs]),
            ))
    return rows, runs


def fig5_ratios(rows: Sequence[Fig5Row], runs: Sequence[Fig5Run]) -> dict[str, dict[str, float]]:
    """Per workload, median over repetitions of the paper's comparisons (same rep)."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r.workload for r in rows):
        by = {(r.config, r.rep): r for r in runs if r.workload == name and r.rep >= 0}
        reps = sorted({rep for _, rep in by})

        def ratio(a: str, b: str, by: dict[tuple[str, int], Fig5Run] = by,
                  reps: list[int] = reps) -> float:
            return median([by[a, i].r_rate / by[b, i].r_rate for i in reps])

        out[name] = {
            "net_vs_none": ratio("Gopen/Net", "none"),
            "disk_vs_none": ratio("Gopen/Disk", "none"),
            "disk_vs_net": ratio("Gopen/Disk", "Gopen/Net"),
            "disk_vs_none_disk": ratio("Gopen/Disk", "none/Disk"),
            "real_vs_data": median([by["Gopen/Disk", i].real_rate / by["Gopen/Disk", i].r_rate
                                    for i in reps]),
        }
    return out


# ------------------------------------------------------------------------ Figs. 6, 7


@dataclass
class Fig67Row:
    experiment: str  # "Q" or "U"
    target: str
    reps: int
    g_check: int
    n_c: int
    extent: int
    ec_load_s: float  # median of scan (EC reconstruction) + load
    ec_load_cpu_s: float  # median of scan CPU + load
    replay_tuples: int
    replay_bytes: int
    replay_s: float
    total_s: float
    verified: bool
    deterministic: bool  # G_check, extent and replay the same in every repetition


FIG5_PIPELINE_MODES = ("none", "open-only")


def _fig5_pipeline_spec(tuples: int, size: int, mode: str) -> str:
    """The paper's Fig. 5 workload as a pipeline: generator, 2 keys, one operator."""
    return f"""
[source]
kind = "generator"
rows = {tuples}
keys = 2
seed = {DEFAULT_SEED}

[aggregate]
group_by = "item_id"
field = "item_price"
function = "avg"
window = {{ kind = "count", size = {size} }}

[checkpoint]
mode = "{mode}"

[run]
partitions = 1
"""


@dataclass
class Fig5PipelineRow:
    workload: str  # fast | slow
    mode: str  # none | open-only
    tuples: int
    reps: int
    rows_per_s: float  # source rows / wall of the run (median)
    r_per_s: float  # R rows at the sink (the output log) per second (median)
    real_per_s: float  # R + G_open rows per second (median)
    vs_none: float  # median over reps of this R rate ÷ none's R rate in the same rep


def fig5_pipeline(*, tuples: int, reps: int, work: Path, log: Log = _quiet
                  ) -> list[Fig5PipelineRow]:
    """Fig. 5 where the paper measured it: at the sink of the whole pipeline.

    ``cec run pipeline`` on the generator (2 keys, count windows of 1 and 1000, one
    key partition: one operator, as in the paper), mode ``none`` against ``open-only``
    (G_open persisted with every R, fsync'ed), all in one warm session (a first,
    discarded run warms it), configurations interleaved in every repetition (in
    reverse order every other one). The sink rate is R rows written to the output log
    per second of the run.
    """
    from bench.pipeline_bench import run_cec_specs

    sizes = {"fast": 1, "slow": 1000}
    plan = [("warm-up", _fig5_pipeline_spec(min(tuples, 200_000), 1, "open-only"))]
    keys = []
    for rep in range(reps):
        for workload, size in sizes.items():
            # ABBA: odd repetitions run the modes in reverse, so that a drift or the
            # position after another workload's run favours neither
            for mode in FIG5_PIPELINE_MODES[:: -1 if rep % 2 else 1]:
                plan.append((f"fig5-{workload}-{mode}", _fig5_pipeline_spec(tuples, size, mode)))
                keys.append((rep, workload, mode))
    runs = run_cec_specs(plan, work)[1:]
    by: dict[tuple[int, str, str], dict[str, Any]] = {}
    for key, r in zip(keys, runs, strict=True):
        shutil.rmtree(r["log_dir"], ignore_errors=True)
        by[key] = r
        log(f"fig5 pipeline rep {key[0]} {key[1]} {key[2]}: {r['rows_per_s']:,.0f} rows/s")
    def r_rate(rep: int, workload: str, mode: str) -> float:  # R rows at the sink per s
        r = by[(rep, workload, mode)]
        return float(r["results"]) / float(r["wall_s"])

    rows = []
    for workload in sizes:
        for mode in FIG5_PIPELINE_MODES:
            mine = [by[(rep, workload, mode)] for rep in range(reps)]
            rows.append(Fig5PipelineRow(
                workload, mode, tuples, reps, median([r["rows_per_s"] for r in mine]),
                median([r_rate(rep, workload, mode) for rep in range(reps)]),
                median([(r["results"] + r["g_open"]) / r["wall_s"] for r in mine]),
                median([r_rate(rep, workload, mode) / r_rate(rep, workload, "none")
                        for rep in range(reps)])))
    return rows


def fig67(*, keys: int, tuples: int, reps: int, work: Path, log: Log = _quiet,
          only: str | None = None) -> tuple[recovery_bench.Setup, list[Fig67Row],
                                            list[recovery_bench.Result]]:
    setup = recovery_bench.Setup(keys=keys, tuples=tuples, window=10, batch=1000,
                                 batch_ms=10.0, row_us=1.0, seed=DEFAULT_SEED,
                                 u_scale=keys / 100_000)
    wdir = Path(tempfile.mkdtemp(prefix="fig67-", dir=work))
    rows: list[Fig67Row] = []
    allres: list[recovery_bench.Result] = []
    try:
        recovery_bench.write_upstream(setup, wdir / "up")
        cfgs = [c for c in recovery_bench.configs(setup) if only is None or c[0] == only]
        per: dict[tuple[str, str], list[recovery_bench.Result]] = {}
        for _ in range(reps):
            for experiment, target, policy in cfgs:
                r = recovery_bench.one(setup, experiment, target, policy, wdir)
                per.setdefault((experiment, target), []).append(r)
                allres.append(r)
                log(f"fig{'6' if experiment == 'Q' else '7'} {experiment}={target}: "
                    f"G_check {r.g_check:,}, extent {r.extent:,}, "
                    f"EC-load {r.scan_s + r.load_s:.3f} s")
        for experiment, target, _ in cfgs:
            rs = per[experiment, target]
            first = rs[0]
            same = all((r.g_check, r.extent, r.replay_tuples)
                       == (first.g_check, first.extent, first.replay_tuples) for r in rs)
            rows.append(Fig67Row(
                experiment=experiment, target=target, reps=len(rs), g_check=first.g_check,
                n_c=first.n_c, extent=first.extent,
                ec_load_s=median([r.scan_s + r.load_s for r in rs]),
                ec_load_cpu_s=median([r.scan_cpu + r.load_s for r in rs]),
                replay_tuples=first.replay_tuples, replay_bytes=first.replay_bytes,
                replay_s=median([r.replay_s for r in rs]),
                total_s=median([r.total_s for r in rs]),
                verified=all(r.verified for r in rs), deterministic=same,
            ))
    finally:
        shutil.rmtree(wdir, ignore_errors=True)
    return setup, rows, allres


# Figs. 8 and 9 live in bench/paper_cp.py; their names stay importable from here.
from bench.paper_cp import (  # noqa: E402
    CI_MS,
    CP_VALUES,
    NO_CEC,
    OPEN_ONLY,
    Fig89Row,
    Fig89Run,
    cp_batches,
    cp_label,
    cp_policy,
    fig89,
    fig89_once,
)

__all__ = ["CI_MS", "CP_VALUES", "NO_CEC", "OPEN_ONLY", "Fig89Row", "Fig89Run", "cp_batches",
           "cp_label", "cp_policy", "fig89", "fig89_once"]
