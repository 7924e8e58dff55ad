"""The Python API: a windowed aggregate built in Python, run on Spark with cec's guarantees.

::

    import cec_spark as cec

    res = (cec.stream(df, time="item_time")          # a DataFrame, or a file/folder
             .filter("item_price > 10")
             .group_by("item_id")
             .window(time="10 seconds", slide="5 seconds")   # or count=1000, slide=...
             .agg(avg="item_price")
             .checkpoint(Q="2x", U=1_000_000)
             .run("/path/run_dir"))
    res.results()          # a Spark DataFrame of the results (= cec export)

A :class:`Stream` is an immutable builder: every call returns a new one and checks its
own arguments at once with the spec's own validators (:mod:`cec.spec.tables`), so a bad
call raises :class:`cec.errors.SpecError` (exit status 2 on the command line) naming the
call and the spec field it sets::

    .agg(median='item_price'): [aggregate].function: 'median' is not one of count|sum|...

:meth:`Stream.spec` is the :class:`~cec.spec.PipelineSpec` the equivalent TOML file gives
(the same tables, validated by the same models); :func:`run` plans it with
:func:`cec_spark.run.plan.plan_new_run` and runs it with :func:`cec_spark.driver.runner.run_plan`,
the path of ``cec run pipeline``, into an ordinary run directory (``run.toml``, logs):
``cec recover --from-log``, ``cec export``, ``cec inspect`` and
``spark.read.format("cec")`` work on it. A DataFrame source is written once to
``RUN/source`` (:mod:`cec_spark.api_frame` says why and what it costs).

The command line is built on the functions of this module (:func:`load`, :func:`run`,
:func:`recover`, :func:`export`, :func:`inspect_extent`, :func:`inspect_log`,
:func:`stored_spec`): one path for both.

Sessions: a run started from Python uses this process's active SparkSession if there is
one (a DataFrame's own session for a DataFrame source; the run's master is then that
session's, and it must have P + 1 task slots), else it starts one with cec's settings and
leaves it running, so that :meth:`Run.results` can read the results. The SQL settings a
run needs (shuffle partitions, Arrow, the UTC time zone) are set on a session of the
user's for the run and restored after it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from cec.errors import SpecError, UsageError
from cec.spec import PipelineSpec
from cec.spec.parse import first_problem, to_spec, where
from cec.spec.tables import (
    AggregateTable,
    CheckpointTable,
    FilterTable,
    RunTable,
    SourceTable,
    SpecDocument,
    WindowTable,
)
from cec_spark.read.export import export as _export
from cec_spark.report import ExportResult, ExtentResult, LogReport, RecoverResult, RunResult
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.types import EXTENSIONS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Spark and the runtime are imported by the functions that run something (marked
# "lazy"): `cec export` and `cec inspect log` go through this module and start in
# 0.6 s instead of 1.7 s without them.

__all__ = ["ORIGIN", "SOURCE_DIR", "Run", "Stream", "export", "generator", "inspect_extent",
           "inspect_log", "load", "recover", "results", "run", "stored_spec", "stream"]

#: how a spec built in Python names itself (``run.toml``'s first line, messages)
ORIGIN = "cec_spark.api"
#: the folder of a run directory that holds a DataFrame source (cec_spark.api_frame)
SOURCE_DIR = "source"

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
    return SpecError(f"{call}: {where(loc)}: {msg}")


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
               slide: str | int | dt.timedelta | None = None) -> Stream:
        """A time window of ``time`` (a duration: ``"10 seconds"``, ``"1m30s"``,
        ``"500ms"``, a ``timedelta`` or an integer of microseconds) or a count window of
        ``count`` tuples; ``slide`` (same unit) makes it sliding (default: tumbling)."""
        text = _call(".window", time=time, count=count, slide=slide)
        if (time is None) == (count is None):
            raise SpecError(f"{text}: [aggregate].window.size: give one size: time="
                            '"10 seconds" (a duration) or count=1000 (tuples)')
        table: dict[str, object] = ({"kind": "time", "size": _duration(time)}
                                    if time is not None else {"kind": "count", "size": count})
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
            raise SpecError(f"{text}: [aggregate].function: give one function, e.g. "
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
            source["path"] = str(base / SOURCE_DIR)
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
            raise _error(self.call(_slot(loc)), exc.errors()) from None
        return to_spec(valid, ORIGIN, Path.cwd())

    def run(self, run_dir: Path | str, *, max_tuples: int | None = None,
            progress: bool = False) -> Run:
        """Run the pipeline into ``run_dir`` (new, or an empty directory) to the end of
        its source (:func:`run`); ``progress`` draws the CLI's progress view."""
        return run(self, run_dir, max_tuples=max_tuples, progress=progress)


