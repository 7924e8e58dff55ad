"""Pipeline specs: the TOML file a user writes, parsed into frozen dataclasses.

A spec has five tables (``[source]``, ``[filter]``, ``[aggregate]``, ``[checkpoint]``,
``[run]``); only ``[source]`` and ``[aggregate]`` are required. Every problem is a
:class:`cec.errors.SpecError` whose message names the file and the field, e.g.::

    items.toml: [aggregate].function: 'median' is not one of count|sum|min|max|avg

Relative paths are resolved against the directory of the spec file. The parser does
no I/O beyond reading the spec itself (whether a source path exists is checked by
:mod:`cec_spark.sources`, which names the missing file).

``dump_spec`` writes the resolved spec back as TOML (absolute paths, every default
filled in); a run stores it as ``RUN/run.toml`` so recovery needs only the directory,
and ``load_spec`` reads it back into an equal :class:`PipelineSpec`.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from cec.errors import SpecError, UsageError

SOURCE_KINDS = ("csv", "parquet", "jsonl", "generator", "stream-dir")
FILE_FORMATS = ("csv", "parquet", "jsonl")
FUNCTIONS = ("count", "sum", "min", "max", "avg")
WINDOW_KINDS = ("count", "time")
MODES = ("none", "open-only", "targets")  # cec.policy.MODES
RESERVED_COLUMNS = ("ts", "seq")

SourceKind = Literal["csv", "parquet", "jsonl", "generator", "stream-dir"]
Function = Literal["count", "sum", "min", "max", "avg"]

_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|h)\s*$")
_UNIT_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_Q_FACTOR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x\s*$")


@dataclass(frozen=True)
class GeneratorSpec:
    """The paper's workload: ``item_id`` (uniform over ``keys``), ``item_price``, ``item_time``.

    Row ``i`` is a pure function of ``(seed, i)``: ``item_time = start_ts + i * interval_us``.
    """

    rows: int = 2_000_000
    keys: int = 100_000
    seed: int = 42
    start_ts: int = 1_700_000_000_000_000
    interval_us: int = 10


@dataclass(frozen=True)
class SourceSpec:
    kind: SourceKind
    time_field: str
    path: Path | None = None  # absolute; None for the generator
    format: str | None = None  # stream-dir: the format of its files (csv|jsonl|parquet)
    poll_ms: int = 200  # stream-dir: how often the folder is listed
    chunk_rows: int = 1_000_000  # rows per ingest chunk (the unit of resumption)
    generator: GeneratorSpec | None = None

    @property
    def bounded(self) -> bool:
        return self.kind != "stream-dir"


@dataclass(frozen=True)
class WindowSpec:
    kind: Literal["count", "time"]
    size: int  # tuples (count) or microseconds (time)
    slide: int  # same unit; slide == size is tumbling

    @property
    def tumbling(self) -> bool:
        return self.slide == self.size


@dataclass(frozen=True)
class AggregateSpec:
    group_by: str
    field: str | None  # None only for function = "count"
    function: Function
    window: WindowSpec


@dataclass(frozen=True)
class CheckpointSpec:
    q_records: int | None = None  # Q as a number of output records
    q_factor: float | None = 2.0  # Q as a multiple of the open windows ("2x")
    u: int = 1_000_000  # replay target: input tuples
    ci_ms: float = 5.0
    cp_ms: float = 100.0
    mode: str = "targets"

    @property
    def q_text(self) -> str:
        if self.q_records is not None:
            return str(self.q_records)
        return f"{self.q_factor:g}x"


@dataclass(frozen=True)
class RunSpec:
    partitions: int = 4
    master: str | None = None  # None: local[P+2,3] (see default_master)
    fsync: str = "always"
    segment_kb: int = 64 * 1024  # segment size of the logs: the unit of trimming
    trim_upstream: bool = True  # drop upstream segments no recovery can replay again
    trim_lag_s: float = 30.0  # ... as of this long ago (an output tail lost since heals)
    # Spark settings ([run.spark] and --conf), applied over cec's defaults
    spark: tuple[tuple[str, str], ...] = ()
    executor_wait_s: float = 30.0  # how long the start waits for executors to register
    slot_timeout_s: float = 300.0  # how long a run waits for lost task slots to come back
    # output log retention (None: keep everything); never past what recovery needs or a
    # registered consumer (cec export --consumer) has acknowledged
    output_keep_mb: float | None = None
    output_keep_s: float | None = None
    # Spark tasks that read the source and write the upstream logs (1: one task reads
    # and writes all P logs, no shuffle; N > 1: N readers, a shuffle by key partition,
    # min(N, P) writers each owning its logs)
    ingest_tasks: int = 1

    @property
    def effective_master(self) -> str:
        return self.master or default_master(self.partitions)

    @property
    def spark_conf(self) -> dict[str, str]:
        return dict(self.spark)


@dataclass(frozen=True)
class PipelineSpec:
    source: SourceSpec
    aggregate: AggregateSpec
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    run: RunSpec = field(default_factory=RunSpec)
    where: str | None = None
    origin: str = "<spec>"  # the file it was read from, for messages

    def with_run(self, *, partitions: int | None = None, master: str | None = None,
                 conf: Mapping[str, str] | None = None) -> PipelineSpec:
        """The spec with command-line overrides of ``[run]`` applied (``--conf`` over
        ``[run.spark]``)."""
        run = self.run
        if conf:
            run = replace(run, spark=tuple({**run.spark_conf, **conf}.items()))
        if partitions is not None:
            if partitions < 1:
                raise SpecError(f"--partitions: must be >= 1, got {partitions}")
            run = replace(run, partitions=partitions)
        if master is not None:
            run = replace(run, master=master)
        return replace(self, run=run)


def parse_conf(pairs: list[str] | tuple[str, ...], option: str = "--conf") -> dict[str, str]:
    """``key=value`` pairs of a repeatable ``--conf`` option (Spark settings)."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{option}: expected key=value (e.g. spark.driver.memory=4g), "
                             f"got {pair!r}")
        if not key.startswith("spark."):
            raise UsageError(f"{option}: {key!r} is not a Spark setting (they start with "
                             "'spark.')")
        conf[key] = value
    return conf


