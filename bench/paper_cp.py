"""Figs. 8 and 9 of the paper (CEC, DSN 2011, §IV): the effect of the checkpoint period CP
on response time and on the extent (see :mod:`bench.paper`'s docstring for the method)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from bench import recovery_bench
from bench.util import Log, _quiet, median
from bench.workload import WorkloadSpec, generate_columns
from cec.operator import OperatorConfig, VectorOperator
from cec.policy import PolicyConfig
from cec.records import RESULT_TYPES
from cec.windows import CountWindow

# ------------------------------------------------------------------------ Figs. 8, 9

CP_VALUES = (25.0, 50.0, 100.0, 250.0)
CI_MS = 10.0


NO_CEC = "no CEC"
OPEN_ONLY = "G_open only"


def cp_label(cp_ms: float) -> str:
    return f"CP {cp_ms:g} ms"


@dataclass
class Fig89Run:
    config: str  # NO_CEC (mode none), OPEN_ONLY (mode open-only) or cp_label(cp_ms)
    cp_ms: float | None  # None unless mode targets
    rep: int
    tuples: int
    wall_s: float
    windows: int  # windows closed in the timed part
    response_mean_s: float
    response_median_s: float
    g_check: int  # in the timed part
    g_check_warm: int  # in the warm-up (the first, unlimited step usually falls there)
    extent_mean: float  # q sampled over the timed part
    extent_end: int
    series: list[tuple[float, float]] = field(default_factory=list)  # (t s, mean resp s)


@dataclass
class Fig89Row:
    config: str
    cp_ms: float | None
    reps: int
    response_mean_s: float
    response_median_s: float
    vs_none: float  # median over reps of response / no-CEC response of the same rep
    vs_open: float  # the same against G_open only (the cost of G_check alone)
    throughput: float
    g_check: int
    extent_mean: float
    extent_end: float


def cp_batches(keys: int, tuples: int, batch: int) -> list[pa.RecordBatch]:
    cols = generate_columns(WorkloadSpec(n_rows=tuples, n_keys=keys))
    table = pa.table({"ts": cols["item_time"], "seq": np.arange(tuples, dtype=np.int64),
                      "item_id": cols["item_id"], "item_price": cols["item_price"]})
    batches: list[pa.RecordBatch] = table.to_batches(max_chunksize=batch)
    return batches


def cp_policy(config: str, cp_ms: float | None) -> PolicyConfig:
    if config == NO_CEC:
        return PolicyConfig(mode="none")
    if config == OPEN_ONLY:
        return PolicyConfig(mode="open-only")
    assert cp_ms is not None
    return PolicyConfig(mode="targets", q="1x", u=recovery_bench.UNBOUNDED, ci_ms=CI_MS,
                        cp_ms=cp_ms)


def fig89_once(config: str, cp_ms: float | None, batches: Sequence[pa.RecordBatch],
               warm: int, rep: int, bins: int = 20) -> Fig89Run:
    op = VectorOperator(OperatorConfig(
        window=CountWindow(10, 10), function="avg", key_column="item_id",
        value_column="item_price", policy=cp_policy(config, cp_ms), clock=time.monotonic))
    n = len(batches)
    size = batches[0].num_rows
    ends = np.empty(n, dtype=np.float64)  # wall clock at the end of each batch
    sample_at = set(np.linspace(warm, n - 1, 16).astype(int).tolist()) if n > warm else set()
    extents: list[int] = []
    closes: list[tuple[np.ndarray, np.ndarray]] = []  # (tau1 of R rows, batch index)
    g_check = g_check_warm = 0
    t0 = time.perf_counter()
    t_warm = t0
    for i, b in enumerate(batches):
        out = op.process(b)
        ends[i] = time.perf_counter()
        if i == warm:
            t_warm = ends[i - 1] if i else t0
        if i < warm:
            g_check_warm += int(np.count_nonzero(out.column("type").to_numpy() == 3))
        else:
            typ = out.column("type").to_numpy()
            is_r = np.isin(typ, RESULT_TYPES)
            if is_r.any():
                closes.append((out.column("tau1").to_numpy()[is_r], np.full(is_r.sum(), i)))
            g_check += int(np.count_nonzero(typ == 3))
            if i in sample_at:
                extents.append(op.q)
    tau1 = np.concatenate([c[0] for c in closes]) if closes else np.empty(0, np.int64)
    closed_in = np.concatenate([c[1] for c in closes]) if closes else np.empty(0, np.int64)
    opened_in = (tau1 - int(batches[0].column("seq")[0].as_py())) // size
    resp = ends[closed_in] - ends[opened_in]
    series: list[tuple[float, float]] = []
    if len(resp):
        t_close = ends[closed_in] - t_warm
        edges = np.linspace(0.0, float(t_close.max()) + 1e-9, bins + 1)
        which = np.clip(np.searchsorted(edges, t_close, side="right") - 1, 0, bins - 1)
        for k in range(bins):
            m = which == k
            if m.any():
                series.append((float((edges[k] + edges[k + 1]) / 2), float(resp[m].mean())))
    tuples = sum(b.num_rows for b in batches[warm:])
    return Fig89Run(
        config=config, cp_ms=cp_ms, rep=rep, tuples=tuples, wall_s=float(ends[-1] - t_warm),
        windows=len(resp),
        response_mean_s=float(resp.mean()) if len(resp) else float("nan"),
        response_median_s=float(np.median(resp)) if len(resp) else float("nan"),
        g_check=g_check, g_check_warm=g_check_warm,
        extent_mean=float(np.mean(extents)) if extents else 0.0,
        extent_end=op.q, series=series,
    )


def fig89(*, keys: int, warm: int, tuples: int, batch: int, reps: int,
          cps: Sequence[float] = CP_VALUES, log: Log = _quiet
          ) -> tuple[list[Fig89Row], list[Fig89Run]]:
    batches = cp_batches(keys, warm + tuples, batch)
    n_warm = warm // batch
    configs: list[tuple[str, float | None]] = [(NO_CEC, None), (OPEN_ONLY, None)]
    configs += [(cp_label(cp), cp) for cp in cps]
    runs: list[Fig89Run] = []
    for rep in range(reps):
        for config, cp in configs:  # interleaved
            r = fig89_once(config, cp, batches, n_warm, rep)
            runs.append(r)
            log(f"fig8 {config} rep {rep}: response {r.response_mean_s:.3f} s, "
                f"extent {r.extent_mean:,.0f}, G_check {r.g_check:,}")
    by = {(r.config, r.rep): r for r in runs}

    def ratio(config: str, base: str) -> float:
        return median([by[config, i].response_mean_s / by[base, i].response_mean_s
                       for i in range(reps)])

    rows = []
    for config, cp in configs:
        rs = [by[config, i] for i in range(reps)]
        rows.append(Fig89Row(
            config=config, cp_ms=cp, reps=reps,
            response_mean_s=median([r.response_mean_s for r in rs]),
            response_median_s=median([r.response_median_s for r in rs]),
            vs_none=ratio(config, NO_CEC), vs_open=ratio(config, OPEN_ONLY),
            throughput=median([r.tuples / r.wall_s for r in rs]),
            g_check=int(median([r.g_check for r in rs])),
            extent_mean=median([r.extent_mean for r in rs]),
            extent_end=median([r.extent_end for r in rs]),
        ))
    return rows, runs
