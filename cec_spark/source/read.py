"""Reading a source's bytes: CSV headers, the Arrow parse of a chunk, the exact
diagnosis of a chunk the parser refused, the row checks, and :func:`read_chunk`.

:func:`read_chunk` is what the ingest's Spark task (:mod:`cec_spark.ingest.query`)
calls on an executor to produce Arrow batches; the planner
(:mod:`cec_spark.source.check`) parses with the same functions. A chunk the planner
did not read (``Chunk.check``) is checked here, row by row, before any of its rows is
yielded (:func:`chunk_table`): the task names a bad row as the planner would have.

A resumed ingest's chunk may skip its first rows (``Chunk.skip``: every upstream log
holds them): they are not parsed (:func:`_from_row`: a text chunk is read from the
byte after the newline that ends them, found by counting newlines; a parquet chunk
from the row group that holds its first row read), but for the last of them in a
checked chunk, which is read again so the first row read is checked against it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from cec.errors import CecError
from cec_spark.errors import InputError
from cec_spark.source.chunk_report import Reports, report_chunk
from cec_spark.source.order import reorder
from cec_spark.source.times import TimeValueError, to_us
from cec_spark.source.types import SEQ, Chunk, ColumnTypes, TimeSpec

# The slow diagnosis (Python's csv) must read every line the fast path (Arrow) reads:
# Python's default limit of 128 KiB per field made a long line a raw traceback.
csv.field_size_limit(1 << 30)


def ends_with_newline(path: Path, size: int) -> bool:
    with path.open("rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) == b"\n"


def read_bytes(path: str, start: int, stop: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(stop - start)


def csv_header(path: Path) -> tuple[tuple[str, ...], int]:
    with path.open("rb") as fh:
        first = fh.readline()
    if not first.strip():
        raise InputError(f"{path.name}: line 1: empty file or missing header")
    try:  # utf-8-sig: a byte order mark before the first column name is dropped
        header = next(csv.reader([first.decode("utf-8-sig")]))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path.name}: line 1: unreadable header: {exc}") from exc
    return tuple(h.strip() for h in header), len(first)


_COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_ .\-]{0,63}")


def header_text(columns: tuple[str, ...]) -> str:
    """The header for a message, only if it looks like column names: a file that is
    not a CSV (a spec pointing at /etc/passwd) must not have its first line echoed."""
    if len(columns) <= 50 and all(_COLUMN_NAME.fullmatch(c) for c in columns):
        return f"the header has {', '.join(columns)}"
    return f"its first line is not a header of column names ({len(columns)} fields)"


def parse_text(fmt: str, data: bytes, columns: tuple[str, ...],
               types: ColumnTypes | None, overrides: dict[str, pa.DataType]) -> pa.Table:
    if fmt == "csv":
        col_types = dict(overrides)
        if types is not None:
            col_types = {f.name: f.type for f in types.parse_schema()}
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=list(columns), block_size=16 << 20),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(column_types=col_types,
                                                 strings_can_be_null=False,
                                                 # "nan" is a number (refused later as
                                                 # not finite), not a missing value
                                                 null_values=[""]))
    schema = types.parse_schema() if types is not None else None
    opts = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"
                               if schema is not None else "infer")
    return pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(
        block_size=16 << 20), parse_options=opts)


def diagnose(fmt: str, name: str, data: bytes, first_line: int, columns: tuple[str, ...],
             rules: TimeSpec, types: ColumnTypes | None, cause: Exception) -> InputError:
    """Find the first bad line of a chunk the fast parser refused, slowly and exactly
    (``rules``: the time field, its unit and the columns every row must hold)."""
    checks = _value_checks(rules, types)
    lines = data.decode("utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        where = f"{name}: line {first_line + i}"
        values = _line_values(fmt, line, columns, where)
        if isinstance(values, InputError):
            return values
        for col, kind in checks.items():
            problem = _check_value(values, col, kind, where, rules)
            if problem is not None:
                return problem
    return InputError(f"{name}: lines {first_line}-{first_line + len(lines) - 1}: "
                      f"cannot parse: {cause}")


def _value_checks(rules: TimeSpec, types: ColumnTypes | None) -> dict[str, type]:
    """The columns a line must hold and what each must parse as (str: ISO time)."""
    tf = rules.field
    time_kind = types.kind(tf) if types is not None and tf in types.names else "int64"
    checks: dict[str, type] = {tf: str if time_kind == "iso" else int}
    if rules.value_field is not None:
        checks[rules.value_field] = float
    if (types is not None and rules.group_by in types.names
            and types.types[types.names.index(rules.group_by)] == "int64"):
        checks[rules.group_by] = int
    return checks


def _line_values(fmt: str, line: str, columns: tuple[str, ...], where: str
                 ) -> dict[str, object] | InputError:
    """One line's fields by column name, or what is wrong with the line."""
    if not line.strip():
        return InputError(f"{where}: the line is blank")
    return _csv_values(line, columns, where) if fmt == "csv" else _json_values(line, where)


