"""The types of a planned source: chunks, column types, a source's plan.

A source is cut into **chunks**, the unit of ingest and of resumption
(:mod:`cec_spark.sources`). These types are what the planner produces, what
``run.toml`` stores (the column types) and what travels to Spark tasks (a chunk as
JSON text).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pyarrow as pa

from cec.errors import UsageError

SEQ = "__cec_seq"  # the column that carries the source row number through Spark
END_MARKER = "_END"
EXTENSIONS = {"csv": (".csv",), "jsonl": (".jsonl", ".json", ".ndjson"),
              "parquet": (".parquet", ".parq")}
_TYPES = {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
          "bool": pa.bool_()}



class InputError(UsageError):
    """Bad input data: a missing file or column, a malformed row, time going back."""



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


@dataclass(frozen=True)
class WatchState:
    """Where a :class:`cec_spark.stream_dir.StreamDirWatcher` stands: the files it has
    consumed and the running state of its validation (a watcher resumes from it)."""

    seen: tuple[str, ...]
    next_seq: int
    last_ts: int | None
    last_where: str


@dataclass(frozen=True)
class SourcePlan:
    """Chunks of a source in stream order and the types of its columns."""

    columns: ColumnTypes
    chunks: tuple[Chunk, ...] = ()
    ended: bool = True  # False while an unbounded source may still grow
    watch: WatchState | None = None  # a stream folder's: where its watcher stands

    @property
    def rows(self) -> int:
        return self.chunks[-1].next_seq if self.chunks else 0
