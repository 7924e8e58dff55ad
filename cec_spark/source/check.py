"""Validation and chunk planning of a source's files (csv, jsonl, parquet).

Each file is parsed once, chunk by chunk, as the ingest will read it: a missing
column, a malformed row, a missing or non-finite value or a time field that goes back
raises :class:`InputError` naming the file, line (row for parquet) and field.
:class:`_FileState` carries what a pass over several files needs (the column types
the first file fixed, the next ``seq``, the last time seen).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.order import OrderState
from cec_spark.source.read import (
    _csv_header,
    _diagnose,
    _header_text,
    _line_starts,
    _parse_text,
    _read_bytes,
    parquet_file,
    with_time_us,
)
from cec_spark.source.times import _duration, iso, kind_of, unit_warnings
from cec_spark.source.types import EXTENSIONS, Chunk, ColumnTypes, TimeSpec

_INTEGER = r"^\s*[-+]?\d+\s*$"


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int64"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float64"
    if pa.types.is_boolean(t):
        return "bool"
    return "string"


class _FileState:
    """Running state of a validation pass over the files of one source."""

    def __init__(self, spec: PipelineSpec, max_rows: int | None) -> None:
        self.spec = spec
        self.max_rows = max_rows
        self.columns: ColumnTypes | None = None
        self.chunks: list[Chunk] = []
        self.next_seq = 0
        self.last_ts: int | None = None
        self.last_where = ""
        self.time = TimeSpec.of(spec)
        # for unit_warnings: the raw integers' largest magnitude, the times' range
        self.raw_max_abs: int | None = None
        self.min_us: int | None = None
        self.max_us: int | None = None
        # lateness settings: the planner's side of cec_spark.source.order
        self.order = OrderState(self.time.allowed_lateness_us, self.time.late == "drop") \
            if self.time.reorders else None

    def add_chunk(self, chunk: Chunk, table: pa.Table) -> None:
        """Plan ``chunk`` (its rows ``table``, after the cut) as the next chunk."""
        if self.order is not None:
            chunk = self.order.plan(chunk, table.column(self.time.field).to_numpy(),
                                    self.chunks)
        else:  # times are non-decreasing (check): no later row is before the last one
            chunk = replace(chunk, wm=self.last_ts)
        self.chunks.append(chunk)
        self.next_seq += chunk.rows

    def flush(self) -> None:
        """At the end of the source: the chunk that releases the rows still held."""
        if self.order is not None and self.chunks:
            last = self.order.flush(self.chunks[-1], self.chunks)
            if last is not None:
                self.chunks.append(last)

    @property
    def full(self) -> bool:
        return self.max_rows is not None and self.next_seq >= self.max_rows

    def needed(self) -> list[str]:
        agg = self.spec.aggregate
        cols = [self.spec.source.time_field, agg.group_by]
        if agg.field is not None:
            cols.append(agg.field)
        return cols

    def fix_types(self, table: pa.Table, name: str) -> ColumnTypes:
        if self.columns is not None:
            return self.columns
        agg = self.spec.aggregate
        types = []
        for col in table.column_names:
            t = _type_name(table.schema.field(col).type)
            if col == self.spec.source.time_field:
                kind = kind_of(table.schema.field(col).type)
                if kind is None:
                    shown = table.column(col)[0].as_py() if table.num_rows else None
                    raise InputError(f"{name}: {col}: {shown!r} (a {table.schema.field(col).type} "
                                     "column) is no time: an integer epoch (with "
                                     "[source].time_unit), a TIMESTAMP or ISO-8601 text")
                if kind != "int64" and self.time.unit != "us":
                    what = "a TIMESTAMP" if kind == "timestamp" else "ISO-8601 text"
                    raise InputError(f"{name}: {col}: the time field is {what}, an instant "
                                     "with no unit to choose; leave [source].time_unit out "
                                     "(it is the unit of integer epochs)")
                t = kind
            elif col == agg.field:
                t = "float64"
            elif col == agg.group_by:
                t = "int64" if t == "int64" else "string"
            types.append(t)
        self.columns = ColumnTypes(tuple(table.column_names), tuple(types))
        return self.columns

    def time_us(self, table: pa.Table, name: str, first: int, unit_word: str) -> pa.Table:
        """The table with its time field in microseconds; notes what unit_warnings needs."""
        assert self.columns is not None
        tf = self.time.field
        kind = self.columns.kind(tf)
        raw = table.column(tf)
        if kind == "int64" and pa.types.is_integer(raw.type) and len(raw) \
                and not raw.null_count:
            big = int(pc.max(pc.abs_checked(raw.cast(pa.int64()))).as_py()) \
                if pc.min(raw).as_py() != -(1 << 63) else (1 << 63) - 1
            self.raw_max_abs = max(self.raw_max_abs or 0, big)
        table = with_time_us(table, self.time, kind, name, first, unit_word)
        ts = table.column(tf)
        if len(ts):
            lo, hi = int(pc.min(ts).as_py()), int(pc.max(ts).as_py())
            self.min_us = lo if self.min_us is None else min(self.min_us, lo)
            self.max_us = hi if self.max_us is None else max(self.max_us, hi)
        return table

    def warnings(self) -> list[str]:
        """What looks wrong about the time unit of what was planned (unit_warnings)."""
        if self.columns is None:
            return []
        return unit_warnings(self.time.field, self.columns.kind(self.time.field),
                             self.time.unit, self.raw_max_abs, self.min_us, self.max_us,
                             self.next_seq, self.spec.aggregate.window)

    def check(self, table: pa.Table, name: str, first_line: int, unit: str) -> pa.Table:
        """Nulls and non-decreasing time of one parsed chunk; returns it, cut to max_rows."""
        for col in self.needed():
            arr = table.column(col)
            if arr.null_count:
                i = int(pc.index(pc.is_null(arr), True).as_py())
                raise InputError(f"{name}: {unit} {first_line + i}: {col}: missing value")
            if pa.types.is_floating(arr.type):
                finite = pc.is_finite(arr)
                if not pc.all(finite).as_py():
                    i = int(pc.index(finite, False).as_py())
                    raise InputError(f"{name}: {unit} {first_line + i}: {col}: "
                                     f"{arr[i].as_py()!r} is not a finite number (inf and "
                                     "nan are refused)")
        if self.max_rows is not None and self.next_seq + table.num_rows > self.max_rows:
            table = table.slice(0, self.max_rows - self.next_seq)
        tf = self.spec.source.time_field
        ts = table.column(tf).to_numpy()
        if self.order is not None:  # late rows and allowed_lateness (source_order)
            late = None if self.order.drop else self.order.first_late(ts)
            if late is not None:
                i, before = late
                raise InputError(
                    f"{name}: {unit} {first_line + i}: {tf}: {iso(int(ts[i]))} is more than "
                    f"allowed_lateness ({_duration(self.time.allowed_lateness_us)}) behind "
                    f"{iso(before)}, the latest time before it (late = \"error\"; "
                    "late = \"drop\" drops such rows)")
        elif len(ts):
            if self.last_ts is not None and ts[0] < self.last_ts:
                raise InputError(
                    f"{name}: {unit} {first_line}: {tf}: {int(ts[0])} is before the previous "
                    f"row's {self.last_ts} ({self.last_where}); the time field must be "
                    "non-decreasing")
            back = np.flatnonzero(np.diff(ts) < 0)
            if len(back):
                i = int(back[0]) + 1
                raise InputError(
                    f"{name}: {unit} {first_line + i}: {tf}: {int(ts[i])} is before the "
                    f"previous row's {int(ts[i - 1])}; the time field must be non-decreasing")
            self.last_ts = int(ts[-1])
            self.last_where = f"{unit} {first_line + len(ts) - 1}"
        return table


def _plan_text_file(st: _FileState, path: Path, fmt: str) -> None:
    """Plan one csv or jsonl file: chunks of ``chunk_rows`` lines, each parsed and
    checked (the first chunk of the source fixes the column types)."""
    spec = st.spec
    columns, header_len, first_line = _text_header(st, path, fmt)
    offsets, _, size = _line_starts(path, header_len, spec.source.chunk_rows)
    offsets.append(size)
    line = first_line
    for start, stop in itertools.pairwise(offsets):
        if st.full or start >= stop:
            break
        data = _read_bytes(str(path), start, stop)
        table, n_lines = _parse_text_chunk(st, path.name, fmt, data, line, columns)
        if st.columns is None:
            table = _fix_types(st, table, path.name)
        assert st.columns is not None
        table = st.time_us(table, path.name, line, "line")
        table = table.cast(st.columns.schema()) if fmt == "csv" else table
        cut = st.check(table, path.name, line, "line")
        st.add_chunk(Chunk(len(st.chunks), fmt, str(path), start, stop, st.next_seq,
                           cut.num_rows, line, columns), cut)
        line += n_lines


def _text_header(st: _FileState, path: Path, fmt: str) -> tuple[tuple[str, ...], int, int]:
    """(columns, header bytes, first data line) of a csv file (checked to hold the
    columns the spec needs); a jsonl file has none."""
    if fmt != "csv":
        return (), 0, 1
    columns, header_len = _csv_header(path)
    missing = [c for c in st.needed() if c not in columns]
    if missing:
        raise InputError(f"{path.name}: line 1: missing column {missing[0]!r} "
                         f"({_header_text(columns)})")
    return tuple(columns), header_len, 2


def _parse_text_chunk(st: _FileState, name: str, fmt: str, data: bytes, line: int,
                      columns: tuple[str, ...]) -> tuple[pa.Table, int]:
    """One chunk's table and its number of lines; a chunk the fast parser refuses, or
    one with a blank line, is an InputError naming the first bad line."""
    spec = st.spec
    overrides = {spec.source.time_field: pa.string()}  # its kind: decided below
    if spec.aggregate.field is not None:
        overrides[spec.aggregate.field] = pa.float64()
    if st.columns is None:
        overrides[spec.aggregate.group_by] = pa.string()
    try:
        table = _parse_text(fmt, data, columns, st.columns, overrides)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _diagnose(fmt, name, data, line, columns, spec, st.columns, exc) from exc
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if table.num_rows != n_lines or data.startswith((b"\n", b"\r\n")) \
            or b"\n\n" in data or b"\n\r\n" in data:  # a blank line: name it
        raise _diagnose(fmt, name, data, line, columns, spec, st.columns,
                        ValueError(f"{n_lines} lines gave {table.num_rows} rows"))
    if fmt == "jsonl":
        table = _jsonl_time_as_text(st, name, data, line, table)
    elif st.columns is None and table.num_rows:
        table = _csv_time_kind(st, name, data, line, columns, table)
    return table, n_lines


def _jsonl_time_as_text(st: _FileState, name: str, data: bytes, line: int,
                        table: pa.Table) -> pa.Table:
    """A jsonl chunk holding every needed field, its time read as text when Arrow
    guessed a timestamp (the time's parse is ours)."""
    missing = [c for c in st.needed() if c not in table.column_names]
    if missing:
        raise InputError(f"{name}: line {line}: missing field {missing[0]!r}")
    tf = st.spec.source.time_field
    tcol = table.column(tf)
    if st.columns is None and (pa.types.is_timestamp(tcol.type)
                               or pa.types.is_date(tcol.type)):
        table = pajson.read_json(io.BytesIO(data), parse_options=pajson.ParseOptions(
            explicit_schema=pa.schema([(tf, pa.string())]),
            unexpected_field_behavior="infer"))
    return table


def _csv_time_kind(st: _FileState, name: str, data: bytes, line: int,
                   columns: tuple[str, ...], table: pa.Table) -> pa.Table:
    """The first csv chunk: its first row decides the time's kind: integers (epochs in
    time_unit), or ISO-8601 text."""
    spec = st.spec
    tf = spec.source.time_field
    tcol = table.column(tf)
    if not re.match(_INTEGER, str(tcol[0].as_py())):
        return table
    try:
        ints = pc.cast(pc.utf8_trim_whitespace(tcol), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        types = ColumnTypes(tuple(columns), tuple(
            "int64" if c == tf else "string" for c in columns))
        raise _diagnose("csv", name, data, line, columns, spec, types, exc) from exc
    return table.set_column(table.column_names.index(tf), tf, ints)


def _fix_types(st: _FileState, table: pa.Table, name: str) -> pa.Table:
    """The source's first chunk fixes its column types (an integer key if every key
    of it is one); the chunk with them."""
    group_by = st.spec.aggregate.group_by
    key = table.column(group_by)
    if pa.types.is_string(key.type):
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = table.set_column(table.column_names.index(group_by), group_by,
                                     pc.cast(key, pa.int64()))
    st.fix_types(table, name)
    return table


def _plan_parquet_file(st: _FileState, path: Path) -> None:
    name = path.name
    try:
        pf = parquet_file(str(path))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{name}: not a readable parquet file: {exc}") from exc
    missing = [c for c in st.needed() if c not in pf.schema_arrow.names]
    if missing:
        raise InputError(f"{name}: missing column {missing[0]!r} "
                         f"(the file has {', '.join(pf.schema_arrow.names)})")
    groups: list[tuple[int, int]] = []
    lo, rows = 0, 0
    for g in range(pf.num_row_groups):
        rows += pf.metadata.row_group(g).num_rows
        if rows >= st.spec.source.chunk_rows:
            groups.append((lo, g + 1))
            lo, rows = g + 1, 0
    if lo < pf.num_row_groups:
        groups.append((lo, pf.num_row_groups))
    row = 0
    for lo, hi in groups:
        if st.full:
            break
        table = pf.read_row_groups(list(range(lo, hi)))
        field = st.spec.aggregate.field
        if field is not None and pa.types.is_integer(table.column(field).type):
            # the aggregate reads its field as a double: above 2^53 an integer changes
            big = pc.greater(pc.abs(table.column(field)), 1 << 53)
            if pc.any(big).as_py():
                i = int(pc.index(big, True).as_py())
                raise InputError(f"{name}: row {row + i} (row groups {lo}-{hi - 1}): "
                                 f"{field}: {table.column(field)[i].as_py()} is beyond "
                                 "2^53, where a double (the aggregate's type) loses "
                                 "integer precision")
        if st.columns is None:
            st.fix_types(table, name)
        assert st.columns is not None
        try:
            table = st.time_us(table.select(list(st.columns.names)), name, row, "row")
            table = table.cast(st.columns.schema())
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(f"{name}: row groups {lo}-{hi - 1}: columns do not match the "
                             f"source's first file: {exc}") from exc
        cut = st.check(table, name, row, "row")
        st.add_chunk(Chunk(len(st.chunks), "parquet", str(path), lo, hi, st.next_seq,
                           cut.num_rows, row), cut)
        row += table.num_rows


def source_files(path: Path, fmt: str | None) -> list[Path]:
    """The data files of a file or folder source, in name order."""
    if path.is_file():
        return [path]
    if not path.exists():
        raise InputError(f"{path}: [source].path: no such file or directory")
    files = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith((".", "_")) or not entry.is_file():
            continue
        if fmt is not None and not entry.name.lower().endswith(EXTENSIONS[fmt]):
            continue
        files.append(entry)
    return files


def _file_format(path: Path, declared: str | None) -> str:
    if declared is not None:
        return declared
    for fmt, exts in EXTENSIONS.items():
        if path.name.lower().endswith(exts):
            return fmt
    raise InputError(f"{path.name}: unknown file type (expected .csv, .jsonl or .parquet; "
                     "or set [source].format)")


def _plan_file(st: _FileState, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        _plan_parquet_file(st, path)
    else:
        _plan_text_file(st, path, fmt)