def _slot(loc: tuple[str | int, ...]) -> str:
    """The builder call that sets the spec field at ``loc``."""
    table = str(loc[0]) if loc else "source"
    if table == "aggregate":
        key = str(loc[1]) if len(loc) > 1 else ""
        return {"group_by": "group_by", "window": "window"}.get(key, "agg")
    return {"filter": "filter", "checkpoint": "checkpoint", "run": "options"}.get(table,
                                                                                  "source")


def stream(source: DataFrame | str | Path, *, time: str | None = None,
           kind: str | None = None, chunk_rows: int | None = None, **more: object) -> Stream:
    """A pipeline over ``source``:

    * a Spark DataFrame (bounded): written once to ``RUN/source`` when it runs
      (:mod:`cec_spark.api_frame`); ``time`` names its time column, a TIMESTAMP or an
      integer of microseconds since the epoch (default: its only TIMESTAMP column);
    * a file or folder: ``kind`` is ``csv``, ``jsonl``, ``parquet`` or ``stream-dir``
      (default: from a file's extension); ``time`` is required (``[source].time_field``).

    ``chunk_rows`` and ``more`` (``format``, ``poll_ms`` ...) are fields of ``[source]``.
    """
    from pyspark.sql import DataFrame  # noqa: PLC0415 - lazy
    from pyspark.sql import types as T  # noqa: PLC0415 - lazy

    if isinstance(source, DataFrame):
        text = _call("stream", _Shown("<DataFrame>"), time=time, chunk_rows=chunk_rows, **more)
        if time is None:
            stamps = [f.name for f in source.schema.fields
                      if isinstance(f.dataType, T.TimestampType)]
            if len(stamps) != 1:
                raise SpecError(f"{text}: [source].time_field: name the time column, "
                                f"stream(df, time=...) (the DataFrame has "
                                f"{len(stamps)} TIMESTAMP columns)")
            time = stamps[0]
        table: dict[str, object] = {"kind": "parquet", "path": SOURCE_DIR, "time_field": time,
                                    "chunk_rows": chunk_rows, **more}
    else:
        text = _call("stream", str(source), time=time, kind=kind, chunk_rows=chunk_rows, **more)
        path = Path(source)
        if kind is None:
            found = [k for k, exts in EXTENSIONS.items() if path.name.lower().endswith(exts)]
            if not found or path.is_dir():
                raise SpecError(f"{text}: [source].kind: give kind= (csv, jsonl, parquet or "
                                f"stream-dir): {source} is not a file with a known extension")
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


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Run:
    """A run that :func:`run` made: its directory and how it ended."""

    run_dir: Path  # absolute
    outcome: RunResult

    @property
    def completed(self) -> bool:
        """Every partition consumed its whole (bounded) input."""
        return self.outcome.completed

    def results(self, spark: SparkSession | None = None) -> DataFrame:
        """The results as a Spark DataFrame (:func:`results`)."""
        return results(self.run_dir, spark)

    def export(self, out: Path | str, fmt: str = "csv", consumer: str | None = None
               ) -> ExportResult:
        """``cec export`` of this run (:func:`export`)."""
        return export(self.run_dir, out, fmt, consumer)

    def extent(self, *, partition: int | None = None, at: int | None = None) -> ExtentResult:
        """``cec inspect extent`` of this run (:func:`inspect_extent`)."""
        return inspect_extent(self.run_dir, partition=partition, at=at)


