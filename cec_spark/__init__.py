"""The Spark pipeline: spec → ingest → long-lived operator tasks → logs; and its tools.

The functions the CLI calls, one per command:

* :func:`run_pipeline` (``cec run pipeline``), :func:`recover_run` (``cec recover``),
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
    from cec_spark.driver import resume_run, run_pipeline
    from cec_spark.inspect import inspect_extent, inspect_log, recover_run
    from cec_spark.layout import RunLayout
    from cec_spark.results import export, results_table
    from cec_spark.session import start_early

_WHERE = {
    "run_pipeline": "cec_spark.driver",
    "resume_run": "cec_spark.driver",
    "export": "cec_spark.results",
    "results_table": "cec_spark.results",
    "inspect_extent": "cec_spark.inspect",
    "inspect_log": "cec_spark.inspect",
    "recover_run": "cec_spark.inspect",
    "start_early": "cec_spark.session",
    "RunLayout": "cec_spark.layout",
}

__all__ = [
    "RunLayout",
    "export",
    "inspect_extent",
    "inspect_log",
    "recover_run",
    "results_table",
    "resume_run",
    "run_pipeline",
    "start_early",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cec_spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
