"""The builder: :class:`Stream`, made by :func:`stream` or :func:`generator`.

A :class:`Stream` is immutable: every call returns a new one and checks its own
arguments at once with the spec's own validators (:mod:`cec.spec.tables`), so a bad
call raises :class:`cec.errors.SpecError` (exit status 2 on the command line) naming
the call and the spec field it sets::

    .agg(median='item_price'): [aggregate].function: 'median' is not one of count|sum|...

:meth:`Stream.spec` is the :class:`~cec.spec.PipelineSpec` the equivalent TOML file
gives (the same tables, validated by the same models). Nothing here runs anything:
:meth:`Stream.run` hands the pipeline to :func:`cec_spark.api.launch.run_stream`.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from cec.errors import SpecError
from cec.spec import PipelineSpec
from cec.spec.parse import field_error, first_problem, to_spec
from cec.spec.tables import (
    AggregateTable,
    CheckpointTable,
    FilterTable,
    RunTable,
    SourceTable,
    SpecDocument,
    WindowTable,
)
from cec_spark.api.launch import ORIGIN, Run, run_stream
from cec_spark.rundir.layout import SOURCE_DIR, RunLayout
from cec_spark.source.types import EXTENSIONS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ORIGIN", "SOURCE_DIR", "Stream", "generator", "slot_of", "stream"]

Items = tuple[tuple[str, Any], ...]


# --------------------------------------------------------------------------- checks


class _Shown(str):
    """An argument shown as written (``<DataFrame>``), not as its repr."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _call(name: str, *args: object, **kwargs: object) -> str:
    """The text of a builder call, as a message names it: ``.agg(avg='item_price')``."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()
                                       if v is not None]
    return f"{name}({', '.join(parts)})"


def _error(call: str, errors: list[ErrorDetails]) -> SpecError:
    loc, msg = first_problem(errors)
    return field_error(call, loc, msg)


def _check(model: type[BaseModel], data: Mapping[str, object], prefix: tuple[str, ...],
           call: str, *, partial: bool = False) -> None:
    """Validate one table (or, ``partial``, the fields of it that one call sets: missing
    fields are some other call's) with the TOML's model; a SpecError naming ``call``."""
    try:
        model.model_validate(dict(data))
    except ValidationError as exc:
        errors = [cast(ErrorDetails, {**e, "loc": (*prefix, *e["loc"])})
                  for e in exc.errors() if not (partial and e["type"] == "missing")]
        if errors:
            raise _error(call, errors) from None


def _duration(value: object) -> object:
    """A ``datetime.timedelta`` as integer microseconds (exact); other values as given
    (a duration string or an integer of microseconds, as in the TOML)."""
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1)
    return value


def _merged(items: Items, new: Mapping[str, object]) -> Items:
    return tuple({**dict(items), **{k: v for k, v in new.items() if v is not None}}.items())


def _table(items: Items) -> dict[str, object]:
    return {k: dict(v) if k == "spark" else v for k, v in items}


def slot_of(loc: tuple[str | int, ...]) -> str:
    """The builder call (:meth:`Stream.call`'s slot) that sets the spec field at ``loc``
    (its keys from the document's root, as :attr:`cec.errors.SpecError.field`)."""
    table = str(loc[0]) if loc else "source"
    if table == "aggregate":
        key = str(loc[1]) if len(loc) > 1 else ""
        return {"group_by": "group_by", "window": "window"}.get(key, "agg")
    return {"filter": "filter", "checkpoint": "checkpoint", "run": "options"}.get(table,
                                                                                  "source")


# --------------------------------------------------------------------------- builder


@dataclass(frozen=True)
class Stream:
    """A pipeline being built: a source, a filter, a key, a window, a function,
    checkpoint targets and run options. Immutable: every method returns a new Stream.
    Make one with :func:`stream` or :func:`generator`."""

    source: Items  # the [source] table, as the TOML would hold it
    frame: DataFrame | None = field(default=None, compare=False, repr=False)
    conditions: tuple[str, ...] = ()  # .filter() calls, ANDed
    key: str | None = None
    window_table: Items | None = None
    function: str | None = None
    value_field: str | None = None
    checkpoint_table: Items = ()
    run_table: Items = ()
    calls: Items = ()  # slot -> the text of the call that set it (for messages)

    def _called(self, slot: str, text: str) -> Items:
        return _merged(self.calls, {slot: text})

    def call(self, slot: str) -> str:
        """The text of the call that set ``slot`` (source, filter, group_by, window,
        agg, checkpoint, options)."""
        found = dict(self.calls).get(slot)
        return str(found) if found is not None else f".{slot}()"

    def call_of(self, loc: tuple[str | int, ...]) -> str:
        """The text of the call that set the spec field at ``loc`` (:func:`slot_of`)."""
        return self.call(slot_of(loc))

    def filter(self, condition: str) -> Stream:
        """Keep the rows for which the Spark SQL ``condition`` holds (``[filter].where``;
        several calls: all must hold)."""
        text = _call(".filter", condition)
        _check(FilterTable, {"where": condition}, ("filter",), text)
        called = dict(self.calls).get("filter", "")
        return replace(self, conditions=(*self.conditions, condition),
                       calls=self._called("filter", f"{called}{text}"))

    def group_by(self, column: str) -> Stream:
        """The key column (``[aggregate].group_by``): an integer or string column."""
        text = _call(".group_by", column)
        _check(AggregateTable, {"group_by": column}, ("aggregate",), text, partial=True)
        return replace(self, key=column, calls=self._called("group_by", text))

    def window(self, *, time: str | int | dt.timedelta | None = None,
               count: int | None = None,
               slide: str | int | dt.timedelta | None = None,
               session: str | int | dt.timedelta | None = None) -> Stream:
        """A time window of ``time`` (a duration: ``"10 seconds"``, ``"1m30s"``,
        ``"500ms"``, a ``timedelta`` or an integer of microseconds), a count window of
        ``count`` tuples, or a session window whose ``session`` is the gap (a duration:
        a key's session closes when event time passes its last tuple plus the gap);
        ``slide`` (same unit) makes a time or count window sliding (default: tumbling)."""
        text = _call(".window", time=time, count=count, slide=slide, session=session)
        if sum(x is not None for x in (time, count, session)) != 1:
            raise field_error(text, ("aggregate", "window", "size"), 'give one size: time='
                              '"10 seconds" (a duration), count=1000 (tuples) or session='
                              '"30 seconds" (the gap)')
        table: dict[str, object]
        if session is not None:
            table = {"kind": "session", "gap": _duration(session)}
        elif time is not None:
            table = {"kind": "time", "size": _duration(time)}
        else:
            table = {"kind": "count", "size": count}
        if slide is not None:
            table["slide"] = _duration(slide)
        _check(WindowTable, table, ("aggregate", "window"), text)
        return replace(self, window_table=tuple(table.items()),
                       calls=self._called("window", text))

    def agg(self, function: str | None = None, field: str | None = None, /,
            **by_function: str) -> Stream:
        """The aggregate: ``.agg(avg="item_price")`` (one of count, sum, min, max, avg,
        naming the column), ``.agg("avg", "item_price")`` or ``.agg("count")``."""
        text = _call(".agg", *(a for a in (function, field) if a is not None), **by_function)
        if function is None and len(by_function) == 1:
            function, field = next(iter(by_function.items()))
            field = None if field == "*" else field
        elif function is None or by_function:
            raise field_error(text, ("aggregate", "function"), "give one function, e.g. "
                              '.agg(avg="item_price") or .agg("count")')
        given = {"function": function} if field is None else {"function": function,
                                                               "field": field}
        _check(AggregateTable, given, ("aggregate",), text, partial=True)
        return replace(self, function=function, value_field=field,
                       calls=self._called("agg", text))

    def checkpoint(self, *, Q: int | str | None = None, U: int | None = None,
                   CI_ms: float | None = None, CP_ms: float | None = None,
                   mode: str | None = None, **more: object) -> Stream:
        """``[checkpoint]``: the extent target ``Q`` (records, or ``"2x"`` the open
        windows), the replay target ``U`` (input positions), the budget ``CI_ms`` per
        ``CP_ms``, the ``mode``; ``more``: any other field of the table. Calls merge."""
        given = {"Q": Q, "U": U, "CI_ms": CI_ms, "CP_ms": CP_ms, "mode": mode, **more}
        text = _call(".checkpoint", **given)
        table = _merged(self.checkpoint_table, given)
        _check(CheckpointTable, dict(table), ("checkpoint",), text)
        return replace(self, checkpoint_table=table, calls=self._called("checkpoint", text))

    def options(self, *, partitions: int | None = None, master: str | None = None,
                fsync: str | None = None, spark: Mapping[str, str] | None = None,
                **more: object) -> Stream:
        """``[run]``: key partitions, the Spark master, fsync mode, Spark settings
        (``spark={"spark.driver.memory": "4g"}``); ``more``: any other field of the
        table (``segment_kb``, ``ingest_tasks``, ``output_keep_mb`` ...). Calls merge."""
        given: dict[str, object] = {"partitions": partitions, "master": master,
                                    "fsync": fsync, **more}
        if spark is not None:
            given["spark"] = tuple(dict(spark).items())
        text = _call(".options", **{**given, "spark": spark})
        table = _merged(self.run_table, given)
        _check(RunTable, _table(table), ("run",), text)
        return replace(self, run_table=table, calls=self._called("options", text))

    def _document(self, run_dir: Path | str | None) -> dict[str, object]:
        source = dict(self.source)
        if self.frame is not None:
            base = Path(os.path.abspath(run_dir)) if run_dir is not None else Path(".")
            source["path"] = str(RunLayout(base).source_dir)
        doc: dict[str, object] = {"source": source}
        if self.conditions:
            doc["filter"] = {"where": " AND ".join(f"({c})" for c in self.conditions)
                             if len(self.conditions) > 1 else self.conditions[0]}
        aggregate: dict[str, object] = {"group_by": self.key, "function": self.function,
                                        "window": dict(self.window_table or ())}
        if self.value_field is not None:
            aggregate["field"] = self.value_field
        doc.update(aggregate=aggregate, checkpoint=dict(self.checkpoint_table),
                   run=_table(self.run_table))
        return doc

    def spec(self, run_dir: Path | str | None = None) -> PipelineSpec:
        """The validated spec: what the equivalent TOML file gives (relative paths are
        taken from the working directory). A DataFrame source's path is
        ``run_dir/source`` (``./source`` without ``run_dir``)."""
        for slot, name in (("key", ".group_by(column)"), ("window_table", ".window(...)"),
                           ("function", ".agg(...)")):
            if getattr(self, slot) is None:
                raise SpecError(f"{self.call('source')}: {name} was not called (a pipeline "
                                "needs a key, a window and a function)")
        try:
            valid = SpecDocument.model_validate(self._document(run_dir))
        except ValidationError as exc:
            loc, _ = first_problem(exc.errors())
            raise _error(self.call(slot_of(loc)), exc.errors()) from None
        return to_spec(valid, ORIGIN, Path.cwd())

    def run(self, run_dir: Path | str, *, max_tuples: int | None = None,
            progress: bool = False) -> Run:
        """Run the pipeline into ``run_dir`` (new, or an empty directory) to the end of
        its source (:func:`cec_spark.api.launch.run_stream`, as
        :func:`cec_spark.api.commands.run` does); ``progress`` draws the CLI's progress
        view."""
        return run_stream(self, run_dir, max_tuples=max_tuples, progress=progress)


def stream(source: DataFrame | str | Path, *, time: str | None = None,
           kind: str | None = None, chunk_rows: int | None = None, **more: object) -> Stream:
    """A pipeline over ``source``:

    * a Spark DataFrame (bounded): written once to ``RUN/source`` when it runs
      (:mod:`cec_spark.api.frame`); ``time`` names its time column, a TIMESTAMP or an
      integer of microseconds since the epoch (default: its only TIMESTAMP column);
    * a file or folder: ``kind`` is ``csv``, ``jsonl``, ``parquet`` or ``stream-dir``
      (default: from a file's extension); ``time`` is required (``[source].time_field``).

    ``chunk_rows`` and ``more`` (``format``, ``poll_ms`` ...) are fields of ``[source]``.
    """
    from pyspark.sql import DataFrame  # noqa: PLC0415 - Spark only when a run needs it
    from pyspark.sql import types as T  # noqa: PLC0415 - Spark only when a run needs it

    if isinstance(source, DataFrame):
        text = _call("stream", _Shown("<DataFrame>"), time=time, chunk_rows=chunk_rows, **more)
        if time is None:
            stamps = [f.name for f in source.schema.fields
                      if isinstance(f.dataType, T.TimestampType)]
            if len(stamps) != 1:
                raise field_error(text, ("source", "time_field"), "name the time column, "
                                  f"stream(df, time=...) (the DataFrame has {len(stamps)} "
                                  "TIMESTAMP columns)")
            time = stamps[0]
        table: dict[str, object] = {"kind": "parquet", "path": SOURCE_DIR, "time_field": time,
                                    "chunk_rows": chunk_rows, **more}
    else:
        text = _call("stream", str(source), time=time, kind=kind, chunk_rows=chunk_rows, **more)
        path = Path(source)
        if kind is None:
            found = [k for k, exts in EXTENSIONS.items() if path.name.lower().endswith(exts)]
            if not found or path.is_dir():
                raise field_error(text, ("source", "kind"), "give kind= (csv, jsonl, parquet "
                                  f"or stream-dir): {source} is not a file with a known "
                                  "extension")
            kind = found[0]
        table = {"kind": kind, "path": str(path), "time_field": time,
                 "chunk_rows": chunk_rows, **more}
    items = tuple((k, v) for k, v in table.items() if v is not None)
    _check(SourceTable, dict(items), ("source",), text)
    frame = source if isinstance(source, DataFrame) else None
    return Stream(items, frame, calls=(("source", text),))


def generator(*, rows: int | None = None, keys: int | None = None, seed: int | None = None,
              start_ts: int | None = None, interval_us: int | None = None,
              chunk_rows: int | None = None) -> Stream:
    """A pipeline over the built-in generator (the paper's workload: ``item_id``,
    ``item_price``, ``item_time``); the arguments are its ``[source]`` fields."""
    given = {"rows": rows, "keys": keys, "seed": seed, "start_ts": start_ts,
             "interval_us": interval_us, "chunk_rows": chunk_rows}
    text = _call("generator", **given)
    items = tuple([("kind", "generator"), *((k, v) for k, v in given.items() if v is not None)])
    _check(SourceTable, dict(items), ("source",), text)
    return Stream(items, calls=(("source", text),))
