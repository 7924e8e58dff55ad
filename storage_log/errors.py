"""Errors of the persistent stream log."""

from __future__ import annotations

from cec.errors import CecError, CorruptionError, UsageError


class StorageLogError(CecError):
    """Root of the log's own errors."""


class CorruptLogError(CorruptionError, StorageLogError):
    """A record before the tail fails validation; names segment, byte offset, invariant."""


class LogLockedError(StorageLogError):
    """Another process holds the log's writer lock; names the holder's pid."""


class LogOrderError(UsageError, StorageLogError):
    """An appended batch whose seq/ts would break the log's ordering invariants."""


class LogSchemaError(UsageError, StorageLogError):
    """An appended batch whose schema differs from the log's, or cannot be logged."""


class LogSealedError(UsageError, StorageLogError):
    """An append or commit on a log that was sealed (its stream has ended)."""


class LogNotFoundError(UsageError, StorageLogError):
    """A log directory (or, for a reader, its index) that does not exist."""


class LogTrimmedError(StorageLogError):
    """A read that asks for records already dropped by trim."""


class LogWriteError(StorageLogError):
    """The file system refused a write (disk full, read-only, permission): names the
    file and the cause. Nothing committed is lost; a later open carries on."""

    exit_code = 3


class LogClosedError(UsageError, StorageLogError):
    """Use of a closed log, or a write on a read-only or failed log."""
