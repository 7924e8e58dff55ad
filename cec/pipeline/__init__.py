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
    from cec.pipeline.driver import resume_run, run_pipeline
    from cec.pipeline.inspect import inspect_extent, inspect_log, recover_run
    from cec.pipeline.layout import RunLayout
    from cec.pipeline.results import export, results_table
    from cec.pipeline.session import start_early

_WHERE = {
    "run_pipeline": "cec.pipeline.driver",
    "resume_run": "cec.pipeline.driver",
    "export": "cec.pipeline.results",
    "results_table": "cec.pipeline.results",
    "inspect_extent": "cec.pipeline.inspect",
    "inspect_log": "cec.pipeline.inspect",
    "recover_run": "cec.pipeline.inspect",
    "start_early": "cec.pipeline.session",
    "RunLayout": "cec.pipeline.layout",
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
        raise AttributeError(f"module 'cec.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
