"""The visibility probe: can every executor see the run directory and the source?

:func:`probe` runs one short task per slot; each checks that its host sees the run
directory (the same run id, :func:`cec_spark.rundir.access.check_visible`) and the
source, and reports rather than raises, so that a host that cannot see them is named
within seconds instead of after Spark's task retries.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from cec.errors import UsageError
from cec_spark.errors import RunNotVisibleError
from cec_spark.rundir.access import check_visible
from cec_spark.rundir.layout import RunLayout


def where_am_i() -> str:
    """This executor, for messages: host, process and working (Spark work) directory."""
    return f"host {socket.gethostname()} (pid {os.getpid()}, cwd {os.getcwd()})"


def _probe_entry(root: str, run_id: str | None, paths: list[str]
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        problems: list[str] = []
        try:
            check_visible(RunLayout(Path(root)), run_id)
        except RunNotVisibleError as exc:
            problems.append(str(exc))
        for path in paths:
            if not os.path.exists(path):
                problems.append(f"{where_am_i()}: cannot see the source {path}")
        found = json.dumps({"where": where_am_i(), "host": socket.gethostname(),
                            "problems": problems})
        yield pa.RecordBatch.from_pydict({"found": pa.array([found], pa.string())})

    return run


def probe(spark: SparkSession, layout: RunLayout, run_id: str | None,
          source_paths: list[str], tasks: int) -> list[str]:
    """One short task per slot: every host must see the run directory and the source.

    A SQL job (``mapInArrow``); it starts the Python worker daemon the run's jobs, RDD
    or SQL, will fork from on each executor (one daemon for both kinds:
    :mod:`cec_spark.run.session`). Returns the hosts seen; raises UsageError (exit 2)
    naming each host and path that failed.
    """
    spark.sparkContext.setJobGroup("cec-probe",
                                   "cec: can every executor see the run directory?")
    rows = [json.loads(r["found"]) for r in spark.range(0, tasks, 1, tasks).mapInArrow(
        _probe_entry(str(layout.root), run_id, source_paths), "found string").collect()]
    problems = sorted({p for r in rows for p in r["problems"]})
    if problems:
        shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more"
                                           if len(problems) > 4 else "")
        raise UsageError(f"the executors must see the run directory {layout.root} and the "
                         f"source at the same absolute paths as the driver (a shared file "
                         f"system; see docs/CLUSTER.md): {shown}")
    return sorted({str(r["host"]) for r in rows})


def _warm_entry(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    import cec_spark.run.task  # noqa: F401, PLC0415 - what an operator task imports
    yield pa.RecordBatch.from_pydict({"host": pa.array([socket.gethostname()], pa.string())})


def warm_workers(spark: SparkSession, tasks: int) -> list[str]:
    """One short task per slot, the probe's job shape without the run's checks (there
    may be no run yet): the Python worker daemon started on each executor and the
    operator task's modules imported in it. Returns the hosts seen."""
    spark.sparkContext.setJobGroup("cec-warm", "cec: start the Python workers")
    rows = spark.range(0, tasks, 1, tasks).mapInArrow(_warm_entry, "host string").collect()
    return sorted({str(r["host"]) for r in rows})
