"""The SparkSession of a pipeline run, configured for long-lived tasks and Arrow.

Settings and why (DESIGN §7):

* ``spark.sql.shuffle.partitions = P`` (200 made stateful queries ~6x slower here);
* Arrow for every JVM/Python crossing, with big batches
  (``spark.sql.execution.arrow.maxRecordsPerBatch``);
* the Python workers run this interpreter (``sys.executable``), so they import the
  same ``cec``;
* speculation off (a speculative copy of a long-lived task would be a second writer);
* no UI, quiet logs.

The master defaults to ``local[P+2,3]`` (:func:`cec.spec.default_master`).
"""

from __future__ import annotations

import os
import sys
import warnings

from pyspark.sql import SparkSession

ARROW_BATCH_ROWS = 1 << 19


def build_session(master: str, partitions: int, *, app_name: str = "cec") -> SparkSession:
    """A (possibly already running) SparkSession for ``master`` with cec's settings."""
    # PySpark 4.3 warns about pandas 3 on every Arrow UDF; cec moves Arrow, not pandas.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                            category=FutureWarning)
    # The JVM and the Python worker daemon it starts inherit this environment: keep
    # the daemon single-threaded when it forks (see cec.pipeline.daemon).
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.speculation", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "cec.pipeline.daemon")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
