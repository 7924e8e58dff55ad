"""``spark.read.format("cec")``: the results of a run as a DataFrame, equal to cec export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from cec.records import G_OPEN, R, tuple_counts
from cec_spark.rundir.layout import RunLayout
from storage_log.log import StreamLog
from tests.cec_spark.helpers import cec, spec_text

pytestmark = [pytest.mark.spark, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
P = 2
COLS = ["key", "window_start", "window_end", "count", "value"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("ds")
    spec = d / "spec.toml"
    spec.write_text(spec_text('kind = "generator"\nrows = 20000\nkeys = 40\ninterval_us = 1000',
                              window='{ kind = "time", size = "1s", slide = "500ms" }',
                              partitions=P))
    cec(["run", "pipeline", str(spec), "--log-dir", str(d / "run")], check=True)
    cec(["export", str(d / "run"), "--out", str(d / "export.parquet"), "--format", "parquet"],
        check=True)
    return d / "run", d / "export.parquet"


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    import os
    import sys

    from pyspark.sql import SparkSession

    from cec_spark.read.datasource import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the planner's Python too
    session = (SparkSession.builder.master("local[2]").appName("cec-ds-test")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    register(session)
    yield session
    session.stop()


def test_read_equals_cec_export(run: tuple[Path, Path], spark: object) -> None:
    root, export = run
    df = spark.read.format("cec").load(str(root))  # type: ignore[attr-defined]
    assert df.columns == ["partition", "seq", *COLS]
    assert dict(df.dtypes)["window_start"] == dict(df.dtypes)["window_end"] == "timestamp"
    got = df.toPandas().sort_values(["key", "window_start", "window_end"]).reset_index(drop=True)
    want = pq.read_table(export).to_pandas()
    for frame in (got, want):  # TIMESTAMPs (naive in the session's UTC; UTC) as microseconds
        for col in ("window_start", "window_end"):
            frame[col] = (pd.to_datetime(frame[col], utc=True)
                          - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(1, "us")
    assert len(got) == len(want) > 0
    for col in ("key", "window_start", "window_end", "count"):
        assert got[col].tolist() == want[col].tolist(), col
    np.testing.assert_array_equal(got["value"].to_numpy(), want["value"].to_numpy())
    assert set(got["partition"]) == set(range(P))


def test_as_of_and_controls(run: tuple[Path, Path], spark: object) -> None:
    root, _ = run
    reader = spark.read.format("cec")  # type: ignore[attr-defined]
    everything = reader.load(str(root)).count()
    assert reader.option("asOf", -1).load(str(root)).count() == 0
    assert reader.option("asOf", "1970-01-01T00:00:00Z").load(str(root)).count() == 0
    assert reader.option("asOf", 2**63 - 1).load(str(root)).count() == everything
    # as of a middle ts: exactly the results whose output record is at or before it
    expect, middle = 0, None
    for p in range(P):
        with StreamLog.open(RunLayout(root).output(p)) as log:
            for b in log.read_forward():
                ts = b.column("ts").to_numpy()
                middle = int(np.median(ts)) if middle is None else middle
    for p in range(P):
        with StreamLog.open(RunLayout(root).output(p)) as log:
            for b in log.read_forward():
                types = b.column("type").to_numpy()[b.column("ts").to_numpy() <= middle]
                expect += int(np.isin(types, [R, 4]).sum())
    assert 0 < reader.option("asOf", middle).load(str(root)).count() == expect < everything
    controls = spark.read.format("cec").option("controls", "true").load(str(root))  # type: ignore[attr-defined]
    rows = controls.select("type").toPandas()["type"].to_numpy()
    n_r, n_open, _ = tuple_counts(rows)
    assert n_r == everything and n_open > 0 and (rows == G_OPEN).any()
    assert "t_now" in controls.columns and "n_open" in controls.columns


def test_stream_reads_every_result_once(run: tuple[Path, Path], spark: object,
                                        tmp_path: Path) -> None:
    root, export = run
    q = (spark.readStream.format("cec").load(str(root))  # type: ignore[attr-defined]
         .writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start())
    q.awaitTermination(300)
    got = spark.read.parquet(str(tmp_path / "out")).toPandas()  # type: ignore[attr-defined]
    assert len(got) == pq.read_table(export).num_rows
    assert not got.duplicated(["partition", "seq", "key", "window_start"]).any()


def test_missing_or_bad_options_are_clear(run: tuple[Path, Path], spark: object,
                                          tmp_path: Path) -> None:
    root, _ = run
    with pytest.raises(Exception, match=r"asOf='soon' is neither an integer"):
        spark.read.format("cec").option("asOf", "soon").load(str(root)).count()  # type: ignore[attr-defined]
    with pytest.raises(Exception, match=r"run\.toml"):
        spark.read.format("cec").load(str(tmp_path / "nothing")).count()  # type: ignore[attr-defined]


def test_the_run_left_its_metrics(run: tuple[Path, Path]) -> None:
    """RUN/metrics/cec.prom (issue 19 item 6): the final counts of the run."""
    from tests.cec_spark.test_metrics import parse

    root, export = run
    got = parse((root / "metrics" / "cec.prom").read_text())
    assert sum(got["cec_results_total", str(p)] for p in range(P)) == \
        pq.read_table(export).num_rows
    assert all(got["cec_partition_done", str(p)] == 1 for p in range(P))
    assert got["cec_ingest_sealed", None] == 1 and got["cec_source_rows_total", None] == 20000


# A fresh driver that never registers anything: it reads a run through format("cec")
# and says what it got, and whether cec was ever imported in the driver itself.
NO_REGISTER = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("cec-ds-discovery")
         .config("spark.ui.enabled", "false").getOrCreate())
try:
    df = spark.read.format("cec").load(sys.argv[1])
    rows, counts = df.count(), df.groupBy().sum("count").first()[0]
    columns = df.columns
finally:
    spark.stop()
cec = sorted(m for m in sys.modules if m.split(".")[0] in ("cec", "cec_spark", "pyspark_cec"))
print(json.dumps({"rows": rows, "counts": counts, "columns": columns, "driver_imported": cec}))
"""


def test_format_cec_needs_no_register_call(run: tuple[Path, Path], tmp_path: Path) -> None:
    """Spark 4 finds the source by itself (SPARK-45917): its lookup worker imports every
    top-level ``pyspark_*`` module on the path of the Python it starts (PYSPARK_PYTHON)
    and registers its ``DefaultSource`` (pyspark_cec: CecDataSource, named "cec").

    A pip install puts ``pyspark_cec/`` in site-packages, a path entry; an editable
    install's finder is not one, so here the checkout is given as that entry
    (PYTHONPATH), and the child runs in another directory (Python workers also search
    the directory they start in). The driver never imports cec: the worker found it."""
    root, export = run
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", NO_REGISTER, str(root)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = pq.read_table(export)
    assert got["columns"] == ["partition", "seq", *COLS]
    assert got["rows"] == want.num_rows > 0
    assert got["counts"] == sum(want.column("count").to_pylist())
    assert got["driver_imported"] == []
