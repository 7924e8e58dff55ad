"""Errors of the Spark runtime: its part of the one tree under :class:`cec.errors.CecError`.

Each class inherits its exit status from its kind (the table is in :mod:`cec.errors`):

========================  ====  =====================================================
``InputError``            2     bad input data (names the file, line or row, field)
``RunNotVisibleError``    2     an executor does not see the run directory
``DriverSupersededError`` 2     a newer driver took the run over
``PipelineError``         1     a Spark job failed for a reason not in the input
========================  ====  =====================================================

A base module of the runtime: it imports nothing of :mod:`cec_spark`, so every
runtime package may raise these.
"""

from __future__ import annotations

from cec.errors import CecError, UsageError

__all__ = ["DriverSupersededError", "InputError", "PipelineError", "RunNotVisibleError"]


class InputError(UsageError):
    """Bad input data: a missing file or column, a malformed row, time going back."""


class FilterRowError(InputError):
    """``[filter].where`` fails on a source row (Spark's ANSI error for it); ``seq``: the
    row's seq, which :func:`cec_spark.ingest.project.project_chunk` turns into its file
    and line before the error leaves the ingest."""

    def __init__(self, message: str, seq: int | None) -> None:
        super().__init__(message)
        self.seq = seq


class DriverSupersededError(UsageError):
    """A newer driver took over the run (two ``cec recover`` at once): this one stops."""


class RunNotVisibleError(UsageError):
    """An executor does not see the run directory the driver created (exit 2)."""


class PipelineError(CecError):
    """The pipeline failed for a reason that is not the user's input."""
