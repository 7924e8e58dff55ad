"""Reading a spec: TOML text → :class:`~cec.spec.tables.SpecDocument` → :class:`PipelineSpec`.

Every problem is one :class:`~cec.errors.SpecError` naming the file and the field
(``items.toml: [aggregate].function: 'median' is not one of count|sum|min|max|avg``);
:func:`spec_error` is the one place a pydantic ``ValidationError`` becomes one.
Relative paths are resolved against ``base`` (the spec file's directory); no I/O
beyond reading the spec itself.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from cec.errors import SpecError
from cec.spec.model import (
    AggregateSpec,
    CheckpointSpec,
    PipelineSpec,
    RunSpec,
    SourceSpec,
)
from cec.spec.tables import (
    SUBTABLES,
    TABLES,
    SourceTable,
    SpecDocument,
    field_names,
    table_model,
)
from cec.spec.values import Problem

_TABLE_TYPES = ("model_type", "model_attributes_type", "dict_type")


def where(loc: tuple[str | int, ...]) -> str:
    """``("run", "spark", "x")`` → ``[run.spark].x``; ``("aggregate", "window", "kind")``
    → ``[aggregate].window.kind``."""
    if not loc:
        return ""
    head, rest = str(loc[0]), loc[1:]
    if tuple(loc[:2]) in SUBTABLES:
        head, rest = f"{loc[0]}.{loc[1]}", loc[2:]
    return f"[{head}]" + "".join(f".{k}" for k in rest)


def first_problem(errors: list[ErrorDetails]) -> tuple[tuple[str | int, ...], str]:
    """The problem to report of pydantic's ``errors`` and its place: ``(loc, message)``,
    ``loc`` the keys from the document's root (``("aggregate", "function")``).

    First in the file's order of tables; within a table an unknown key comes first (a
    misspelt key also makes the key it meant missing: the misspelling is the news).
    """
    def order(err: ErrorDetails) -> tuple[int, bool]:
        table = str(err["loc"][0]) if err["loc"] else ""
        return (TABLES.index(table) if table in TABLES else -1,
                err["type"] != "extra_forbidden")

    err = min(errors, key=order)
    loc = tuple(err["loc"])
    problem = (err.get("ctx") or {}).get("error")
    kind = err["type"]
    if isinstance(problem, Problem):
        loc += problem.fields
        msg = problem.message
    elif kind == "missing":
        msg = "missing table" if len(loc) == 1 else "missing field"
    elif kind == "extra_forbidden":
        model = table_model(loc[:-1])
        allowed = ", ".join(field_names(model)) if model is not None else "?"
        msg = f"unknown {'table' if len(loc) == 1 else 'field'} (allowed: {allowed})"
    elif kind in _TABLE_TYPES:
        msg = f"must be a table, got {type(err['input']).__name__}"
    else:  # not expected: every value is checked by a validator of cec.spec.tables
        msg = err["msg"]
    return loc, msg


def field_error(origin: str, loc: tuple[str | int, ...], problem: str) -> SpecError:
    """``origin: [table].field: problem``, a SpecError that carries ``loc`` as its
    ``field`` and ``problem`` (:class:`~cec.errors.SpecError`)."""
    place = where(loc)
    return SpecError(f"{origin}: {place}: {problem}" if place else f"{origin}: {problem}",
                     field=tuple(str(k) for k in loc), problem=problem)


def spec_error(exc: ValidationError, origin: str) -> SpecError:
    """The first problem (:func:`first_problem`), as ``origin: [table].field: message``."""
    loc, msg = first_problem(exc.errors())
    return field_error(origin, loc, msg)


def _source(tbl: SourceTable, base: Path) -> SourceSpec:
    if tbl.kind == "generator":
        return SourceSpec("generator", "item_time", chunk_rows=tbl.chunk_rows,
                          generator=tbl.generator())
    assert tbl.path is not None and tbl.time_field is not None  # checked by SourceTable
    path = Path(tbl.path).expanduser()
    if not path.is_absolute():
        path = (base / path).resolve()
    return SourceSpec(tbl.kind, tbl.time_field, path=path, format=tbl.format,
                      poll_ms=tbl.poll_ms, chunk_rows=tbl.chunk_rows,
                      time_unit=tbl.time_unit, allowed_lateness_us=tbl.lateness_us(),
                      late=tbl.late, idle_close_us=tbl.idle_close_us())


def to_spec(doc: SpecDocument, origin: str, base: Path) -> PipelineSpec:
    """The frozen spec of a validated document."""
    agg, cp, run = doc.aggregate, doc.checkpoint, doc.run
    q_records, q_factor = ((cp.q, None) if isinstance(cp.q, int)
                           else (None, CheckpointSpec.q_factor if cp.q is None else cp.q))
    return PipelineSpec(
        source=_source(doc.source, base),
        aggregate=AggregateSpec(agg.group_by, agg.field, agg.function, agg.window.window()),
        checkpoint=CheckpointSpec(q_records, q_factor, cp.u, cp.ci_ms, cp.cp_ms, cp.mode,
                                  cp.rto, cp.targets_given),
        run=RunSpec(run.partitions, run.master, run.fsync, run.segment_kb, run.trim_upstream,
                    run.trim_lag_s, run.spark, run.executor_wait_s, run.slot_timeout_s,
                    run.output_keep_mb, run.output_keep_s, run.ingest_tasks,
                    "ingest_tasks" in run.model_fields_set, run.key_groups, run.upstream),
        where=doc.filter.where,
        origin=origin,
    )


def _toml(text: str, origin: str) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: not valid TOML: {exc}") from exc


def _validate(doc: dict[str, object], origin: str, base: Path) -> PipelineSpec:
    try:
        valid = SpecDocument.model_validate(doc)
    except ValidationError as exc:
        raise spec_error(exc, origin) from None
    return to_spec(valid, origin, base)


def parse_spec(text: str, *, origin: str = "<spec>", base: Path | None = None) -> PipelineSpec:
    """Parse spec text; ``origin`` names it in messages, ``base`` anchors relative paths."""
    return _validate(_toml(text, origin), origin, base or Path.cwd())


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


def parse_stored_spec(text: str, origin: str) -> PipelineSpec:
    """Parse a ``run.toml`` (which may carry extra tables such as ``[cec]``).

    Durations were stored as microseconds, paths as absolute: the spec's tables are
    validated with the ordinary rules, so a stored spec is checked exactly like a user's.
    """
    doc = _toml(text, origin)
    spec_only = {k: v for k, v in doc.items() if k in TABLES}
    return _validate(spec_only, origin, Path("/"))


__all__ = ["field_error", "first_problem", "load_spec", "parse_spec", "parse_stored_spec",
           "spec_error", "to_spec", "where"]