def load(spec_path: Path | str, *, partitions: int | None = None, master: str | None = None,
         conf: dict[str, str] | None = None, rto: str | None = None, **more: Any
         ) -> PipelineSpec:
    """A spec file, read once, with the command line's overrides (``cec run pipeline``:
    ``--partitions``, ``--master``, ``--conf``, ``--rto``); ``more``: further overrides of
    :func:`cec_spark.run.plan.pipeline_spec`. An objective below this machine's floor is a
    SpecError here."""
    from cec_spark.run.plan import pipeline_spec  # noqa: PLC0415 - lazy

    return pipeline_spec(spec_path, partitions=partitions, master=master, conf=conf, rto=rto,
                         **more)


def _objective(spec: PipelineSpec) -> PipelineSpec:
    """A built spec's recovery-time objective checked as :func:`load` checks a file's
    (below the floor: SpecError; no margin: a warning on stderr)."""
    from cec_spark.run.rto import check_objective  # noqa: PLC0415 - lazy
    from cec_spark.watchdog import say  # noqa: PLC0415 - lazy

    warning = check_objective(spec)
    if warning is not None:
        say(warning)
    return spec


def stored_spec(run_dir: Path | str, *, master: str | None = None,
                conf: dict[str, str] | None = None, trust: bool | None = None
                ) -> PipelineSpec:
    """The spec a resume of ``run_dir`` runs (its ``run.toml``, with the overrides)."""
    from cec_spark.run.plan import plan_resume  # noqa: PLC0415 - lazy

    return plan_resume(run_dir, master=master, conf=conf, trust=trust).spec


