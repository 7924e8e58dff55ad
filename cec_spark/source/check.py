"""Chunk planning of a source's files: the entry per file, and csv and jsonl files.

:func:`plan_file` plans one file of a source into the pass's
:class:`~cec_spark.source.file_state.FileState` (a parquet file:
:mod:`cec_spark.source.parquet`); a csv or jsonl file is planned here. A run's plan is
**light** (:attr:`FileState.light <cec_spark.source.file_state.FileState.light>`): chunk
boundaries from file metadata (a csv header, a parquet footer's row counts; a text
file's bytes, every ``[cec] chunk_bytes`` at a line start,
:func:`~cec_spark.source.scan.line_starts`, or, for a run from before, its newlines
counted in one pass with its fingerprint, :func:`~cec_spark.source.scan.scan_lines`),
the source's first chunk parsed and checked (it fixes the column types) and each other
chunk's last time read (its watermark, and the time its successor's first row must not
be below, ``FileState.add_light``); the ingest task checks the other rows
(:attr:`~cec_spark.source.types.Chunk.check`). Otherwise (lateness settings, whose plan
needs every row's time; a stream folder's watcher) each file is parsed once, chunk by
chunk, as the ingest will read it. Either way a missing column, a malformed row, a
missing or non-finite value or a time field that goes back raises :class:`InputError`
naming the file, line (row for parquet) and field.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.file_state import FileState
from cec_spark.source.files import source_files
from cec_spark.source.parquet import plan_parquet_file
from cec_spark.source.read import (
    csv_header,
    diagnose,
    has_blank_line,
    header_text,
    parse_text,
    read_bytes,
    text_lines,
)
from cec_spark.source.scan import line_starts, nth_line, scan_lines
from cec_spark.source.types import Chunk, ColumnTypes

__all__ = ["chunk_bytes_for", "plan_file", "reports_for"]

_INTEGER = r"^\s*[-+]?\d+\s*$"


def _plan_text_file(st: FileState, path: Path, fmt: str) -> None:
    """Plan one csv or jsonl file: chunks of ``chunk_rows`` lines (the first chunk of the
    source fixes the column types). Each chunk is parsed and checked here, or, light
    (:attr:`FileState.light`), only the source's first: the others are cut by counting
    newlines and the time of each one's last line read (its watermark); their tasks
    check their rows (:attr:`Chunk.check`)."""
    if st.chunk_bytes is not None:
        _plan_text_bytes(st, path, fmt, st.chunk_bytes)
        return
    spec = st.spec
    columns, header_len, first_line = _text_header(st, path, fmt)
    scan = scan_lines(path, header_len, spec.source.chunk_rows, digest=st.light)
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
                ts = _chunk_times(st, path.name, fmt, read_bytes(str(path), start, stop),
                                  line, columns)
                st.add_timed(Chunk(len(st.chunks), fmt, str(path), start, stop,
                                   st.next_seq, rows, line, columns), ts[:rows],
                             path.name, "line")
                line += n_lines
                continue
            lasts.append((start, stop, line, rows, n_lines,
                          nth_line(path, start, stop, rows, n_lines)))
            st.next_seq += rows  # (the chunks are added below, in order)
            line += n_lines
            continue
        data = read_bytes(str(path), start, stop)
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


def _plan_text_bytes(st: FileState, path: Path, fmt: str, every: int) -> None:
    """Plan one csv or jsonl file by bytes (:attr:`Chunk.sparse`): a chunk every
    ``every`` bytes, at the next line start (:func:`line_starts`), its first seq its
    first byte's place in the source (the files before it take their sizes). Of the
    rows, only the source's first chunk is parsed and checked (it fixes the column
    types), and each other chunk's last line read (its watermark); no newline is
    counted: what this reads grows with the files and chunks, not the rows. The
    file's fingerprint is its size and time (:mod:`cec_spark.source.chunk_report`
    keeps the digests of what the tasks read)."""
    columns, header_len, first_line = _text_header(st, path, fmt)
    stat = path.stat()
    base = st.next_seq  # the sizes of the files before this one
    st.next_seq = base + header_len
    bounds = [*line_starts(path, header_len, stat.st_size, every), stat.st_size]
    lasts: list[tuple[int, int, bytes]] = []
    for start, stop in itertools.pairwise(bounds):
        if start >= stop:
            break
        chunk = Chunk(len(st.chunks) + len(lasts), fmt, str(path), start, stop,
                      base + start, stop - start, 0, columns, sparse=True, reported=True)
        if st.columns is not None:
            lasts.append((start, stop, nth_line(path, start, stop, 1, 1)))
            continue
        data = read_bytes(str(path), start, stop)
        table, _ = _parse_text_chunk(st, path.name, fmt, data, first_line, columns)
        table = _fix_types(st, table, path.name)
        assert st.columns is not None
        table = st.time_us(table, path.name, first_line, "line")
        table = table.cast(st.columns.schema()) if fmt == "csv" else table
        st.add_chunk(replace(chunk, first_line=first_line),
                     st.check(table, path.name, first_line, "line"))
    if lasts:
        times = _last_times(st, path.name, fmt, columns, [(0, text) for _, _, text in lasts])
        for k, ((start, stop, _), last) in enumerate(zip(lasts, times, strict=True)):
            where = f"the last line of {path.name}" if k == len(lasts) - 1 else ""
            st.add_light(Chunk(len(st.chunks), fmt, str(path), start, stop, base + start,
                               stop - start, 0, columns, sparse=True, reported=True),
                         last, where)
    st.next_seq = base + stat.st_size
    st.files.append({"file": str(path), "bytes": stat.st_size,
                     "mtime_ns": stat.st_mtime_ns})


def _chunk_times(st: FileState, name: str, fmt: str, data: bytes, line: int,
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
        raise diagnose(fmt, name, data, line, columns, st.time, st.columns, exc) from exc
    if table.num_rows != (n := text_lines(data)):
        raise diagnose(fmt, name, data, line, columns, st.time, st.columns,
                       ValueError(f"{n} lines gave {table.num_rows} rows"))
    try:
        table = st.time_us(table, name, line, "line")
    except InputError:
        if has_blank_line(data):
            raise diagnose(fmt, name, data, line, columns, st.time, st.columns,
                           ValueError("a blank line")) from None
        raise
    return np.asarray(table.column(tf).to_numpy())


def _last_times(st: FileState, name: str, fmt: str, columns: tuple[str, ...],
                lines: list[tuple[int, bytes]]) -> list[int | None]:
    """The time of each ``(line number, bytes)`` (chunks' last lines), as microseconds;
    None for a line that does not give one (its chunk's task names what is wrong).
    Parsed in one go; only if that fails, line by line. Notes the times for
    :meth:`FileState.warnings`: the source's largest time is a chunk's last."""
    assert st.columns is not None
    tf = st.time.field

    def times(part: list[tuple[int, bytes]]) -> list[int | None]:
        data = b"".join(text.rstrip(b"\r") + b"\n" for _, text in part)
        table = parse_text(fmt, data, columns, st.columns, {})
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


def _text_header(st: FileState, path: Path, fmt: str) -> tuple[tuple[str, ...], int, int]:
    """(columns, header bytes, first data line) of a csv file (checked to hold the
    columns the spec needs); a jsonl file has none."""
    if fmt != "csv":
        return (), 0, 1
    columns, header_len = csv_header(path)
    missing = [c for c in st.needed() if c not in columns]
    if missing:
        raise InputError(f"{path.name}: line 1: missing column {missing[0]!r} "
                         f"({header_text(columns)})")
    return tuple(columns), header_len, 2


def _parse_text_chunk(st: FileState, name: str, fmt: str, data: bytes, line: int,
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
        table = parse_text(fmt, data, columns, st.columns, overrides)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise diagnose(fmt, name, data, line, columns, st.time, st.columns, exc) from exc
    n_lines = text_lines(data)
    if table.num_rows != n_lines or has_blank_line(data):  # a blank line: name it
        raise diagnose(fmt, name, data, line, columns, st.time, st.columns,
                       ValueError(f"{n_lines} lines gave {table.num_rows} rows"))
    if fmt == "jsonl":
        table = _jsonl_time_as_text(st, name, data, line, table)
    elif st.columns is None and table.num_rows:
        table = _csv_time_kind(st, name, data, line, columns, table)
    return table, n_lines


def _jsonl_time_as_text(st: FileState, name: str, data: bytes, line: int,
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


def _csv_time_kind(st: FileState, name: str, data: bytes, line: int,
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
        raise diagnose("csv", name, data, line, columns, st.time, types, exc) from exc
    return table.set_column(table.column_names.index(tf), tf, ints)


def _fix_types(st: FileState, table: pa.Table, name: str) -> pa.Table:
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


#: bytes of the first file's first lines a new run measures its rows' width on
_SAMPLE = 1 << 16


def reports_for(spec: PipelineSpec, max_rows: int | None) -> bool:
    """The ``[cec] source_reports`` of a new run: the tasks of a csv, jsonl or parquet
    file source without lateness settings or ``max_rows`` report the chunks they read
    (:mod:`cec_spark.source.chunk_report`), and the planner digests no byte (False: as
    runs from before; ``CEC_PLAN_BY_ROWS=1`` makes new runs so too, to test old run
    directories)."""
    src = spec.source
    return src.path is not None and src.kind in ("csv", "jsonl", "parquet") \
        and not src.reorders and max_rows is None \
        and os.environ.get("CEC_PLAN_BY_ROWS") != "1"


def chunk_bytes_for(spec: PipelineSpec, max_rows: int | None) -> int | None:
    """The ``[cec] chunk_bytes`` of a new run: a text file source whose tasks report
    their chunks (:func:`reports_for`) is planned by bytes, its chunks about
    ``chunk_rows`` rows of the width of the first lines of the first file that has
    some (None: planned by rows). Fixed at creation, so every later plan of the run
    cuts its chunks the same."""
    src = spec.source
    if src.path is None or src.kind not in ("csv", "jsonl") \
            or not reports_for(spec, max_rows):
        return None
    head, lines = b"", 0
    for path in source_files(src.path, src.kind if src.path.is_dir() else None):
        with path.open("rb") as fh:  # the first file with a line after its header
            if src.kind == "csv":
                fh.readline()
            head = fh.read(_SAMPLE)
        lines = head.count(b"\n")
        if lines:
            break
    width = len(head) / lines if lines else max(len(head), 1)
    return max(1, round(src.chunk_rows * width))


def plan_file(st: FileState, path: Path, fmt: str) -> None:
    """Plan one file of a source (``fmt``: csv, jsonl or parquet) into the pass's state
    ``st`` (module docstring)."""
    if fmt == "parquet":
        plan_parquet_file(st, path)
    else:
        _plan_text_file(st, path, fmt)
