"""Prometheus metrics of a run, as a text file the node exporter's textfile collector reads.

While a run or a resume goes, the driver rewrites ``RUN/metrics/cec.prom`` every
:data:`EVERY_S` seconds and once at the end (written aside, then renamed: a scrape never
sees half a file). Point the collector at the directory
(``node_exporter --collector.textfile.directory=RUN/metrics``) or copy the file. Every
series carries ``run`` (the run directory) and, per partition, ``partition``. Counters
are totals since the run started (Prometheus derives rates); gauges are as of the last
refresh:

========================================  =======  =========================================
metric                                    type     meaning
========================================  =======  =========================================
``cec_input_tuples_total``                counter  tuples the operator consumed
``cec_results_total``                     counter  results (R) written to the output log
``cec_g_open_total``                      counter  G_open footprints written
``cec_g_check_total``                     counter  G_check footprints written
``cec_open_windows``                      gauge    open windows N
``cec_extent_records``                    gauge    the eventual checkpoint's extent q
``cec_replay_length``                     gauge    replay length u (input positions)
``cec_upstream_committed_seq``            gauge    last committed position of the upstream log
``cec_recovery_seconds``                  gauge    the last recovery's measured time (if any)
``cec_partition_done``                    gauge    1 when the partition's input ended
``cec_predicted_recovery_seconds``        gauge    predicted recovery time (cec_spark.run.rto)
``cec_recovery_objective_seconds``        gauge    ``[checkpoint].rto`` (absent without one)
``cec_ingest_watermark_seconds``          gauge    the ingest's watermark W (event time, seconds
                                                   since the epoch): every row with ts < W is in
                                                   the partition's upstream log (its last token)
``cec_operator_watermark_seconds``        gauge    the event time the partition's operator
                                                   reached (the last W it applied or its last
                                                   tuple's time): its time windows ending at or
                                                   before it are closed (the ingest's minus
                                                   this: how far the operator is behind)
``cec_late_rows_total``                   counter  late rows dropped ([source] late = "drop")
``cec_source_rows_total``                 counter  source rows ingested
``cec_ingest_sealed``                     gauge    1 when the bounded source is all ingested
``cec_up_seconds``                        gauge    seconds since this driver started
========================================  =======  =========================================
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

EVERY_S = 2.0
FILE = "cec.prom"

_PARTITION = (
    ("cec_input_tuples_total", "counter", "in_tuples", "tuples the operator consumed"),
    ("cec_results_total", "counter", "r", "results (R) written to the output log"),
    ("cec_g_open_total", "counter", "g_open", "G_open footprints written"),
    ("cec_g_check_total", "counter", "g_check", "G_check footprints written"),
    ("cec_open_windows", "gauge", "n_open", "open windows N"),
    ("cec_extent_records", "gauge", "q", "the eventual checkpoint's extent q (records)"),
    ("cec_replay_length", "gauge", "u", "replay length u (input positions)"),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _recovery_s(state: Mapping[str, Any]) -> float | None:
    rec = state.get("recovered")
    if not isinstance(rec, Mapping):
        return None
    phases = rec.get("phases")
    if not isinstance(phases, list):
        return None
    times = [float(ph["measured_s"]) for ph in phases
             if isinstance(ph, Mapping) and isinstance(ph.get("measured_s"), int | float)]
    return sum(times) if times else None


def _rto(state: Mapping[str, Any], key: str) -> float | None:
    info = state.get("rto")
    v = info.get(key) if isinstance(info, Mapping) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _event_seconds(us: int) -> str:
    """Event time ``us`` (µs) as seconds since the epoch, every digit kept (``:g``
    would round a 2026 time to ten seconds)."""
    sign, us = ("-" if us < 0 else ""), abs(us)
    return f"{sign}{us // 1_000_000}.{us % 1_000_000:06d}"


def _watermark(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def exposition(run: str, states: Sequence[Mapping[str, Any]],
               upstream: Sequence[int | None], *, source_rows: int, sealed: bool,
               up_s: float, late: Sequence[int | None] = (), standbys_ready: int = 0,
               watermarks: Sequence[int | None] = (),
               operators: Sequence[int | None] | None = None) -> str:
    """The Prometheus text format (0.0.4) of a run's state (pure: no I/O).
    ``watermarks``: each partition's ingest watermark (its upstream log's last token's
    ``wm``, µs); ``operators``: the event time each operator reached
    (:func:`cec_spark.report.watermark.reached`; None: its state's ``watermark_us``)."""
    r = _label(run)
    lines: list[str] = []

    def family(name: str, kind: str, about: str, rows: list[tuple[str, float]],
               text: Callable[[float], str] = "{:g}".format) -> None:
        lines.append(f"# HELP {name} {about}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{{{labels}}} {text(value)}" for labels, value in rows)

    def per_partition(value_of: Any) -> list[tuple[str, float]]:
        rows = []
        for p, st in enumerate(states):
            v = value_of(p, st)
            if v is not None:
                rows.append((f'run="{r}",partition="{p}"', float(v)))
        return rows

    for name, kind, key, about in _PARTITION:
        family(name, kind, about, per_partition(
            lambda _p, st, key=key: int(st.get(key) or 0) if st else None))
    family("cec_upstream_committed_seq", "gauge",
           "last committed position of the partition's upstream log",
           per_partition(lambda p, _st: upstream[p] if p < len(upstream) else None))
    family("cec_recovery_seconds", "gauge", "the last recovery's measured time",
           per_partition(lambda _p, st: _recovery_s(st)))
    family("cec_partition_done", "gauge", "1 when the partition's input ended",
           per_partition(lambda _p, st: (1 if st.get("done") else 0) if st else None))
    family("cec_predicted_recovery_seconds", "gauge",
           "predicted recovery time: fixed + extent / EC-load rate + replay / replay rate",
           per_partition(lambda _p, st: _rto(st, "predicted_s")))
    objective = next((v for v in (_rto(st, "objective_s") for st in states) if v), None)
    if objective is not None:
        family("cec_recovery_objective_seconds", "gauge", "the recovery-time objective",
               [(f'run="{r}"', objective)])
    family("cec_standbys_ready", "gauge", "warm standbys ready to take the run over "
           "(cec standby)", [(f'run="{r}"', standbys_ready)])
    family("cec_ingest_watermark_seconds", "gauge", "the ingest's watermark W, event "
           "time: every row with ts < W is in the partition's upstream log",
           per_partition(lambda p, _st: _watermark(watermarks[p]) if p < len(watermarks)
                         else None), text=lambda v: _event_seconds(int(v)))
    def operator(p: int, st: Mapping[str, Any]) -> int | None:
        if operators is not None:
            return _watermark(operators[p]) if p < len(operators) else None
        return _watermark(st.get("watermark_us")) if st else None

    family("cec_operator_watermark_seconds", "gauge", "the event time the partition's "
           "operator reached (the last watermark it applied or its last tuple's time): "
           "its windows ending at or before it are closed", per_partition(operator),
           text=lambda v: _event_seconds(int(v)))
    family("cec_late_rows_total", "counter", "late rows dropped (committed with the "
           "partition's upstream log)",
           per_partition(lambda p, _st: late[p] if p < len(late) else None))
    family("cec_source_rows_total", "counter", "source rows ingested",
           [(f'run="{r}"', float(source_rows))])
    family("cec_ingest_sealed", "gauge", "1 when the bounded source is all ingested",
           [(f'run="{r}"', 1.0 if sealed else 0.0)])
    family("cec_up_seconds", "gauge", "seconds since this driver started",
           [(f'run="{r}"', round(up_s, 3))])
    return "\n".join(lines) + "\n"


def write(directory: Path, text: str, still_ours: Callable[[], bool] | None = None) -> None:
    """``directory/cec.prom``, replaced atomically; a failure is not the run's problem.
    ``still_ours``: asked right before the replace (the last moment): False, nothing is
    written (a driver superseded while it made the text, e.g. frozen and woken)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{FILE}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        if still_ours is not None and not still_ours():
            tmp.unlink(missing_ok=True)
            return
        os.replace(tmp, directory / FILE)
    except OSError:
        pass  # metrics are advisory: a full disk must not stop the pipeline here
