"""Record format 2 (ARCHITECTURE §3) on the run's readers: ``cec export``'s rows,
``format("cec")``'s rows (results and controls) and an offline rescale of an old run
(format 1 everywhere) into a new generation of format-2 logs, all without Spark.

A format-2 log here is a format-1 log less the columns format 2 does not keep
(:func:`tests.recovery.test_record_format.to_format2`), or the operator's own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from cec.errors import UsageError, exit_code
from cec.records import output_schema, record_format
from cec.window_state import AGGREGATE, LOGGED, UNTRACKED, logged_for, names, tracked_for
from cec_spark.ingest.logs import create_logs
from cec_spark.read.datasource import _Run
from cec_spark.read.export import result_rows, results_table
from cec_spark.recover.rescale import rescale
from cec_spark.run.operators import record_format_of
from cec_spark.run.plan import pipeline_spec, plan_new_run
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import write_run_text
from storage_log.log import StreamLog
from tests.cec_spark.helpers import operate_partitions, spec_text, write_items_csv
from tests.cec_spark.test_rescale_offline import CHUNK as OFFLINE_CHUNK
from tests.cec_spark.test_rescale_offline import _ingest
from tests.recovery.test_record_format import CASES, GAP, _format1_run, to_format2

# ------------------------------------------------------------------ rows, pure


@pytest.mark.parametrize(("function", "kind"), CASES)
def test_export_rows_of_either_format_are_equal(function: str, kind: str) -> None:
    """``cec export``'s (and ``cec tail``'s) rows of each record: the same tables."""
    results = 0
    for batch in _format1_run(function, kind):
        two = to_format2(batch, function, kind)
        for upto in (None, int(batch.column("seq")[0].as_py()) if batch.num_rows else None):
            a = result_rows(batch, kind == "count", pa.int64(), upto)
            b = result_rows(two, kind == "count", pa.int64(), upto)
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert b.equals(a)
                results += a.num_rows
    assert results > 0


def _reader(kind: str, controls: bool) -> _Run:
    """``format("cec")``'s reader of a run with this window kind (no run directory)."""
    run = _Run.__new__(_Run)
    run.count_window = kind == "count"
    run.session_gap = GAP if kind == "session" else None
    run.controls = controls
    return run


@pytest.mark.parametrize(("function", "kind"), CASES)
def test_the_data_source_gives_the_same_rows_for_either_format(function: str, kind: str
                                                              ) -> None:
    """Results: equal. Controls: the format-1 columns (the declared schema) either way,
    equal in every column the function reads (a session's first_ts/last_ts too); the
    others hold what an untracked field holds."""
    tracked = set(tracked_for(function, kind))
    if kind == "session":
        tracked |= {"first_ts", "last_ts"}
    rows = 0
    for batch in _format1_run(function, kind):
        two = to_format2(batch, function, kind)
        res1, res2 = _reader(kind, False).convert(3, batch), _reader(kind, False).convert(3, two)
        assert (res1 is None) == (res2 is None)
        if res1 is not None and res2 is not None:
            assert res2.equals(res1)
        ctl1, ctl2 = _reader(kind, True).convert(3, batch), _reader(kind, True).convert(3, two)
        if batch.num_rows == 0:
            assert ctl1 is None and ctl2 is None
            continue
        assert ctl1 is not None and ctl2 is not None
        assert ctl2.schema.names == ctl1.schema.names == ["partition", *batch.schema.names]
        assert ctl2.schema.types == ctl1.schema.types
        for name in ctl1.schema.names:
            if name in names(AGGREGATE) and name not in tracked:
                assert (ctl2.column(name).to_numpy() == UNTRACKED[name]).all(), name
            else:
                assert ctl2.column(name).equals(ctl1.column(name)), name
        rows += batch.num_rows
    assert rows > 0


# ------------------------------------------------- an old run rescaled, real logs

ROWS, CHUNK = 3_000, OFFLINE_CHUNK  # test_rescale_offline._ingest writes chunks of it


def _new_run(tmp: Path, name: str, window: str, function: str, partitions: int
             ) -> RunLayout:
    src = tmp / "items.csv"
    spec_path = tmp / f"{name}.toml"
    spec_path.write_text(spec_text(
        f'kind = "csv"\npath = "{src}"\ntime_field = "item_time"\nchunk_rows = {CHUNK}',
        where=None, window=window, function=function, partitions=partitions))
    plan = plan_new_run(pipeline_spec(spec_path), spec_path, tmp / name)
    write_run_text(plan.layout, plan.run_text)
    create_logs(plan.layout, partitions, "never")
    return RunLayout(plan.layout.root)


def _rows(tmp: Path) -> pa.Table:
    t = pacsv.read_csv(tmp / "items.csv")
    return pa.table({"ts": t.column("item_time"),
                     "seq": pa.array(np.arange(t.num_rows, dtype=np.int64)),
                     "item_id": t.column("item_id"), "item_price": t.column("item_price")})


