"""storage_log: the checksummed, LMDB-indexed, append-only stream log.

The public API is :class:`storage_log.log.StreamLog` (see docs/ARCHITECTURE.md §2);
the byte layout of a record is in :class:`storage_log.frame.FrameCodec`.
"""

from storage_log.errors import (
    CorruptLogError,
    LogLockedError,
    LogOrderError,
    StorageLogError,
)
from storage_log.log import StreamLog
from storage_log.reconcile import ReconcileReport

__all__ = [
    "CorruptLogError",
    "LogLockedError",
    "LogOrderError",
    "ReconcileReport",
    "StorageLogError",
    "StreamLog",
]