def _csv_values(line: str, columns: tuple[str, ...], where: str
                ) -> dict[str, object] | InputError:
    try:
        row = next(csv.reader([line]))
    except csv.Error as exc:
        return InputError(f"{where}: not a CSV line: {exc}")
    if len(row) != len(columns):
        return InputError(f"{where}: expected {len(columns)} fields "
                          f"({','.join(columns)}), got {len(row)}")
    return dict(zip(columns, row, strict=True))


def _json_values(line: str, where: str) -> dict[str, object] | InputError:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        return InputError(f"{where}: not a JSON object: "
                          f"{getattr(exc, 'msg', type(exc).__name__)}")
    return obj if isinstance(obj, dict) else InputError(f"{where}: not a JSON object")


def _check_value(values: dict[str, object], col: str, kind: type, where: str,
                 rules: TimeSpec) -> InputError | None:
    """What is wrong with ``values[col]`` as a ``kind`` (None: nothing)."""
    if col not in values or values[col] in (None, ""):
        return InputError(f"{where}: {col}: missing value")
    raw = values[col]
    try:
        if kind is str:  # an ISO time: its parse is to_us's
            to_us(pa.array([str(raw)]), "iso", "us")
        elif kind is int:
            if isinstance(raw, float) or (isinstance(raw, str) and not
                                          raw.strip().lstrip("-").isdigit()):
                raise ValueError(raw)
            int(raw)  # type: ignore[call-overload]
        else:
            float(raw)  # type: ignore[arg-type]
    except TimeValueError as exc:
        return InputError(f"{where}: {col}: {raw!r} {exc.why}")
    except (TypeError, ValueError, OverflowError):
        what = "an integer" if kind is int else "a number"
        if col == rules.field:
            what = f"an integer (epoch {rules.unit}, [source].time_unit)"
        shown = raw if not isinstance(raw, str) or len(raw) <= 40 else raw[:40] + "..."
        return InputError(f"{where}: {col}: {shown!r} is not {what}")
    return None


def with_time_us(table: pa.Table, time: TimeSpec, kind: str, name: str, first: int,
                 unit_word: str) -> pa.Table:
    """``table`` with its time field as int64 microseconds (:mod:`cec_spark.source.times`);
    a value without one is an InputError naming ``name``, the line or row, the field."""
    col = table.column_names.index(time.field)
    try:
        us = to_us(table.column(col), kind, time.unit)
    except TimeValueError as exc:
        shown = "" if exc.shown is None else f"{exc.shown!r} "
        raise InputError(f"{name}: {unit_word} {first + exc.index}: {time.field}: "
                         f"{shown}{exc.why}") from None
    return table.set_column(col, time.field, pa.array(us, pa.int64()))


def parquet_file(path: str) -> pq.ParquetFile:
    """A parquet file whose INT96 timestamps (Spark's default) read as microseconds."""
    return pq.ParquetFile(path, coerce_int96_timestamp_unit="us")


