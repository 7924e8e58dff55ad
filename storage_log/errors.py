"""Errors of the persistent stream log.

The log imports nothing from the project, so its errors have their own root,
:class:`StorageLogError`. Each class carries the process exit status a command line
maps it to, as ``exit_code`` (the numbers of ``cec.errors``): 1 an unexpected failure,
2 bad usage (a call the log refuses), 3 a corrupt log that needs a repair, or a write
the file system refused.
"""

from __future__ import annotations

from pathlib import Path


class StorageLogError(Exception):
    """Root of the log's own errors."""

    exit_code: int = 1


class LogUsageError(StorageLogError):
    """A call the log refuses: a bad option or argument, or a use its state forbids."""

    exit_code = 2


class CorruptLogError(StorageLogError):
    """A record before the tail fails validation; names segment, byte offset, invariant."""

    exit_code = 3


class LogLockedError(StorageLogError):
    """Another process holds the log's writer lock; names the holder's pid."""


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
