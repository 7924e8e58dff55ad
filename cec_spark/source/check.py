"""Validation and chunk planning of a source's files (csv, jsonl, parquet).

A run's plan is **light** (:attr:`_FileState.light`): chunk boundaries from file
metadata (a csv header, a parquet footer's row counts, a text file's newlines counted
in one pass with its fingerprint, :func:`_scan_lines`), the source's first chunk parsed
and checked (it fixes the column types) and each other chunk's last time read (its
watermark, and the time its successor's first row must not be below,
:meth:`_FileState.add_light`); the ingest task checks the other rows
(:attr:`~cec_spark.source.types.Chunk.check`). Otherwise (lateness settings, whose plan
needs every row's time; a stream folder's watcher) each file is parsed once, chunk by
chunk, as the ingest will read it. Either way a missing column, a malformed row, a
missing or non-finite value or a time field that goes back raises :class:`InputError`
naming the file, line (row for parquet) and field. :class:`_FileState` carries what a
pass over several files needs (the column types the first file fixed, the next ``seq``,
the last time seen).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
import xxhash

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.order import OrderState
from cec_spark.source.read import (
    _csv_header,
    _diagnose,
    _ends_with_newline,
    _header_text,
    _parse_text,
    _read_bytes,
    check_big_ints,
    check_order,
    check_values,
    has_blank_line,
    parquet_file,
    text_lines,
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

    def __init__(self, spec: PipelineSpec, max_rows: int | None, *,
                 light: bool = False) -> None:
        self.spec = spec
        self.max_rows = max_rows
        # light: read the rows of the source's first chunk only (it fixes the column
        # types); every other chunk is planned from file metadata and checked by the
        # ingest task that reads it (Chunk.check). With lateness settings, whose plan
        # is made from every row's time (cec_spark.source.order), each chunk's times
        # are read (the time column alone: add_timed) and the rest left to its task.
        self.light = light
        self.files: list[dict[str, Any]] = []  # the fingerprint made on the way
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

    def add_light(self, chunk: Chunk, last: int | None, last_where: str) -> None:
        """Plan ``chunk``, whose rows are not read here: the task that reads them checks
        them from the row before it (``prev_ts``); ``last``: the time of its last row
        (None: unknown; its task names what is wrong with it), its watermark."""
        chunk = replace(chunk, check=True, prev_ts=self.last_ts, prev_where=self.last_where,
                        wm=last)
        self.last_ts, self.last_where = last, last_where
        self.chunks.append(chunk)
        self.next_seq += chunk.rows

    def add_timed(self, chunk: Chunk, ts: np.ndarray, name: str, unit: str) -> None:
        """Plan ``chunk`` with lateness settings from its times ``ts`` alone (after the
        cut; read here, the late rows refused here with ``late = "error"``); its task
        checks the rest of its rows (:attr:`Chunk.check`)."""
        assert self.order is not None
        if not self.order.drop:
            late = self.order.first_late(ts)
            if late is not None:
                raise self.late_error(ts, late, name, chunk.first_line, unit)
        self.add_chunk(replace(chunk, check=True), pa.table({self.time.field: ts}))

    def late_error(self, ts: np.ndarray, late: tuple[int, int], name: str, first: int,
                   unit: str) -> InputError:
        i, before = late
        return InputError(
            f"{name}: {unit} {first + i}: {self.time.field}: {iso(int(ts[i]))} is more than "
            f"allowed_lateness ({_duration(self.time.allowed_lateness_us)}) behind "
            f"{iso(before)}, the latest time before it (late = \"error\"; "
            "late = \"drop\" drops such rows)")

    def cut(self, rows: int) -> int:
        """``rows`` of a next chunk, cut at ``max_rows``."""
        if self.max_rows is None:
            return rows
        return max(0, min(rows, self.max_rows - self.next_seq))

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
        check_values(table, self.time, name, first_line, unit)
        if self.max_rows is not None and self.next_seq + table.num_rows > self.max_rows:
            table = table.slice(0, self.max_rows - self.next_seq)
        tf = self.spec.source.time_field
        ts = table.column(tf).to_numpy()
        if self.order is not None:  # late rows and allowed_lateness (source_order)
            late = None if self.order.drop else self.order.first_late(ts)
            if late is not None:
                raise self.late_error(ts, late, name, first_line, unit)
        elif len(ts):
            check_order(ts, tf, name, first_line, unit, self.last_ts, self.last_where)
            self.last_ts = int(ts[-1])
            self.last_where = f"{unit} {first_line + len(ts) - 1}"
        return table


def _plan_text_file(st: _FileState, path: Path, fmt: str) -> None:
    """Plan one csv or jsonl file: chunks of ``chunk_rows`` lines (the first chunk of the
    source fixes the column types). Each chunk is parsed and checked here, or, light
    (:attr:`_FileState.light`), only the source's first: the others are cut by counting
    newlines and the time of each one's last line read (its watermark); their tasks
    check their rows (:attr:`Chunk.check`)."""
    spec = st.spec
    columns, header_len, first_line = _text_header(st, path, fmt)
    scan = _scan_lines(path, header_len, spec.source.chunk_rows, digest=st.light)
    offsets = [*scan.offsets, scan.size]
    line = first_line
    n_chunks = len(offsets) - 1
    lasts: list[tuple[int, int, int, int, int, bytes]] = []  # light chunks, then parsed
    for k, (start, stop) in enumerate(itertools.pairwise(offsets)):
        if st.full or start >= stop:
            break
        if st.light and st.columns is not None:
            n_lines = spec.source.chunk_rows if k < n_chunks - 1 else \
                scan.lines - spec.source.chunk_rows * (n_chunks - 1)
            rows = st.cut(n_lines)
            if st.order is not None:  # lateness: the chunk's times (its time column)
                ts = _chunk_times(st, path.name, fmt, _read_bytes(str(path), start, stop),
                                  line, columns)
                st.add_timed(Chunk(len(st.chunks), fmt, str(path), start, stop,
                                   st.next_seq, rows, line, columns), ts[:rows],
                             path.name, "line")
                line += n_lines
                continue
            lasts.append((start, stop, line, rows, n_lines,
                          _nth_line(path, start, stop, rows, n_lines)))
            st.next_seq += rows  # (the chunks are added below, in order)
            line += n_lines
            continue
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
    if lasts:
        st.next_seq -= sum(r for _, _, _, r, _, _ in lasts)
        times = _last_times(st, path.name, fmt, columns,
                            [(first + rows - 1, text) for _, _, first, rows, _, text in lasts])
        for (start, stop, first, rows, _, _), last in zip(lasts, times, strict=True):
            st.add_light(Chunk(len(st.chunks), fmt, str(path), start, stop, st.next_seq,
                               rows, first, columns), last, f"line {first + rows - 1}")
    if st.light:
        st.files.extend({"file": str(path), "bytes": at, "xxh64": h} for at, h in scan.digests)


class _Scan(NamedTuple):
    offsets: list[int]  # every chunk's first byte (the first: the first data line)
    lines: int  # the data lines of the file
    size: int
    digests: list[tuple[int, str]]  # (bytes, xxh64 of the file's first bytes): at each
    #                                 chunk boundary, then the whole file's; [] unasked


def _scan_lines(path: Path, begin: int, every: int, *, digest: bool) -> _Scan:
    """One pass over a text file: the offset of every ``every``-th line start from
    ``begin``, the lines, and (``digest``) the xxh64 of the whole file and of each
    prefix ending at a chunk boundary (:mod:`cec_spark.source.fingerprint`: a resumed
    ingest checks the part it read): numpy's work per byte, none per line."""
    size = path.stat().st_size
    offsets, lines, pos = [begin], 0, 0
    h = xxhash.xxh64() if digest else None
    digests: list[tuple[int, str]] = []
    with path.open("rb") as fh:
        while block := fh.read(_SCAN_BLOCK):
            ends, n = _boundaries(block, max(0, begin - pos), lines, every)
            done = 0
            for e in ends:
                if pos + e >= size:
                    continue
                offsets.append(pos + e)
                if h is not None:
                    h.update(block[done:e])
                    done = e
                    digests.append((pos + e, h.hexdigest()))
            if h is not None:
                h.update(block[done:] if done else block)
            lines += n
            pos += len(block)
    if size > begin and not _ends_with_newline(path, size):
        lines += 1
    if h is not None:
        digests.append((size, h.hexdigest()))
    return _Scan(offsets, lines, size, digests)


