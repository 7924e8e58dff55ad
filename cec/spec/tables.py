"""The TOML a user writes, as pydantic models: one model per table, unknown keys refused.

The models mirror the file (``[checkpoint].Q`` is the alias of ``q``, the generator's
settings sit in ``[source]``, a window's size may be ``"10s"``); :mod:`cec.spec.parse`
turns a validated :class:`SpecDocument` into the frozen :class:`~cec.spec.PipelineSpec`.

Every check is a validator: one value's checks are :mod:`cec.spec.values` (checked by
hand rather than coerced: ``1`` is not ``true``, ``"4"`` is not ``4``), put on the
fields here; what involves several fields of a table is a model validator here. A
validator's problem is a :class:`~cec.spec.values.Problem` (a ``ValueError``, so
pydantic records it) carrying the message and, for a check made on a whole table, the
field it is about; :func:`cec.spec.parse.spec_error` turns pydantic's
``ValidationError`` into the one :class:`~cec.errors.SpecError`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from cec.durations import duration_us, parse_duration_us
from cec.spec.model import (
    FILE_FORMATS,
    FSYNC_MODES,
    FUNCTIONS,
    GENERATOR_COLUMNS,
    LATE_POLICIES,
    MAX_KEY_GROUPS,
    MODES,
    RESERVED_COLUMNS,
    SOURCE_KINDS,
    TIME_UNITS,
    UPSTREAM_MODES,
    WINDOW_KINDS,
    FileFormat,
    FsyncMode,
    Function,
    GeneratorSpec,
    LatePolicy,
    RunSpec,
    SourceKind,
    TimeUnit,
    UpstreamMode,
)
from cec.spec.values import (
    OptText,
    Problem,
    Text,
    boolean,
    choice,
    inline_table,
    integer,
    number,
    spark_settings,
)
from cec.windows import CountWindow, SessionWindow, TimeWindow, WindowSpec

_Q_FACTOR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x\s*$")


# --------------------------------------------------------------------------- tables


class Table(BaseModel):
    """A TOML table: unknown keys are errors, nothing is coerced."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class SourceTable(Table):
    kind: Annotated[SourceKind, choice(SOURCE_KINDS)]
    path: OptText = None
    time_field: OptText = None
    format: Annotated[FileFormat | None, choice(FILE_FORMATS)] = None
    poll_ms: Annotated[int, integer(1)] = 200
    chunk_rows: Annotated[int, integer(1)] = 1_000_000
    time_unit: Annotated[TimeUnit, choice(TIME_UNITS)] = "us"
    allowed_lateness: Any = 0
    late: Annotated[LatePolicy, choice(LATE_POLICIES)] = "error"
    idle_close: Any = None  # stream-dir: a duration (off when absent)
    # the generator's (defaults: GeneratorSpec)
    rows: Annotated[int | None, integer(0)] = None
    keys: Annotated[int | None, integer(1)] = None
    seed: Annotated[int | None, integer()] = None
    start_ts: Annotated[int | None, integer(0)] = None
    interval_us: Annotated[int | None, integer(0)] = None

    @model_validator(mode="after")
    def _fields_of_the_kind(self) -> SourceTable:
        given = self.model_fields_set
        self.lateness_us()
        self.idle_close_us()
        if "idle_close" in given and self.kind != "stream-dir":
            raise Problem('only used by kind = "stream-dir"', "idle_close")
        if self.kind == "generator":
            for key in ("path", "format", "time_unit", "allowed_lateness", "late"):
                if key in given:
                    raise Problem('not used by kind = "generator"', key)
            if self.time_field not in (None, "item_time"):
                raise Problem("the generator's time field is 'item_time'", "time_field")
            return self
        for key in ("rows", "keys", "seed", "start_ts", "interval_us"):
            if key in given:
                raise Problem('only used by kind = "generator"', key)
        for key in ("path", "time_field"):
            if key not in given:
                raise Problem("missing field", key)
        if "format" in given and self.kind != "stream-dir":
            raise Problem('only used by kind = "stream-dir"', "format")
        return self

    def lateness_us(self) -> int:
        """``allowed_lateness`` in microseconds (a :class:`Problem` if it is no duration)."""
        us = duration_us(self.allowed_lateness)
        if us is None or us < 0:
            raise Problem(f"{self.allowed_lateness!r} is not a duration like \"2s\" or "
                          "\"500ms\"", "allowed_lateness")
        return us

    def idle_close_us(self) -> int | None:
        """``idle_close`` in microseconds (None: off; a :class:`Problem` if it is no
        positive duration)."""
        if self.idle_close is None:
            return None
        us = duration_us(self.idle_close)
        if us is None or us <= 0:
            raise Problem(f"{self.idle_close!r} is not a positive duration like \"5s\" or "
                          "\"500ms\"", "idle_close")
        return us

    def generator(self) -> GeneratorSpec:
        d = GeneratorSpec()
        return GeneratorSpec(
            rows=d.rows if self.rows is None else self.rows,
            keys=d.keys if self.keys is None else self.keys,
            seed=d.seed if self.seed is None else self.seed,
            start_ts=d.start_ts if self.start_ts is None else self.start_ts,
            interval_us=d.interval_us if self.interval_us is None else self.interval_us)