def default_master(partitions: int) -> str:
    """``local[P+2,3]``: P slots for the long-lived operator tasks, 2 for the ingest.

    A slot count that does not cover P + ingest starves the ingest (Spark's fair
    scheduler does not preempt); 3 attempts per task before the job aborts, after which
    the driver resubmits (DESIGN §7).
    """
    return f"local[{partitions + 2},3]"


# --------------------------------------------------------------------------- parsing


class _Ctx:
    """Where we are in the file, for error messages."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, where: str, msg: str) -> SpecError:
        return SpecError(f"{self.origin}: {where}: {msg}")

    def table(self, doc: Mapping[str, Any], name: str, *, required: bool) -> dict[str, Any]:
        value = doc.get(name)
        if value is None:
            if required:
                raise self.fail(f"[{name}]", "missing table")
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"[{name}]", f"must be a table, got {type(value).__name__}")
        return value

    def unknown(self, tbl: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> None:
        for key in tbl:
            if key not in allowed:
                raise self.fail(
                    f"[{name}].{key}", f"unknown field (allowed: {', '.join(allowed)})"
                )

    def string(self, tbl: Mapping[str, Any], name: str, key: str, *,
               default: str | None = None, required: bool = False) -> str | None:
        value = tbl.get(key)
        if value is None:
            if required:
                raise self.fail(f"[{name}].{key}", "missing field")
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"[{name}].{key}", f"must be a non-empty string, got {value!r}")
        return value

    def integer(self, tbl: Mapping[str, Any], name: str, key: str, *, default: int,
                minimum: int | None = None) -> int:
        value = tbl.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"[{name}].{key}", f"must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(f"[{name}].{key}", f"must be >= {minimum}, got {value}")
        return value

    def number(self, tbl: Mapping[str, Any], name: str, key: str, *, default: float,
               positive: bool = True) -> float:
        value = tbl.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"[{name}].{key}", f"must be a number, got {value!r}")
        if not math.isfinite(value) or (positive and value <= 0):
            raise self.fail(f"[{name}].{key}", f"must be a positive number, got {value!r}")
        return float(value)

    def choice(self, tbl: Mapping[str, Any], name: str, key: str, choices: tuple[str, ...],
               *, default: str | None = None) -> str:
        value = self.string(tbl, name, key, default=default, required=default is None)
        assert value is not None
        if value not in choices:
            raise self.fail(f"[{name}].{key}", f"{value!r} is not one of {'|'.join(choices)}")
        return value


def parse_duration_us(value: object) -> int | None:
    """``"10s"`` → 10_000_000; an int is taken as microseconds; None when invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            us = int(m.group(1)) * _UNIT_US[m.group(2)]
            return us if us > 0 else None
    return None


