"""Leases: how a driver (or a standby) says it is alive to the processes that watch
the run directory, on this host and on others.

A lease is a small file the live process holds two ways at once:

* ``flock(LOCK_EX)`` on it, for as long as the process lives. The kernel lets go the
  instant the process dies (``kill -9`` included), so a watcher on the same host that
  waits on ``flock(LOCK_SH)`` wakes at once. A host that sees the run directory through
  its own mount (NFS, or a FUSE mount) has its own ``flock`` domain: there the lock
  says nothing, and is never trusted (:func:`lock_state` finds out which).
* a **beat**: a counter rewritten in place every :data:`BEAT_S` by a thread. A watcher
  that sees the counter stand still for its lease time (:class:`BeatJudge`, measured on
  the watcher's own monotonic clock, so the hosts' clocks need not agree) knows the
  process is dead or frozen. This is the only signal across hosts, and the only one
  for a frozen (``SIGSTOP``) process on any host: it holds its lock but stops beating.

A third, when the watcher can tell the holder runs on its own machine (same boot and
same pid namespace, :func:`same_machine`): whether the holder's pid still lives (with
the process start time, so a reused pid is not mistaken for it).

What the beat needs from the file system (docs/CLUSTER.md, "Control-plane cost"): a
watcher on another host must read each beat within the lease time. A watcher opens
the file for every look, so close-to-open consistency (NFS's default ``cto``; a FUSE
mount without ``kernel_cache``) hands it the server's bytes whatever the attribute
cache (``actimeo``); the writer's side must put each beat *on the server*: an NFS
client keeps a ``pwrite`` in its page cache until a flush, close or ``fsync`` (the
kernel's write-back may wait 30 s). So on a file system that is not known to be local
(:func:`needs_sync`: NFS, FUSE, CIFS, Ceph, Lustre, ...) each beat is followed by an
``fdatasync``; on a local file system, where every reader shares the writer's page
cache, it is not (a flush every 0.25 s would only cost the logs' disk time).

When the holder ends by itself it says how (:meth:`Lease.end`: ``completed``,
``stopped``, ``failed``, ``superseded``, with its exit status): a watcher tells a death
from an end. The record is a JSON object padded to :data:`RECORD_BYTES`, written with
one ``pwrite`` at offset 0 (a reader that catches a torn record reads it again).

Files: ``RUN/drivers/NNNNNNNN.live`` for driver ``N`` (:func:`~cec_spark.rundir.drivers.take_driver`
gives the number), ``RUN/standbys/HOST-PID.live`` for a standby (``cec standby``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BEAT_S", "DEFAULT_LEASE_S", "FENCE_LOOK_S", "RECORD_BYTES", "BeatJudge", "Lease",
           "boot_id", "lock_state", "machine_id", "needs_sync", "pid_alive", "read_lease",
           "released", "same_machine"]

BEAT_S = 0.25
"""How often a holder rewrites its beat."""
DEFAULT_LEASE_S = 2.0
"""How long a watcher lets a beat stand still before it calls the holder dead (at least
four beats: a holder under load may miss one or two)."""
RECORD_BYTES = 1024
FENCE_LOOK_S = DEFAULT_LEASE_S / 2
"""How often a task with nothing to write (an idle operator or ingest task) looks in
``RUN/drivers`` for a newer driver: a superseded task ends within about this long (a
busy one looks at each state report; every write it makes is fenced by its log's
epoch anyway)."""

#: file systems whose readers all share the writer's page cache (one host): no beat sync
LOCAL_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs",
                      "zfs", "overlay", "jfs", "reiserfs", "bcachefs", "vfat", "exfat"})


def _unescape(field: str) -> str:
    """A /proc/self/mountinfo field: octal escapes (``\\040`` a space) undone."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def fs_type(path: Path, mountinfo: str | None = None) -> str:
    """The type of the file system holding ``path`` (``/proc/self/mountinfo``, this
    process's mount namespace: the longest mount point that holds it); '' when
    unknown."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return ""
    target = os.path.realpath(path)
    best, kind = -1, ""
    for line in mountinfo.splitlines():
        fields = line.split()
        try:
            point = _unescape(fields[4])
            fstype = fields[fields.index("-") + 1]
        except (IndexError, ValueError):
            continue
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # >=: the later of two mounts at one point
            best, kind = len(point), fstype
    return kind


def needs_sync(path: Path, mountinfo: str | None = None) -> bool:
    """Whether a beat written in ``path`` must be ``fdatasync``-ed to reach a watcher on
    another host: True unless its file system is known to be local (:data:`LOCAL_FS`)."""
    return fs_type(path, mountinfo) not in LOCAL_FS


@functools.cache
def boot_id() -> str:
    """This boot of this machine (Linux's ``boot_id``; '' when unknown): what a process
    wrote without fsync is in the page cache of its boot only."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@functools.cache
def machine_id() -> str:
    """This machine's boot and pid namespace: two processes with the same id can judge
    each other's pids. ('' when unknown: then no pid is judged.) Read once per process
    (a process keeps its boot and its pid namespace)."""
    boot = boot_id()
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{ns}" if boot else ""


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc``), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int, start: int | None) -> bool:
    """Process ``pid`` (started at ``start`` ticks, if known) still runs on this machine
    (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    try:
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return False
        return start is None or int(fields[19]) == start
    except (ValueError, IndexError):
        return True


def same_machine(record: dict[str, Any]) -> bool:
    """The lease's holder runs on this machine, in this pid namespace."""
    mine = machine_id()
    return bool(mine) and record.get("machine") == mine


