"""The one error tree of the project, and the exit status of each error.

Every error a user can meet derives from :class:`CecError`, whichever layer raises it;
a command catches that one class. Each class carries the process exit status the CLI
maps it to, as ``exit_code``, declared once, on the class that introduces it (a
subclass inherits it). The statuses (:data:`EXIT_STATUSES`):

==== ==========================================================
0    success
1    an unexpected failure (a bug, or an environment problem), and :class:`CecError`
     itself: Spark did not start, a pipeline job failed, a log is locked or trimmed
2    bad usage, bad spec, bad input (names the file, line, field): :class:`UsageError`
3    a damaged log or run file that needs ``--repair`` (names segment and offset):
     :class:`CorruptionError`; or a write the file system refused
     (:class:`~storage_log.errors.LogWriteError`)
4    recovery impossible (e.g. the upstream no longer holds ``T``): :class:`RecoveryError`
5    the cluster lost the task slots a run needs and they did not come back in time
     (everything committed is kept: ``cec recover`` resumes): :class:`ClusterError`
130  interrupted by Ctrl-C (not an error: the CLI's own; ``cec recover`` resumes)
==== ==========================================================

The tree (each package declares its errors in its own ``errors`` module)::

    CecError                                   storage_log.errors (re-exported here)
    ├── UsageError                       2     storage_log.errors (re-exported here)
    │   ├── SpecError, InputOrderError, InputRangeError,           cec.errors
    │   │   WindowMemoryError
    │   ├── LogUsageError (also a StorageLogError)                 storage_log.errors
    │   │   └── LogOrderError, LogSchemaError, LogSealedError,
    │   │       LogNotFoundError, LogClosedError
    │   └── InputError, DriverSupersededError, RunNotVisibleError  cec_spark.errors
    │       └── FilterRowError (an InputError)                      cec_spark.errors
    ├── CorruptionError                  3     storage_log.errors (re-exported here)
    │   └── CorruptLogError (also a StorageLogError)               storage_log.errors
    ├── RecoveryError                    4     cec.errors
    │   ├── ExtentError → InconsistentLogError                     recovery.errors
    │   └── ReplayUnavailableError                                 recovery.errors
    ├── ClusterError                     5     cec.errors
    ├── StorageLogError                  1     storage_log.errors
    │   ├── LogLockedError → LogFencedError, LogTrimmedError
    │   └── LogWriteError                3
    └── PipelineError                    1     cec_spark.errors

Why the root is declared in :mod:`storage_log.errors`: the log is the bottom layer
and imports nothing of the project, so the class every layer derives from must be
declared there; this module is its documented home (``from cec.errors import
CecError``). The root keeps the name ``CecError`` because it is the project's (the CLI,
the API and the docs name it), not the log's. :class:`UsageError` and
:class:`CorruptionError` live beside it because the log raises them too.

A library error that is wrapped is re-raised with ``raise ... from exc`` so the cause
stays visible. Exceptions that never reach a user stay private to their module and
are not ``CecError`` s, each saying why: ``storage_log.framing.FrameError``,
``storage_log.index.IndexCorrupt``, ``cec.spec.values.Problem`` (a pydantic validator
must raise a ``ValueError``), ``cec_spark.source.times.TimeValueError``.
"""

from __future__ import annotations

from storage_log.errors import CecError, CorruptionError, UsageError

__all__ = ["EXIT_STATUSES", "CecError", "ClusterError", "CorruptionError", "InputOrderError",
           "InputRangeError", "RecoveryError", "SpecError", "UsageError", "WindowMemoryError",
           "exit_code"]

#: Every exit status of the ``cec`` command, and what it means (the table above).
EXIT_STATUSES = {
    0: "ok",
    1: "an unexpected failure",
    2: "bad usage, spec or input",
    3: "a damaged log or run file, or a write the file system refused",
    4: "recovery impossible",
    5: "the cluster lost the task slots a run needs",
    130: "interrupted (Ctrl-C)",
}


class SpecError(UsageError):
    """A pipeline spec that cannot be run; the message names the file and field.

    An error about one field of the spec (:func:`cec.spec.parse.field_error`) also
    carries it: ``field``, its keys from the document's root (``("filter", "where")``),
    and ``problem``, the message's text after the field; so a caller can name the field
    its own way (the Python API names the builder call that set it) without reading
    the message. Other errors have ``field == ()`` and ``problem`` the whole message.
    """

    def __init__(self, message: str, *, field: tuple[str, ...] = (),
                 problem: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.problem = message if problem is None else problem


class InputOrderError(UsageError):
    """An input tuple whose position (ts, seq) breaks the stream's ordering rules."""


class InputRangeError(UsageError):
    """An input tuple whose timestamp puts one of its time windows outside int64."""


class WindowMemoryError(UsageError):
    """A partition's open windows do not fit the memory its task has
    (:mod:`cec.operator.memory`); a failed task carrying it is not retried."""


class RecoveryError(CecError):
    """The state before the crash cannot be rebuilt from what is on disk."""

    exit_code = 4


class ClusterError(CecError):
    """The Spark cluster cannot run the pipeline now (lost task slots, a stopped app)."""

    exit_code = 5


def exit_code(exc: BaseException) -> int:
    """The process exit status for ``exc``: its class's for a :class:`CecError`, else 1."""
    if isinstance(exc, CecError):
        return exc.exit_code
    return 1
