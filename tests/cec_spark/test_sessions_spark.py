"""Session windows through a real pipeline equal Spark's own ``session_window``
(issue 31): several gaps, keys with one tuple, sessions spanning the whole input and
many ties at exactly ``last + gap`` (times on a 50 ms grid, gaps multiples of it);
sum, avg, count, min and max, integer and string keys (issue 39).

Widened (issue 39) with the input Spark and cec treat differently, each difference
asserted: a NaN price (Spark aggregates it, NaN the largest; cec refuses the source,
naming file, line and field), an empty source (Spark: no session; cec refuses it; a
source whose every row the filter drops: no session in either), and rows out of order
(``allowed_lateness`` with ``late = "drop"``: cec keeps its documented rule, a row is
late when more than the lateness behind the largest time before it in the source,
whatever the chunks; the reference applies that rule in Spark SQL, then Spark's
``session_window``). Spark's own streaming watermark drops differently, so it is no
reference: it drops a row whose session ends at or before the watermark the
late-event filter holds, which lags the micro-batches (in the first micro-batch after
the watermark was set it has none), so which rows go depends on how the input is cut
into micro-batches. On Spark 4.3 (one CSV file per micro-batch, ``withWatermark`` 2 s,
gap 1 s) rows 3, 3.5 and 9 s behind the largest time of micro-batch 0 were all kept in
micro-batch 1 (late to cec with a lateness of 2 s); a row 19 s behind, in micro-batch
2, was dropped (asserted: ``test_spark_streaming_keeps_a_row_cec_drops_as_late``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cec_spark.driver.runner import run_pipeline
from cec_spark.errors import InputError
from cec_spark.read.export import results_table
from cec_spark.report import RunResult
from cec_spark.run.session import build_session
from tests.cec_spark.helpers import spec_text

pytestmark = pytest.mark.spark

P = 2
BASE = 1_700_000_000_000_000


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = build_session(f"local[{P + 2},3]", P)
    yield session
    session.stop()


def write_csv(path: Path, rows: int = 3000, keys: int = 12, seed: int = 3, *,
              string_keys: bool = False, late: bool = False) -> pd.DataFrame:
    """Items on a 50 ms grid; ``late``: some rows moved back in time, most by less than
    2 s (within the lateness), some by up to 10 s."""
    rng = np.random.default_rng(seed)
    step = rng.integers(0, 3, rows) * 50_000  # a 50 ms grid: ties at the gap are common
    df = pd.DataFrame({"item_id": rng.integers(0, keys, rows),
                       "item_price": np.round(rng.uniform(-5.0, 100.0, rows), 2),
                       "item_time": BASE + np.cumsum(step)})
    df.loc[df.index[::500], "item_id"] = 1000 + np.arange(len(df.index[::500]))  # singletons
    if late:
        back = rng.choice([0, 0, 0, 0, 0, 0, 0, 0, 1, 2], rows)  # 0: in order
        by = np.where(back == 1, rng.integers(1, 40, rows), rng.integers(41, 200, rows))
        df["item_time"] -= np.where(back > 0, by * 50_000, 0)
    if string_keys:  # not numbers: the source keeps them strings
        df["item_id"] = "k" + df["item_id"].astype(str)
    df.to_csv(path, index=False)
    return df


def spark_sessions(spark: object, csv: Path, gap: str, function: str,
                   lateness_us: int | None = None) -> pd.DataFrame:
    """Spark's ``session_window`` of the CSV's rows that pass the filter; with
    ``lateness_us``, of those cec's rule does not drop as late (computed here in Spark
    SQL over the file's row order, before the filter)."""
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    df = spark.read.option("header", True).option("inferSchema", True).csv(str(csv))
    if lateness_us is not None:
        assert df.rdd.getNumPartitions() == 1  # the row ids follow the file's order
        before = Window.orderBy("row").rowsBetween(Window.unboundedPreceding, -1)
        df = (df.withColumn("row", F.monotonically_increasing_id())
              .withColumn("max_before", F.max("item_time").over(before))
              .where(F.col("max_before").isNull()
                     | (F.col("item_time") >= F.col("max_before") - lateness_us)))
    df = df.where("item_price >= 0").withColumn("t", F.timestamp_micros("item_time"))
    agg = {"sum": F.sum("item_price"), "avg": F.avg("item_price"),
           "count": F.count("*").cast("double"), "min": F.min("item_price"),
           "max": F.max("item_price")}[function]
    out = (df.groupBy("item_id", F.session_window("t", gap).alias("w"))
           .agg(F.count("*").alias("count"), agg.alias("value"))
           .select(F.col("item_id").alias("key"),
                   F.unix_micros("w.start").alias("window_start"),
                   F.unix_micros("w.end").alias("window_end"), "count", "value"))
    return out.toPandas().sort_values(["key", "window_start"]).reset_index(drop=True)


