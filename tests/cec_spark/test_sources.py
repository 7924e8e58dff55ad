"""Source validation, chunk planning and chunk reading (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cec.spec import PipelineSpec, parse_spec
from cec_spark.source.planner import SEQ, InputError, StreamDirWatcher, plan_source, read_chunk
from cec_spark.source.types import TimeSpec
from tests.cec_spark.helpers import spec_text, write_items_csv


def _spec(tmp: Path, kind: str, path: str, chunk_rows: int = 100, **kw: object) -> PipelineSpec:
    src = (f'kind = "{kind}"\npath = "{path}"\ntime_field = "item_time"\n'
           f"chunk_rows = {chunk_rows}")
    return parse_spec(spec_text(src, **kw), origin="t.toml", base=tmp)  # type: ignore[arg-type]


def _read_all(spec: PipelineSpec, max_rows: int | None = None) -> pd.DataFrame:
    plan = plan_source(spec, max_rows=max_rows)
    tables = [pa.Table.from_batches(list(read_chunk(c, plan.columns, TimeSpec.of(spec))))
              for c in plan.chunks]
    return pa.concat_tables(tables).to_pandas()


def test_csv_chunks_cover_every_row_with_dense_seq(tmp_path: Path) -> None:
    df = write_items_csv(tmp_path / "a.csv", 1234)
    spec = _spec(tmp_path, "csv", "a.csv")
    plan = plan_source(spec)
    assert [c.rows for c in plan.chunks] == [100] * 12 + [34]
    assert plan.chunks[1].first_line == 102 and plan.rows == 1234
    got = _read_all(spec)
    assert got[SEQ].tolist() == list(range(1234))
    pd.testing.assert_frame_equal(got[list(df.columns)], df, check_dtype=False)
    assert plan.columns.types == ("int64", "float64", "int64")


def test_max_rows_cuts_the_source(tmp_path: Path) -> None:
    write_items_csv(tmp_path / "a.csv", 500)
    got = _read_all(_spec(tmp_path, "csv", "a.csv"), max_rows=250)
    assert got[SEQ].tolist() == list(range(250))


def test_string_keys_and_jsonl(tmp_path: Path) -> None:
    rows = [{"item_id": f"k{i % 3}", "item_price": i * 1.5, "item_time": 10 * i}
            for i in range(7)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = _spec(tmp_path, "jsonl", "a.jsonl", chunk_rows=3)
    plan = plan_source(spec)
    assert len(plan.chunks) == 3
    got = _read_all(spec)
    assert got["item_id"].tolist() == [r["item_id"] for r in rows]
    assert got[SEQ].tolist() == list(range(7))


def test_parquet_folder_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "pq"
    folder.mkdir()
    df = write_items_csv(tmp_path / "x.csv", 300)
    for i, lo in enumerate(range(0, 300, 100)):
        pq.write_table(pa.Table.from_pandas(df.iloc[lo:lo + 100], preserve_index=False),
                       folder / f"part-{i:05d}.parquet", row_group_size=40)
    (folder / "_workload.json").write_text("{}")
    got = _read_all(_spec(tmp_path, "parquet", "pq"))
    assert got["item_time"].tolist() == df.item_time.tolist()
    assert got[SEQ].tolist() == list(range(300))


@pytest.mark.parametrize(("body", "needle"), [
    ("item_id,item_price,item_time\n1,2.0,10\n2,3.0,5\n",
     "a.csv: line 3: item_time: 5 is before the previous row's 10"),
    ("item_id,item_price,item_time\n1,2.0,10\n2,3.0\n",
     "a.csv: line 3: expected 3 fields"),
    ("item_id,item_price,item_time\n1,2.0,10\n2,abc,11\n",
     "a.csv: line 3: item_price: 'abc' is not a number"),
    ("item_id,item_price,item_time\n1,2.0,10\n2,1.0,1.5\n",
     "a.csv: line 3: item_time: '1.5' is not an integer"),
    ("item_id,item_price,item_time\n1,2.0,10\n2,,11\n", "a.csv: line 3: item_price: missing"),
    ("item_id,price,item_time\n1,2.0,10\n", "a.csv: line 1: missing column 'item_price'"),
    ("", "a.csv: line 1: empty file"),
])
def test_bad_csv_names_file_line_field(tmp_path: Path, body: str, needle: str) -> None:
    (tmp_path / "a.csv").write_text(body)
    with pytest.raises(InputError) as exc:
        plan_source(_spec(tmp_path, "csv", "a.csv"))
    assert needle in str(exc.value), str(exc.value)
    assert exc.value.exit_code == 2


def test_time_going_back_across_chunks(tmp_path: Path) -> None:
    lines = ["item_id,item_price,item_time"] + [f"1,1.0,{t}" for t in (1, 2, 3, 4, 3, 5)]
    (tmp_path / "a.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 6: item_time: 3 is before"):
        plan_source(_spec(tmp_path, "csv", "a.csv", chunk_rows=4))


def test_bad_jsonl_line(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"item_id": 1, "item_price": 1, "item_time": 1}\n'
                                      '{"item_id": 1, "item_price": 1, "item_time": }\n')
    with pytest.raises(InputError, match=r"a\.jsonl: line 2: not a JSON object"):
        plan_source(_spec(tmp_path, "jsonl", "a.jsonl"))


def test_missing_source_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope.csv: \[source\].path: no such file"):
        plan_source(_spec(tmp_path, "csv", "nope.csv"))


def test_stream_dir_follows_new_files_until_end(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    df = write_items_csv(tmp_path / "all.csv", 250)
    spec = _spec(tmp_path, "stream-dir", "in", chunk_rows=60)
    watcher = StreamDirWatcher(spec)
    assert watcher.poll() == [] and not watcher.ended
    df.iloc[:100].to_csv(folder / "f-001.csv", index=False)
    (folder / ".f-002.csv.tmp").write_text("ignored while being written")
    first = watcher.poll()
    assert [c.rows for c in first] == [60, 40] and not watcher.ended
    df.iloc[100:].to_csv(folder / "f-002.csv", index=False)
    (folder / "_END").touch()
    second = watcher.poll()
    assert watcher.ended and [c.first_seq for c in second] == [100, 160, 220]
    assert [c.index for c in first + second] == [0, 1, 2, 3, 4]
    (folder / "f-000.csv").write_text("late")
    assert watcher.poll() == []
