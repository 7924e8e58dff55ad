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

**Bounded memory.** The export reads the output logs once, sorting what it reads in
runs spilled beside the output file and merged as the file is written
(:mod:`cec_spark.read.sorted_runs`): a few hundred MB whatever the number of results.
The file is the one a sort of every result in memory wrote: the CSV or parquet writer
gets the rows a table at a time, parquet's row groups cut at :data:`ROW_GROUP_ROWS`
rows as ``pyarrow.parquet.write_table`` cuts them. :func:`results_table` and
:func:`results_since` hold every result (a table in memory), for small runs and tests.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cec.errors import UsageError
from cec.records import RESULT_TYPES
from cec_spark.read.sorted_runs import SORT_ROWS, InFlight, SortedRuns, sort_results
from cec_spark.report import ExportResult
from cec_spark.rundir.acks import ack_key, read_ack, write_ack
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file
from storage_log.epoch import list_epochs
from storage_log.log import StreamLog

if TYPE_CHECKING:
    from cec.spec import PipelineSpec
    from cec_spark.rundir.run_file import RunSettings

    #: a run's run.toml as read_run_file gives it
    RunFile = tuple[PipelineSpec, RunSettings]

#: the record types whose rows are results. Made from a buffer: ``pa.array`` of a list
#: (or of a numpy array) imports pandas, to ask whether it is a pandas object, and `cec
#: run pipeline --out` imports this module before it launches the JVM: that launch came
#: 0.4-0.7 s later (pandas is imported later all the same, by pyarrow's first
#: ``to_numpy``, while the JVM starts)
_RESULT_TYPES = pa.Array.from_buffers(pa.int8(), len(RESULT_TYPES),
                                      [None, pa.py_buffer(bytes(RESULT_TYPES))])

COLUMNS = ("key", "window_start", "window_end", "count", "value")


TIMESTAMP = pa.timestamp("us", tz="UTC")
ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
ROW_GROUP_ROWS = 1 << 20
"""Rows of a parquet row group: ``pyarrow.parquet.write_table``'s default cut."""
_YEAR_10000 = 253_402_300_800_000_000  # µs since 1970 of 10000-01-01


def window_end_kind(window_kind: str) -> str:
    """``inclusive`` (count windows: the last tuple's ts) or ``exclusive`` (time windows)."""
    return "inclusive" if window_kind == "count" else "exclusive"


def with_timestamps(table: pa.Table, *, iso: bool) -> pa.Table:
    """``table`` with its int64 microsecond bounds as ``timestamp[us, UTC]``, or as
    ISO-8601 text (``iso``)."""
    for col in ("window_start", "window_end"):
        i = table.column_names.index(col)
        ts = iso_text(table.column(i)) if iso else table.column(i).cast(TIMESTAMP)
        table = table.set_column(i, col, ts)
    return table


def iso_text(micros: pa.ChunkedArray) -> pa.ChunkedArray:
    """int64 microseconds as ``strftime(ISO_FORMAT)`` writes them in UTC
    (``2024-05-01T12:00:00.000000Z``). From 1970 to the year 9999 the cast to text
    writes the same but a space for the ``T`` and no ``Z``, 7x as fast; other times
    go through ``strftime``."""
    lo_hi = pc.min_max(micros).as_py()
    if lo_hi["min"] is None or lo_hi["min"] < 0 or lo_hi["max"] >= _YEAR_10000:
        return pc.strftime(micros.cast(TIMESTAMP), format=ISO_FORMAT)
    text = pc.cast(micros.cast(pa.timestamp("us")), pa.string())
    return pc.binary_join_element_wise(pc.utf8_replace_slice(text, 10, 11, "T"), "Z", "")


def results_table(root: Path | str) -> pa.Table:
    """The sorted results of a run (see the module docstring), in memory."""
    return results_since(root)[0]