def _window(ctx: _Ctx, raw: object) -> WindowSpec:
    where = "[aggregate].window"
    if raw is None:
        raise ctx.fail(where, "missing field")
    if not isinstance(raw, dict):
        raise ctx.fail(where, "must be an inline table like { kind = \"count\", size = 10 }")
    for key in raw:
        if key not in ("kind", "size", "slide"):
            raise ctx.fail(f"{where}.{key}", "unknown field (allowed: kind, size, slide)")
    kind = raw.get("kind")
    if kind not in WINDOW_KINDS:
        raise ctx.fail(f"{where}.kind", f"{kind!r} is not one of {'|'.join(WINDOW_KINDS)}")
    if "size" not in raw:
        raise ctx.fail(f"{where}.size", "missing field")
    if kind == "count":
        counts: list[int] = []
        for key in ("size", "slide"):
            value = raw.get(key, raw["size"])
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ctx.fail(f"{where}.{key}",
                               f"a count window needs a positive integer, got {value!r}")
            counts.append(value)
        if counts[1] > counts[0]:
            raise ctx.fail(f"{where}.slide", "must not exceed the window size")
        return WindowSpec("count", counts[0], counts[1])
    size_us = parse_duration_us(raw["size"])
    if size_us is None:
        raise ctx.fail(f"{where}.size",
                       f"{raw['size']!r} is not a duration like \"10s\", \"500ms\" or an "
                       "integer of microseconds")
    slide_us = parse_duration_us(raw.get("slide", raw["size"]))
    if slide_us is None or slide_us <= 0:
        raise ctx.fail(f"{where}.slide",
                       f"{raw.get('slide')!r} is not a duration like \"5s\"")
    if slide_us > size_us:
        raise ctx.fail(f"{where}.slide", "must not exceed the window size")
    return WindowSpec("time", size_us, slide_us)


def _source(ctx: _Ctx, tbl: dict[str, Any], base: Path) -> SourceSpec:
    name = "source"
    ctx.unknown(tbl, name, ("kind", "path", "time_field", "format", "poll_ms", "chunk_rows",
                            "rows", "keys", "seed", "start_ts", "interval_us"))
    kind = ctx.choice(tbl, name, "kind", SOURCE_KINDS)
    chunk_rows = ctx.integer(tbl, name, "chunk_rows", default=1_000_000, minimum=1)
    if kind == "generator":
        for key in ("path", "format"):
            if key in tbl:
                raise ctx.fail(f"[source].{key}", "not used by kind = \"generator\"")
        d = GeneratorSpec()
        gen = GeneratorSpec(
            rows=ctx.integer(tbl, name, "rows", default=d.rows, minimum=0),
            keys=ctx.integer(tbl, name, "keys", default=d.keys, minimum=1),
            seed=ctx.integer(tbl, name, "seed", default=d.seed),
            start_ts=ctx.integer(tbl, name, "start_ts", default=d.start_ts, minimum=0),
            interval_us=ctx.integer(tbl, name, "interval_us", default=d.interval_us,
                                    minimum=0),
        )
        time_field = ctx.string(tbl, name, "time_field", default="item_time")
        assert time_field is not None
        if time_field != "item_time":
            raise ctx.fail("[source].time_field",
                           "the generator's time field is 'item_time'")
        return SourceSpec("generator", time_field, chunk_rows=chunk_rows, generator=gen)
    for key in ("rows", "keys", "seed", "start_ts", "interval_us"):
        if key in tbl:
            raise ctx.fail(f"[source].{key}", "only used by kind = \"generator\"")
    raw_path = ctx.string(tbl, name, "path", required=True)
    assert raw_path is not None
    path = Path(raw_path).expanduser()
    if not path.is_absolute():
        path = (base / path).resolve()
    time_field = ctx.string(tbl, name, "time_field", required=True)
    assert time_field is not None
    fmt: str | None = None
    if kind == "stream-dir":
        if "format" in tbl:
            fmt = ctx.choice(tbl, name, "format", FILE_FORMATS)
    elif "format" in tbl:
        raise ctx.fail("[source].format", "only used by kind = \"stream-dir\"")
    poll_ms = ctx.integer(tbl, name, "poll_ms", default=200, minimum=1)
    return SourceSpec(kind, time_field, path=path, format=fmt,  # type: ignore[arg-type]
                      poll_ms=poll_ms, chunk_rows=chunk_rows)


