"""docs/JSON.md and the commands' ``--json`` come from one source: the package cec_spark/report.

The Spark-backed commands' real outputs are checked against the same schema in
tests/cli/test_pipeline_cli.py (:func:`checked`); here, without Spark: the doc is
what the code generates, every result class's ``asdict`` passes, a wrong field or
type does not, and the renderer's human view of each.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cec_spark import report
from cli import render, schema

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("pydantic")


def test_docs_json_md_is_generated_from_the_result_classes() -> None:
    doc = (REPO / "docs" / "JSON.md").read_text()
    assert doc == schema.markdown(), "regenerate: python -m cli.schema > docs/JSON.md"


def _sample(tp: Any) -> Any:
    """A value of type ``tp`` (every optional filled: the deepest check)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, __import__("types").UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _sample(args[0])
    if origin is list:
        return [_sample(typing.get_args(tp)[0])]
    if origin is tuple:  # tuple[X, ...]
        return (_sample(typing.get_args(tp)[0]),)
    if origin is dict:
        return {"k": _sample(typing.get_args(tp)[1])}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _sample(hints[f.name]) for f in dataclasses.fields(tp)})
    return {int: 1, float: 1.5, str: "x", bool: True}[tp]


@pytest.mark.parametrize("command", list(schema.COMMANDS))
def test_every_result_class_passes_its_schema(command: str) -> None:
    cls = schema.COMMANDS[command]
    doc = json.loads(render.to_json(_sample(cls)))
    assert schema.problems(doc, cls) == []
    assert f"`{command} --json`" in schema.markdown()


def test_a_wrong_field_or_type_is_found() -> None:
    doc = json.loads(render.to_json(_sample(report.RunResult)))
    doc["per_partition"][0]["in_tuples"] = "many"
    doc["elapsed_s"] = None
    del doc["steady_s"]
    doc["extra"] = 1
    found = "\n".join(schema.problems(doc, report.RunResult))
    assert "$.per_partition[0].in_tuples" in found
    assert "$.elapsed_s" in found
    assert "are not" in found  # the field list differs


def test_names_follow_the_rules() -> None:
    """partition (never p), durations *_s, times *_us: no field named otherwise."""
    seen: set[str] = set()

    def walk(cls: Any) -> None:
        for f in dataclasses.fields(cls):
            seen.add(f.name)
            for arg in [f.type, *typing.get_args(typing.get_type_hints(cls)[f.name])]:
                inner = typing.get_args(arg) or (arg,)
                for t in inner:
                    if dataclasses.is_dataclass(t):
                        walk(t)

    for cls in schema.COMMANDS.values():
        walk(cls)
    assert "p" not in seen
    places = {"fenced_at", "cut_at"}  # places in a segment file (bytes), not times
    bad = [n for n in seen - places
           if n.endswith(("_at", "_ts", "seconds", "_ms", "_us_s"))]
    assert not bad, bad


def test_human_view_plain_lines_are_not_truncated() -> None:
    result = _sample(report.RecoverResult)
    long = "y" * 300
    result = dataclasses.replace(result, run_dir=long)
    console = Console(record=True, width=60, force_terminal=False)
    render.render(result, json_out=False, rows="partitions",
                  columns=("partition", ("extent_records", "extent.records"),
                           ("scan_s", "phases.0.seconds"), ("n", "phases.#")),
                  console=console)
    text = console.export_text()
    assert f"run_dir: {long}" in text
    assert "partition=1  extent_records=1  scan_s=1.5  n=1" in text
    assert "resumed:" in text and "  completed: True" in text


def test_resolve_paths() -> None:
    part = _sample(report.RecoverPartition)
    part = dataclasses.replace(part, phases=(report.Phase("scan", 2.0, None, None),
                                             report.Phase("load", 1.0, 0.5, 0.1)))
    assert render.resolve(part, "phases.scan.seconds") == 2.0
    assert render.resolve(part, "phases.load.seconds") == 0.5
    assert render.resolve(part, "phases.replay.seconds") is None
    assert render.resolve(part, "extent.oldest.0.age") == 1
    assert render.resolve(part, "extent.oldest.5.age") is None


def test_fields_added_later_have_defaults() -> None:
    """A field added to a result after consumers existed (the watermarks of issue 37)
    has a default, so that code building the result without it keeps working, and is
    documented in docs/JSON.md; the fields before it keep their places."""
    added = {report.ExtentPartition: ("ingest_watermark_us", "operator_watermark_us",
                                      "operator_behind_s", "watermark")}
    doc = schema.markdown()
    for cls, names in added.items():
        fields = [f.name for f in dataclasses.fields(cls)]
        assert fields[-len(names):] == list(names), fields  # appended, nothing reordered
        for f in dataclasses.fields(cls):
            if f.name in names:
                assert f.default is None, f.name
                assert f"| `{f.name}` |" in doc
    sample = _sample(report.ExtentPartition)
    kept = {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)
            if f.name not in added[report.ExtentPartition]}
    assert report.ExtentPartition(**kept).watermark is None
