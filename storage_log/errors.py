"""Errors of the persistent stream log, and the root of the project's one error tree.

The log is the bottom layer and imports nothing of the project, so the root every
error derives from, :class:`CecError`, is declared here, with the two kinds of error
the log shares with the layers above it, :class:`UsageError` (exit status 2) and
:class:`CorruptionError` (3). Their documented home is :mod:`cec.errors`, which
re-exports them and holds the table of exit statuses and the whole tree. Each class
carries its exit status as ``exit_code``, declared once, on the class that introduces
it; a subclass inherits it.

The log's own errors are :class:`StorageLogError` s; one that is also a usage error or
damage derives from that kind too (``LogUsageError(StorageLogError, UsageError)``), so
``except UsageError`` catches a bad call to the log as it catches a bad spec.
:class:`StorageLogError` declares no ``exit_code`` of its own, so such a class finds
its kind's status first (1 otherwise, the root's).
"""

from __future__ import annotations

from pathlib import Path


class CecError(Exception):
    """Root of every error raised on purpose by cec, at every layer (:mod:`cec.errors`)."""

    exit_code: int = 1


class UsageError(CecError):
    """Bad arguments, a bad pipeline spec, or bad input data."""

    exit_code = 2


class CorruptionError(CecError):
    """Persistent data that fails validation and needs an explicit repair."""

    exit_code = 3


class StorageLogError(CecError):
    """An error of the log (of this package); exit status 1 unless its kind says."""


class LogUsageError(StorageLogError, UsageError):
    """A call the log refuses: a bad option or argument, or a use its state forbids."""


class CorruptLogError(StorageLogError, CorruptionError):
    """A record before the tail fails validation; names segment, byte offset, invariant."""


class LogLockedError(StorageLogError):
    """Another process holds the log's writer lock; names the holder's pid."""


class LogFencedError(LogLockedError):
    """A writer whose epoch was superseded: another writer took the log over
    (:mod:`storage_log.epoch`)."""


class LogOrderError(LogUsageError):
    """An appended batch whose seq/ts would break the log's ordering invariants."""


class LogSchemaError(LogUsageError):
    """An appended batch whose schema differs from the log's, or cannot be logged."""


class LogSealedError(LogUsageError):
    """An append or commit on a log that was sealed (its stream has ended)."""


class LogNotFoundError(LogUsageError):
    """A log directory (or, for a reader, its index) that does not exist."""


class LogTrimmedError(StorageLogError):
    """A read that asks for records already dropped by trim."""


class LogWriteError(StorageLogError):
    """The file system refused a write (disk full, read-only, permission): names the
    file and the cause. Nothing committed is lost; a later open carries on."""

    exit_code = 3


class LogClosedError(LogUsageError):
    """Use of a closed log, or a write on a read-only or failed log."""


def write_error(path: Path, what: str, exc: OSError) -> LogWriteError:
    """A refused write as one clear error: the log, the file, the cause, what to do."""
    where = f" ({exc.filename})" if exc.filename else ""
    return LogWriteError(
        f"cannot {what} log {path}: {exc.strerror or exc}{where}. Nothing committed is "
        "lost: make room or make it writable (the index cache too: CEC_INDEX_DIR), "
        "then resume (cec recover --from-log RUN)")