def _aggregate(ctx: _Ctx, tbl: dict[str, Any], time_field: str) -> AggregateSpec:
    name = "aggregate"
    ctx.unknown(tbl, name, ("group_by", "field", "function", "window"))
    group_by = ctx.string(tbl, name, "group_by", required=True)
    function = ctx.choice(tbl, name, "function", FUNCTIONS)
    fld = ctx.string(tbl, name, "field", required=function != "count")
    assert group_by is not None
    for key, col in (("group_by", group_by), ("field", fld)):
        if col in RESERVED_COLUMNS and col != time_field:
            raise ctx.fail(f"[aggregate].{key}",
                           f"{col!r} is reserved for the stream position (ts, seq)")
    if fld is not None and fld == group_by:
        raise ctx.fail("[aggregate].field", "must differ from group_by")
    return AggregateSpec(group_by, fld, function, _window(ctx, tbl.get("window")))  # type: ignore[arg-type]


def _checkpoint(ctx: _Ctx, tbl: dict[str, Any]) -> CheckpointSpec:
    name = "checkpoint"
    ctx.unknown(tbl, name, ("Q", "U", "CI_ms", "CP_ms", "mode"))
    d = CheckpointSpec()
    q_records: int | None = None
    q_factor: float | None = d.q_factor
    raw_q = tbl.get("Q")
    if raw_q is not None:
        if isinstance(raw_q, int) and not isinstance(raw_q, bool) and raw_q >= 1:
            q_records, q_factor = raw_q, None
        elif isinstance(raw_q, str) and (m := _Q_FACTOR.match(raw_q)) and float(m.group(1)) > 0:
            q_factor = float(m.group(1))
        else:
            raise ctx.fail("[checkpoint].Q",
                           f"{raw_q!r} is neither a positive record count nor a factor like \"2x\"")
    u = ctx.integer(tbl, name, "U", default=d.u, minimum=1)
    ci = ctx.number(tbl, name, "CI_ms", default=d.ci_ms)
    cp = ctx.number(tbl, name, "CP_ms", default=d.cp_ms)
    if ci > cp:
        raise ctx.fail("[checkpoint].CI_ms", f"must not exceed CP_ms ({cp:g}), got {ci:g}")
    mode = ctx.choice(tbl, name, "mode", MODES, default=d.mode)
    return CheckpointSpec(q_records, q_factor, u, ci, cp, mode)


