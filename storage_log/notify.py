"""Waiting for a log's next commit without polling where the kernel can tell.

A commit ends with a write to the log's active segment (the frame that carries the
COMMIT flag, DESIGN §6), and a reader's snapshot walks the segments from its last
commit point (:class:`storage_log.scan.ScanIndex`): so a write in the log's directory
is the moment to look again. :class:`CommitWatch` asks Linux's inotify for the writes,
creations and renames in a set of log directories and sleeps in ``select`` until one
comes: a reader on the writer's host wakes within a millisecond of the write.

inotify sees only what is written through this host's kernel: a writer on another
host of a shared file system (NFS, a FUSE mount) is not seen. So :meth:`CommitWatch.wait`
never sleeps longer than ``fallback_s`` (a poll across hosts), and where inotify is
missing (another OS, a limit reached) it is that poll alone. The watch only says *when
to look*: what is committed is always what a snapshot reads, so a spurious or a lost
wake-up costs time, never correctness.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import time
from pathlib import Path

__all__ = ["CommitWatch"]

# <sys/inotify.h>
_IN_MODIFY = 0x00000002
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MASK = _IN_MODIFY | _IN_MOVED_TO | _IN_CREATE  # appends, renames, new segments


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name, use_errno=True)
        lib.inotify_init1.argtypes = [ctypes.c_int]
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return lib


_LIBC = _libc()


class CommitWatch:
    """Sleep until a log directory in the watch changes (see the module docstring).

    Not thread-safe: one waiter per watch. ``close()`` (or ``with``) releases the
    inotify descriptor."""

    def __init__(self, directories: list[Path] | tuple[Path, ...] = (), *,
                 fallback_s: float = 0.05) -> None:
        self.fallback_s = fallback_s
        self._fd = -1
        self._watched: set[Path] = set()
        if _LIBC is not None and os.environ.get("CEC_INOTIFY", "1") != "0":
            fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd >= 0:
                self._fd = fd
        for d in directories:
            self.add(d)

    @property
    def notifying(self) -> bool:
        """Whether the kernel tells of writes (else :meth:`wait` is a sleep)."""
        return self._fd >= 0

    def add(self, directory: Path) -> bool:
        """Watch ``directory`` too (a log that now exists); False when it cannot be
        watched (missing, or no inotify: then a poll)."""
        if self._fd < 0 or directory in self._watched:
            return directory in self._watched
        wd = _LIBC.inotify_add_watch(self._fd, os.fsencode(directory), _MASK)  # type: ignore[union-attr]
        if wd < 0:
            err = ctypes.get_errno()
            if err not in (errno.ENOENT, errno.ENOTDIR):
                self.close()  # ENOSPC (the user's watch limit) and the like: poll instead
            return False
        self._watched.add(directory)
        return True

    def wait(self, timeout: float) -> bool:
        """Sleep until a write in a watched directory, ``timeout`` seconds, or
        ``fallback_s``, whichever comes first; True when woken by a write."""
        timeout = max(0.0, min(timeout, self.fallback_s))
        if self._fd < 0:
            time.sleep(timeout)
            return False
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return False
        try:
            while os.read(self._fd, 65536):  # drain: one wake-up for many writes
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._watched.clear()

    def __enter__(self) -> CommitWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        self.close()
