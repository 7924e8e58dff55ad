"""The SparkSession a run started from Python uses, and what the run borrows of it.

A run started from Python uses this process's active SparkSession if there is one (a
DataFrame's own session for a DataFrame source; the run's master is then that
session's, and it must have P + 1 task slots), else it starts one with cec's settings
and leaves it running, so that :meth:`cec_spark.api.commands.Run.results` can read
the results. The SQL settings a run needs (shuffle partitions, Arrow, the UTC time
zone) are set on a session of the user's for the run and restored after it
(:func:`lent`). The command line does not come here: its run starts its own session
and stops it at the end (:func:`cec_spark.driver.runner.run_plan`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from cec.errors import UsageError
from cec.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_workers", "lent", "on_session"]


def on_session(spec: PipelineSpec, spark: SparkSession | None, call: str) -> PipelineSpec:
    """The spec with the master of ``spark``, the running session the run will use
    (None: none, the spec as it is); ``call`` (the builder's ``.options(...)``) is named
    if the spec asks for another master."""
    if spark is None:
        return spec
    master = spark.sparkContext.master
    if spec.run.master is None:
        return spec.with_run(master=master)
    if spec.run.master != master:
        raise UsageError(f"{call}: [run].master: {spec.run.master!r}, but this process's "
                         f"SparkSession runs on {master!r} and a run started from Python "
                         "uses it (leave master out, or stop that session first)")
    return spec


def _probe(_: Iterable[int]) -> Iterator[str]:
    import cec_spark.run.task  # noqa: F401, PLC0415 - what an operator task imports first

    yield sys.executable


def check_workers(spark: SparkSession) -> None:
    """A session the run did not start may run its Python workers on another Python
    (``PYSPARK_PYTHON``, read when the session started; default ``python3``): if so,
    one task checks that it imports cec, so that a run fails in seconds naming it
    rather than after every operator task's retries."""
    exe = str(getattr(spark.sparkContext, "pythonExec", sys.executable))
    if os.path.realpath(shutil.which(exe) or exe) == os.path.realpath(sys.executable):
        return
    try:
        spark.sparkContext.parallelize([0], 1).mapPartitions(_probe).collect()
    except Exception as exc:
        found = re.findall(r"(\w+Error: [^\n]+)", str(exc))  # Spark's text: its worker's error
        raise UsageError(
            f"this SparkSession's Python workers run {exe!r}, which cannot import cec "
            f"({found[-1] if found else type(exc).__name__}); set PYSPARK_PYTHON="
            f"{sys.executable} in the environment before the session starts") from None


@contextlib.contextmanager
def lent(spark: SparkSession | None, spec: PipelineSpec, *,
         workers_checked: bool = False) -> Iterator[None]:
    """The session a run from Python uses, for the run ``spec``: none running
    (``spark`` None): start one with cec's settings and leave it running; else the
    user's ``spark`` (its workers checked, :func:`check_workers`, unless
    ``workers_checked``), with the SQL settings the run sets restored after it."""
    from cec_spark.run.session import build_session, default_conf  # noqa: PLC0415 - Spark

    settings = spec.run
    if spark is None:
        build_session(settings.effective_master, settings.partitions, settings.spark_conf)
        yield
        return
    if not workers_checked:
        check_workers(spark)
    keys = {**default_conf(settings.effective_master, settings.partitions),
            **settings.spark_conf}
    saved: dict[str, str | None] = {}
    for key in keys:
        with contextlib.suppress(Exception):
            if spark.conf.isModifiable(key):
                saved[key] = spark.conf.get(key, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            with contextlib.suppress(Exception):
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)
