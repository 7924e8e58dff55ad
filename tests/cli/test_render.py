"""The human view's numbers (cli/render.py): times, rates and durations as a person reads
them; ``--json`` keeps the raw values, byte for byte."""

from __future__ import annotations

import dataclasses
import json

import pytest
from rich.console import Console

from cec_spark import report
from cli import render
from tests.cli.test_json_schema import _sample

NUMBERS = [  # (value, 3 significant digits)
    (0, "0"), (0.0, "0"), (7, "7"), (999, "999"), (1000, "1,000"), (999_999, "1,000,000"),
    (1e6, "1,000,000"), (1.5e9, "1,500,000,000"), (3.25e5, "325,000"),
    (324_987.3, "325,000"), (650.3, "650"), (3.076, "3.08"), (0.372, "0.372"),
    (0.0001234, "0.000123"), (-1500, "-1,500"), (-0.0004, "-0.0004"), (999.6, "1,000"),
    (1.5, "1.5"), (float("nan"), "nan"), (float("inf"), "inf"),
]


@pytest.mark.parametrize(("value", "text"), NUMBERS)
def test_number(value: float, text: str) -> None:
    assert render.number(value) == text


@pytest.mark.parametrize(("name", "value", "text"), [
    ("source_rows_per_s", 3.25e5, "325,000 rows/s"),
    ("steady_rows_per_s", 5373.4, "5,370 rows/s"),
    ("ec_records_per_s", 12.5, "12.5 records/s"),
    ("replay_positions_per_s", 0.0, "0 positions/s"),
    ("started_at_us", 1795756044435420, "2026-11-27 05:07:24 UTC"),
    ("updated_at_us", 0, "1970-01-01 00:00:00 UTC"),
    ("elapsed_s", 3.0761, "3.08 s"), ("steady_s", 0.372, "0.372 s"),
    ("ingest_s", 1234.56, "1,235 s"), ("rto_s", 30, "30 s"), ("fixed_s", 0.0, "0 s"),
    # not a time, rate or duration: as it is
    ("at_us", 1795756044435420, "1795756044435420"),  # an event time
    ("t_c_ts_us", 5, "5"), ("source_rows", 20000, "20000"), ("pid", 4242, "4242"),
    ("completed", True, "True"), ("steady_s", None, "-"), ("run_dir", "r", "r"),
    ("ratio", 0.123456, "0.1235"),
])
def test_readable(name: str, value: object, text: str) -> None:
    assert render.readable(name, value) == text


def test_table_cells_keep_whole_digits() -> None:
    assert [render.cell(v) for v in (12345.678, 1.5, 0.00012345, 2.0, 3.25e5, None)] == \
        ["12,346", "1.5", "0.0001234", "2", "325,000", "-"]


def _run_result() -> report.RunResult:
    return dataclasses.replace(_sample(report.RunResult), source_rows_per_s=3.25e5,
                               started_at_us=1795756044435420, elapsed_s=3.0761)


def test_the_summary_a_person_reads() -> None:
    console = Console(record=True, width=100, force_terminal=False)
    render.render(_run_result(), json_out=False, console=console)
    lines = console.export_text().splitlines()
    assert "source_rows_per_s: 325,000 rows/s" in lines
    assert "started_at_us: 2026-11-27 05:07:24 UTC" in lines
    assert "elapsed_s: 3.08 s" in lines
    assert not [line for line in lines if "e+" in line]


def test_json_is_the_raw_values_byte_for_byte(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run_result()
    render.render(result, json_out=True)
    out = capsys.readouterr().out
    assert out == json.dumps(dataclasses.asdict(result), indent=2) + "\n"
    doc = json.loads(out)
    assert doc["source_rows_per_s"] == 325000.0
    assert doc["started_at_us"] == 1795756044435420 and doc["elapsed_s"] == 3.0761
