"""The writer lock of a log: ``flock(LOCK_EX)`` on the file ``lock``, holding our pid.

The lock belongs to the open file description, so it is released when the holder
closes it or dies (SIGKILL included); a stale pid left in the file is harmless.
A second writer, in this process or another, gets :class:`LogLockedError` naming the
pid written by the holder.

``flock`` fences writers on one host only: on NFS (or any file system a host sees
through its own client) a lock is a lease that a frozen client loses without knowing.
Writer epochs (:mod:`storage_log.epoch`) fence across hosts. To test that epochs alone
keep a log exact, ``CEC_TEST_NO_WRITER_LOCK=1`` makes every process behave as its own
host: the lock file is written but never locked. Never set it in production.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from storage_log.errors import LogLockedError

LOCK_NAME = "lock"


class WriterLock:
    """An acquired exclusive writer lock; :meth:`release` (or process exit) frees it."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            if os.environ.get("CEC_TEST_NO_WRITER_LOCK") != "1":
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise LogLockedError(
                f"log {directory} is locked by another writer (pid {holder}); "
                "stop that process or open the log read-only"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def _read_holder(fd: int) -> str:
    """The pid written by the holder (it writes right after locking, so retry briefly)."""
    for _ in range(50):
        data = os.pread(fd, 32, 0).strip()
        if data.isdigit():
            return data.decode()
        time.sleep(0.01)
    return "unknown"