def results_since(root: Path | str, after: dict[str, int] | None = None
                  ) -> tuple[pa.Table, dict[str, int]]:
    """The sorted results with output seq after ``after[k]`` in the output log named
    ``k`` (:func:`cec_spark.rundir.acks.ack_key`; all when None), in memory, and each
    log's last output seq read (:func:`read_results`)."""
    layout = RunLayout(Path(root))
    parts: list[pa.Table] = []
    last = read_results(layout, after, parts.append)
    table = pa.concat_tables(parts) if parts else empty_results(result_key_type(layout))
    return sort_results(table).select(list(COLUMNS)), last


def result_key_type(layout: RunLayout, run_file: RunFile | None = None) -> pa.DataType:
    """The type of the run's ``key`` column (``run_file``: its run.toml, already read)."""
    settings = (run_file or read_run_file(layout))[1]
    return pa.int64() if settings.key_type == "int64" else pa.string()


def empty_results(key_type: pa.DataType) -> pa.Table:
    return pa.table({"key": pa.array([], key_type),
                     **{c: pa.array([], pa.int64()) for c in
                        ("window_start", "window_end", "count")},
                     "value": pa.array([], pa.float64()),
                     "tau1": pa.array([], pa.int64())})


def read_results(layout: RunLayout, after: dict[str, int] | None,
                 add: Callable[[pa.Table], Any], run_file: RunFile | None = None
                 ) -> dict[str, int]:
    """Each batch of the results with output seq after ``after[k]`` in the output log
    named ``k`` (all when None) to ``add``, log after log, in each log's order; each
    log's last output seq read. A rescaled run's results are those of every
    generation: each old generation's logs up to the end its successor recorded.
    ``run_file``: the run's run.toml, already read (a big run's takes 0.15 s to parse)."""
    run_file = run_file or read_run_file(layout)
    spec = run_file[0]
    count_window = spec.aggregate.window.kind == "count"
    key_type = result_key_type(layout, run_file)
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
            last[name] = log_results(log, since, end, count_window, key_type, add)
    return last


def log_results(log: StreamLog, since: int, end: int | None, count_window: bool,
                key_type: pa.DataType, add: Callable[[pa.Table], Any]) -> int:
    """Each batch of the results in ``log`` with output seq after ``since`` (-1: all),
    up to ``end`` (None: the last committed) to ``add``; the last seq read (``since``
    when there was none)."""
    upto = log.last_seq
    if end is not None and upto is not None:
        upto = end if end < upto else upto
        if upto < 0:
            upto = None
    if upto is None or upto <= since:
        return since
    for raw in log.read_forward(after_seq=since) if since >= 0 else log.read_forward():
        # seq strictly increases within a record (the log's invariant): its first
        # row's is its least
        if raw.num_rows and raw.column("seq")[0].as_py() > upto:
            break
        rows = result_rows(raw, count_window, key_type, upto)
        if rows is not None:
            add(rows)
    return upto


