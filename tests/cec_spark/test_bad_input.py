"""Bad input in file sources (issue 17): exit 2 naming file, line and field; never a
traceback; never a file's content echoed (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cec.spec import PipelineSpec, parse_spec
from cec_spark.source.planner import InputError, plan_source
from tests.cec_spark.helpers import spec_text

HEAD = "item_id,item_price,item_time\n"


def _spec(tmp: Path, kind: str, path: str) -> PipelineSpec:
    src = f'kind = "{kind}"\npath = "{path}"\ntime_field = "item_time"\nchunk_rows = 100'
    return parse_spec(spec_text(src), origin="t.toml", base=tmp)


def _error(tmp: Path, name: str, data: bytes, kind: str = "csv") -> str:
    (tmp / name).write_bytes(data)
    with pytest.raises(InputError) as exc:
        plan_source(_spec(tmp, kind, name))
    return str(exc.value)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "NaN", "Infinity"])
def test_csv_non_finite_numbers_are_refused(tmp_path: Path, value: str) -> None:
    msg = _error(tmp_path, "a.csv", f"{HEAD}1,2.0,10\n1,{value},11\n".encode())
    assert msg.startswith("a.csv: line 3: item_price: ") and "not a finite number" in msg


def test_jsonl_non_finite_numbers_are_refused(tmp_path: Path) -> None:
    data = b'{"item_id": 1, "item_price": 1.0, "item_time": 1}\n' \
           b'{"item_id": 1, "item_price": NaN, "item_time": 2}\n'
    msg = _error(tmp_path, "a.jsonl", data, "jsonl")
    assert msg.startswith("a.jsonl: line 2: item_price: "), msg


@pytest.mark.parametrize(("kind", "data", "line"), [
    ("csv", f"{HEAD}1,2.0,10\n\n1,3.0,11\n".encode(), 3),
    ("csv", f"{HEAD}1,2.0,10\n\n".encode(), 3),
    ("jsonl", b'{"item_id": 1, "item_price": 1.0, "item_time": 1}\n\n'
              b'{"item_id": 1, "item_price": 2.0, "item_time": 2}\n', 2),
])
def test_blank_lines_are_named(tmp_path: Path, kind: str, data: bytes, line: int) -> None:
    msg = _error(tmp_path, f"a.{kind}", data, kind)
    assert msg == f"a.{kind}: line {line}: the line is blank", msg


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbf" + f"{HEAD}1,2.0,10\n2,3.0,11\n".encode())
    plan = plan_source(_spec(tmp_path, "csv", "a.csv"))
    assert plan.rows == 2 and plan.columns.names[0] == "item_id"


def test_a_30_mb_line_is_read_and_a_bad_line_after_it_named(tmp_path: Path) -> None:
    big = "x" * (30 << 20)
    (tmp_path / "a.csv").write_text(f"{HEAD}1,2.0,10\n{big},3.0,11\n")
    assert plan_source(_spec(tmp_path, "csv", "a.csv")).rows == 2
    msg = _error(tmp_path, "b.csv", f"{HEAD}1,2.0,10\n{big},3.0,11\n1,abc,12\n".encode())
    assert msg == "b.csv: line 4: item_price: 'abc' is not a number", msg[:300]


def test_a_long_field_within_the_limit_is_read(tmp_path: Path) -> None:
    long = "y" * 300_000
    (tmp_path / "a.csv").write_text(f"item_id,item_price,item_time,note\n1,2.0,10,{long}\n")
    assert plan_source(_spec(tmp_path, "csv", "a.csv")).rows == 1


def test_iso_timestamps_in_jsonl_are_read_and_a_bad_one_named(tmp_path: Path) -> None:
    good = b'{"item_id": 1, "item_price": 1.0, "item_time": "2024-01-01T00:00:00Z"}\n'
    (tmp_path / "ok.jsonl").write_bytes(good)
    assert plan_source(_spec(tmp_path, "jsonl", "ok.jsonl")).columns.kind("item_time") == "iso"
    data = good + b'{"item_id": 1, "item_price": 1.0, "item_time": "2024-13-01T00:00:00Z"}\n'
    msg = _error(tmp_path, "a.jsonl", data, "jsonl")
    assert msg == ("a.jsonl: line 2: item_time: '2024-13-01T00:00:00Z' is not an ISO-8601 "
                   "time (like 2024-05-01T12:00:00Z)"), msg


def test_a_file_that_is_no_csv_is_not_echoed(tmp_path: Path) -> None:
    secret = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/bin/false\n"
    msg = _error(tmp_path, "passwd", secret.encode())
    assert "root" not in msg and "/bin" not in msg, msg
    assert msg.startswith("passwd: line 1: missing column 'item_"), msg
    assert "(its first line is not a header of column names" in msg, msg
    ok = _error(tmp_path, "b.csv", b"id,item_price,item_time\n1,2.0,3\n")
    assert "(the header has id, item_price, item_time)" in ok


def test_parquet_integers_beyond_2_53_in_the_value_field_are_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"item_id": [1, 2], "item_price": pa.array([5, (1 << 53) + 1], pa.int64()),
                  "item_time": [1, 2]})
    pq.write_table(t, tmp_path / "a.parquet")
    with pytest.raises(InputError) as exc:
        plan_source(_spec(tmp_path, "parquet", "a.parquet"))
    assert str(exc.value).startswith("a.parquet: row 1 (row groups 0-0): item_price: "
                                     "9007199254740993 is beyond 2^53"), str(exc.value)
    f = pa.table({"item_id": [1], "item_price": pa.array([float("nan")]), "item_time": [1]})
    pq.write_table(f, tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"b\.parquet: row 0: item_price: nan is not a finite"):
        plan_source(_spec(tmp_path, "parquet", "b.parquet"))
