"""Sources: validation, chunk planning and chunk reading of a pipeline's input.

A source is cut into **chunks**, the unit of ingest and of resumption. A chunk is a
contiguous run of source rows: a byte range of whole lines of a CSV/JSONL file, a run
of row groups of a parquet file, or a row range of the generator. Chunk ``c`` knows
``first_seq``, the source row number of its first row, so ``seq = first_seq + i`` is
the row's position in the stream *before* the filter (ARCHITECTURE §1). Chunks are
numbered densely from 0 in stream order; planning is deterministic (the same files
give the same chunks), which is what lets a restarted ingest skip what its logs'
commit tokens already cover.

Bounded sources are validated completely by :func:`plan_source` before anything is
written: a missing file or column, a malformed row or a time field that goes back
raises :class:`InputError` (exit status 2) naming the file, line (row for parquet) and
field. ``stream-dir`` sources are watched by :class:`StreamDirWatcher`; its files are
consumed in name order (names starting with ``.`` or ``_`` are ignored: write a file
under such a name and rename it into place), each validated as it is found, and the
stream ends when a file named ``_END`` appears.

This module does no Spark: :func:`read_chunk` is what the Spark data source
(:mod:`cec_spark.ingest`) calls on an executor to produce Arrow batches.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from cec.errors import UsageError
from cec.spec import PipelineSpec

SEQ = "__cec_seq"  # the column that carries the source row number through Spark
END_MARKER = "_END"
EXTENSIONS = {"csv": (".csv",), "jsonl": (".jsonl", ".json", ".ndjson"),
              "parquet": (".parquet", ".parq")}
_TYPES = {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
          "bool": pa.bool_()}


# The slow diagnosis (Python's csv) must read every line the fast path (Arrow) reads:
# Python's default limit of 128 KiB per field made a long line a raw traceback.
csv.field_size_limit(1 << 30)


class InputError(UsageError):
    """Bad input data: a missing file or column, a malformed row, time going back."""


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Chunk:
    """A contiguous run of source rows; JSON-serialisable (shipped to Spark as text)."""

    index: int
    fmt: str  # csv | jsonl | parquet | generator
    file: str  # absolute path; "" for the generator
    start: int  # byte offset (csv/jsonl), first row group (parquet), first row (generator)
    stop: int  # exclusive end in the same unit
    first_seq: int
    rows: int  # rows delivered (after a --max-tuples cut)
    first_line: int = 0  # 1-based line of the first row (csv/jsonl), for messages
    columns: tuple[str, ...] = ()  # csv: the file's header

    @property
    def next_seq(self) -> int:
        return self.first_seq + self.rows

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Chunk:
        raw = json.loads(text)
        raw["columns"] = tuple(raw["columns"])
        return cls(**raw)


@dataclass(frozen=True)
class ColumnTypes:
    """The Arrow types of the source columns, as names from ``_TYPES``."""

    names: tuple[str, ...]
    types: tuple[str, ...]

    def schema(self) -> pa.Schema:
        return pa.schema([(n, _TYPES[t]) for n, t in zip(self.names, self.types, strict=True)])

    def to_json(self) -> str:
        return json.dumps({"names": list(self.names), "types": list(self.types)})

    @classmethod
    def from_json(cls, text: str) -> ColumnTypes:
        raw = json.loads(text)
        return cls(tuple(raw["names"]), tuple(raw["types"]))


@dataclass
class SourcePlan:
    """Chunks of a source in stream order and the types of its columns."""

    columns: ColumnTypes
    chunks: list[Chunk] = field(default_factory=list)
    ended: bool = True  # False while an unbounded source may still grow

    @property
    def rows(self) -> int:
        return self.chunks[-1].next_seq if self.chunks else 0


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
                t = "int64"
            elif col == agg.field:
                t = "float64"
            elif col == agg.group_by:
                t = "int64" if t == "int64" else "string"
            types.append(t)
        self.columns = ColumnTypes(tuple(table.column_names), tuple(types))
        return self.columns

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
        if len(ts):
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


# --------------------------------------------------------------------------- files


def _line_starts(path: Path, begin: int, every: int) -> tuple[list[int], int, int]:
    """Offsets of every ``every``-th line start from ``begin``; (offsets, lines, size).

    A final line without a newline counts; ``offsets[0] == begin``.
    """
    size = path.stat().st_size
    offsets = [begin]
    lines = 0
    pos = begin
    with path.open("rb") as fh:
        fh.seek(begin)
        while True:
            block = fh.read(64 << 20)
            if not block:
                break
            nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            ends = nl + pos + 1  # the offsets just after each newline
            for k in range(len(ends)):
                if (lines + k + 1) % every == 0 and ends[k] < size:
                    offsets.append(int(ends[k]))
            lines += len(nl)
            pos += len(block)
    if size > begin and not _ends_with_newline(path, size):
        lines += 1
    return offsets, lines, size


def _ends_with_newline(path: Path, size: int) -> bool:
    with path.open("rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) == b"\n"


def _read_bytes(path: str, start: int, stop: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(stop - start)


def _csv_header(path: Path) -> tuple[tuple[str, ...], int]:
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


def _header_text(columns: tuple[str, ...]) -> str:
    """The header for a message, only if it looks like column names: a file that is
    not a CSV (a spec pointing at /etc/passwd) must not have its first line echoed."""
    if len(columns) <= 50 and all(_COLUMN_NAME.fullmatch(c) for c in columns):
        return f"the header has {', '.join(columns)}"
    return f"its first line is not a header of column names ({len(columns)} fields)"


def _parse_text(fmt: str, data: bytes, columns: tuple[str, ...],
                types: ColumnTypes | None, overrides: dict[str, pa.DataType]) -> pa.Table:
    if fmt == "csv":
        col_types = dict(overrides)
        if types is not None:
            col_types = {n: _TYPES[t] for n, t in zip(types.names, types.types, strict=True)}
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=list(columns), block_size=16 << 20),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(column_types=col_types,
                                                 strings_can_be_null=False,
                                                 # "nan" is a number (refused later as
                                                 # not finite), not a missing value
                                                 null_values=[""]))
    schema = types.schema() if types is not None else None
    opts = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"
                               if schema is not None else "infer")
    return pajson.read_json(io.BytesIO(data), read_options=pajson.ReadOptions(
        block_size=16 << 20), parse_options=opts)


def _diagnose(fmt: str, name: str, data: bytes, first_line: int, columns: tuple[str, ...],
              spec: PipelineSpec, types: ColumnTypes | None, cause: Exception) -> InputError:
    """Find the first bad line of a chunk the fast parser refused, slowly and exactly."""
    agg = spec.aggregate
    checks: dict[str, type] = {spec.source.time_field: int}
    if agg.field is not None:
        checks[agg.field] = float
    if (types is not None and agg.group_by in types.names
            and types.types[types.names.index(agg.group_by)] == "int64"):
        checks[agg.group_by] = int
    lines = data.decode("utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        where = f"{name}: line {first_line + i}"
        if not line.strip():
            return InputError(f"{where}: the line is blank")
        if fmt == "csv":
            try:
                row = next(csv.reader([line]))
            except csv.Error as exc:
                return InputError(f"{where}: not a CSV line: {exc}")
            if len(row) != len(columns):
                return InputError(f"{where}: expected {len(columns)} fields "
                                  f"({','.join(columns)}), got {len(row)}")
            values: dict[str, object] = dict(zip(columns, row, strict=True))
        else:
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                return InputError(f"{where}: not a JSON object: "
                                  f"{getattr(exc, 'msg', type(exc).__name__)}")
            if not isinstance(obj, dict):
                return InputError(f"{where}: not a JSON object")
            values = obj
        for col, kind in checks.items():
            if col not in values or values[col] in (None, ""):
                return InputError(f"{where}: {col}: missing value")
            raw = values[col]
            try:
                if kind is int:
                    if isinstance(raw, float) or (isinstance(raw, str) and not
                                                  raw.strip().lstrip("-").isdigit()):
                        raise ValueError(raw)
                    int(raw)  # type: ignore[call-overload]
                else:
                    float(raw)  # type: ignore[arg-type]
            except (TypeError, ValueError, OverflowError):
                what = "an integer" if kind is int else "a number"
                if col == spec.source.time_field:
                    what = "an integer (microseconds since the epoch)"
                shown = raw if not isinstance(raw, str) or len(raw) <= 40 else raw[:40] + "..."
                return InputError(f"{where}: {col}: {shown!r} is not {what}")
    return InputError(f"{name}: lines {first_line}-{first_line + len(lines) - 1}: "
                      f"cannot parse: {cause}")


def _plan_text_file(st: _FileState, path: Path, fmt: str) -> None:
    spec = st.spec
    name = path.name
    if fmt == "csv":
        columns, header_len = _csv_header(path)
        missing = [c for c in st.needed() if c not in columns]
        if missing:
            raise InputError(f"{name}: line 1: missing column {missing[0]!r} "
                             f"({_header_text(columns)})")
        first_line = 2
    else:
        columns, header_len, first_line = (), 0, 1
    every = spec.source.chunk_rows
    offsets, _, size = _line_starts(path, header_len, every)
    offsets.append(size)
    line = first_line
    for start, stop in itertools.pairwise(offsets):
        if st.full or start >= stop:
            break
        data = _read_bytes(str(path), start, stop)
        overrides = {spec.source.time_field: pa.int64()}
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
            missing = [c for c in st.needed() if c not in table.column_names]
            if missing:
                raise InputError(f"{name}: line {line}: missing field {missing[0]!r}")
            tf = spec.source.time_field
            tcol = table.column(tf)
            if not pa.types.is_integer(tcol.type) and not pa.types.is_null(tcol.type):
                i = 0 if tcol.null_count == len(tcol) else int(
                    pc.index(pc.is_valid(tcol), True).as_py())
                v = tcol[i].as_py()
                shown = v.isoformat() if hasattr(v, "isoformat") else v
                raise InputError(f"{name}: line {line + i}: {tf}: {shown!r} is not an "
                                 "integer (microseconds since the epoch)")
        if st.columns is None:
            key = table.column(spec.aggregate.group_by)
            if pa.types.is_string(key.type):
                with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    table = table.set_column(table.column_names.index(spec.aggregate.group_by),
                                             spec.aggregate.group_by, pc.cast(key, pa.int64()))
            st.fix_types(table, name)
            assert st.columns is not None
            table = table.cast(st.columns.schema()) if fmt == "csv" else table
        cut = st.check(table, name, line, "line")
        st.chunks.append(Chunk(len(st.chunks), fmt, str(path), start, stop, st.next_seq,
                               cut.num_rows, line, columns))
        st.next_seq += cut.num_rows
        line += n_lines


def _plan_parquet_file(st: _FileState, path: Path) -> None:
    name = path.name
    try:
        pf = pq.ParquetFile(path)
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
            table = table.select(list(st.columns.names)).cast(st.columns.schema())
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(f"{name}: row groups {lo}-{hi - 1}: columns do not match the "
                             f"source's first file: {exc}") from exc
        cut = st.check(table, name, row, "row")
        st.chunks.append(Chunk(len(st.chunks), "parquet", str(path), lo, hi, st.next_seq,
                               cut.num_rows, row))
        st.next_seq += cut.num_rows
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


def plan_source(spec: PipelineSpec, *, max_rows: int | None = None) -> SourcePlan:
    """Validate a bounded source completely and cut it into chunks.

    For ``stream-dir`` this is the plan of the files present now (use
    :class:`StreamDirWatcher` to follow the folder).
    """
    src = spec.source
    if src.kind == "generator":
        assert src.generator is not None
        total = src.generator.rows if max_rows is None else min(max_rows, src.generator.rows)
        cols = ColumnTypes(("item_id", "item_price", "item_time"),
                           ("int64", "float64", "int64"))
        chunks = [Chunk(i, "generator", "", lo, min(lo + src.chunk_rows, total), lo,
                        min(lo + src.chunk_rows, total) - lo)
                  for i, lo in enumerate(range(0, total, src.chunk_rows))]
        return SourcePlan(cols, chunks, True)
    if src.kind == "stream-dir":
        watcher = StreamDirWatcher(spec, max_rows=max_rows)
        watcher.poll()
        return watcher.plan
    assert src.path is not None
    st = _FileState(spec, max_rows)
    files = source_files(src.path, src.kind if src.path.is_dir() else None)
    if not files:
        raise InputError(f"{src.path}: [source].path: no {src.kind} files in this folder")
    for path in files:
        _plan_file(st, path, src.kind)
        if st.full:
            break
    if st.columns is None:
        raise InputError(f"{src.path}: the source holds no rows")
    return SourcePlan(st.columns, st.chunks, True)


class StreamDirWatcher:
    """Follows a ``stream-dir`` source: new files in name order, ``_END`` ends it."""

    def __init__(self, spec: PipelineSpec, *, max_rows: int | None = None) -> None:
        assert spec.source.path is not None
        self.spec = spec
        self.folder = spec.source.path
        self._st = _FileState(spec, max_rows)
        self._seen: list[str] = []
        self._known: set[str] = set()  # every name looked at: consumed or skipped
        self.ended = False

    @property
    def plan(self) -> SourcePlan:
        cols = self._st.columns or ColumnTypes((), ())
        return SourcePlan(cols, list(self._st.chunks), self.ended)

    def poll(self) -> list[Chunk]:
        """Validate and plan files that appeared since the last poll; the new chunks."""
        if not self.folder.is_dir():
            raise InputError(f"{self.folder}: [source].path: not a directory")
        if self.ended:
            return []
        before = len(self._st.chunks)
        end_seen = (self.folder / END_MARKER).exists()
        fmt = self.spec.source.format
        for path in self._new_files(fmt):
            if self._seen and path.name < self._seen[-1]:
                raise InputError(f"{path.name}: arrived after {self._seen[-1]} but sorts before "
                                 "it; stream-dir files are consumed in name order")
            _plan_file(self._st, path, _file_format(path, fmt))
            self._seen.append(path.name)
            self._known.add(path.name)
            if self._st.full:
                end_seen = True
                break
        self.ended = end_seen
        return self._st.chunks[before:]

    def _new_files(self, fmt: str | None) -> list[Path]:
        """The data files not consumed yet, in name order (as :func:`source_files`).

        Only names not seen before are looked at: a poll costs one listing of the
        folder, not a look at every file it ever consumed (a long stream has many).
        """
        try:
            with os.scandir(self.folder) as it:
                names = sorted(e.name for e in it if e.name not in self._known)
        except FileNotFoundError as exc:
            raise InputError(f"{self.folder}: [source].path: not a directory") from exc
        files = []
        for name in names:
            if name.startswith((".", "_")):
                continue  # hidden: being written, or the end marker
            path = self.folder / name
            if not path.is_file():
                continue
            if fmt is not None and not name.lower().endswith(EXTENSIONS[fmt]):
                self._known.add(name)  # never a data file of this source
                continue
            files.append(path)
        return files


# --------------------------------------------------------------------------- reading


def read_chunk(chunk: Chunk, columns: ColumnTypes, *, batch_rows: int = 1 << 18
               ) -> Iterator[pa.RecordBatch]:
    """The rows of a chunk with typed columns plus ``SEQ`` (int64), as Arrow batches."""
    schema = columns.schema()
    if chunk.fmt == "parquet":
        table = pq.ParquetFile(chunk.file).read_row_groups(
            list(range(chunk.start, chunk.stop)), columns=list(columns.names))
    else:
        data = _read_bytes(chunk.file, chunk.start, chunk.stop)
        table = _parse_text(chunk.fmt, data, chunk.columns, columns, {})
        table = table.select(list(columns.names))
    table = table.cast(schema).slice(0, chunk.rows)
    seq = pa.array(np.arange(chunk.first_seq, chunk.first_seq + table.num_rows,
                             dtype=np.int64))
    table = table.append_column(SEQ, seq)
    yield from table.to_batches(max_chunksize=batch_rows)