def check_values(table: pa.Table, rules: TimeSpec, name: str, first: int, unit: str
                 ) -> None:
    """Every needed column of a chunk's rows holds a value, and a finite one
    (:attr:`TimeSpec.needed`); else an InputError naming the file, line or row, field."""
    for col in rules.needed:
        arr = table.column(col)
        if arr.null_count:
            i = int(pc.index(pc.is_null(arr), True).as_py())
            raise InputError(f"{name}: {unit} {first + i}: {col}: missing value")
        if pa.types.is_floating(arr.type):
            finite = pc.is_finite(arr)
            if not pc.all(finite).as_py():
                i = int(pc.index(finite, False).as_py())
                raise InputError(f"{name}: {unit} {first + i}: {col}: "
                                 f"{arr[i].as_py()!r} is not a finite number (inf and "
                                 "nan are refused)")


def check_order(ts: np.ndarray, field: str, name: str, first: int, unit: str,
                prev_ts: int | None, prev_where: str) -> None:
    """The times of a chunk's rows are non-decreasing, from ``prev_ts`` (the row before
    the chunk, at ``prev_where``; None: none); else an InputError naming the row."""
    if not len(ts):
        return
    if prev_ts is not None and ts[0] < prev_ts:
        raise InputError(
            f"{name}: {unit} {first}: {field}: {int(ts[0])} is before the previous "
            f"row's {prev_ts} ({prev_where}); the time field must be non-decreasing")
    back = np.flatnonzero(np.diff(ts) < 0)
    if len(back):
        i = int(back[0]) + 1
        raise InputError(
            f"{name}: {unit} {first + i}: {field}: {int(ts[i])} is before the "
            f"previous row's {int(ts[i - 1])}; the time field must be non-decreasing")


def check_big_ints(table: pa.Table, field: str | None, name: str, row: int, lo: int,
                   hi: int) -> None:
    """A parquet integer value field beyond 2^53 (the aggregate reads it as a double,
    which loses integer precision there) is an InputError naming the row."""
    if field is None or field not in table.column_names \
            or not pa.types.is_integer(table.column(field).type):
        return
    big = pc.greater(pc.abs(table.column(field)), 1 << 53)
    if pc.any(big).as_py():
        i = int(pc.index(big, True).as_py())
        raise InputError(f"{name}: row {row + i} (row groups {lo}-{hi - 1}): "
                         f"{field}: {table.column(field)[i].as_py()} is beyond "
                         "2^53, where a double (the aggregate's type) loses "
                         "integer precision")


def text_lines(data: bytes) -> int:
    """The lines of a chunk's bytes (a last line without a newline counts)."""
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def has_blank_line(data: bytes) -> bool:
    return data.startswith((b"\n", b"\r\n")) or b"\n\n" in data or b"\n\r\n" in data


def _checked_table(chunk: Chunk, columns: ColumnTypes, time: TimeSpec,
                   report: Reports | None = None) -> pa.Table:
    """:func:`_checked_one`; a chunk cut by bytes (``chunk.sparse``: its first line not
    known) that fails is checked again with its first line counted, so that the error
    names the line (what a message costs, never a read)."""
    try:
        return _checked_one(chunk, columns, time, report)
    except InputError:
        if not chunk.sparse or chunk.fmt == "parquet":
            raise
        first = first_line_of(chunk)
        after_header = 2 if chunk.fmt == "csv" else 1
        _checked_one(replace(chunk, sparse=False, first_line=first, prev_where=(
            f"line {first - 1}" if first > after_header else chunk.prev_where)),
            columns, time, None)
        raise