def result_rows(raw: pa.RecordBatch, count_window: bool, key_type: pa.DataType,
                upto: int | None) -> pa.Table | None:
    """The results (``R``, ``G_open+R``) among an output log's rows with seq up to
    ``upto`` (all when None), as ``key, window_start, window_end, count, value, tau1``
    (bounds int64 microseconds); None when there is none."""
    if raw.num_rows == 0:
        return None
    # as few Arrow calls a record as can be: each releases the GIL and may wait to get it
    # back from the export's other threads (its runs' sorts, the file's writes)
    keep = pc.is_in(raw.column("type"), _RESULT_TYPES)
    seq = raw.column("seq")
    if upto is not None and seq[len(seq) - 1].as_py() > upto:  # committed since
        keep = pc.and_(keep, pc.less_equal(seq, upto))
    # the six columns taken before the rows are filtered: the record's other ten are
    # not copied (10 M results: 3.3 s of an export's 12 s went to filtering them)
    r = raw.select(["key", "first_ts" if count_window else "win_start",
                    "last_ts" if count_window else "win_end", "cnt", "value", "tau1"]
                   ).filter(keep)
    if r.num_rows == 0:
        return None
    key = r.column("key")
    return pa.table({
        "key": key if key.type == key_type else key.cast(key_type),
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


class ResultFile:
    """The export file written from sorted tables, in order, as one write of their
    concatenation writes it; counts the rows and distinct keys (nulls last, one key).

    The writes (CSV's text, parquet's encoding and compression) run on a thread of
    their own, one table at a time, while the caller merges the next rows: 10 M results
    measured 1.3 s of parquet writes beside 1.1 s of merging, in one thread. A write's
    error is raised at the next write or at :meth:`close`."""

    def __init__(self, path: Path, fmt: str, window_end: str) -> None:
        self.path, self.fmt, self._end = path, fmt, window_end
        self._writer: Any = None
        self._writing: InFlight[None] = InFlight("cec-export-write")  # the table being written
        self._pending: list[pa.Table] = []  # parquet: rows of the next row group
        self._pending_rows = 0
        self.rows = self.keys = 0
        self._last_key: Any = None
        self._null_seen = False

    def write(self, table: pa.Table) -> None:
        table = table.select(list(COLUMNS))
        self._count_keys(table.column("key"))
        self.rows += table.num_rows
        if self.fmt == "csv":
            self._writing.submit(lambda: self._write(with_timestamps(table, iso=True)))
            return
        self._pending.append(table)
        self._pending_rows += table.num_rows
        while self._pending_rows >= ROW_GROUP_ROWS:
            rows = pa.concat_tables(self._pending)
            group = rows.slice(0, ROW_GROUP_ROWS).combine_chunks()
            rest = rows.slice(ROW_GROUP_ROWS)
            del rows  # only the rows after the group stay held while it is written
            self._pending, self._pending_rows = [rest], rest.num_rows
            self._write_group(group)

    def close(self, empty: pa.Table) -> None:
        """The last row group written and the file closed (``empty``: what an export
        without a result writes)."""
        if self.rows == 0:
            self.write(empty)
        if self._pending_rows or (self.rows == 0 and self.fmt != "csv"):
            self._write_group(pa.concat_tables(self._pending))
        self._pending, self._pending_rows = [], 0
        self._writing.close()
        self.abandon()

    def abandon(self) -> None:
        """The file closed as it is (a failed export leaves it unfinished), once the
        write under way ended (its error, if any, is not raised again here)."""
        self._writing.close(quiet=True)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _write_group(self, rows: pa.Table) -> None:
        def write() -> None:
            # one chunk, as the whole table's slice was: the pages are cut as they were
            table = with_timestamps(rows.combine_chunks(), iso=False)  # (no copy if it is)
            self._write(table.replace_schema_metadata({"cec.window_end": self._end}))

        self._writing.submit(write)

    def _write(self, table: pa.Table) -> None:
        if self._writer is None:
            self._writer = pacsv.CSVWriter(self.path, table.schema) if self.fmt == "csv" \
                else pq.ParquetWriter(self.path, table.schema)
        self._writer.write_table(table)

    def _count_keys(self, keys: pa.ChunkedArray) -> None:
        nulls = keys.null_count
        if nulls and not self._null_seen:  # null keys come last, one key
            self._null_seen = True
            self.keys += 1
        some = keys.slice(0, len(keys) - nulls).combine_chunks()
        if len(some) == 0:
            return
        changes = pc.sum(pc.not_equal(some.slice(1), some.slice(0, len(some) - 1))).as_py()
        self.keys += (changes or 0) + (some[0].as_py() != self._last_key)
        self._last_key = some[len(some) - 1].as_py()


#: an export file's format by its name's suffix, when no format is given
SUFFIX_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def export_format(out: Path | str, fmt: str | None) -> str:
    """An export's format: ``fmt`` (``--format``: csv or parquet), or when it is None
    the one ``out``'s suffix names (.parquet or .pq, .csv), else csv. A UsageError (exit
    2) for another ``fmt``, or one the suffix contradicts (``x.parquet`` as csv): the
    file would not be what its name says. ``cec run pipeline --out`` checks it before
    the run."""
    named = SUFFIX_FORMATS.get(Path(out).suffix.lower())
    if fmt is None:
        return named or "csv"
    if fmt not in ("csv", "parquet"):
        raise UsageError(f"--format: {fmt!r} is not one of csv|parquet")
    if named is not None and named != fmt:
        raise UsageError(f"--out {out}: its name says {named}, --format says {fmt}; "
                         "name the file for its format or leave --format out")
    return fmt


@dataclass
class Begun:
    """What was read ahead, handed to the export: the sorted runs and their spill
    directory (the export owns both from here), each log's last seq read, and each
    log's epochs when it was first read."""

    runs: SortedRuns
    spill: Path
    last: dict[str, int]
    epochs: dict[Path, tuple[int, ...]] = field(default_factory=dict)

    def unchanged(self) -> bool:
        """Every log read has the writers it had when it was first read."""
        return all(tuple(list_epochs(path)) == seen for path, seen in self.epochs.items())



def export(root: Path | str, out: Path | str, fmt: str | None = None,
           consumer: str | None = None, *, sort_rows: int = SORT_ROWS,
           ahead: Callable[[], Begun | None] | None = None) -> ExportResult:
    """Write the results of the run in ``root`` to ``out``; a summary.

    With ``consumer`` only the results that consumer has not acknowledged yet are
    written, then acknowledged (``RUN/consumers/NAME.json``): output retention never
    deletes what a registered consumer has not acknowledged. ``sort_rows``: results
    sorted in memory at once (more are spilled in sorted runs beside ``out``).
    ``ahead``: gives what was read while the run went on (``cec run pipeline --out``,
    :mod:`cec_spark.read.export_ahead`), read on from when its output logs' writers
    are still those it read (else everything is read again).
    """
    fmt = export_format(out, fmt)
    if consumer is not None:
        check_consumer(consumer)
    layout = RunLayout(Path(root))
    after = None if consumer is None else read_ack(layout, consumer)
    run_file = read_run_file(layout)
    end = window_end_kind(run_file[0].aggregate.window.kind)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    begun = None if ahead is None or consumer is not None else ahead()
    if begun is not None:
        runs, spill = begun.runs, begun.spill
    else:
        spill = Path(tempfile.mkdtemp(prefix=f".{out.name}.sort-", dir=out.parent))
        runs = SortedRuns(spill, sort_rows=sort_rows)
    try:
        last = read_results(layout, after if begun is None else begun.last, runs.add, run_file)
        if begun is not None and not begun.unchanged():  # a writer came since: read it all
            runs.close()
            shutil.rmtree(spill, ignore_errors=True)
            runs = SortedRuns(spill, sort_rows=sort_rows)
            last = read_results(layout, after, runs.add, run_file)
        file = ResultFile(tmp, fmt, end)
        write_all(file, runs.sorted(), empty_results(result_key_type(layout, run_file)))
    finally:
        try:
            runs.close()  # (a run still being written when another error came)
        finally:
            shutil.rmtree(spill, ignore_errors=True)
    tmp.replace(out)
    if consumer is not None:  # the file is complete: acknowledge what it holds
        write_ack(layout, consumer, last)
    return ExportResult(out=str(out), format=fmt, rows=file.rows, consumer=consumer,
                        keys=file.keys, window_end=end)


def write_all(file: ResultFile, tables: Iterable[pa.Table], empty: pa.Table) -> None:
    """Every table to ``file``, then the file closed (also when a write fails)."""
    try:
        for table in tables:
            file.write(table)
        file.close(empty)
    finally:
        file.abandon()