def _run(ctx: _Ctx, tbl: dict[str, Any]) -> RunSpec:
    name = "run"
    ctx.unknown(tbl, name, ("partitions", "master", "fsync", "segment_kb", "trim_upstream",
                            "trim_lag_s", "executor_wait_s", "slot_timeout_s", "spark",
                            "output_keep_mb", "output_keep_s", "ingest_tasks"))
    partitions = ctx.integer(tbl, name, "partitions", default=4, minimum=1)
    ingest_tasks = ctx.integer(tbl, name, "ingest_tasks", default=RunSpec.ingest_tasks,
                               minimum=1)
    master = ctx.string(tbl, name, "master")
    fsync = ctx.choice(tbl, name, "fsync", ("always", "interval", "never"), default="always")
    segment_kb = ctx.integer(tbl, name, "segment_kb", default=RunSpec.segment_kb, minimum=4)
    trim = tbl.get("trim_upstream", True)
    if not isinstance(trim, bool):
        raise ctx.fail(f"[{name}].trim_upstream", f"must be true or false, got {trim!r}")
    lag = ctx.number(tbl, name, "trim_lag_s", default=RunSpec.trim_lag_s, positive=False)
    if lag < 0:
        raise ctx.fail(f"[{name}].trim_lag_s", f"must be >= 0, got {lag!r}")
    wait = ctx.number(tbl, name, "executor_wait_s", default=RunSpec.executor_wait_s,
                      positive=False)
    slot_timeout = ctx.number(tbl, name, "slot_timeout_s", default=RunSpec.slot_timeout_s)
    if wait < 0:
        raise ctx.fail(f"[{name}].executor_wait_s", f"must be >= 0, got {wait!r}")
    raw_spark = tbl.get("spark", {})
    if not isinstance(raw_spark, dict):
        raise ctx.fail("[run.spark]", f"must be a table, got {raw_spark!r}")
    spark = _spark_table(ctx, raw_spark)
    keep_mb = ctx.number(tbl, name, "output_keep_mb", default=1.0) \
        if "output_keep_mb" in tbl else None
    keep_s = ctx.number(tbl, name, "output_keep_s", default=1.0) \
        if "output_keep_s" in tbl else None
    return RunSpec(partitions, master, fsync, segment_kb, trim, lag, spark, wait,
                   slot_timeout, keep_mb, keep_s, ingest_tasks)