def _checked_one(chunk: Chunk, columns: ColumnTypes, time: TimeSpec,
                 report: Reports | None) -> pa.Table:
    """The rows of a chunk the planner did not read (``chunk.check``), each checked as
    the planner checks the rows it reads (:mod:`cec_spark.source.check`): parsed, every
    needed value there and finite, times in microseconds and non-decreasing from the
    row before the chunk. The first bad row is an InputError naming the file, line
    (row for parquet) and field; no row of the chunk is returned before all are checked."""
    name = Path(chunk.file).name
    first = chunk.first_line
    if chunk.fmt == "parquet":
        unit = "row"
        lo, hi = chunk.start, chunk.stop
        try:
            pf = parquet_file(chunk.file)
            names = [n for n in columns.names if n in pf.schema_arrow.names]
            table = pf.read_row_groups(list(range(lo, hi)), columns=names)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{name}: row groups {lo}-{hi - 1}: not readable: {exc}") \
                from exc
        check_big_ints(table, time.value_field, name, first, lo, hi)
        try:
            table = with_time_us(table.select(list(columns.names)), time,
                                 columns.kind(time.field), name, first, unit)
            table = table.cast(columns.schema())
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(f"{name}: row groups {lo}-{hi - 1}: columns do not match the "
                             f"source's first file: {exc}") from exc
    else:
        unit = "line"
        data = read_bytes(chunk.file, chunk.start, chunk.stop)
        try:
            table = parse_text(chunk.fmt, data, chunk.columns, columns, {})
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise diagnose(chunk.fmt, name, data, first, chunk.columns, time, columns,
                           exc) from exc
        # a line the parser skipped (a blank jsonl line): a row fewer than lines (the
        # planner counted them: chunk.rows, but for a cut at max_rows; a chunk cut by
        # bytes: counted here, for jsonl only: the csv parser skips no line, it makes a
        # blank one a row of nulls, refused below)
        maybe_skipped = chunk.fmt == "jsonl" if chunk.sparse \
            else table.num_rows != chunk.rows
        if maybe_skipped and table.num_rows != (n := text_lines(data)):
            raise diagnose(chunk.fmt, name, data, first, chunk.columns, time, columns,
                           ValueError(f"{n} lines gave {table.num_rows} rows"))
        try:
            table = with_time_us(table, time, columns.kind(time.field), name, first, unit)
            table = table.select(list(columns.names)).cast(columns.schema())
            check_values(table, time, name, first, unit)
        except InputError:
            if has_blank_line(data):  # a blank csv line is a row of nulls: name the line
                raise diagnose(chunk.fmt, name, data, first, chunk.columns, time,
                               columns, ValueError("a blank line")) from None
            raise
    if chunk.fmt == "parquet":
        check_values(table, time, name, first, unit)
    table = table.slice(0, chunk.rows)
    if not time.reorders:  # with lateness settings the planner read the times
        check_order(table.column(time.field).to_numpy(), time.field, name, first, unit,
                    chunk.prev_ts, chunk.prev_where)
    if report is not None and chunk.reported:
        report_chunk(report, chunk, table.num_rows,
                     pf.metadata if chunk.fmt == "parquet" else data)
    return table


def first_line_of(chunk: Chunk) -> int:
    """The 1-based line of a text chunk's first row: ``chunk.first_line``, or, for a
    chunk cut by bytes (``chunk.sparse``, whose planner counted no newline), one more
    than the newlines before its first byte, counted now (for a message)."""
    if not chunk.sparse or chunk.fmt == "parquet":
        return chunk.first_line
    seen, left = 0, chunk.start
    with open(chunk.file, "rb") as fh:
        while left > 0 and (block := fh.read(min(_LINE_BLOCK, left))):
            seen += block.count(b"\n")
            left -= len(block)
    return seen + 1


def _line_start(path: str, start: int, stop: int, n: int) -> int:
    """The byte offset of line ``n`` (0-based) of the text ``[start, stop)`` of a file:
    just after its ``n``-th newline, counted block by block (numpy's work per byte,
    none per line; only the bytes before it are read)."""
    if n <= 0:
        return start
    seen, pos = 0, start
    with open(path, "rb") as fh:
        fh.seek(start)
        while pos < stop:
            block = fh.read(min(_LINE_BLOCK, stop - pos))
            if not block:
                break
            nl = np.frombuffer(block, dtype=np.uint8) == 10
            count = int(np.count_nonzero(nl))
            if seen + count >= n:
                return pos + int(np.flatnonzero(nl)[n - seen - 1]) + 1
            seen += count
            pos += len(block)
    raise InputError(f"{Path(path).name}: bytes {start}-{stop} hold {seen} lines, the "
                     f"resumed ingest skips {n} of them: the source changed since they "
                     "were read (a resumed run must read the same input)")


_LINE_BLOCK = 8 << 20


