"""What each command's library function returns: frozen dataclasses, one per result.

* :class:`RunResult` (``cec run pipeline``, and the ``resumed`` run of ``cec recover``),
  with one :class:`PartitionRun` per partition;
* :class:`RecoverResult` (``cec recover``), one :class:`RecoverPartition` per partition;
* :class:`ExtentResult` (``cec inspect extent``), one :class:`ExtentPartition` each;
* :class:`LogReport` (``cec inspect log``), one :class:`LogInfo` per log;
* :class:`ExportResult` (``cec export``).

The CLI renders any of them (``cli/render.py``); ``--json`` is
``dataclasses.asdict`` of the result, fields in the order declared here, every field
always present (``null`` when it does not apply). ``docs/JSON.md`` is generated from
these classes, the docstring under each field included (``cli/schema.py``).

Names: a partition is ``partition``; durations are seconds (``*_s``); wall-clock
times and the logs' event times are int64 microseconds (``*_us``); positions in a log
(``seq``, ``t_c``, ``replay_after_seq``) are plain integers.

| module | what it declares |
|---|---|
| ``recovery`` | :func:`recovery_of`: a task's recovery read back (the classes are ``recovery``'s) |
| ``run`` | :class:`RunResult`, :class:`PartitionRun` |
| ``recover`` | :class:`RecoverResult` and its parts (reconcile, repairs, rescale) |
| ``read`` | :class:`ExtentResult`, :class:`LogReport`, :class:`ExportResult` |
| ``common`` | the pydantic docstring setting, :class:`ErrorReport`, :func:`now_us` |
| ``watermark`` | a partition's two watermarks (ingest's, operator's) as a person reads them |

What one partition's recovery did (footprints, extent, replay, phases, rates) is
declared once, in the ``recovery`` layer, where it is computed:
:class:`~recovery.explain.RecoveryExplain` and its parts, re-exported here.

First read: ``run.py``. This package imports nothing of the runtime: every other
package may use it.
"""

from __future__ import annotations

from cec_spark.report.common import ErrorReport, now_us
from cec_spark.report.read import (
    ExportResult,
    ExtentPartition,
    ExtentResult,
    LogInfo,
    LogReport,
    Segment,
    TupleCounts,
    Verify,
)
from cec_spark.report.recover import (
    OutputRepair,
    Reconcile,
    RecoverPartition,
    RecoverResult,
    RescalePartition,
    RescaleResult,
    UpstreamRepair,
    reconcile_of,
)
from cec_spark.report.recovery import recovery_of
from cec_spark.report.run import PartitionRun, RunResult
from recovery.checkpoint import ExtentMetrics, Footprint
from recovery.explain import Phase, RateModel, RecoveryExplain
from recovery.upstream import ReplayStats

Result = RunResult | RecoverResult | ExtentResult | LogReport | ExportResult

__all__ = [
    'ErrorReport', 'ExportResult', 'ExtentMetrics', 'ExtentPartition', 'ExtentResult',
    'Footprint', 'LogInfo', 'LogReport', 'OutputRepair', 'PartitionRun', 'Phase', 'RateModel',
    'Reconcile', 'RecoverPartition', 'RecoverResult', 'RecoveryExplain', 'ReplayStats',
    'RescalePartition', 'RescaleResult', 'Result', 'RunResult', 'Segment', 'TupleCounts',
    'UpstreamRepair', 'Verify', 'now_us', 'reconcile_of', 'recovery_of',
]
