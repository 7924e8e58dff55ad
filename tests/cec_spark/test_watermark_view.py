"""Each partition's two watermarks as a user sees them (issue 37 item 5), without Spark:
``cec inspect extent`` (human and ``--json``) on logs written here with StreamLog and
tokens carrying ``wm``, the ``RUN/metrics`` text, the progress view's cells and line,
and the phrase itself (:mod:`cec_spark.report.watermark`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from cec.ingest_token import IngestToken, encode_token
from cec.records import END_OF_STREAM_TS
from cec.spec import load_spec
from cec_spark.driver.display import plain_watermark, watermark_cell
from cec_spark.driver.looks import UpstreamPositions
from cec_spark.ingest.logs import create_logs
from cec_spark.read.inspect import inspect_extent
from cec_spark.report.watermark import behind_s, event_time, reached, watermark_text
from cec_spark.run import metrics
from cec_spark.rundir.advisory import write_advisory
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import run_text, settings_for, write_run_text
from cec_spark.source.types import ColumnTypes
from storage_log.log import StreamLog
from tests.cec_spark.helpers import spec_text
from tests.cec_spark.test_metrics import parse

#: 2026-11-27 05:07:24.100 UTC, microseconds
T0 = int(datetime(2026, 11, 27, 5, 7, 24, 100_000, tzinfo=UTC).timestamp()) * 1_000_000 \
    + 100_000


def test_t0_is_the_documented_example() -> None:
    assert event_time(T0) == "2026-11-27 05:07:24.100 UTC"
    assert event_time(T0, date=False) == "05:07:24.100"


@pytest.mark.parametrize(("ingest", "operator", "text"), [
    (None, None, None),
    (T0, None, "2026-11-27 05:07:24.100 UTC (ingest), operator none applied yet"),
    (T0, T0, "2026-11-27 05:07:24.100 UTC (ingest), operator caught up"),
    (T0, T0 - 200_000,
     "2026-11-27 05:07:24.100 UTC (ingest), operator at 05:07:23.900, 0.2 s behind"),
    (T0, T0 - 10_000_000,
     "2026-11-27 05:07:24.100 UTC (ingest), operator at 05:07:14.100, 10 s behind"),
    (T0, T0 - 6 * 3600 * 1_000_000,  # the day before: the operator's date is written
     "2026-11-27 05:07:24.100 UTC (ingest), operator at 2026-11-26 23:07:24.100 UTC, "
     "21,600 s behind"),
    (None, T0, "2026-11-27 05:07:24.100 UTC (operator), ingest's not known"),
    (END_OF_STREAM_TS, T0,
     "end of stream (ingest), operator at 2026-11-27 05:07:24.100 UTC"),
    (1_500, 1_000, "1970-01-01 00:00:00.001 UTC (ingest), operator at 00:00:00.001, "
     "0.001 s behind"),
])
def test_watermark_text(ingest: int | None, operator: int | None, text: str | None) -> None:
    assert watermark_text(ingest, operator) == text


def test_behind_is_never_negative() -> None:
    assert behind_s(T0, T0 + 5) == 0.0  # read at different moments: never "ahead"
    assert behind_s(T0, None) is None and behind_s(None, T0) is None
    assert behind_s(T0 + 2_500_000, T0) == 2.5


# ----------------------------------------------------------------------- inspect


SCHEMA = pa.schema([("seq", pa.int64()), ("ts", pa.int64()), ("item_id", pa.int64()),
                    ("item_price", pa.float64())])


def _rows(seqs: list[int], ts: list[int]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(seqs, pa.int64()), pa.array(ts, pa.int64()),
                            pa.array([1] * len(seqs), pa.int64()),
                            pa.array([1.0] * len(seqs))], schema=SCHEMA)


def _run_dir(tmp_path: Path, partitions: int = 2) -> RunLayout:
    """A run directory as ``cec run pipeline`` leaves it: run.toml, every log created."""
    spec_file = tmp_path / "s.toml"
    spec_file.write_text(spec_text('kind = "stream-dir"\npath = "in"\nformat = "csv"\n'
                                   'time_field = "item_time"', where=None,
                                   window='{ kind = "time", size = "1s" }',
                                   partitions=partitions))
    (tmp_path / "in").mkdir()
    spec = load_spec(spec_file)
    cols = ColumnTypes(("item_id", "item_price", "item_time"), ("int64", "float64", "int64"))
    layout = RunLayout(tmp_path / "run")
    write_run_text(layout, run_text(spec, settings_for(spec, cols, None)))
    create_logs(layout, partitions, "never")
    return layout


def _token(chunk: int, wm: int | None, late: int = 0) -> bytes:
    return encode_token(IngestToken(chunk, 10 * (chunk + 1), 10 * (chunk + 1), late, wm))


def _quiet_partition_1(layout: RunLayout) -> None:
    """3 s of rows for both partitions, then 10 s of partition 0's keys only: partition
    1's log learns the watermark from token-only commits (TOKEN frames)."""
    with StreamLog.open(layout.upstream(0), writable=True) as log:
        log.append(_rows([0, 2], [T0, T0 + 2_900_000]))
        log.commit(_token(0, T0 + 3_000_000))
        log.append(_rows([4, 6], [T0 + 5_000_000, T0 + 12_900_000]))
        log.commit(_token(1, T0 + 13_000_000))
    with StreamLog.open(layout.upstream(1), writable=True) as log:
        log.append(_rows([1, 3], [T0 + 100_000, T0 + 2_500_000]))
        log.commit(_token(0, T0 + 3_000_000, late=2))
        log.commit(_token(1, T0 + 13_000_000, late=2))  # no row: a TOKEN frame
    # the operators: partition 0 caught up, partition 1 still at the first W
    write_advisory(layout.state_file(0), {"in_tuples": 4, "watermark_us": T0 + 13_000_000})
    write_advisory(layout.state_file(1), {"in_tuples": 2, "watermark_us": T0 + 3_000_000})