def _from_row(chunk: Chunk) -> tuple[Chunk, int]:
    """``(part, drop)``: the chunk read from a row at or before its row ``chunk.skip``,
    and the rows of it to drop then: the rows before ``skip`` are not parsed (a
    parquet chunk: but for those of the row group that holds row ``skip``). A checked
    chunk (``chunk.check``) is read from row ``skip - 1``, which was checked with the
    rows before it, so that the order of row ``skip`` is checked against it
    (``prev_ts`` is then unused)."""
    target = chunk.skip - 1 if chunk.check else chunk.skip
    if chunk.fmt == "parquet":
        meta = parquet_file(chunk.file).metadata
        group, before = chunk.start, 0
        while group < chunk.stop - 1 and before + meta.row_group(group).num_rows <= target:
            before += meta.row_group(group).num_rows
            group += 1
        start = group
    else:
        before = target
        start = _line_start(chunk.file, chunk.start, chunk.stop, target)
    part = replace(chunk, start=start, first_seq=chunk.first_seq + before,
                   rows=chunk.rows - before, first_line=chunk.first_line + before, skip=0,
                   reported=False,  # read in part: its report is the whole read's
                   prev_ts=None if before < chunk.skip else chunk.prev_ts,
                   prev_where="" if before < chunk.skip else chunk.prev_where)
    return part, chunk.skip - before


def chunk_table(chunk: Chunk, columns: ColumnTypes, time: TimeSpec,
                report: Reports | None = None) -> pa.Table:
    """The rows of a chunk, typed as the ingest reads them (times in microseconds);
    checked row by row first when the planner did not read them (``chunk.check``).
    A resumed ingest's chunk: its rows from row ``chunk.skip`` (:func:`_from_row`).
    ``report``: where a reported chunk read whole is reported (its rows and digest,
    :mod:`cec_spark.source.chunk_report`) before its rows are returned."""
    if chunk.rows == 0 or chunk.skip >= chunk.rows:  # a flush chunk (cec_spark.source.
        return columns.schema().empty_table()        # order), or one every log holds
    if chunk.skip > 0:
        part, drop = _from_row(chunk)
        return chunk_table(part, columns, time).slice(drop)
    if chunk.check:
        return _checked_table(chunk, columns, time, report)
    if chunk.fmt == "parquet":
        pf = parquet_file(chunk.file)
        table = pf.read_row_groups(list(range(chunk.start, chunk.stop)),
                                   columns=list(columns.names))
        if report is not None and chunk.reported:
            report_chunk(report, chunk, table.num_rows, pf.metadata)
    else:
        data = read_bytes(chunk.file, chunk.start, chunk.stop)
        table = parse_text(chunk.fmt, data, chunk.columns, columns, {})
        table = table.select(list(columns.names))
        if report is not None and chunk.reported:
            report_chunk(report, chunk, table.num_rows, data)
    table = table.slice(0, chunk.rows)
    unit_word = "row" if chunk.fmt == "parquet" else "line"
    table = with_time_us(table, time, columns.kind(time.field), Path(chunk.file).name,
                         chunk.first_line, unit_word)
    return table.cast(columns.schema())


def read_chunk(chunk: Chunk, columns: ColumnTypes, time: TimeSpec, *,
               batch_rows: int = 1 << 18, report: Reports | None = None
               ) -> Iterator[pa.RecordBatch]:
    """The rows of a chunk with typed columns plus ``SEQ`` (int64), as Arrow batches;
    with lateness settings, the rows it emits and the ``LATE`` flag
    (:func:`cec_spark.source.order.reorder`). A resumed ingest's chunk: its rows from
    row ``chunk.skip`` on (never with lateness settings: their seqs are not rows)."""
    if time.reorders:
        if chunk.skip:
            raise CecError(f"{chunk.file}: chunk {chunk.index}: a resumed ingest cannot "
                           "skip rows of a chunk whose rows are reordered")
        table = reorder(chunk, time, lambda c: chunk_table(c, columns, time))
        yield from table.to_batches(max_chunksize=batch_rows)
        return
    table = chunk_table(chunk, columns, time, report)
    first = chunk.first_seq + min(chunk.skip, chunk.rows)
    seq = pa.array(np.arange(first, first + table.num_rows, dtype=np.int64))
    table = table.append_column(SEQ, seq)
    yield from table.to_batches(max_chunksize=batch_rows)
