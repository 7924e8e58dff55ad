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
wrapped is re-raised with ``raise ... from exc`` so the cause stays visible.
"""

from __future__ import annotations


class CecError(Exception):
    """Root of every error raised on purpose by cec."""

    exit_code: int = 1


class UsageError(CecError):
    """Bad arguments, a bad pipeline spec, or bad input data."""

    exit_code = 2


class SpecError(UsageError):
    """A pipeline spec that cannot be run; the message names the file and field."""


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
