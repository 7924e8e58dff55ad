"""``cec export``: every result (``R``) of every partition as one CSV or parquet file.

Columns ``key, window_start, window_end, count, value``. For a count window the bounds
are the timestamps of its first and last tuple; for a time window its own bounds
(``[window_start, window_end)``). Control records (``G_open``, ``G_check``) are
dropped (a ``G_open+R`` row gives its ``R``). Rows are sorted by ``(key, window_start,
window_end, tau1)`` so two exports of equal results are equal byte for byte, however
the partitions interleaved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cec.errors import UsageError
from cec.pipeline.layout import RunLayout
from cec.records import RESULT_TYPES
from storage_log.log import StreamLog

COLUMNS = ("key", "window_start", "window_end", "count", "value")


def results_table(root: Path | str) -> pa.Table:
    """The sorted results of a run (see the module docstring)."""
    layout = RunLayout(Path(root))
    spec, settings = layout.read_run_file()
    count_window = spec.aggregate.window.kind == "count"
    key_type = pa.int64() if settings.key_type == "int64" else pa.string()
    parts: list[pa.Table] = []
    for p in range(spec.run.partitions):
        path = layout.output(p)
        if not path.exists():
            continue
        with StreamLog.open(path) as log:
            for batch in log.read_forward():
                if batch.num_rows == 0:
                    continue
                r = batch.filter(pc.is_in(batch.column("type"), pa.array(RESULT_TYPES, pa.int8())))
                if r.num_rows == 0:
                    continue
                start = r.column("first_ts" if count_window else "win_start")
                end = r.column("last_ts" if count_window else "win_end")
                parts.append(pa.table({
                    "key": r.column("key").cast(key_type),
                    "window_start": start,
                    "window_end": end,
                    "count": r.column("cnt"),
                    "value": r.column("value"),
                    "tau1": r.column("tau1"),
                }))
    if parts:
        table = pa.concat_tables(parts)
    else:
        table = pa.table({"key": pa.array([], key_type),
                          **{c: pa.array([], pa.int64()) for c in
                             ("window_start", "window_end", "count")},
                          "value": pa.array([], pa.float64()),
                          "tau1": pa.array([], pa.int64())})
    table = table.sort_by([("key", "ascending"), ("window_start", "ascending"),
                           ("window_end", "ascending"), ("tau1", "ascending")])
    return table.select(list(COLUMNS))


def export(root: Path | str, out: Path | str, fmt: str = "csv") -> dict[str, Any]:
    """Write the results of the run in ``root`` to ``out``; a summary."""
    if fmt not in ("csv", "parquet"):
        raise UsageError(f"--format: {fmt!r} is not one of csv|parquet")
    table = results_table(root)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    if fmt == "csv":
        pacsv.write_csv(table, tmp)
    else:
        pq.write_table(table, tmp)
    tmp.replace(out)
    return {"out": str(out), "format": fmt, "rows": table.num_rows,
            "keys": len(pc.unique(table.column("key"))) if table.num_rows else 0}