class FilterTable(Table):
    where: OptText = None


class WindowTable(Table):
    """``[aggregate].window``: ``{ kind, size, slide }``; sizes of a time window are
    durations (:mod:`cec.durations`), of a count window tuples. A session window is
    ``{ kind = "session", gap = "30s" }``: a duration, no size and no slide."""

    kind: Annotated[Literal["count", "time", "session"], choice(WINDOW_KINDS,
                                                                 of_strings=False)]
    size: Any = None
    slide: Any = None
    gap: Any = None

    @model_validator(mode="after")
    def _valid(self) -> WindowTable:
        self.window()
        return self

    def window(self) -> WindowSpec:
        """The window (a :class:`Problem` naming ``size`` or ``slide`` if it is none)."""
        if self.kind == "session":
            return self._session()
        if "gap" in self.model_fields_set:
            raise Problem(f"only a session window has a gap; a {self.kind} window has a "
                          "size (and a slide)", "gap")
        if "size" not in self.model_fields_set:
            raise Problem(f"a {self.kind} window needs a size", "size")
        slide = self.size if "slide" not in self.model_fields_set else self.slide
        if self.kind == "count":
            for key, value in (("size", self.size), ("slide", slide)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise Problem(f"a count window needs a positive integer, got {value!r}",
                                  key)
            if slide > self.size:
                raise Problem("must not exceed the window size", "slide")
            return CountWindow(self.size, slide)
        size_us = parse_duration_us(self.size)
        if size_us is None:
            raise Problem(f"{self.size!r} is not a duration like \"10s\", \"500ms\" or an "
                          "integer of microseconds", "size")
        slide_us = parse_duration_us(slide)
        if slide_us is None:
            raise Problem(f"{self.slide!r} is not a duration like \"5s\"", "slide")
        if slide_us > size_us:
            raise Problem("must not exceed the window size", "slide")
        return TimeWindow(size_us, slide_us)

    def _session(self) -> SessionWindow:
        for key in ("size", "slide"):
            if key in self.model_fields_set:
                raise Problem(f"a session window has a gap, not a {key} "
                              "(window = { kind = \"session\", gap = \"30s\" })", key)
        if "gap" not in self.model_fields_set:
            raise Problem("a session window needs a gap, like \"30s\"", "gap")
        gap_us = parse_duration_us(self.gap)
        if gap_us is None or gap_us < 1:
            raise Problem(f"{self.gap!r} is not a positive duration like \"30s\" or an "
                          "integer of microseconds", "gap")
        return SessionWindow(gap_us)


class AggregateTable(Table):
    group_by: Text
    field: OptText = None
    function: Annotated[Function, choice(FUNCTIONS)]
    window: Annotated[WindowTable, BeforeValidator(inline_table)]

    @model_validator(mode="after")
    def _field(self) -> AggregateTable:
        if self.field is None and self.function != "count":
            raise Problem("missing field", "field")
        if self.field is not None and self.field == self.group_by:
            raise Problem("must differ from group_by", "field")
        return self


def _q(value: object) -> int | float:
    """``Q``: a record count (int) or a factor of the open windows (``"2x"``, a float)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and (m := _Q_FACTOR.match(value)) and float(m.group(1)) > 0:
        return float(m.group(1))
    raise Problem(f"{value!r} is neither a positive record count nor a factor like \"2x\"")


def _rto(value: object) -> int:
    """``rto``: a recovery-time objective, a positive duration (``"30s"``; an int is
    microseconds, as ``run.toml`` stores it)."""
    us = parse_duration_us(value)
    if us is None:
        raise Problem(f"{value!r} is not a positive duration like \"30s\" or \"1m\"")
    return us


class CheckpointTable(Table):
    q: Annotated[int | float | None, BeforeValidator(_q)] = Field(None, alias="Q")
    u: Annotated[int, integer(1)] = Field(1_000_000, alias="U")
    ci_ms: Annotated[float, number()] = Field(5.0, alias="CI_ms")
    cp_ms: Annotated[float, number()] = Field(100.0, alias="CP_ms")
    mode: Annotated[str, choice(MODES)] = "targets"
    rto: Annotated[int | None, BeforeValidator(_rto)] = None  # microseconds

    @model_validator(mode="after")
    def _ci_within_cp(self) -> CheckpointTable:
        if self.ci_ms > self.cp_ms:
            raise Problem(f"must not exceed CP_ms ({self.cp_ms:g}), got {self.ci_ms:g}",
                          "CI_ms")
        return self

    @model_validator(mode="after")
    def _rto_alone(self) -> CheckpointTable:
        if self.rto is None:
            return self
        for name, key in (("q", "Q"), ("u", "U")):
            if name in self.model_fields_set:
                raise Problem(f"cannot be given with rto: a recovery-time objective sets Q "
                              f"and U from the measured recovery rates (remove {key} or rto)",
                              key)
        if self.mode != "targets":
            raise Problem(f'needs mode = "targets" (mode {self.mode!r} writes no G_check, '
                          "so nothing could keep the recovery time)", "rto")
        return self

    @property
    def targets_given(self) -> bool:
        """``Q`` or ``U`` written in the file (an objective may not replace them)."""
        return bool({"q", "u"} & self.model_fields_set)


_RUN = RunSpec()


class RunTable(Table):
    partitions: Annotated[int, integer(1)] = _RUN.partitions
    master: OptText = None
    fsync: Annotated[FsyncMode, choice(FSYNC_MODES)] = _RUN.fsync
    segment_kb: Annotated[int, integer(4)] = _RUN.segment_kb
    trim_upstream: Annotated[bool, BeforeValidator(boolean)] = _RUN.trim_upstream
    trim_lag_s: Annotated[float, number(positive=False)] = _RUN.trim_lag_s
    executor_wait_s: Annotated[float, number(positive=False)] = _RUN.executor_wait_s
    slot_timeout_s: Annotated[float, number()] = _RUN.slot_timeout_s
    spark: Annotated[tuple[tuple[str, str], ...], BeforeValidator(spark_settings)] = ()
    output_keep_mb: Annotated[float | None, number()] = None
    output_keep_s: Annotated[float | None, number()] = None
    ingest_tasks: Annotated[int, integer(1)] = _RUN.ingest_tasks
    key_groups: Annotated[int | None, integer(1, MAX_KEY_GROUPS)] = None
    upstream: Annotated[UpstreamMode, choice(UPSTREAM_MODES)] = _RUN.upstream

    @model_validator(mode="after")
    def _groups_cover_partitions(self) -> RunTable:
        if self.key_groups is not None and self.key_groups < self.partitions:
            raise Problem(f"must be >= partitions ({self.partitions}): a partition owns at "
                          f"least one key group, got {self.key_groups}", "key_groups")
        if self.partitions > MAX_KEY_GROUPS:
            raise Problem(f"must be <= {MAX_KEY_GROUPS} (the most key groups a run can "
                          f"have), got {self.partitions}", "partitions")
        return self


class SpecDocument(Table):
    """A whole spec file; ``[source]`` and ``[aggregate]`` are required."""

    source: SourceTable
    filter: FilterTable = FilterTable.model_validate({})  # frozen: shared
    aggregate: AggregateTable
    checkpoint: CheckpointTable = CheckpointTable.model_validate({})  # frozen: shared
    run: RunTable = RunTable.model_validate({})  # frozen: shared

    @model_validator(mode="after")
    def _columns(self) -> SpecDocument:
        time_field = self.source.time_field or "item_time"
        agg = self.aggregate
        for key, col in (("group_by", agg.group_by), ("field", agg.field)):
            if col in RESERVED_COLUMNS and col != time_field:
                raise Problem(f"{col!r} is reserved for the stream position (ts, seq)",
                              "aggregate", key)
        if self.source.kind == "generator":
            for key, col in (("group_by", agg.group_by), ("field", agg.field)):
                if col is not None and col not in GENERATOR_COLUMNS:
                    raise Problem(f"the generator has no column {col!r} "
                                  f"(it has {', '.join(GENERATOR_COLUMNS)})", "aggregate", key)
        return self


#: the tables of a file; their names are the keys of :class:`SpecDocument`
TABLES: tuple[str, ...] = tuple(SpecDocument.model_fields)
#: tables written as ``[a.b]`` headers (other nested tables are ``[a].b`` fields)
SUBTABLES = {("run", "spark")}


def table_model(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model of the table at ``loc`` (keys as written), None if it is not one."""
    model: type[BaseModel] = SpecDocument
    for key in loc:
        fields = {f.alias or name: f for name, f in model.model_fields.items()}
        info = fields.get(str(key))
        if info is None or not (isinstance(info.annotation, type)
                                and issubclass(info.annotation, BaseModel)):
            return None
        model = info.annotation
    return model


def field_names(model: type[BaseModel]) -> list[str]:
    """The keys a table allows, as written."""
    return [f.alias or name for name, f in model.model_fields.items()]
