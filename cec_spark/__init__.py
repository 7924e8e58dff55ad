"""The Spark pipeline: spec → ingest → long-lived operator tasks → logs; and its tools.

The Python API (:mod:`cec_spark.api`), also at the top level::

    import cec_spark as cec
    res = (cec.stream(df, time="item_time").group_by("item_id")
              .window(time="10 seconds").agg(avg="item_price").run("runs/x"))
    res.results()    # a Spark DataFrame

:func:`stream`, :func:`generator` (builders), :func:`load`, :func:`run`, :func:`recover`;
the CLI calls the API's functions. (``cec_spark.results`` is the module of ``cec export``:
the API's ``results(run_dir)`` is :func:`cec_spark.api.results`.) The core package ``cec``
cannot offer ``cec.stream``: it may not import Spark or anything above it
(``tests/test_layers.py``); so the API lives here, and ``import cec_spark as cec`` reads
as the example.

The runtime's functions behind each command:

* :func:`run_pipeline` (``cec run pipeline``; :func:`run_plan` of the plan that
  :func:`pipeline_spec` and :func:`plan_new_run` make), :func:`recover_run`
  (``cec recover``; :func:`plan_resume`),
* :func:`inspect_extent`, :func:`inspect_log` (``cec inspect ...``),
* :func:`export` (``cec export``);
* :func:`start_early`: the run's SparkSession started while the command prepares.

They are loaded on first use (PEP 562), so that a Spark Python worker importing one
submodule (the data source, the task) does not import the driver's machinery too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cec_spark import api
    from cec_spark.api import Run, Stream, generator, load, recover, run, stream
    from cec_spark.driver import resume_run, run_pipeline, run_plan
    from cec_spark.inspect import inspect_extent, inspect_log, recover_run
    from cec_spark.layout import RunLayout
    from cec_spark.plan import RunPlan, pipeline_spec, plan_new_run, plan_resume
    from cec_spark.results import export, results_table
    from cec_spark.rto import measure_startup
    from cec_spark.session import start_early

_WHERE = {
    "stream": "cec_spark.api",
    "generator": "cec_spark.api",
    "load": "cec_spark.api",
    "run": "cec_spark.api",
    "recover": "cec_spark.api",
    "Stream": "cec_spark.api",
    "Run": "cec_spark.api",
    "run_pipeline": "cec_spark.driver",
    "resume_run": "cec_spark.driver",
    "run_plan": "cec_spark.driver",
    "RunPlan": "cec_spark.plan",
    "pipeline_spec": "cec_spark.plan",
    "plan_new_run": "cec_spark.plan",
    "plan_resume": "cec_spark.plan",
    "export": "cec_spark.results",
    "results_table": "cec_spark.results",
    "inspect_extent": "cec_spark.inspect",
    "inspect_log": "cec_spark.inspect",
    "recover_run": "cec_spark.inspect",
    "start_early": "cec_spark.session",
    "measure_startup": "cec_spark.rto",
    "RunLayout": "cec_spark.layout",
}

__all__ = [
    "Run",
    "RunLayout",
    "RunPlan",
    "Stream",
    "api",
    "export",
    "generator",
    "inspect_extent",
    "inspect_log",
    "load",
    "measure_startup",
    "pipeline_spec",
    "plan_new_run",
    "plan_resume",
    "recover",
    "recover_run",
    "results_table",
    "resume_run",
    "run",
    "run_pipeline",
    "run_plan",
    "start_early",
    "stream",
]


def __getattr__(name: str) -> Any:
    if name == "api":
        return importlib.import_module("cec_spark.api")
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cec_spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
