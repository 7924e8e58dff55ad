"""The one error tree of the project.

Every error a user can meet derives from :class:`CecError`. Each class carries the
process exit status the CLI maps it to:

==== ==========================================================
0    success
1    an unexpected failure (a bug, or an environment problem)
2    bad usage, bad spec, bad input (names the file, line, field)
3    a corrupt log that needs ``--repair`` (names segment and offset)
4    recovery impossible (e.g. the upstream no longer holds ``T``)
5    the cluster lost the task slots a run needs and they did not come back in time
     (everything committed is kept: ``cec recover`` resumes once they are back)
==== ==========================================================

Packages add their own subclasses in their own ``errors.py``; a library error that is
wrapped is re-raised with ``raise ... from exc`` so the cause stays visible. The one
exception is the layer below cec, ``storage_log``, which imports nothing from the
project: its errors derive from :class:`storage_log.errors.StorageLogError` and carry
the same ``exit_code`` numbers. Code that catches "an error a user can meet" catches
:data:`USER_ERRORS` (and bad usage, :data:`USAGE_ERRORS`), not :class:`CecError` alone.
"""

from __future__ import annotations

from storage_log.errors import LogUsageError, StorageLogError


class CecError(Exception):
    """Root of every error raised on purpose by cec."""

    exit_code: int = 1


class UsageError(CecError):
    """Bad arguments, a bad pipeline spec, or bad input data."""

    exit_code = 2


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


class NotImplementedYetError(UsageError):
    """A command whose implementation has not landed yet (never a fake result)."""


class CorruptionError(CecError):
    """Persistent data that fails validation and needs an explicit repair."""

    exit_code = 3


class RecoveryError(CecError):
    """The state before the crash cannot be rebuilt from what is on disk."""

    exit_code = 4


class ClusterError(CecError):
    """The Spark cluster cannot run the pipeline now (lost task slots, a stopped app)."""

    exit_code = 5


#: An error raised on purpose, by cec or by the log below it (one line, an exit status).
UserError = CecError | StorageLogError

#: The classes of :data:`UserError`, for ``except`` and ``isinstance``.
USER_ERRORS = (CecError, StorageLogError)

#: Bad usage, a bad spec or bad input (exit 2), from cec or from the log.
USAGE_ERRORS = (UsageError, LogUsageError)


def exit_code(exc: BaseException) -> int:
    """The process exit status for ``exc``: its class's for a user error, else 1."""
    if isinstance(exc, USER_ERRORS):
        return exc.exit_code
    return 1
