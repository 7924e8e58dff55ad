"""Session windows through a real pipeline equal Spark's own ``session_window``
(issue 31): several gaps, keys with one tuple, sessions spanning the whole input and
many ties at exactly ``last + gap`` (times on a 50 ms grid, gaps multiples of it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cec_spark.driver.runner import run_pipeline
from cec_spark.read.export import results_table
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


def write_csv(path: Path, rows: int = 3000, keys: int = 12, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    step = rng.integers(0, 3, rows) * 50_000  # a 50 ms grid: ties at the gap are common
    df = pd.DataFrame({"item_id": rng.integers(0, keys, rows),
                       "item_price": np.round(rng.uniform(-5.0, 100.0, rows), 2),
                       "item_time": BASE + np.cumsum(step)})
    df.loc[df.index[::500], "item_id"] = 1000 + np.arange(len(df.index[::500]))  # singletons
    df.to_csv(path, index=False)
    return df


def spark_sessions(spark: object, csv: Path, gap: str, function: str) -> pd.DataFrame:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    df = (spark.read.option("header", True).option("inferSchema", True).csv(str(csv))
          .where("item_price >= 0")
          .withColumn("t", F.timestamp_micros("item_time")))
    agg = {"sum": F.sum("item_price"), "avg": F.avg("item_price"),
           "count": F.count("*").cast("double")}[function]
    out = (df.groupBy("item_id", F.session_window("t", gap).alias("w"))
           .agg(F.count("*").alias("count"), agg.alias("value"))
           .select(F.col("item_id").alias("key"),
                   F.unix_micros("w.start").alias("window_start"),
                   F.unix_micros("w.end").alias("window_end"), "count", "value"))
    return out.toPandas().sort_values(["key", "window_start"]).reset_index(drop=True)


@pytest.mark.parametrize("gap,spark_gap,function", [
    ("100ms", "100 milliseconds", "sum"),    # ties at exactly last + gap on the grid
    ("1s", "1 second", "avg"),
    ("1h", "1 hour", "count"),               # one session per key spanning the input
])
def test_sessions_equal_spark_session_window(spark: object, tmp_path: Path, gap: str,
                                             spark_gap: str, function: str) -> None:
    write_csv(tmp_path / "items.csv")
    src = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 700'
    (tmp_path / "s.toml").write_text(spec_text(
        src, window=f'{{ kind = "session", gap = "{gap}" }}', function=function,
        partitions=P))
    run = tmp_path / "run"
    assert run_pipeline(tmp_path / "s.toml", run, progress=False).completed
    got = results_table(run).to_pandas()
    got = got.sort_values(["key", "window_start"]).reset_index(drop=True)
    ref = spark_sessions(spark, tmp_path / "items.csv", spark_gap, function)
    assert len(got) == len(ref) > 0
    for col in ("key", "window_start", "window_end", "count"):
        assert got[col].astype("int64").tolist() == ref[col].astype("int64").tolist(), col
    np.testing.assert_allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9)
    assert (ref["count"] == 1).any()  # keys with one tuple are there