class Lease:
    """A lease held by this process (module docstring): the lock and the beat thread.

    ``info`` goes into every record (who holds it and why); :meth:`update` changes it;
    :meth:`end` says how the holder ended and lets go. The beat thread is a daemon: a
    process that dies takes it along, which is the point. ``sync``: ``fdatasync`` each
    beat (default: :func:`needs_sync` of the lease's folder).
    """

    def __init__(self, path: Path, info: dict[str, Any], *, sync: bool | None = None) -> None:
        self.path = path
        self.info = {"host": socket.gethostname(), "pid": os.getpid(),
                     "start": process_start(os.getpid()), "machine": machine_id(),
                     "beat_s": BEAT_S, **info}
        self.beat = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sync = needs_sync(path.parent) if sync is None else sync
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"{path}: another process holds this lease") from None
        self._fd = fd
        self._write()
        self._thread = threading.Thread(target=self._beat, name="cec-lease", daemon=True)
        self._thread.start()

    def _write(self, *, beat: bool = False, **extra: Any) -> None:
        with self._lock:
            # a beat that woke before end() set the stop must not write over its record
            if self._fd < 0 or (beat and self._stop.is_set()):
                return
            self.beat += 1
            record = {**self.info, "beat": self.beat, "at": round(time.time(), 3), **extra}
            data = json.dumps(record).encode()
            if len(data) >= RECORD_BYTES:
                raise ValueError(f"{self.path}: lease record over {RECORD_BYTES} bytes")
            with contextlib.suppress(OSError):  # a full disk: the watchers see no beat
                os.pwrite(self._fd, data.ljust(RECORD_BYTES - 1) + b"\n", 0)
                if self.sync:  # onto the server, for a watcher on another host
                    os.fdatasync(self._fd)

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_S):
            self._write(beat=True)

    def update(self, **info: Any) -> None:
        """Change what the record says (e.g. a standby's ``state``), beating at once."""
        self.info.update(info)
        self._write()

    def end(self, outcome: str, code: int = 0, reason: str = "") -> None:
        """The holder ends by itself: write how, stop beating, let go of the lock."""
        if self._fd < 0:
            return
        self._stop.set()
        self._write(ended=outcome, code=code, reason=reason[:300])
        with self._lock:
            fd, self._fd = self._fd, -1
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def read_lease(path: Path) -> dict[str, Any] | None:
    """The lease's record, or None (no file, or a record torn by a write in progress:
    the caller reads again at its next look)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        record = json.loads(raw.decode("utf-8").strip() or "null")
    except (UnicodeDecodeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def lock_state(path: Path) -> str:
    """``held`` (a process of this ``flock`` domain holds the lease's lock), ``free``
    (nobody here holds it: the holder is dead, or lives in another ``flock`` domain), or
    ``missing``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "missing"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return "held"
    except OSError as exc:  # a file system without flock: the lock says nothing
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            return "free"
        raise
    finally:
        os.close(fd)
    return "free"


def released(path: Path, on_release: Callable[[], None]) -> None:
    """Call ``on_release`` (from a daemon thread) the moment the lease's lock is let go:
    its holder ended or died. Costs a blocked thread, no CPU. Only meaningful when
    :func:`lock_state` said ``held`` (the same ``flock`` domain)."""
    def wait() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            on_release()
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            pass
        finally:
            os.close(fd)
        on_release()

    threading.Thread(target=wait, name="cec-lease-watch", daemon=True).start()


@dataclass
class BeatJudge:
    """Whether a lease's beat stood still for ``lease_s`` of the watcher's own clock
    (pure: the watcher feeds it what it read and when)."""

    lease_s: float
    _beat: Any = None
    _since: float | None = None

    def see(self, now: float, record: dict[str, Any] | None) -> bool:
        """Feed one look at the lease (``record`` None: unreadable or missing this time);
        True when the beat has not moved for ``lease_s`` (since the first look, if it
        never moved)."""
        beat = None if record is None else (record.get("beat"), record.get("pid"))
        if self._since is None:
            self._beat, self._since = beat, now
            return False
        if beat is not None and beat != self._beat:
            self._beat, self._since = beat, now
            return False
        return now - self._since >= self.lease_s

    def stood_s(self, now: float) -> float:
        """How long the beat has stood still."""
        return 0.0 if self._since is None else now - self._since