def _run(tmp_path: Path, gap: str, function: str, source: str = "") -> RunResult:
    src = ('kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 700'
           + source)
    (tmp_path / "s.toml").write_text(spec_text(
        src, window=f'{{ kind = "session", gap = "{gap}" }}', function=function,
        partitions=P))
    result = run_pipeline(tmp_path / "s.toml", tmp_path / "run", progress=False)
    assert result.completed
    return result


def _assert_equal(got: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert len(got) == len(ref) > 0
    assert got["key"].tolist() == ref["key"].tolist()
    for col in ("window_start", "window_end", "count"):
        assert got[col].astype("int64").tolist() == ref[col].astype("int64").tolist(), col
    np.testing.assert_allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9)
    assert (ref["count"] == 1).any()  # keys with one tuple are there


def _results(tmp_path: Path) -> pd.DataFrame:
    got = results_table(tmp_path / "run").to_pandas()
    return got.sort_values(["key", "window_start"]).reset_index(drop=True)


@pytest.mark.parametrize("gap,spark_gap,function,string_keys", [
    ("100ms", "100 milliseconds", "sum", False),    # ties at exactly last + gap on the grid
    ("1s", "1 second", "avg", False),
    ("1h", "1 hour", "count", False),               # one session per key spanning the input
    ("100ms", "100 milliseconds", "min", True),     # max: the lateness test's
])
def test_sessions_equal_spark_session_window(spark: object, tmp_path: Path, gap: str,
                                             spark_gap: str, function: str,
                                             string_keys: bool) -> None:
    write_csv(tmp_path / "items.csv", string_keys=string_keys)
    _run(tmp_path, gap, function)
    got = _results(tmp_path)
    assert (got["key"].map(type) == (str if string_keys else int)).all()
    _assert_equal(got, spark_sessions(spark, tmp_path / "items.csv", spark_gap, function))


def test_rows_past_the_lateness_are_dropped_by_the_documented_rule(spark: object,
                                                                  tmp_path: Path) -> None:
    df = write_csv(tmp_path / "items.csv", rows=2000, late=True)
    t = df["item_time"].to_numpy()
    before = np.maximum.accumulate(np.concatenate([[t[0]], t[:-1]]))
    late = t < before - 2_000_000
    back = (t < before) & ~late
    assert late.sum() > 20 and back.sum() > 20  # both kinds are there
    result = _run(tmp_path, "1s", "max", '\nallowed_lateness = "2s"\nlate = "drop"')
    assert result.late_rows == int((late & (df["item_price"] >= 0)).sum())  # after the filter
    ref = spark_sessions(spark, tmp_path / "items.csv", "1 second", "max",
                         lateness_us=2_000_000)
    _assert_equal(_results(tmp_path), ref)


def test_nan_prices_spark_aggregates_and_cec_refuses(spark: object, tmp_path: Path) -> None:
    df = write_csv(tmp_path / "items.csv", rows=300)
    row = int(np.flatnonzero(df["item_price"] >= 0)[10])
    df["item_price"] = df["item_price"].astype(object)
    df.loc[row, "item_price"] = "NaN"
    df.to_csv(tmp_path / "items.csv", index=False)
    ref = spark_sessions(spark, tmp_path / "items.csv", "1 second", "max")
    key, ts = df.loc[row, "item_id"], int(df.loc[row, "item_time"])
    hit = ref[(ref["key"] == key) & (ref["window_start"] <= ts) & (ts < ref["window_end"])]
    assert len(hit) == 1 and np.isnan(hit["value"].iloc[0])  # NaN: Spark's largest double
    assert not np.isnan(ref.drop(hit.index)["value"]).any()
    with pytest.raises(InputError, match=rf"items.csv: line {row + 2}: item_price: nan is not "
                       "a finite number") as err:
        _run(tmp_path, "1s", "max")
    assert err.value.exit_code == 2


