"""The bridge from a Spark streaming source into a stream folder (issue 19 item 7).

No Kafka broker is available here: Spark's file stream source stands in for Kafka (both
are replayable sources of Structured Streaming; the bridge sees only a streaming
DataFrame). The whole chain is checked: source -> bridge -> stream folder -> cec run
-> export, equal to the reference, with a restarted bridge writing nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cec.errors import UsageError
from tests.cec_spark.helpers import (
    cec,
    read_export_csv,
    reference_count_windows,
    spec_text,
    write_items_csv,
)


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    import sys

    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("cec-bridge-test")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    yield session
    session.stop()


def _stream(spark: object, folder: Path) -> object:
    return (spark.readStream.schema(  # type: ignore[attr-defined]
        "item_id LONG, item_price DOUBLE, item_time LONG")
        .option("header", "true").option("maxFilesPerTrigger", 1).csv(str(folder)))


def _add(path: Path, rows: object, i: int) -> None:
    """Write one source file with a modification time of its own: Spark's file source
    takes files in modification-time order (``maxFilesPerTrigger``), and files written
    in the same millisecond come in listing order, which is not name order (the CI run
    of cb4e9db got f1 or f2 before f0, so the folder's times went backwards)."""
    import os

    rows.to_csv(path, index=False)  # type: ignore[attr-defined]
    stamp = 1_700_000_000 + 10 * i
    os.utime(path, (stamp, stamp))


def test_a_stream_through_the_bridge_gives_exact_results(spark: object, tmp_path: Path
                                                         ) -> None:
    from cec_spark.source.bridge import to_stream_folder

    src, folder, ckpt = tmp_path / "src", tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()
    df = write_items_csv(tmp_path / "all.csv", 4_000, keys=30, seed=3)
    for i, lo in enumerate(range(0, 3_000, 1_000)):
        _add(src / f"f{i}.csv", df.iloc[lo:lo + 1_000], i)
    to_stream_folder(_stream(spark, src), folder, ckpt, order_by="item_time",
                     available_now=True).awaitTermination()
    first = sorted(p.name for p in folder.iterdir())
    assert first == [f"batch-{i:012d}.parquet" for i in range(3)], first
    # the same query again: Spark's checkpoint says all is done, nothing is rewritten
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    to_stream_folder(_stream(spark, src), folder, ckpt, order_by="item_time",
                     available_now=True).awaitTermination()
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
    _add(src / "f3.csv", df.iloc[3_000:], 3)  # the source grows
    to_stream_folder(_stream(spark, src), folder, ckpt, order_by="item_time",
                     available_now=True).awaitTermination()
    assert sorted(p.name for p in folder.iterdir())[-1] == "batch-000000000003.parquet"
    (folder / "_END").touch()
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text('kind = "stream-dir"\npath = "in"\nformat = "parquet"\n'
                              'time_field = "item_time"\npoll_ms = 50', partitions=2))
    cec(["run", "pipeline", str(spec), "--log-dir", str(tmp_path / "run"), "--json"],
        check=True)
    cec(["export", str(tmp_path / "run"), "--out", str(tmp_path / "out.csv")], check=True)
    got = read_export_csv(tmp_path / "out.csv")
    ref = reference_count_windows(df, 10)
    cols = ["key", "window_start", "window_end", "count"]
    assert got[cols].values.tolist() == ref[cols].values.tolist()


def test_a_batch_dataframe_is_refused(spark: object, tmp_path: Path) -> None:
    from cec_spark.source.bridge import to_stream_folder

    with pytest.raises(UsageError, match="not a streaming one"):
        to_stream_folder(spark.range(3), tmp_path / "in", tmp_path / "c")  # type: ignore[attr-defined]