def _boundaries(block: bytes, skip: int, lines: int, every: int) -> tuple[list[int], int]:
    """The offsets in ``block`` just after each newline that ends line ``k * every``
    (counting the ``lines`` before the block; newlines before ``skip`` are not lines'),
    and the block's newlines. The newlines' positions are made only for a block that
    holds such a line."""
    eq = np.frombuffer(block, dtype=np.uint8)[skip:] == 10
    n = int(np.count_nonzero(eq))
    want = (lines // every + 1) * every  # the next line number ending a chunk
    if lines + n < want:
        return [], n
    nl = np.flatnonzero(eq)[want - lines - 1::every] + skip + 1
    return nl.tolist(), n


_SCAN_BLOCK = 16 << 20


def _nth_line(path: Path, start: int, stop: int, n: int, lines: int) -> bytes:
    """The bytes of line ``n`` (1-based) of the chunk ``[start, stop)`` of ``lines``
    lines: the last one read backwards from ``stop`` (a few bytes), another (a cut at
    ``max_rows``) found by reading the chunk; b"" for ``n`` 0."""
    if n <= 0:
        return b""
    with path.open("rb") as fh:
        if n < lines:
            fh.seek(start)
            data = fh.read(stop - start)
            at = 0
            for _ in range(n - 1):
                at = data.index(b"\n", at) + 1
            end = data.find(b"\n", at)
            return data[at:end if end >= 0 else len(data)]
        back = 4096
        while True:
            lo = max(start, stop - back)
            fh.seek(lo)
            data = fh.read(stop - lo).rstrip(b"\n")
            nl = data.rfind(b"\n")
            if nl >= 0 or lo == start:
                return data[nl + 1:]
            back *= 4


def _chunk_times(st: _FileState, name: str, fmt: str, data: bytes, line: int,
                 columns: tuple[str, ...]) -> np.ndarray:
    """The times of a text chunk's rows, in microseconds, parsing its time column alone
    (a row the parser refuses, a blank line or a bad time: the first bad line named)."""
    assert st.columns is not None
    tf = st.time.field
    raw = st.columns.parse_schema().field(tf).type
    try:
        if fmt == "csv":
            table = pacsv.read_csv(
                io.BytesIO(data),
                read_options=pacsv.ReadOptions(column_names=list(columns),
                                               block_size=16 << 20),
                parse_options=pacsv.ParseOptions(ignore_empty_lines=False),
                convert_options=pacsv.ConvertOptions(column_types={tf: raw},
                                                     include_columns=[tf],
                                                     strings_can_be_null=False,
                                                     null_values=[""]))
        else:
            table = pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(
                block_size=16 << 20), parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema([(tf, raw)]), unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _diagnose(fmt, name, data, line, columns, st.time, st.columns, exc) from exc
    if table.num_rows != (n := text_lines(data)):
        raise _diagnose(fmt, name, data, line, columns, st.time, st.columns,
                        ValueError(f"{n} lines gave {table.num_rows} rows"))
    try:
        table = st.time_us(table, name, line, "line")
    except InputError:
        if has_blank_line(data):
            raise _diagnose(fmt, name, data, line, columns, st.time, st.columns,
                            ValueError("a blank line")) from None
        raise
    return np.asarray(table.column(tf).to_numpy())


def _last_times(st: _FileState, name: str, fmt: str, columns: tuple[str, ...],
                lines: list[tuple[int, bytes]]) -> list[int | None]:
    """The time of each ``(line number, bytes)`` (chunks' last lines), as microseconds;
    None for a line that does not give one (its chunk's task names what is wrong).
    Parsed in one go; only if that fails, line by line. Notes the times for
    :meth:`_FileState.warnings`: the source's largest time is a chunk's last."""
    assert st.columns is not None
    tf = st.time.field

    def times(part: list[tuple[int, bytes]]) -> list[int | None]:
        data = b"".join(text.rstrip(b"\r") + b"\n" for _, text in part)
        table = _parse_text(fmt, data, columns, st.columns, {})
        if table.num_rows != len(part) or tf not in table.column_names:
            raise ValueError("lines")
        us = st.time_us(table.select([tf]), name, part[0][0], "line").column(tf)
        return [None if v is None else int(v) for v in us.to_pylist()]

    try:
        return times(lines)
    except (InputError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError, KeyError):
        pass
    out: list[int | None] = []
    for item in lines:
        try:
            out.extend(times([item]))
        except (InputError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError, KeyError):
            out.append(None)
    return out


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
        raise _diagnose(fmt, name, data, line, columns, st.time, st.columns, exc) from exc
    n_lines = text_lines(data)
    if table.num_rows != n_lines or has_blank_line(data):  # a blank line: name it
        raise _diagnose(fmt, name, data, line, columns, st.time, st.columns,
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
        raise _diagnose("csv", name, data, line, columns, st.time, types, exc) from exc
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
        if st.light and st.columns is not None:
            n = sum(pf.metadata.row_group(g).num_rows for g in range(lo, hi))
            rows = st.cut(n)
            if st.order is not None:  # lateness: the chunk's times (its time column)
                times = st.time_us(pf.read_row_groups(list(range(lo, hi)),
                                                      columns=[st.time.field]),
                                   name, row, "row")
                st.add_timed(Chunk(len(st.chunks), "parquet", str(path), lo, hi,
                                   st.next_seq, rows, row),
                             times.column(st.time.field).to_numpy()[:rows], name, "row")
                row += n
                continue
            st.add_light(Chunk(len(st.chunks), "parquet", str(path), lo, hi, st.next_seq,
                               rows, row), _last_row_time(st, pf, name, hi - 1, row, n, rows),
                         f"row {row + rows - 1}")
            row += n
            continue
        table = pf.read_row_groups(list(range(lo, hi)))
        check_big_ints(table, st.spec.aggregate.field, name, row, lo, hi)
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
    if st.light:
        st.files.append({"file": str(path), "bytes": path.stat().st_size,
                         "xxh64": file_digest(path)})


def _last_row_time(st: _FileState, pf: pq.ParquetFile, name: str, group: int, row: int,
                   n: int, rows: int) -> int | None:
    """The time of row ``rows - 1`` of a chunk of ``n`` rows (its row groups' last is
    ``group``), in microseconds, from the footer: the group's largest value of an
    integer or INT64 timestamp time field (its last one when the times are
    non-decreasing, which the task checks), else read from that group's time column
    alone (INT96 timestamps have no statistics). None: none to be had (the
    chunk's task names what is wrong)."""
    assert st.columns is not None
    tf = st.time.field
    if rows <= 0:
        return None
    try:
        field = pf.schema_arrow.field(tf)
        stats = None
        if rows == n and pf.metadata.num_columns == len(pf.schema_arrow):
            stats = pf.metadata.row_group(group).column(
                pf.schema_arrow.get_field_index(tf)).statistics
        if stats is not None and stats.has_min_max and not stats.null_count and (
                pa.types.is_integer(field.type) or (pa.types.is_timestamp(field.type)
                                                    and stats.physical_type == "INT64")):
            # the stored value: an integer, or a timestamp's count in its unit
            table = pa.table({tf: pa.array([stats.max_raw], pa.int64()).cast(field.type)})
            return int(st.time_us(table, name, row + rows - 1, "row").column(tf)[0].as_py())
        col = pf.read_row_group(group, columns=[tf])
        before = n - col.num_rows  # rows of the chunk's groups before the last
        i = rows - 1 - before
        if i < 0:  # the cut ends in an earlier group: read the groups' times
            return None
        table = col.slice(i, 1)
        return int(st.time_us(table, name, row + rows - 1, "row").column(tf)[0].as_py())
    except (InputError, KeyError, TypeError, ValueError, pa.ArrowInvalid,
            pa.ArrowNotImplementedError, OSError):
        return None


def file_digest(path: Path) -> str:
    """The xxh64 of a file's bytes, hex (the source fingerprint's digest)."""
    h = xxhash.xxh64()
    with path.open("rb") as fh:
        while block := fh.read(_SCAN_BLOCK):
            h.update(block)
    return h.hexdigest()


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
