"""Spec parsing and validation (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cec.errors import SpecError, UsageError
from cec.spec import (
    default_master,
    dump_spec,
    load_spec,
    parse_conf,
    parse_duration_us,
    parse_spec,
    parse_stored_spec,
)
from tests.cec_spark.helpers import REPO, spec_text

CSV_SOURCE = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"'


def test_the_contract_example_parses_verbatim() -> None:
    spec = load_spec(REPO / "cli" / "examples" / "items_csv.toml")
    assert spec.source.kind == "csv"
    assert spec.source.path == (REPO / "cli" / "examples" / "items.csv").resolve()
    assert spec.where == "item_price >= 0"
    agg = spec.aggregate
    assert (agg.group_by, agg.field, agg.function) == ("item_id", "item_price", "avg")
    assert (agg.window.kind, agg.window.size, agg.window.slide) == ("count", 10, 10)
    cp = spec.checkpoint
    assert (cp.q_factor, cp.q_records, cp.u, cp.ci_ms, cp.cp_ms, cp.mode) == (
        2.0, None, 1_000_000, 5.0, 100.0, "targets")
    assert spec.run.partitions == 4
    assert spec.run.effective_master == "local[6,3]"


def test_builtin_default_is_the_generator() -> None:
    spec = load_spec(REPO / "cli" / "examples" / "items.toml")
    assert spec.source.kind == "generator"
    assert spec.source.generator is not None and spec.source.generator.keys == 100_000


def test_time_window_and_overrides() -> None:
    spec = parse_spec(spec_text(CSV_SOURCE, window='{ kind = "time", size = "10s", '
                                'slide = "5s" }', q="500"), origin="t.toml", base=Path("/d"))
    w = spec.aggregate.window
    assert (w.kind, w.size, w.slide) == ("time", 10_000_000, 5_000_000)
    assert spec.checkpoint.q_records == 500 and spec.checkpoint.q_factor is None
    assert spec.source.path == Path("/d/items.csv")
    over = spec.with_run(partitions=8, master="local[2]")
    assert over.run.partitions == 8 and over.run.effective_master == "local[2]"
    assert default_master(8) == "local[10,3]"


def test_dump_roundtrip() -> None:
    spec = parse_spec(spec_text(CSV_SOURCE, window='{ kind = "time", size = "10s", '
                                'slide = "5s" }'), origin="t.toml", base=Path("/d"))
    back = parse_stored_spec(dump_spec(spec, {"cec": {"max_tuples": 3}}), "run.toml")
    assert back.source == spec.source and back.aggregate == spec.aggregate
    assert back.checkpoint == spec.checkpoint and back.where == spec.where
    assert back.run.effective_master == spec.run.effective_master
    assert back.run.segment_kb == spec.run.segment_kb == 64 * 1024
    assert back.run.trim_upstream is spec.run.trim_upstream is True
    assert back.run.trim_lag_s == spec.run.trim_lag_s == 30.0
    tuned = parse_spec(spec_text(CSV_SOURCE, extra_run="segment_kb = 16\ntrim_upstream = false"
                                 "\ntrim_lag_s = 0"), origin="t.toml", base=Path("/d"))
    assert (tuned.run.segment_kb, tuned.run.trim_upstream, tuned.run.trim_lag_s) == \
        (16, False, 0.0)


@pytest.mark.parametrize("value,expected", [("10s", 10_000_000), ("500ms", 500_000),
                                            (7, 7), ("1m", 60_000_000), ("x", None),
                                            (0, None), (True, None)])
def test_durations(value: object, expected: int | None) -> None:
    assert parse_duration_us(value) == expected


@pytest.mark.parametrize(("text", "needle"), [
    (spec_text(CSV_SOURCE, function="median"),
     "[aggregate].function: 'median' is not one of count|sum|min|max|avg"),
    (spec_text(CSV_SOURCE, window='{ kind = "hopping", size = 3 }'),
     "[aggregate].window.kind: 'hopping' is not one of count|time|session"),
    (spec_text(CSV_SOURCE, window='{ kind = "count", size = 0 }'),
     "[aggregate].window.size"),
    (spec_text(CSV_SOURCE, window='{ kind = "count", size = 5, slide = 6 }'),
     "[aggregate].window.slide"),
    (spec_text(CSV_SOURCE, window='{ kind = "time", size = "ten seconds" }'),
     "[aggregate].window.size"),
    (spec_text(CSV_SOURCE, q='"two"'), "[checkpoint].Q"),
    (spec_text(CSV_SOURCE, extra_run="master = 3"), "[run].master"),
    (spec_text(CSV_SOURCE, extra_run="segment_kb = 2"), "[run].segment_kb: must be >= 4"),
    (spec_text(CSV_SOURCE, extra_run='trim_upstream = "yes"'), "[run].trim_upstream"),
    (spec_text(CSV_SOURCE, extra_run="trim_lag_s = -1"), "[run].trim_lag_s: must be >= 0"),
    (spec_text(CSV_SOURCE, extra_run="slot_timeout_s = 0"), "[run].slot_timeout_s"),
    (spec_text(CSV_SOURCE, extra_run="executor_wait_s = -1"),
     "[run].executor_wait_s: must be >= 0"),
    (spec_text(CSV_SOURCE, extra_run="spark = 3"), "[run.spark]: must be a table"),
    (spec_text(CSV_SOURCE) + "\n[run.spark]\ndriver.memory = \"4g\"\n",
     "[run.spark].driver.memory: not a Spark setting"),
    (spec_text(CSV_SOURCE) + "\n[run.spark]\n\"spark.x\" = [1]\n",
     "[run.spark].spark.x: must be a string, number or boolean"),
    (spec_text(CSV_SOURCE).replace("partitions = 3", "partitions = 0"),
     "[run].partitions: must be >= 1"),
    (spec_text('kind = "kafka"\npath = "x"\ntime_field = "t"'),
     "[source].kind: 'kafka' is not one of"),
    (spec_text('kind = "csv"\ntime_field = "t"'), "[source].path: missing field"),
    (spec_text('kind = "csv"\npath = "x.csv"'), "[source].time_field: missing field"),
    (spec_text(CSV_SOURCE).replace("CI_ms = 5", "CI_ms = 500"), "[checkpoint].CI_ms"),
    (spec_text(CSV_SOURCE).replace('group_by = "item_id"', 'group_by = "seq"'),
     "[aggregate].group_by: 'seq' is reserved"),
    (spec_text(CSV_SOURCE).replace("[run]", "[runn]"), "[runn]: unknown table"),
    (spec_text(CSV_SOURCE).replace("U = 1000000", "U = 1000000\nR = 3"),
     "[checkpoint].R: unknown field"),
    (spec_text('kind = "generator"\nrows = -1'), "[source].rows: must be >= 0"),
    ("[source\nkind=1", "not valid TOML"),
    (spec_text(CSV_SOURCE).replace('[aggregate]\ngroup_by = "item_id"',
                                   '[aggregate]\ngroup_by = "item_id"\n'
                                   'mode = "x"'), "[aggregate].mode: unknown field"),
    (spec_text(CSV_SOURCE, window='{ size = 3 }'), "[aggregate].window.kind: missing field"),
    (spec_text(CSV_SOURCE, window='{ kind = "count", size = 3, step = 1 }'),
     "[aggregate].window.step: unknown field (allowed: kind, size, slide, gap)"),
    # a misspelt key is named, not the key it meant
    (spec_text(CSV_SOURCE).replace("window =", "windoww ="),
     "[aggregate].windoww: unknown field (allowed: group_by, field, function, window)"),
    (spec_text(CSV_SOURCE, extra_run='fsync = "sometimes"'),
     "[run].fsync: 'sometimes' is not one of always|interval|never"),
    (spec_text(CSV_SOURCE, extra_run="ingest_tasks = true"),
     "[run].ingest_tasks: must be an integer, got True"),
    (spec_text(CSV_SOURCE, window='{ kind = "time", size = "10" }'),
     "[aggregate].window.size: '10' is not a duration"),
    ('source = 3\n', "[source]: must be a table, got int"),
    ('[source]\nkind = "generator"\n', "[aggregate]: missing table"),
])
def test_bad_specs_name_file_and_field(text: str, needle: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(text, origin="items.toml")
    msg = str(exc.value)
    assert msg.startswith("items.toml"), msg
    assert needle in msg, msg


def test_spark_settings_table_and_conf_overrides() -> None:
    """[run.spark] takes quoted or dotted keys; --conf wins; both survive run.toml."""
    text = spec_text(CSV_SOURCE) + (
        '\n[run.spark]\n"spark.driver.memory" = "3g"\nspark.ui.enabled = true\n'
        "spark.sql.shuffle.partitions = 7\n")
    spec = parse_spec(text, origin="s.toml", base=REPO)
    assert spec.run.spark_conf == {"spark.driver.memory": "3g", "spark.ui.enabled": "true",
                                   "spark.sql.shuffle.partitions": "7"}
    spec = spec.with_run(conf=parse_conf(["spark.driver.memory=5g", "spark.a.b=x=y"]))
    assert spec.run.spark_conf["spark.driver.memory"] == "5g"
    assert spec.run.spark_conf["spark.a.b"] == "x=y"
    again = parse_stored_spec(dump_spec(spec), "run.toml")
    assert again.run.spark_conf == spec.run.spark_conf
    for bad, needle in ((["x"], "expected key=value"), (["=1"], "expected key=value"),
                        (["ui=1"], "'ui' is not a Spark setting")):
        with pytest.raises(UsageError, match=needle):
            parse_conf(bad)


def test_fsync_modes_are_storage_logs() -> None:
    from storage_log import FSYNC_MODES

    for mode in FSYNC_MODES:
        spec = parse_spec(spec_text(CSV_SOURCE, extra_run=f'fsync = "{mode}"'), origin="f.toml")
        assert spec.run.fsync == mode


def test_window_is_the_core_window_type() -> None:
    from cec.windows import CountWindow, TimeWindow

    spec = parse_spec(spec_text(CSV_SOURCE, window='{ kind = "time", size = "1s", '
                                'slide = "250ms" }'), origin="w.toml")
    assert spec.aggregate.window == TimeWindow(1_000_000, 250_000)
    spec = parse_spec(spec_text(CSV_SOURCE), origin="w.toml")
    assert isinstance(spec.aggregate.window, CountWindow)


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "nope.toml")
