"""What the progress view shows: its table, its plain line, and their numbers and times.

Pure text from what the view read (:mod:`cec_spark.driver.progress` looks; this module
reads no file): the live table (:func:`progress_table`: a row a partition,
:func:`partition_row`, under :func:`title_text`), the plain line for a pipe
(:func:`plain_line`, with :func:`plain_watermark`), the watermark column
(:func:`watermark_cell`) and the compact numbers (:func:`compact`: 950, 12.3k, 4.56M).
"""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from cec_spark.ingest.query import IngestProgress
from cec_spark.report.watermark import behind_s, duration, event_time
from cec_spark.rundir.drivers import StandbyView

COLUMNS = ("partition", "upstream seq", "tuples", "tuples/s", "N open", "extent q",
           "replay u", "G_check/s", "R", "recovery s", "watermark", "state")


def progress_table(title: str, notes: list[str], rows: list[tuple[str, ...]]) -> Table:
    """The live table: ``rows`` (:func:`partition_row`) under ``title``
    (:func:`title_text`), the notes said so far as its caption."""
    table = Table(title=title, title_justify="left",
                  caption=" · ".join(notes) or None)
    for col in COLUMNS:
        table.add_column(col, justify="right" if col != "state" else "left")
    for row in rows:
        table.add_row(*row)
    return table


def title_text(root: object, elapsed: float, ing: IngestProgress,
               states: list[dict[str, Any]], late: int, standby: str) -> str:
    """The table's title: the run, the time, the ingest, the late rows dropped, the
    recovery-time objective (a task's state file says it) and the standbys."""
    total = f"/{ing.chunks_total}" if ing.chunks_total is not None else ""
    objective = next((st["rto"].get("objective_s") for st in states
                      if isinstance(st.get("rto"), dict)
                      and st["rto"].get("objective_s")), None)
    return (f"cec {root}  {elapsed:6.1f}s  ingest: chunk {ing.chunks_done}"
            f"{total}, {ing.source_rows:,} source rows"
            f"{f', {late:,} late rows dropped' if late else ''}"
            f"{', sealed' if ing.sealed else ''}"
            f"{f'  rto {objective:g} s' if objective else ''}"
            f"{standby}")


def partition_row(p: int, st: dict[str, Any], up: int | None, rates: tuple[float, float],
                  ingest_us: int | None, operator_us: int | None) -> tuple[str, ...]:
    """Partition ``p``'s row: its state file ``st``, its upstream log's committed end
    ``up``, its (tuples/s, G_check/s) and its watermarks."""
    tuples = int(st.get("in_tuples", 0))
    rate, crate = rates
    state = "done" if st.get("done") else ("recovered" if st.get("recovered")
                                           else ("running" if st else "starting"))
    info = st.get("rto") if isinstance(st.get("rto"), dict) else {}
    pred = info.get("predicted_s") if info else None
    return (str(p), "-" if up is None else compact(up), compact(tuples),
            compact(rate), compact(int(st.get("n_open", 0))),
            compact(int(st.get("q", 0))), compact(int(st.get("u", 0))),
            compact(crate), compact(int(st.get("r", 0))),
            "-" if pred is None else f"{pred:.1f}",
            watermark_cell(ingest_us, operator_us), state)


def standby_words(ready: int, view: StandbyView) -> str:
    """The title's standby part: how many are ready, hot, how far behind."""
    if not ready:
        return ""
    hot = "" if not view.hot else (
        f", hot, {view.behind:,} records behind" if view.behind else ", hot")
    return f"  standby ready ({ready}{hot})"


def plain_line(elapsed: float, ing: IngestProgress, partitions: int,
               states: list[dict[str, Any]], late: int, marks: str) -> str:
    """One line for a pipe: elapsed, ingest, and the partitions' totals."""
    total = f"/{ing.chunks_total}" if ing.chunks_total is not None else ""
    done = sum(1 for st in states if st.get("done"))
    running = sum(1 for st in states if st and not st.get("done"))
    tuples = sum(int(st.get("in_tuples", 0)) for st in states)
    results = sum(int(st.get("r", 0)) for st in states)
    return (f"cec: {elapsed:.0f} s  ingest chunk {ing.chunks_done}"
            f"{total}, {ing.source_rows:,} source rows{', sealed' if ing.sealed else ''}  "
            f"partitions: {running} running, {done} done of {partitions}  "
            f"tuples {tuples:,}  results {results:,}"
            f"{f'  late rows dropped {late:,}' if late else ''}{marks}")


def watermark_cell(ingest_us: int | None, operator_us: int | None) -> str:
    """The table's watermark column: the ingest's W as a time of day (UTC) and, when
    the operator's is behind it, by how much: ``05:07:24.100, op 0.2 s behind``."""
    if ingest_us is None:
        return "-" if operator_us is None else f"op {event_time(operator_us, date=False)}"
    lag = behind_s(ingest_us, operator_us)
    text = event_time(ingest_us, date=False)
    if operator_us is None:
        return f"{text}, op none"
    return f"{text}, op {duration(lag)} behind" if lag else text


def plain_watermark(ingest: list[int | None], operator: list[int | None]) -> str:
    """The plain line's watermark part: the least ingest watermark over the partitions
    (the partition whose windows wait longest) and the largest operator lag; empty when
    no partition has one."""
    known = [(w, p) for p, w in enumerate(ingest) if w is not None]
    if not known:
        return ""
    least, p = min(known)
    lags = [lag for lag in (behind_s(i, o) for i, o in zip(ingest, operator, strict=False))
            if lag is not None]
    text = f"  watermark {event_time(least)}"
    if len(ingest) > 1:
        text += f" (ingest, least: partition {p})"
    else:
        text += " (ingest)"
    if lags and max(lags) > 0:
        text += f", operators up to {duration(max(lags))} behind"
    elif lags:
        text += ", operators caught up"
    return text


UNITS = ("", "k", "M", "G", "T", "P", "E")


def _fixed(x: float) -> str:
    """``x`` (>= 0) to 3 significant digits and at most 2 decimals, trailing zeros cut."""
    text = f"{x:.{2 if x < 10 else 1 if x < 100 else 0}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def compact(n: float) -> str:
    """A count or rate in 3 significant digits and a unit: 950, 0.25, 12.3k, 4.56M, 1.5G.

    The value is rounded first and the unit chosen after, so that 999_999 is ``1M``
    (not ``1e+03k``); beyond the largest unit (E, 10^18) the digits grow: ``1,500E``."""
    if not math.isfinite(n):
        return str(n)
    sign, size = ("-" if n < 0 else ""), abs(n)
    for power, unit in enumerate(UNITS):
        scaled = size / 1000**power
        text = _fixed(scaled)
        if float(text) < 1000:
            return "0" if text == "0" else f"{sign}{text}{unit}"
    return f"{sign}{size / 1000 ** (len(UNITS) - 1):,.0f}{UNITS[-1]}"
