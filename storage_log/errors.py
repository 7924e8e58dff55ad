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