def test_inspect_extent_shows_each_partitions_watermarks(tmp_path: Path) -> None:
    layout = _run_dir(tmp_path)
    _quiet_partition_1(layout)
    res = inspect_extent(layout.root)
    p0, p1 = res.partitions
    assert (p0.ingest_watermark_us, p0.operator_watermark_us) == (T0 + 13_000_000,) * 2
    assert p0.operator_behind_s == 0.0
    assert p0.watermark == "2026-11-27 05:07:37.100 UTC (ingest), operator caught up"
    assert (p1.ingest_watermark_us, p1.operator_watermark_us) == (T0 + 13_000_000,
                                                                   T0 + 3_000_000)
    assert p1.operator_behind_s == 10.0
    assert p1.watermark == ("2026-11-27 05:07:37.100 UTC (ingest), operator at "
                            "05:07:27.100, 10 s behind")
    assert p1.late_rows == 2  # the token's other fields still read

    doc = json.loads(_render(res, json_out=True))
    got = doc["partitions"][1]
    assert got["ingest_watermark_us"] == T0 + 13_000_000
    assert got["operator_watermark_us"] == T0 + 3_000_000
    assert got["operator_behind_s"] == 10.0
    from cli import schema

    assert schema.problems(doc, type(res)) == []

    text = _render(res, json_out=False)
    assert ("watermark=2026-11-27 05:07:37.100 UTC (ingest), operator at 05:07:27.100, "
            "10 s behind") in text
    assert "partition=0" in text and "operator caught up" in text


def test_inspect_extent_without_watermarks_or_as_of_a_time(tmp_path: Path) -> None:
    """An older run's tokens (no wm) and no operator key: null, not a guess; with
    --at the watermarks (now) are not shown as if they were the past's."""
    layout = _run_dir(tmp_path, partitions=1)
    with StreamLog.open(layout.upstream(0), writable=True) as log:
        log.append(_rows([0], [T0]))
        log.commit(_token(0, None))
    write_advisory(layout.state_file(0), {"in_tuples": 1})
    (p0,) = inspect_extent(layout.root).partitions
    assert (p0.ingest_watermark_us, p0.operator_watermark_us, p0.operator_behind_s,
            p0.watermark) == (None, None, None, None)
    assert "watermark=-" in _render(inspect_extent(layout.root), json_out=False)

    with StreamLog.open(layout.upstream(0), writable=True) as log:
        log.commit(_token(0, T0 + 1))
    # not a time: ignored
    write_advisory(layout.state_file(0), {"in_tuples": 1, "watermark_us": True})
    (p0,) = inspect_extent(layout.root).partitions
    assert (p0.ingest_watermark_us, p0.operator_watermark_us) == (T0 + 1, None)
    (p0,) = inspect_extent(layout.root, at=T0).partitions
    assert (p0.ingest_watermark_us, p0.watermark) == (None, None)


def test_a_tuple_at_w_counts_as_the_operators_watermark(tmp_path: Path) -> None:
    """A watermark not above the operator's last tuple is a no-op (the state's
    watermark_us stays where it was): the operator has still reached that tuple's time,
    and is shown so (inspect, the progress view), not as behind the ingest."""
    assert reached(None, None) is None and reached(T0, None) == T0
    assert reached(None, T0) == T0 and reached(T0, T0 + 5) == T0 + 5
    layout = _run_dir(tmp_path)
    _quiet_partition_1(layout)
    # partition 0 processed its last row (seq 6 at 12.9 s) but applied no watermark yet
    write_advisory(layout.state_file(0), {"in_tuples": 4, "in_last_seq": 6})
    # partition 1 processed seq 1 only (0.1 s) and applied W = 3 s
    write_advisory(layout.state_file(1), {"in_tuples": 1, "in_last_seq": 1,
                                          "watermark_us": T0 + 3_000_000})
    p0, p1 = inspect_extent(layout.root).partitions
    assert p0.operator_watermark_us == T0 + 12_900_000 and p0.operator_behind_s == 0.1
    assert p1.operator_watermark_us == T0 + 3_000_000  # W above its last tuple
    ups = UpstreamPositions(layout)
    try:
        states = [{"in_last_seq": 6}, {"in_last_seq": 1, "watermark_us": T0 + 3_000_000},
                  {"in_last_seq": 2}]  # the log's last row; a row read; not in the log
        assert ups.operator(0, states[0]) == T0 + 12_900_000
        assert ups.operator(1, states[1]) == T0 + 3_000_000
        assert ups.operator(1, {"in_last_seq": 1}) == T0 + 100_000
        assert ups.operator(1, states[2]) is None
        assert ups.operator(0, {"in_last_seq": 4, "watermark_us": T0}) == T0 + 5_000_000
        assert watermark_cell(ups.watermark(0), ups.operator(0, states[0])) == \
            "05:07:37.100, op 0.1 s behind"
    finally:
        ups.close()
    text = metrics.exposition("run", states[:2], [6, 3], source_rows=6, sealed=False,
                              up_s=1.0, watermarks=[T0 + 13_000_000] * 2,
                              operators=[T0 + 12_900_000, None])
    assert parse(text)["cec_operator_watermark_seconds", "0"] == (T0 + 12_900_000) / 1e6
    assert ("cec_operator_watermark_seconds", "1") not in parse(text)