def _spark_table(ctx: _Ctx, tbl: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """``[run.spark]``: Spark settings; dotted keys may be quoted or written as TOML dotted
    keys (``spark.driver.memory = "4g"`` is the same setting)."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        where = f"[run.spark].{prefix}"
        if not prefix.startswith("spark."):
            raise ctx.fail(where, "not a Spark setting (Spark settings start with 'spark.'; "
                           'quote the key: "spark.driver.memory" = "4g")')
        if isinstance(value, bool):
            flat[prefix] = "true" if value else "false"
        elif isinstance(value, int | float | str):
            flat[prefix] = str(value)
        else:
            raise ctx.fail(where, f"must be a string, number or boolean, got {value!r}")

    walk("", tbl)
    return tuple(flat.items())


def parse_spec(text: str, *, origin: str = "<spec>", base: Path | None = None) -> PipelineSpec:
    """Parse spec text; ``origin`` names it in messages, ``base`` anchors relative paths."""
    ctx = _Ctx(origin)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML: {exc}") from exc
    for key in doc:
        if key not in ("source", "filter", "aggregate", "checkpoint", "run"):
            raise ctx.fail(f"[{key}]", "unknown table (allowed: source, filter, aggregate, "
                           "checkpoint, run)")
    source = _source(ctx, ctx.table(doc, "source", required=True), base or Path.cwd())
    ftbl = ctx.table(doc, "filter", required=False)
    ctx.unknown(ftbl, "filter", ("where",))
    where = ctx.string(ftbl, "filter", "where")
    aggregate = _aggregate(ctx, ctx.table(doc, "aggregate", required=True), source.time_field)
    if source.kind == "generator":
        allowed = ("item_id", "item_price", "item_time")
        for key, col in (("group_by", aggregate.group_by), ("field", aggregate.field)):
            if col is not None and col not in allowed:
                raise ctx.fail(f"[aggregate].{key}", f"the generator has no column {col!r} "
                               f"(it has {', '.join(allowed)})")
    checkpoint = _checkpoint(ctx, ctx.table(doc, "checkpoint", required=False))
    run = _run(ctx, ctx.table(doc, "run", required=False))
    return PipelineSpec(source, aggregate, checkpoint, run, where, origin)


def load_spec(path: Path | str) -> PipelineSpec:
    """Read and validate a spec file (SpecError names the file if it cannot be read)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise SpecError(f"{path}: spec file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the spec: {exc}") from exc
    return parse_spec(text, origin=path.name, base=path.resolve().parent)


# --------------------------------------------------------------------------- dumping


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_value(str(k))} = {_toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def spec_to_tables(spec: PipelineSpec) -> dict[str, dict[str, object]]:
    """The fully resolved spec as TOML tables (every default explicit)."""
    src = spec.source
    source: dict[str, object] = {"kind": src.kind, "time_field": src.time_field,
                                 "chunk_rows": src.chunk_rows}
    if src.path is not None:
        source["path"] = str(src.path)
        source["poll_ms"] = src.poll_ms
    if src.format is not None:
        source["format"] = src.format
    if src.generator is not None:
        g = src.generator
        source.update(rows=g.rows, keys=g.keys, seed=g.seed, start_ts=g.start_ts,
                      interval_us=g.interval_us)
    w = spec.aggregate.window
    window: dict[str, object] = {"kind": w.kind, "size": w.size, "slide": w.slide}
    aggregate: dict[str, object] = {"group_by": spec.aggregate.group_by,
                                    "function": spec.aggregate.function, "window": window}
    if spec.aggregate.field is not None:
        aggregate["field"] = spec.aggregate.field
    cp = spec.checkpoint
    checkpoint: dict[str, object] = {
        "Q": cp.q_records if cp.q_records is not None else cp.q_text,
        "U": cp.u, "CI_ms": cp.ci_ms, "CP_ms": cp.cp_ms, "mode": cp.mode}
    run: dict[str, object] = {"partitions": spec.run.partitions, "fsync": spec.run.fsync,
                              "master": spec.run.effective_master,
                              "segment_kb": spec.run.segment_kb,
                              "trim_upstream": spec.run.trim_upstream,
                              "trim_lag_s": spec.run.trim_lag_s,
                              "executor_wait_s": spec.run.executor_wait_s,
                              "slot_timeout_s": spec.run.slot_timeout_s}
    if spec.run.ingest_tasks != 1:
        run["ingest_tasks"] = spec.run.ingest_tasks
    if spec.run.output_keep_mb is not None:
        run["output_keep_mb"] = spec.run.output_keep_mb
    if spec.run.output_keep_s is not None:
        run["output_keep_s"] = spec.run.output_keep_s
    if spec.run.spark:
        run["spark"] = spec.run.spark_conf
    tables: dict[str, dict[str, object]] = {"source": source}
    if spec.where is not None:
        tables["filter"] = {"where": spec.where}
    tables.update(aggregate=aggregate, checkpoint=checkpoint, run=run)
    return tables


def dump_spec(spec: PipelineSpec, extra: Mapping[str, Mapping[str, object]] | None = None
              ) -> str:
    """TOML text of the resolved spec (plus extra tables, e.g. ``[cec]`` run settings)."""
    lines = [f"# resolved from {spec.origin}"]
    tables: dict[str, Mapping[str, object]] = dict(spec_to_tables(spec))
    if extra:
        tables.update(extra)
    for name, tbl in tables.items():
        lines.append(f"\n[{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in tbl.items())
    return "\n".join(lines) + "\n"


def parse_stored_spec(text: str, origin: str) -> PipelineSpec:
    """Parse a ``run.toml`` (which may carry extra tables such as ``[cec]``)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML: {exc}") from exc
    spec_only = {k: v for k, v in doc.items() if k in
                 ("source", "filter", "aggregate", "checkpoint", "run")}
    # Durations were stored as microseconds, paths as absolute: reparse with the
    # ordinary rules so a stored spec is validated exactly like a user's.
    body = "\n".join(
        f"[{name}]\n" + "\n".join(f"{k} = {_toml_value(v)}" for k, v in tbl.items())
        for name, tbl in spec_only.items())
    return parse_spec(body, origin=origin, base=Path("/"))