@contextlib.contextmanager
def _borrowed(spark: SparkSession, spec: PipelineSpec) -> Iterator[None]:
    """The SQL settings a run sets on a session it did not start, restored after it."""
    from cec_spark.run.session import default_conf  # noqa: PLC0415 - lazy

    keys = {**default_conf(spec.run.effective_master, spec.run.partitions),
            **spec.run.spark_conf}
    saved: dict[str, str | None] = {}
    for key in keys:
        with contextlib.suppress(Exception):
            if spark.conf.isModifiable(key):
                saved[key] = spark.conf.get(key, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            with contextlib.suppress(Exception):
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


def _on_session(spec: PipelineSpec, spark: SparkSession | None, call: str) -> PipelineSpec:
    """The spec with the master of the session the run will use (a running one)."""
    if spark is None:
        return spec
    master = spark.sparkContext.master
    if spec.run.master is None:
        return spec.with_run(master=master)
    if spec.run.master != master:
        raise UsageError(f"{call}: [run].master: {spec.run.master!r}, but this process's "
                         f"SparkSession runs on {master!r} and a run started from Python "
                         "uses it (leave master out, or stop that session first)")
    return spec


def _probe(_: Iterable[int]) -> Iterator[str]:
    import cec_spark.run.task  # noqa: F401, PLC0415 - what an operator task imports first

    yield sys.executable


def _check_workers(spark: SparkSession) -> None:
    """A session the run did not start may run its Python workers on another Python
    (``PYSPARK_PYTHON``, read when the session started; default ``python3``): if so,
    one task checks that it imports cec, so that a run fails in seconds naming it
    rather than after every operator task's retries."""
    exe = str(getattr(spark.sparkContext, "pythonExec", sys.executable))
    if os.path.realpath(shutil.which(exe) or exe) == os.path.realpath(sys.executable):
        return
    try:
        spark.sparkContext.parallelize([0], 1).mapPartitions(_probe).collect()
    except Exception as exc:
        found = re.findall(r"(\w+Error: [^\n]+)", str(exc))
        raise UsageError(
            f"this SparkSession's Python workers run {exe!r}, which cannot import cec "
            f"({found[-1] if found else type(exc).__name__}); set PYSPARK_PYTHON="
            f"{sys.executable} in the environment before the session starts") from None


def _run_spec(spec: PipelineSpec, spec_path: Path | str | None, run_dir: Path | str | None,
              *, max_tuples: int | None, progress: bool, keep_session: bool,
              staged: str | None = None, options_call: str = ".options()",
              workers_checked: bool = False) -> Run:
    from pyspark.sql import SparkSession  # noqa: PLC0415 - lazy

    from cec_spark.driver.runner import run_plan  # noqa: PLC0415 - lazy
    from cec_spark.run.plan import plan_new_run  # noqa: PLC0415 - lazy
    from cec_spark.run.session import build_session  # noqa: PLC0415 - lazy

    if not keep_session:  # the command line: the run's own session, stopped at its end
        plan = plan_new_run(spec, spec_path or ORIGIN, run_dir, max_tuples=max_tuples)
        return Run(plan.layout.root, run_plan(plan, progress=progress))
    active = SparkSession.getActiveSession()
    spec = _on_session(spec, active, options_call)
    plan = plan_new_run(spec, spec_path or ORIGIN, run_dir, max_tuples=max_tuples,
                        staged=staged)
    if active is None:  # started here and left running (Run.results reads through it)
        settings = plan.spec.run
        build_session(settings.effective_master, settings.partitions, settings.spark_conf)
        return Run(plan.layout.root, run_plan(plan, progress=progress))
    if not workers_checked:
        _check_workers(active)
    with _borrowed(active, plan.spec):
        return Run(plan.layout.root, run_plan(plan, progress=progress))


def _rows(folder: Path) -> int:
    import pyarrow.parquet as pq  # noqa: PLC0415 - lazy

    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(folder.glob("*.parquet")))


def _run_frame(s: Stream, frame: DataFrame, run_dir: Path | str, *,
               max_tuples: int | None, progress: bool) -> Run:
    """Check everything that can be checked, stage the DataFrame, run."""
    from cec_spark.api_frame import stage, staged_frame  # noqa: PLC0415 - lazy
    from cec_spark.run.cluster import check_local_slots  # noqa: PLC0415 - lazy
    from cec_spark.run.plan import check_log_dir  # noqa: PLC0415 - lazy

    root = Path(os.path.abspath(run_dir))
    spec = _on_session(_objective(s.spec(root)), frame.sparkSession, s.call("options"))
    staged = staged_frame(frame, spec, {k: s.call(k) for k in ("source", "group_by", "agg")})
    check_local_slots(spec.run.partitions, spec.run.effective_master)
    check_log_dir(Path(run_dir))
    _check_workers(frame.sparkSession)
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    try:
        stage(staged, root / SOURCE_DIR, spec.source.time_field, spec.source.chunk_rows)
        if _rows(root / SOURCE_DIR) == 0:
            raise UsageError(f"{s.call('source')}: the DataFrame has no rows")
        return _run_spec(spec, None, root, max_tuples=max_tuples, progress=progress,
                         keep_session=True, staged=SOURCE_DIR, options_call=s.call("options"),
                         workers_checked=True)
    except BaseException:
        if not RunLayout(root).exists():  # the run never started: take back what we wrote
            shutil.rmtree(root / SOURCE_DIR, ignore_errors=True)
            if created:
                with contextlib.suppress(OSError):
                    root.rmdir()
        raise


