"""The types of a planned source: chunks, column types, a source's plan.

A source is cut into **chunks**, the unit of ingest and of resumption
(:mod:`cec_spark.source.planner`). These types are what the planner produces, what
``run.toml`` stores (the column types) and what travels to Spark tasks (a chunk as
JSON text).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from cec.spec import PipelineSpec

SEQ = "__cec_seq"  # the column that carries the source row number through Spark
END_MARKER = "_END"
EXTENSIONS = {"csv": (".csv",), "jsonl": (".jsonl", ".json", ".ndjson"),
              "parquet": (".parquet", ".parq")}
_TYPES = {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
          "bool": pa.bool_()}
# a time field's raw types (cec_spark.source.times): read as these, ingested as int64 us
_RAW_TIME_TYPES = {"timestamp": pa.timestamp("us", tz="UTC"), "iso": pa.string()}


@dataclass(frozen=True)
class Chunk:
    """A contiguous run of source rows; JSON-serialisable (shipped to Spark as text)."""

    index: int
    fmt: str  # csv | jsonl | parquet | generator
    file: str  # absolute path; "" for the generator
    start: int  # byte offset (csv/jsonl), first row group (parquet), first row (generator)
    stop: int  # exclusive end in the same unit
    first_seq: int
    rows: int  # rows delivered (after a --max-tuples cut); a sparse chunk's: its seq span
    first_line: int = 0  # 1-based line of the first row (csv/jsonl), for messages
    columns: tuple[str, ...] = ()  # csv: the file's header
    # with lateness settings (cec_spark.source.order; else the defaults): the largest
    # time before the chunk, the seqs its rows take, the earlier chunks holding rows it
    # releases, and whether it is the flush that releases every held row
    max_before: int | None = None
    seq_base: int = -1  # -1: first_seq
    seq_end: int = -1  # -1: next_seq
    carry: tuple[Chunk, ...] = ()
    final: bool = False
    # the watermark after this chunk (cec.ingest_token's ``wm``): every row of the source
    # after it has a time >= wm (None: no row yet); set by the planner
    wm: int | None = None
    # True: the planner did not read this chunk's rows (it read file metadata only,
    # cec_spark.source.check); the ingest task that reads it checks every row before it
    # yields one (cec_spark.source.read.chunk_table), against the time of the row before
    # the chunk (``prev_ts``, None: none or unknown; ``prev_where`` names that row)
    check: bool = False
    prev_ts: int | None = None
    prev_where: str = ""
    # a resumed ingest's chunk: its first ``skip`` rows, which every upstream log holds,
    # are not read (cec_spark.ingest.logs.resume_chunks; only where seq is a source row)
    skip: int = 0
    # a text chunk cut by bytes (a run planned by bytes, RunSettings.chunk_bytes): its
    # rows are not counted by the planner, and ``rows`` is its seq span, ``stop -
    # start``. Its first seq is its first byte's place in the source (the sizes of the
    # files before it plus ``start``), row ``i`` of it takes ``first_seq + i`` (a row
    # holds at least a byte: below ``next_seq``), and ``first_line`` is 0 (unknown: a
    # message counts it, cec_spark.source.read.first_line_of). The task that reads it
    # counts its rows (cec_spark.source.chunk_report).
    sparse: bool = False
    # its task reports it once read whole and checked, before its first row is yielded:
    # rows and the digest of its bytes (cec_spark.source.chunk_report; a run made with
    # ``[cec] source_reports``: every chunk of its csv, jsonl or parquet files)
    reported: bool = False

    @property
    def next_seq(self) -> int:
        return self.first_seq + self.rows

    @property
    def emit_base(self) -> int:
        """The first seq of the rows this chunk emits."""
        return self.first_seq if self.seq_base < 0 else self.seq_base

    @property
    def emit_end(self) -> int:
        """The seq after the rows this chunk emits."""
        return self.next_seq if self.seq_end < 0 else self.seq_end

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Chunk:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Chunk:
        """The chunk of ``asdict(chunk)`` (as JSON made it: lists for tuples)."""
        raw["columns"] = tuple(raw["columns"])
        raw["carry"] = tuple(cls.from_dict(c) for c in raw.get("carry", ()))
        return cls(**raw)


@dataclass(frozen=True)
class ColumnTypes:
    """The Arrow types of the source columns, as names from ``_TYPES``; the time field's
    is its kind (``int64``, ``timestamp`` or ``iso``: :mod:`cec_spark.source.times`)."""

    names: tuple[str, ...]
    types: tuple[str, ...]

    def schema(self) -> pa.Schema:
        """The columns as the ingest reads them (every time field int64 microseconds)."""
        return pa.schema([(n, _TYPES.get(t, pa.int64()))
                          for n, t in zip(self.names, self.types, strict=True)])

    def parse_schema(self) -> pa.Schema:
        """The columns as the source's text holds them (an ISO time field is text)."""
        return pa.schema([(n, _TYPES.get(t) or _RAW_TIME_TYPES[t])
                          for n, t in zip(self.names, self.types, strict=True)])

    def kind(self, name: str) -> str:
        return self.types[self.names.index(name)]

    def to_json(self) -> str:
        return json.dumps({"names": list(self.names), "types": list(self.types)})

    @classmethod
    def from_json(cls, text: str) -> ColumnTypes:
        raw = json.loads(text)
        return cls(tuple(raw["names"]), tuple(raw["types"]))