def _formats(layout: RunLayout, gen: int, partitions: int) -> list[int | None]:
    out: list[int | None] = []
    for p in range(partitions):
        with StreamLog.open(layout.output_of(gen, p)) as log:
            out.append(None if log.schema is None else record_format(log.schema))
    return out


@pytest.mark.parametrize(("window", "function"), [
    ('{ kind = "count", size = 6, slide = 4 }', "avg"),
    ('{ kind = "time", size = "300ms", slide = "100ms" }', "max"),
    ('{ kind = "session", gap = "5s" }', "min")])
def test_an_old_run_rescaled_writes_format2_and_exports_the_same(
        tmp_path: Path, window: str, function: str) -> None:
    """A run of format-1 logs, rescaled 2 -> 3 mid-input: its drains go on in format 1
    (a log keeps its format), the new generation's logs are of format 2, and the run's
    export equals a run without rescale of either format."""
    write_items_csv(tmp_path / "items.csv", ROWS, keys=120, seed=5, negative=False)
    rows = _rows(tmp_path)
    refs = []
    for fmt in (1, 2):
        ref = _new_run(tmp_path, f"ref{fmt}", window, function, 2)
        _ingest(ref, rows, range(ROWS // CHUNK), seal=True)
        operate_partitions(ref, fmt=fmt)
        assert _formats(ref, 0, 2) == [fmt, fmt]
        refs.append(results_table(ref.root))
    assert refs[0].num_rows > 0 and refs[1].equals(refs[0])
    layout = _new_run(tmp_path, "run", window, function, 2)
    _ingest(layout, rows, range(3))
    operate_partitions(layout, upto=CHUNK, fmt=1)  # behind the cut: the rescale drains them
    assert _formats(layout, 0, 2) == [1, 1]
    result = rescale(layout, 3)
    assert result is not None and result.cut == 3 * CHUNK - 1
    assert [o.state for o in result.old] == ["drained", "drained"]
    assert sum(result.windows_per_partition) > 0
    assert _formats(layout, 0, 2) == [1, 1]  # the drains appended format-1 rows
    new = RunLayout(layout.root)
    assert new.generation == 1
    assert set(_formats(new, 1, 3)) <= {2, None} and 2 in _formats(new, 1, 3)
    _ingest(new, rows, range(3, ROWS // CHUNK), seal=True)
    operate_partitions(new)
    assert _formats(new, 1, 3) == [2, 2, 2]
    assert results_table(layout.root).equals(refs[0])


def test_a_rescale_told_to_write_format1_writes_format1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``CEC_RECORD_FORMAT=1`` (cec writing runs as before format 2): the new
    generation's first records are of format 1 too, and the export is the same."""
    monkeypatch.setenv("CEC_RECORD_FORMAT", "1")
    window = '{ kind = "count", size = 5 }'
    write_items_csv(tmp_path / "items.csv", ROWS, keys=120, seed=5, negative=False)
    rows = _rows(tmp_path)
    ref = _new_run(tmp_path, "ref", window, "sum", 2)
    _ingest(ref, rows, range(ROWS // CHUNK), seal=True)
    operate_partitions(ref)
    layout = _new_run(tmp_path, "run", window, "sum", 2)
    _ingest(layout, rows, range(3))
    operate_partitions(layout, upto=CHUNK)
    assert rescale(layout, 3) is not None
    new = RunLayout(layout.root)
    _ingest(new, rows, range(3, ROWS // CHUNK), seal=True)
    operate_partitions(new)
    assert _formats(ref, 0, 2) == [1, 1] and _formats(new, 0, 2) == [1, 1]
    assert _formats(new, 1, 3) == [1, 1, 1]
    assert results_table(layout.root).equals(results_table(ref.root))


def test_the_format_of_a_log_and_a_bad_cec_record_format(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log with rows goes on in its format whatever ``CEC_RECORD_FORMAT`` says; one
    without rows (or not there) takes the variable's, 2 by default; any other value is
    a usage error (exit 2) naming the variable."""
    monkeypatch.delenv("CEC_RECORD_FORMAT", raising=False)
    assert record_format_of(tmp_path / "absent") == 2
    empty = tmp_path / "empty"
    StreamLog.open(empty, writable=True, create=True, fsync="never").close()
    assert record_format_of(empty) == 2
    for fmt, logged in ((1, LOGGED), (2, logged_for("avg", "time"))):
        path = tmp_path / f"f{fmt}"
        schema = output_schema("int64", logged)
        row = pa.RecordBatch.from_pylist([dict.fromkeys(schema.names, 1)], schema=schema)
        with StreamLog.open(path, writable=True, create=True, fsync="never") as log:
            log.append(row)
            log.commit()
        for env in ("1", "2"):
            monkeypatch.setenv("CEC_RECORD_FORMAT", env)
            assert record_format_of(path) == fmt
    monkeypatch.setenv("CEC_RECORD_FORMAT", "1")
    assert record_format_of(empty) == 1
    monkeypatch.setenv("CEC_RECORD_FORMAT", "3")
    with pytest.raises(UsageError, match=r"CEC_RECORD_FORMAT='3'.* is 1 or 2") as err:
        record_format_of(empty)
    assert exit_code(err.value) == 2
