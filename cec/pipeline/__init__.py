"""The Spark pipeline: spec → ingest → long-lived operator tasks → logs; and its tools.

The functions the CLI calls, one per command:

* :func:`run_pipeline` (``cec run pipeline``), :func:`recover_run` (``cec recover``),
* :func:`inspect_extent`, :func:`inspect_log` (``cec inspect ...``),
* :func:`export` (``cec export``).
"""

from cec.pipeline.driver import resume_run, run_pipeline
from cec.pipeline.export import export, results_table
from cec.pipeline.inspect import inspect_extent, inspect_log, recover_run

__all__ = [
    "export",
    "inspect_extent",
    "inspect_log",
    "recover_run",
    "results_table",
    "resume_run",
    "run_pipeline",
]