@dataclass(frozen=True)
class TimeSpec:
    """What the reader needs to know of the time field (``[source]``) and, to check a
    chunk's rows in the ingest task, of the columns every row must hold; JSON-serialisable."""

    field: str
    unit: str = "us"  # of an integer time field
    allowed_lateness_us: int = 0
    late: str = "error"
    group_by: str = ""  # the key column ("": not known, no check of it)
    value_field: str | None = None  # the aggregate's field (None: none)

    @property
    def reorders(self) -> bool:
        return self.allowed_lateness_us > 0 or self.late == "drop"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TimeSpec:
        return cls(**json.loads(text))

    @classmethod
    def of(cls, spec: PipelineSpec) -> TimeSpec:
        src = spec.source
        return cls(src.time_field, src.time_unit, src.allowed_lateness_us, src.late,
                   spec.aggregate.group_by, spec.aggregate.field)

    @property
    def needed(self) -> list[str]:
        """The columns every row must hold a value of: the time, the key, the field."""
        cols = [self.field] + ([self.group_by] if self.group_by else [])
        return cols + ([self.value_field] if self.value_field is not None else [])


@dataclass(frozen=True)
class WatchState:
    """Where a :class:`cec_spark.source.folder.StreamDirWatcher` stands: the files it has
    consumed and the running state of its validation (a watcher resumes from it)."""

    seen: tuple[str, ...]
    next_seq: int
    last_ts: int | None
    last_where: str
    order: Any = None  # with lateness settings: a cec_spark.source.order.OrderState


@dataclass(frozen=True)
class SourcePlan:
    """Chunks of a source in stream order and the types of its columns."""

    columns: ColumnTypes
    chunks: tuple[Chunk, ...] = ()
    ended: bool = True  # False while an unbounded source may still grow
    watch: WatchState | None = None  # a stream folder's: where its watcher stands
    warnings: tuple[str, ...] = ()  # what looks wrong (the time unit), nothing changed
    # the source's fingerprint made while planning (cec_spark.source.fingerprint; ():
    # none made, fingerprint() makes it)
    files: tuple[dict[str, Any], ...] = ()

    @property
    def rows(self) -> int:
        """The seq after the source's last row: its rows, but for chunks cut by bytes
        (:attr:`Chunk.sparse`), whose seqs are places in the bytes."""
        return self.chunks[-1].next_seq if self.chunks else 0
