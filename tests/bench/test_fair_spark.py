"""The fair benchmark's pure parts: its output comparison must catch every difference."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.fair_spark import SENTINEL_KEY, make_data, normalize
from bench.harness import alternate, compare, summary


def _windows(rows: list[tuple[int, int, int, float]]) -> pa.Table:
    k, s, e, a = zip(*rows, strict=True)
    return pa.table({"key": list(k), "window_start": list(s), "window_end": list(e),
                     "avg": list(a)})


BASE = [(2, 0, 10, 1.5), (1, 10, 20, 3.0), (1, 0, 10, 2.0), (SENTINEL_KEY, 99, 109, 0.0)]


def test_equal_outputs_in_any_order_without_the_sentinel() -> None:
    a = normalize(_windows(BASE))
    b = normalize(_windows(list(reversed(BASE[:3]))))
    assert a.num_rows == 3 and SENTINEL_KEY not in a.column("key").to_pylist()
    assert a.column("key").to_pylist() == [1, 1, 2]
    assert compare(a, b) is None
    near = normalize(_windows([(k, s, e, v * (1 + 1e-12)) for k, s, e, v in BASE]))
    assert compare(a, near) is None


def test_every_kind_of_difference_is_named() -> None:
    a = normalize(_windows(BASE))
    missing = normalize(_windows(BASE[1:]))
    assert "3 windows" in (compare(a, missing) or "") and "2" in (compare(a, missing) or "")
    value = normalize(_windows([(2, 0, 10, 1.5), (1, 10, 20, 3.0), (1, 0, 10, 2.0001)]))
    msg = compare(a, value)
    assert msg is not None and "averages differ" in msg and "row 0" in msg
    end = normalize(_windows([(2, 0, 10, 1.5), (1, 10, 19, 3.0), (1, 0, 10, 2.0)]))
    msg = compare(a, end)
    assert msg is not None and "window_end" in msg and "row 1" in msg
    key = normalize(_windows([(3, 0, 10, 1.5), (1, 10, 20, 3.0), (1, 0, 10, 2.0)]))
    assert "key" in (compare(a, key) or "")


def test_summary_and_alternating_schedule() -> None:
    assert summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    order: list[str] = []
    alternate(4, lambda i: order.append(f"a{i}"), lambda i: order.append(f"b{i}"))
    assert order == ["a0", "b0", "b1", "a1", "a2", "b2", "b3", "a3"]


def test_input_files_are_in_stream_order_with_the_sentinel_last(tmp_path: Path) -> None:
    make_data(tmp_path, 25, 4, 10)
    files = sorted(tmp_path.glob("*.parquet"))
    assert [pq.read_metadata(f).num_rows for f in files] == [10, 10, 5, 1]
    t = pa.concat_tables([pq.read_table(f) for f in files])
    ts = t.column("item_time").to_pylist()
    assert ts == sorted(ts) and t.column("item_id").to_pylist()[-1] == SENTINEL_KEY


def test_spark_is_killed_at_a_batch_boundary_and_cec_at_the_same_row_count() -> None:
    """Issue 29: the recovery killed cec at half the input but Spark after two of four
    micro-batches (two thirds). Spark's committed rows at 1 M rows per batch; cec is
    killed once it processed as many rows as Spark had committed."""
    from bench.fair_spark import committed_rows

    rows, fpt, file_rows = 3_000_000, 10, 100_000
    done = [committed_rows(n, fpt, file_rows, rows) for n in range(5)]
    assert done == [0, 1_000_000, 2_000_000, 3_000_000, 3_000_000]
    first = next(n for n in range(5) if done[n] >= 0.5 * rows)
    assert done[first] == 2_000_000  # the kill point both sides share


def test_the_report_names_the_headline_end_point_and_both_kill_points() -> None:
    from bench.fair_spark import DEFINITION, HEADLINE, report

    run = {"median": 10.0, "min": 9.0, "max": 11.0, "n": 3}
    res = {"rows": 3_000_000, "keys": 100, "partitions": 4, "window": "10 s tumbling",
           "windows": 1234, "cpus": 2, "commit": "abc", "started": "2026-11-25 22:00 UTC",
           "load_end": 3.0, "definition": DEFINITION, "headline": HEADLINE,
           "sweep": [], "spark_best": {"store": "hdfs", "rows_per_batch": "1,000,000"},
           "cec": run, "cec_with_export": {**run, "median": 12.0}, "spark": run,
           "speedup_median": 0.83, "speedup_pairs": {"median": 0.8, "min": 0.7, "max": 0.9},
           "speedup_run_only_median": 1.0,
           "recovery": {"kill_at": 0.5, "ratio": 0.5, "kill_gap": 0.0,
                        "spark_rows_per_batch": 1_000_000,
                        "cec": {"restart_s": 5.0, "recover_s": 4.0, "export_s": 1.0,
                                "killed_at_rows": 2_000_100, "killed_at_fraction": 0.667,
                                "load": 3.0},
                        "spark": {"restart_s": 10.0, "killed_at_rows": 2_000_000,
                                  "killed_at_fraction": 0.667, "load": 3.0}}}
    md = report(res)
    assert "`cec run pipeline` + `cec export` (parquet)" in md and "**0.83×**" in md
    assert "2,000,000 rows committed (66.7%)" in md and "2,000,100 rows processed (66.7%)" in md
    assert "`cec recover` + `cec export` 5.0 s (4.0 + 1.0" in md
    assert "1-min load average 3.0 at the end" in md
    assert "(hdfs, 1,000,000 rows per micro-batch)" in md and "**0.5**" in md


def test_cec_spec_and_spark_cfg_read_parquet_by_default_or_the_csv_copy(
        tmp_path: Path) -> None:
    """bench/growth_bench.py's CSV table: cec's source kind and Spark's reader follow the
    input's format; fair_spark's own benchmark keeps parquet."""
    from bench.fair_spark import SPARK_CHILD, cec_spec, spark_cfg

    parquet = cec_spec(tmp_path, tmp_path / "data", False, 4)
    assert parquet.name == "cec.toml" and 'kind = "parquet"' in parquet.read_text()
    csv = cec_spec(tmp_path, tmp_path / "data-csv", False, 4, kind="csv")
    text = csv.read_text()
    assert csv.name == "cec-csv.toml" and 'kind = "csv"' in text
    assert f'path = "{tmp_path / "data-csv"}"' in text and 'time_field = "item_time"' in text
    assert parquet.read_text().replace('"parquet"', '"csv"').replace(
        str(tmp_path / "data"), str(tmp_path / "data-csv")) == text  # nothing else differs
    cfg = spark_cfg(tmp_path, tmp_path / "data", "s", "hdfs", 10, False, 4)
    assert cfg["format"] == "parquet"
    assert spark_cfg(tmp_path, tmp_path / "d", "s", "hdfs", 1, False, 4, "csv")["format"] == (
        "csv")
    with pytest.raises(ValueError, match="parquet or csv"):
        spark_cfg(tmp_path, tmp_path / "d", "s", "hdfs", 1, False, 4, "orc")
    # the child: the same explicit schema for both, CSV with its header line, strict
    assert 'cfg.get("format", "parquet") == "csv"' in SPARK_CHILD
    assert '.option("header", "true").option("mode", "FAILFAST").csv(cfg["data"])' in (
        SPARK_CHILD)
    assert 'schema("item_id BIGINT, item_price BIGINT, item_time BIGINT")' in SPARK_CHILD