def test_empty_input(spark: object, tmp_path: Path) -> None:
    """An empty source: Spark finds no session, cec refuses it (exit 2, naming the
    source); a source the filter empties: no session in either."""
    (tmp_path / "items.csv").write_text("item_id,item_price,item_time\n")
    schema = "item_id BIGINT, item_price DOUBLE, item_time BIGINT"
    from pyspark.sql import SparkSession

    assert isinstance(spark, SparkSession)
    empty = spark.read.schema(schema).option("header", True).csv(str(tmp_path / "items.csv"))
    assert empty.count() == 0
    with pytest.raises(InputError, match="the source holds no rows") as err:
        _run(tmp_path, "1s", "sum")
    assert err.value.exit_code == 2
    df = write_csv(tmp_path / "items.csv", rows=200)
    df["item_price"] = -1.0 - df["item_price"].abs()
    df.to_csv(tmp_path / "items.csv", index=False)
    assert len(spark_sessions(spark, tmp_path / "items.csv", "1 second", "sum")) == 0
    result = _run(tmp_path, "1s", "sum")
    assert result.source_rows == 200 and result.results == 0
    assert results_table(tmp_path / "run").num_rows == 0


def test_spark_streaming_keeps_a_row_cec_drops_as_late(spark: object, tmp_path: Path) -> None:
    """The documented difference (module docstring), asserted on Spark's own streaming
    watermark (2 s delay; one CSV file per micro-batch): two rows 9 s and 19 s behind
    the largest time before them are late to cec's rule (``late_mask``, lateness 2 s);
    Spark keeps the first, in micro-batch 1, whose late-event filter has no watermark
    yet, and drops the second, in micro-batch 2, as cec does."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from cec_spark.source.order import late_mask

    assert isinstance(spark, SparkSession)
    folder = tmp_path / "in"
    folder.mkdir()
    s = 1_000_000
    files = [[(0, 0), (0, 4 * s), (0, 10 * s)],              # micro-batch 0
             [(1, 1 * s), (0, 20 * s)],                      # 1
             [(2, 1 * s), (3, 3600 * s)]]                    # 2; 3600 s closes the rest
    for i, f in enumerate(files):
        pd.DataFrame({"item_id": [k for k, _ in f], "item_price": [1.0] * len(f),
                      "item_time": [BASE + t for _, t in f]}).to_csv(folder / f"f{i}.csv",
                                                                      index=False)
        os.utime(folder / f"f{i}.csv", (1_700_000_000 + i, 1_700_000_000 + i))  # the order
    ts = np.array([BASE + t for f in files for _, t in f])
    assert late_mask(ts, None, 2 * s).tolist() == [False] * 3 + [True, False, True, False]
    stream = (spark.readStream.option("header", True).option("maxFilesPerTrigger", 1)
              .schema("item_id BIGINT, item_price DOUBLE, item_time BIGINT").csv(str(folder))
              .withColumn("t", F.timestamp_micros("item_time"))
              .withWatermark("t", "2 seconds")
              .groupBy("item_id", F.session_window("t", "1 second").alias("w"))
              .agg(F.count("*").alias("count"))
              .select("item_id", F.unix_micros("w.start").alias("start"), "count"))
    query = (stream.writeStream.outputMode("append").format("memory")
             .queryName("late_probe").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.awaitTermination(300)
        assert not query.isActive, "Spark's stream did not end within 300 s"
        got = sorted(tuple(r) for r in spark.table("late_probe").collect())
    finally:
        query.stop()
        spark.catalog.dropTempView("late_probe")
    # key 1 kept by Spark, key 2 dropped by both; key 3 (3600 s) still open at the end
    assert got == [(0, BASE + t * s, 1) for t in (0, 4, 10, 20)] + [(1, BASE + s, 1)]
