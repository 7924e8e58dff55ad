"""``cec export``: every result (``R``) of every partition as one CSV or parquet file.

Columns ``key, window_start, window_end, count, value``. The bounds are timestamps:
``timestamp[us, tz=UTC]`` in parquet, ISO-8601 text (``2024-05-01T12:00:00.000000Z``)
in CSV (:func:`results_table` keeps them as int64 microseconds). **window_end differs
by window kind**, and the parquet file says which in its metadata (``cec.window_end``):

* a time window's bounds are its own, ``[window_start, window_end)``: the end is
  **exclusive**, as in Spark's ``window()``;
* a count window has no time extent of its own: its bounds are the timestamps of its
  first and last tuple, ``[window_start, window_end]``, both **inclusive** (an
  exclusive end would be a time no tuple has);
* a session window starts at its first tuple and ends at its last tuple plus the gap,
  ``[window_start, window_end)``, **exclusive**, as Spark's ``session_window()`` has it
  (a tuple at exactly ``window_end`` would have joined the session).

Control records (``G_open``, ``G_check``) are dropped (a ``G_open+R`` row gives its
``R``). Rows are sorted by ``(key, window_start, window_end, tau1)`` so two exports of
equal results are equal byte for byte, however the partitions interleaved.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cec.errors import UsageError
from cec.records import RESULT_TYPES
from cec_spark.report import ExportResult
from cec_spark.rundir.acks import ack_key, read_ack, write_ack
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file
from storage_log.log import StreamLog

COLUMNS = ("key", "window_start", "window_end", "count", "value")


TIMESTAMP = pa.timestamp("us", tz="UTC")


def window_end_kind(window_kind: str) -> str:
    """``inclusive`` (count windows: the last tuple's ts) or ``exclusive`` (time windows)."""
    return "inclusive" if window_kind == "count" else "exclusive"


def with_timestamps(table: pa.Table, *, iso: bool) -> pa.Table:
    """``table`` with its int64 microsecond bounds as ``timestamp[us, UTC]``, or as
    ISO-8601 text (``iso``)."""
    for col in ("window_start", "window_end"):
        i = table.column_names.index(col)
        ts = table.column(i).cast(TIMESTAMP)
        if iso:
            ts = pc.strftime(ts, format="%Y-%m-%dT%H:%M:%SZ")
        table = table.set_column(i, col, ts)
    return table


def results_table(root: Path | str) -> pa.Table:
    """The sorted results of a run (see the module docstring)."""
    return results_since(root)[0]


def results_since(root: Path | str, after: dict[str, int] | None = None
                  ) -> tuple[pa.Table, dict[str, int]]:
    """The sorted results with output seq after ``after[k]`` in the output log named
    ``k`` (:func:`cec_spark.rundir.acks.ack_key`; all when None), and each log's last
    output seq read. A rescaled run's results are those of every generation: each
    old generation's logs up to the end its successor recorded."""
    layout = RunLayout(Path(root))
    spec, settings = read_run_file(layout)
    count_window = spec.aggregate.window.kind == "count"
    key_type = pa.int64() if settings.key_type == "int64" else pa.string()
    parts: list[pa.Table] = []
    last: dict[str, int] = {}
    for gen, p, path, end in layout.output_logs(spec.run.partitions):
        name = ack_key(gen, p)
        since = -1 if after is None else after.get(name, -1)
        last[name] = since
        if not path.exists():
            continue
        with StreamLog.open(path) as log:
            if since >= 0 and log.first_seq is not None and since + 1 < log.first_seq:
                raise UsageError(f"{path}: the output after seq {since} that this consumer "
                                 f"has not acknowledged starts before the log's first "
                                 f"record {log.first_seq} (trimmed without its ack?)")
            upto = log.last_seq
            if end is not None and upto is not None:
                upto = end if end < upto else upto
                if upto < 0:
                    upto = None
            batches = log.read_forward(after_seq=since) if since >= 0 and upto is not None \
                else ([] if upto is None else log.read_forward())
            for raw in batches:
                if raw.num_rows and upto is not None and pc.min(raw.column("seq")).as_py() > upto:
                    break
                rows = result_rows(raw, count_window, key_type, upto)
                if rows is not None:
                    parts.append(rows)
            if upto is not None:
                last[name] = max(since, upto)
    if parts:
        table = pa.concat_tables(parts)
    else:
        table = pa.table({"key": pa.array([], key_type),
                          **{c: pa.array([], pa.int64()) for c in
                             ("window_start", "window_end", "count")},
                          "value": pa.array([], pa.float64()),
                          "tau1": pa.array([], pa.int64())})
    return sort_results(table).select(list(COLUMNS)), last


SORT_KEYS = [("key", "ascending"), ("window_start", "ascending"),
             ("window_end", "ascending"), ("tau1", "ascending")]


def sort_results(table: pa.Table) -> pa.Table:
    """``table`` ordered by key, window start, window end and ``tau1`` (ties).

    A partition's results come in the order its windows closed, which for one key is
    almost always that order already, and a key is in one partition only. So a stable
    sort by the key alone usually gives the whole order. It is taken when a check of
    every pair of neighbouring rows of one key confirms it. Otherwise (or for a
    non-numeric key) the full sort runs. That is 3 M results in ~0.3 s instead of
    ~1.6 s.
    """
    order = quick_order(table)
    return table.sort_by(SORT_KEYS) if order is None else table.take(pa.array(order))


def quick_order(table: pa.Table) -> np.ndarray | None:
    """The rows' order by a stable sort of the (integer, non-null) key alone, if that is
    the whole order (checked); else None."""
    if table.num_rows < 2 or not pa.types.is_integer(table.column("key").type) \
            or table.column("key").null_count:
        return None
    key = table.column("key").to_numpy()
    order = np.argsort(key, kind="stable")
    k = key[order]
    same = k[1:] == k[:-1]
    if same.any():
        ws, we, tau = (table.column(c).to_numpy()[order]
                       for c in ("window_start", "window_end", "tau1"))
        ordered = (ws[1:] > ws[:-1]) | ((ws[1:] == ws[:-1]) & (
            (we[1:] > we[:-1]) | ((we[1:] == we[:-1]) & (tau[1:] >= tau[:-1]))))
        if not bool(np.all(ordered | ~same)):
            return None
    return order


def result_rows(raw: pa.RecordBatch, count_window: bool, key_type: pa.DataType,
                upto: int | None) -> pa.Table | None:
    """The results (``R``, ``G_open+R``) among an output log's rows with seq up to
    ``upto`` (all when None), as ``key, window_start, window_end, count, value, tau1``
    (bounds int64 microseconds); None when there is none."""
    if raw.num_rows == 0:
        return None
    keep = pc.is_in(raw.column("type"), pa.array(RESULT_TYPES, pa.int8()))
    if upto is not None and pc.max(raw.column("seq")).as_py() > upto:  # committed since
        keep = pc.and_(keep, pc.less_equal(raw.column("seq"), upto))
    # the six columns taken before the rows are filtered: the record's other ten are
    # not copied (10 M results: 3.3 s of an export's 12 s went to filtering them)
    r = raw.select(["key", "first_ts" if count_window else "win_start",
                    "last_ts" if count_window else "win_end", "cnt", "value", "tau1"]
                   ).filter(keep)
    if r.num_rows == 0:
        return None
    return pa.table({
        "key": r.column("key").cast(key_type),
        "window_start": r.column("first_ts" if count_window else "win_start"),
        "window_end": r.column("last_ts" if count_window else "win_end"),
        "count": r.column("cnt"),
        "value": r.column("value"),
        "tau1": r.column("tau1"),
    })


def check_consumer(consumer: str) -> None:
    """A consumer's name: 1-64 letters, digits, '_', '.' or '-' (it names a file)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", consumer):
        raise UsageError(f"--consumer: {consumer!r} must be 1-64 letters, digits, '_', "
                         "'.' or '-'")


def export(root: Path | str, out: Path | str, fmt: str = "csv",
           consumer: str | None = None) -> ExportResult:
    """Write the results of the run in ``root`` to ``out``; a summary.

    With ``consumer`` only the results that consumer has not acknowledged yet are
    written, then acknowledged (``RUN/consumers/NAME.json``): output retention never
    deletes what a registered consumer has not acknowledged.
    """
    if fmt not in ("csv", "parquet"):
        raise UsageError(f"--format: {fmt!r} is not one of csv|parquet")
    if consumer is not None:
        check_consumer(consumer)
    layout = RunLayout(Path(root))
    after = None if consumer is None else read_ack(layout, consumer)
    table, last = results_since(root, after)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    end = window_end_kind(read_run_file(RunLayout(Path(root)))[0].aggregate.window.kind)
    written = with_timestamps(table, iso=fmt == "csv")
    if fmt == "csv":
        pacsv.write_csv(written, tmp)
    else:
        pq.write_table(written.replace_schema_metadata({"cec.window_end": end}), tmp)
    tmp.replace(out)
    if consumer is not None:  # the file is complete: acknowledge what it holds
        write_ack(layout, consumer, last)
    return ExportResult(out=str(out), format=fmt, rows=table.num_rows, consumer=consumer,
                        keys=len(pc.unique(table.column("key"))) if table.num_rows else 0,
                        window_end=end)