def _render(result: object, *, json_out: bool) -> str:
    from cli import render
    from cli.app import EXTENT_COLUMNS

    if json_out:
        return render.to_json(result)
    console = Console(record=True, width=100, force_terminal=False)
    render.render(result, json_out=False, rows="partitions", columns=EXTENT_COLUMNS,
                  console=console)
    return console.export_text()


# ----------------------------------------------------------------------- metrics


def test_metrics_carry_both_watermarks_to_the_microsecond() -> None:
    states = [{"in_tuples": 4, "watermark_us": T0 + 13_000_000},
              {"in_tuples": 2, "watermark_us": T0 + 3_000_000}, {}]
    text = metrics.exposition("run", states, [6, 3, None], source_rows=6, sealed=False,
                              up_s=1.0, watermarks=[T0 + 13_000_000, T0 + 13_000_001, None])
    got = parse(text)
    secs = (T0 + 13_000_000) // 1_000_000
    assert f'cec_ingest_watermark_seconds{{run="run",partition="1"}} {secs}.100001' in text
    assert got["cec_ingest_watermark_seconds", "0"] == (T0 + 13_000_000) / 1e6
    assert got["cec_operator_watermark_seconds", "1"] == (T0 + 3_000_000) / 1e6
    # the lag a dashboard draws: ingest's minus operator's
    lag = got["cec_ingest_watermark_seconds", "1"] - got["cec_operator_watermark_seconds", "1"]
    assert lag == pytest.approx(10.000001, abs=1e-6)
    assert ("cec_ingest_watermark_seconds", "2") not in got  # none yet: no series
    assert ("cec_operator_watermark_seconds", "2") not in got
    assert text.count("# TYPE cec_operator_watermark_seconds gauge") == 1
    # without watermarks (an older caller, a run before them): no series, nothing else moves
    old = metrics.exposition("run", [{"in_tuples": 4}], [6], source_rows=6, sealed=False,
                             up_s=1.0)
    assert "cec_ingest_watermark_seconds{" not in old
    assert "cec_operator_watermark_seconds{" not in old
    assert parse(old)["cec_input_tuples_total", "0"] == 4


def test_metrics_event_seconds_before_the_epoch() -> None:
    text = metrics.exposition("run", [{"watermark_us": -1_500_000}], [None], source_rows=0,
                              sealed=False, up_s=0.0, watermarks=[-1])
    assert 'cec_operator_watermark_seconds{run="run",partition="0"} -1.500000' in text
    assert 'cec_ingest_watermark_seconds{run="run",partition="0"} -0.000001' in text


# ----------------------------------------------------------------------- progress


@pytest.mark.parametrize(("ingest", "operator", "cell"), [
    (None, None, "-"),
    (T0, None, "05:07:24.100, op none"),
    (T0, T0, "05:07:24.100"),
    (T0, T0 - 250_000, "05:07:24.100, op 0.25 s behind"),
    (None, T0, "op 05:07:24.100"),
])
def test_progress_cell(ingest: int | None, operator: int | None, cell: str) -> None:
    assert watermark_cell(ingest, operator) == cell


def test_progress_plain_line_names_the_partition_that_waits() -> None:
    assert plain_watermark([None, None], [None, None]) == ""
    assert plain_watermark([T0 + 13_000_000, T0 + 3_000_000], [T0 + 13_000_000, None]) == (
        "  watermark 2026-11-27 05:07:27.100 UTC (ingest, least: partition 1), "
        "operators caught up")
    assert plain_watermark([T0 + 13_000_000, T0 + 13_000_000],
                           [T0 + 13_000_000, T0 + 3_000_000]) == (
        "  watermark 2026-11-27 05:07:37.100 UTC (ingest, least: partition 0), "
        "operators up to 10 s behind")
    assert plain_watermark([T0], [None]) == "  watermark 2026-11-27 05:07:24.100 UTC (ingest)"