def run(what: Stream | PipelineSpec, run_dir: Path | str | None = None, *,
        spec_path: Path | str | None = None, max_tuples: int | None = None,
        progress: bool = False, keep_session: bool = True) -> Run:
    """Run a pipeline (a :class:`Stream`, or a spec from :func:`load`) into ``run_dir``.

    ``run_dir`` must not exist or be empty (default for a spec file: ``runs/STEM``);
    ``max_tuples`` stops after that many source rows; ``progress`` draws the progress
    view on the terminal. ``keep_session``: use this process's SparkSession, or start
    one and leave it running; False (the command line): start the run's own and stop it
    at the end. Errors are :mod:`cec.errors`' (a bad spec or input: exit status 2).
    """
    if isinstance(what, PipelineSpec):
        return _run_spec(what, spec_path, run_dir, max_tuples=max_tuples, progress=progress,
                         keep_session=keep_session)
    if run_dir is None:
        raise UsageError(f"{what.call('source')}...run(): give the run directory")
    try:
        if what.frame is not None:
            return _run_frame(what, what.frame, run_dir, max_tuples=max_tuples,
                              progress=progress)
        return _run_spec(_objective(what.spec()), None, run_dir, max_tuples=max_tuples,
                         progress=progress,
                         keep_session=keep_session, options_call=what.call("options"))
    except SpecError as exc:  # found by the run (Spark and the filter, the rto floor)
        text = str(exc)
        if not text.startswith(f"{ORIGIN}: ["):
            raise
        place = text[len(ORIGIN) + 2:].split(": ", 1)[0]  # [table].field...
        loc = (place[1:place.index("]")], *place[place.index("]") + 1:].split(".")[1:])
        raise SpecError(f"{what.call(_slot(loc))}: {text[len(ORIGIN) + 2:]}") from exc


def recover(run_dir: Path | str, *, dry_run: bool = False, progress: bool = False,
            master: str | None = None, conf: dict[str, str] | None = None,
            repair: bool = False, trust: bool = False, partitions: int | None = None,
            **more: Any) -> RecoverResult:
    """``cec recover --from-log RUN``: rebuild every partition's eventual checkpoint and
    resume the run to its end (``dry_run``: only explain); ``partitions``: rescale to
    that many. ``more``: further options of :func:`cec_spark.recover.resume.recover_run`."""
    from cec_spark.recover.resume import recover_run  # noqa: PLC0415 - lazy

    return recover_run(run_dir, dry_run=dry_run, progress=progress, master=master, conf=conf,
                       repair=repair, trust=trust, partitions=partitions, **more)


def export(run_dir: Path | str, out: Path | str, fmt: str = "csv",
           consumer: str | None = None, **more: Any) -> ExportResult:
    """``cec export``: every result of the run as one CSV or parquet file. ``more``:
    further options of :func:`cec_spark.read.export.export`."""
    return _export(run_dir, out, fmt, consumer, **more)


def inspect_extent(run_dir: Path | str, *, partition: int | None = None,
                   at: int | None = None) -> ExtentResult:
    """``cec inspect extent``: q, u, T, N per partition, now or as of ``at`` (us)."""
    from cec_spark.read.inspect import inspect_extent as extent  # noqa: PLC0415 - lazy

    return extent(run_dir, partition=partition, at=at)


def inspect_log(path: Path | str, *, verify: bool = False) -> LogReport:
    """``cec inspect log``: segments, records and (``verify``) checksums of the logs."""
    from cec_spark.read.inspect import inspect_log as describe  # noqa: PLC0415 - lazy

    return describe(path, verify=verify)


def results(run_dir: Path | str, spark: SparkSession | None = None) -> DataFrame:
    """The results of a run as a Spark DataFrame: ``spark.read.format("cec")``
    (:mod:`cec_spark.read.datasource`; the same rows as ``cec export``, plus ``partition`` and
    ``seq``), through ``spark`` or this process's active session."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - lazy

    from cec_spark.read.datasource import register  # noqa: PLC0415 - lazy

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise UsageError("results(): no SparkSession in this process; pass spark=")
    register(spark)
    return spark.read.format("cec").load(os.path.abspath(run_dir))
