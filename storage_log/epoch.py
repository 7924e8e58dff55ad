"""Writer epochs: how a log fences a writer that lost its place (a zombie).

One writer per log is enforced by ``flock`` on one host, but ``flock`` does not fence
across hosts: on NFS a lock is a lease that a frozen client (GC pause, SIGSTOP, network
partition) loses without knowing, and Spark may then run the same task elsewhere. So
every writer takes a new **epoch** before it writes anything, writes only segment
files of its own epoch, and records where the data it continues ends. Whatever a
writer of an older epoch writes after that point is never read, indexed, replayed or
exported (BookKeeper's ledger fencing; Kafka's leader epochs).

On disk::

    LOG/epochs/00000003     one file per epoch, never rewritten, JSON:
        {"epoch": 3, "host": "...", "pid": 4711, "created": 1764000000.0,
         "fence": null | {"segment": [base, epoch], "end": bytes, "last_seq": int|null,
                          "last_ts": int|null, "records": int}}

Taking epoch E (:func:`take_epoch`): write a temporary file, fsync it, hard-link it to
``epochs/E`` (the link fails if another writer took E: exactly one wins), fsync the
directory. The fence is the commit point the writer loaded when it opened the log.

The **chain** (:func:`read_chain`) is the log's valid data: start at the newest epoch,
whose segments are all valid (up to their last COMMIT frame); its fence names a
segment ``s`` and a byte ``end``: the segments of ``s``'s epoch up to ``s`` are valid,
``s`` only up to ``end``; then that epoch's own fence, and so on back to a fence of
``null`` (nothing before) or to epoch 0 (segments written before epochs existed).
Epochs the walk skips hold no valid data. Segment ids sort by (base, epoch), which is
the chain's order (a new epoch's first segment starts after its fence's ``last_seq``).

A writer also checks at each commit that no newer epoch exists
(:func:`fenced_by`) and fails with :class:`LogFencedError` if one does, so a zombie
that wakes up stops soon; correctness never depends on that check.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage_log.entry import Committed
from storage_log.errors import CorruptLogError, LogLockedError
from storage_log.segment import (
    MAX_EPOCH,
    fsync_dir,
    list_segments,
    make_sid,
    sid_base,
    sid_epoch,
)

EPOCH_DIR = "epochs"


@dataclass(frozen=True)
class EpochInfo:
    epoch: int
    host: str
    pid: int
    created: float
    fence: Committed | None


@dataclass(frozen=True)
class Chain:
    """The valid segments of a log, in order, and where fenced ones end."""

    segments: list[int]
    limits: dict[int, int] = field(default_factory=dict)  # segment id -> valid bytes
    epoch: int = 0  # the newest epoch taken (0: none)

    def end(self, sid: int, size: int) -> int:
        """How many bytes of segment ``sid`` (``size`` bytes long) the chain holds."""
        limit = self.limits.get(sid)
        return size if limit is None else min(size, limit)

    def holds(self, point: Committed) -> bool:
        """Whether a commit point lies on the chain (an index built up to it is valid)."""
        if point.segment < 0:
            return True
        if point.segment not in self._set:
            return False
        limit = self.limits.get(point.segment)
        return limit is None or point.end <= limit

    @property
    def _set(self) -> frozenset[int]:
        cached: frozenset[int] | None = self.__dict__.get("_segset")
        if cached is None:
            cached = frozenset(self.segments)
            object.__setattr__(self, "_segset", cached)
        return cached


def epoch_dir(directory: Path) -> Path:
    return directory / EPOCH_DIR


def list_epochs(directory: Path) -> list[int]:
    try:
        names = os.listdir(epoch_dir(directory))
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if len(n) == 8 and n.isdigit())


_cache: dict[str, EpochInfo] = {}  # epoch files never change once created
_cache_lock = threading.Lock()


def read_epoch(directory: Path, epoch: int) -> EpochInfo:
    path = epoch_dir(directory) / f"{epoch:08d}"
    key = str(path)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        fence_raw = raw["fence"]
        fence = None
        if fence_raw is not None:
            base, ep = fence_raw["segment"]
            fence = Committed(make_sid(int(base), int(ep)), int(fence_raw["end"]),
                              _opt_int(fence_raw["last_seq"]), _opt_int(fence_raw["last_ts"]),
                              int(fence_raw["records"]))
        info = EpochInfo(int(raw["epoch"]), str(raw["host"]), int(raw["pid"]),
                         float(raw["created"]), fence)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(f"epoch file {path} at byte 0: unreadable or malformed "
                              f"({exc}); it records where the data of the log's "
                              "previous writer ends") from exc
    if info.epoch != epoch:
        raise CorruptLogError(f"epoch file {path} at byte 0: holds epoch {info.epoch}")
    with _cache_lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[key] = info
    return info


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def take_epoch(directory: Path, fence: Committed) -> int:
    """Create the next epoch file, fencing the log at ``fence``; the new epoch."""
    d = epoch_dir(directory)
    d.mkdir(exist_ok=True)
    known = list_epochs(directory)
    epoch = (known[-1] if known else 0) + 1
    if epoch > MAX_EPOCH:
        raise CorruptLogError(f"log {directory}: no epoch left (at {MAX_EPOCH})")
    body = {
        "epoch": epoch, "host": socket.gethostname(), "pid": os.getpid(),
        "created": time.time(),
        "fence": None if fence.segment < 0 else {
            "segment": [sid_base(fence.segment), sid_epoch(fence.segment)],
            "end": fence.end, "last_seq": fence.last_seq, "last_ts": fence.last_ts,
            "records": fence.records},
    }
    tmp = d / f".{epoch:08d}.{socket.gethostname()}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(body, fh)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, d / f"{epoch:08d}")
    except FileExistsError:
        other = read_epoch(directory, epoch)
        raise LogLockedError(
            f"log {directory}: another writer took epoch {epoch} first (host "
            f"{other.host}, pid {other.pid}); two writers opened this log at once") from None
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(d)
    return epoch


def fenced_by(directory: Path, epoch: int) -> EpochInfo | None:
    """The epoch that superseded ``epoch``, if any (one ``stat``)."""
    path = epoch_dir(directory) / f"{epoch + 1:08d}"
    if not path.exists():
        return None
    try:
        return read_epoch(directory, epoch + 1)
    except CorruptLogError:
        return EpochInfo(epoch + 1, "?", 0, 0.0, None)


def read_chain(directory: Path, segments: list[int] | None = None) -> Chain:
    """The valid segments of the log in ``directory`` (see the module docstring)."""
    sids = list_segments(directory) if segments is None else segments
    epochs = list_epochs(directory)
    by_epoch: dict[int, list[int]] = {}
    for sid in sids:
        by_epoch.setdefault(sid_epoch(sid), []).append(sid)
    newest = epochs[-1] if epochs else 0
    orphans = [e for e in by_epoch if e > newest]
    if orphans:  # a writer creates its epoch file before any segment of its epoch
        raise CorruptLogError(
            f"log {directory}: segments of epoch {min(orphans)} but no epoch file "
            f"{epoch_dir(directory) / f'{min(orphans):08d}'} (at byte 0): the record of "
            "where each writer's data starts was lost")
    if not epochs:
        return Chain(by_epoch.get(0, []))
    valid: list[int] = []
    limits: dict[int, int] = {}
    epoch = epochs[-1]
    upper: Committed | None = None
    while True:
        segs = by_epoch.get(epoch, [])
        if upper is not None:
            segs = [s for s in segs if s <= upper.segment]
            limits[upper.segment] = upper.end
        valid[:0] = segs
        if epoch == 0:
            break
        fence = read_epoch(directory, epoch).fence
        if fence is None:
            break
        prev = sid_epoch(fence.segment)
        if prev >= epoch:
            raise CorruptLogError(f"epoch file {epoch_dir(directory) / f'{epoch:08d}'} at "
                                  f"byte 0: fences epoch {prev}, not an older one")
        upper, epoch = fence, prev
    return Chain(valid, limits, epochs[-1])
