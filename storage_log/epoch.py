"""Writer epochs: how a log fences a writer that lost its place (a zombie).

One writer per log is enforced by ``flock`` on one host, but ``flock`` does not fence
across hosts: on NFS a lock is a lease that a frozen client (GC pause, SIGSTOP, network
partition) loses without knowing, and Spark may then run the same task elsewhere. So
every writer takes a new **epoch** before it writes anything, writes only segment
files of its own epoch, and records where the data it continues ends. Whatever a
writer of an older epoch writes after that point is never read, indexed, replayed or
exported (BookKeeper's ledger fencing; Kafka's leader epochs).

On disk::

    LOG/epochs/00000003     one file per epoch, never rewritten, JSON and a checksum:
        {"epoch": 3, "host": "...", "pid": 4711, "created": 1764000000.0,
         "fence": null | {"segment": [base, epoch], "end": bytes, "last_seq": int|null,
                          "last_ts": int|null, "records": int}}
        <xxh64 hex digest of the JSON line>

(files written before the checksum line existed are the JSON line alone, and are
read as they are).

Taking epoch E (:func:`take_epoch`): a durable, exclusive write of ``epochs/E``
(:func:`storage_log.durable.write_durable`: the hard link fails if another writer took
E: exactly one wins). The fence is the commit point the writer loaded when it opened
the log.

**A damaged epoch file is rebuilt from the segments** (:func:`derive_fence`) by a
writable open with ``repair`` (:func:`read_chain` with ``rebuild``; readers report it):
the first frame of an epoch's first segment is a control frame that repeats where the
log ended when the writer began (its ``last_seq``: the fence's), so the fence is the
last commit point of the older epochs' chain at that seq, before any record after it.
An epoch without segments is read only when it is the newest (no fence points into
it); its fence is then the end of the older chain, which is the fence unless a
zombie of an older epoch committed after that writer opened (the one case that the
segments cannot tell apart, and it needs a frozen writer and bit rot in one file).

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

import xxhash

from storage_log.durable import write_durable
from storage_log.entry import Committed
from storage_log.errors import CorruptLogError, LogLockedError
from storage_log.framing import FLAG_COMMIT, FrameError, Kind
from storage_log.segment import (
    MAX_EPOCH,
    SegmentReader,
    list_segments,
    make_sid,
    segment_path,
    sid_base,
    sid_epoch,
)
from storage_log.walk import tail_is_torn

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
    #: epoch files found damaged and rebuilt from the segments (``rebuild``), not
    #: written back yet: epoch -> (what was wrong, the rebuilt content)
    rebuilt: dict[int, tuple[str, EpochInfo]] = field(default_factory=dict)

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


REBUILD_HINT = ("a writable open with repair=True (cec recover --from-log RUN --repair) "
                "rebuilds it from the segments")


def epoch_path(directory: Path, epoch: int) -> Path:
    return epoch_dir(directory) / f"{epoch:08d}"


def read_epoch(directory: Path, epoch: int) -> EpochInfo:
    path = epoch_path(directory, epoch)
    key = str(path)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    try:
        raw = json.loads(_checked_body(path.read_text(encoding="utf-8")))
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
                              f"previous writer ends; {REBUILD_HINT}") from exc
    if info.epoch != epoch:
        raise CorruptLogError(f"epoch file {path} at byte 0: holds epoch {info.epoch}; "
                              f"{REBUILD_HINT}")
    with _cache_lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[key] = info
    return info


def _checked_body(text: str) -> str:
    """The JSON line of an epoch file, its checksum line verified (ValueError)."""
    body, sep, digest = text.rstrip("\n").partition("\n")
    if sep and xxhash.xxh64_hexdigest(body.encode("utf-8")) != digest:
        raise ValueError("checksum mismatch")
    return body


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def epoch_text(info: EpochInfo) -> str:
    """The content of an epoch file: a JSON line and its xxh64 checksum line."""
    fence = info.fence
    body = json.dumps({
        "epoch": info.epoch, "host": info.host, "pid": info.pid, "created": info.created,
        "fence": None if fence is None or fence.segment < 0 else {
            "segment": [sid_base(fence.segment), sid_epoch(fence.segment)],
            "end": fence.end, "last_seq": fence.last_seq, "last_ts": fence.last_ts,
            "records": fence.records}})
    return f"{body}\n{xxhash.xxh64_hexdigest(body.encode('utf-8'))}\n"


def write_rebuilt(directory: Path, info: EpochInfo) -> Path:
    """Put back a damaged epoch file with its rebuilt content (durably)."""
    path = epoch_path(directory, info.epoch)
    write_durable(path, epoch_text(info))
    with _cache_lock:
        _cache.pop(str(path), None)
    return path


def take_epoch(directory: Path, fence: Committed) -> int:
    """Create the next epoch file, fencing the log at ``fence``; the new epoch."""
    d = epoch_dir(directory)
    d.mkdir(exist_ok=True)
    known = list_epochs(directory)
    epoch = (known[-1] if known else 0) + 1
    if epoch > MAX_EPOCH:
        raise CorruptLogError(f"log {directory}: no epoch left (at {MAX_EPOCH})")
    info = EpochInfo(epoch, socket.gethostname(), os.getpid(), time.time(),
                     None if fence.segment < 0 else fence)
    try:
        write_durable(epoch_path(directory, epoch), epoch_text(info), exclusive=True)
    except FileExistsError:
        try:
            other = read_epoch(directory, epoch)
            who = f"host {other.host}, pid {other.pid}"
        except CorruptLogError:
            who = "its epoch file is unreadable"
        raise LogLockedError(
            f"log {directory}: another writer took epoch {epoch} first ({who}); two "
            "writers opened this log at once") from None
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


def read_chain(directory: Path, segments: list[int] | None = None, *,
               rebuild: bool = False) -> Chain:
    """The valid segments of the log in ``directory`` (see the module docstring).

    A damaged epoch file on the chain is CorruptLogError; with ``rebuild`` its content
    is derived from the segments instead (:func:`derive_fence`) and returned in
    :attr:`Chain.rebuilt` for the caller (a repairing writer) to write back.
    """
    sids = list_segments(directory) if segments is None else segments
    epochs = list_epochs(directory)
    newest = epochs[-1] if epochs else 0
    orphans = sorted({sid_epoch(s) for s in sids if sid_epoch(s) > newest})
    if orphans:  # a writer creates its epoch file before any segment of its epoch
        raise CorruptLogError(
            f"log {directory}: segments of epoch {orphans[0]} but no epoch file "
            f"{epoch_path(directory, orphans[0])} (at byte 0): the record of "
            "where each writer's data starts was lost")
    rebuilt: dict[int, tuple[str, EpochInfo]] = {}
    chain = _chain(directory, sids, epochs, rebuilt if rebuild else None)
    return Chain(chain.segments, chain.limits, chain.epoch, rebuilt)


def _chain(directory: Path, sids: list[int], epochs: list[int],
           rebuilt: dict[int, tuple[str, EpochInfo]] | None) -> Chain:
    """:func:`read_chain` of the segments ``sids`` as if ``epochs`` were all the
    epochs taken (``rebuilt``: derive damaged epoch files into it, else raise)."""
    by_epoch: dict[int, list[int]] = {}
    for sid in sids:
        by_epoch.setdefault(sid_epoch(sid), []).append(sid)
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
        fence = _epoch_info(directory, epoch, sids, epochs, rebuilt).fence
        if fence is None:
            break
        upper, epoch = fence, sid_epoch(fence.segment)
    return Chain(valid, limits, epochs[-1])


def _epoch_info(directory: Path, epoch: int, sids: list[int], epochs: list[int],
                rebuilt: dict[int, tuple[str, EpochInfo]] | None) -> EpochInfo:
    """Epoch ``epoch``'s file, or with ``rebuilt`` its content derived from the
    segments when the file is damaged."""
    if rebuilt is not None and epoch in rebuilt:
        return rebuilt[epoch][1]
    try:
        info = read_epoch(directory, epoch)
        prev = None if info.fence is None else sid_epoch(info.fence.segment)
        if prev is not None and prev >= epoch:
            raise CorruptLogError(f"epoch file {epoch_path(directory, epoch)} at byte 0: "
                                  f"fences epoch {prev}, not an older one; {REBUILD_HINT}")
        return info
    except CorruptLogError as exc:
        if rebuilt is None:
            raise
        fence = derive_fence(directory, epoch, sids, epochs, rebuilt)
        info = EpochInfo(epoch, "?", 0, 0.0, fence)
        rebuilt[epoch] = (str(exc), info)
        return info


def derive_fence(directory: Path, epoch: int, sids: list[int], epochs: list[int],
                 rebuilt: dict[int, tuple[str, EpochInfo]] | None = None
                 ) -> Committed | None:
    """The fence of ``epoch`` as the segments show it (see the module docstring):
    the last commit point of the chain of the older epochs at the seq where
    ``epoch``'s first segment says the log ended, or the end of that chain when
    ``epoch`` has no segment. CorruptLogError when the segments cannot tell."""
    older = [s for s in sids if sid_epoch(s) < epoch]
    if not older:
        return None  # nothing before this epoch: no fence
    prior = _chain(directory, older, [e for e in epochs if e < epoch], rebuilt)
    mine = sorted(s for s in sids if sid_epoch(s) == epoch)
    link = _link_of(directory, mine[0]) if mine else None
    point, whole = _last_commit(directory, prior, link)
    if (link is None and whole) or (link is not None and _seq(point) == link):
        return point
    raise CorruptLogError(
        f"epoch file {epoch_path(directory, epoch)} at byte 0: damaged, and it cannot be "
        f"rebuilt: the older segments hold no commit at seq {link}, where the epoch's "
        f"first segment {segment_path(directory, mine[0]).name} says the log ended "
        "before it")


def _seq(point: Committed | None) -> int:
    return -1 if point is None or point.last_seq is None else point.last_seq


def _link_of(directory: Path, sid: int) -> int:
    """Where the log ended before segment ``sid``: its first frame's last_seq."""
    path = segment_path(directory, sid)
    try:
        with SegmentReader(path) as reader:
            for _, _, info in reader.forward(0, reader.size()):
                if info.kind != Kind.DATA:  # a segment's first frame is a control frame
                    return info.last_seq
                break
    except (FrameError, OSError) as exc:
        raise CorruptLogError(f"corrupt log segment {path} at byte 0: its first frame "
                              f"({exc}) is needed to rebuild a damaged epoch file") from exc
    raise CorruptLogError(f"corrupt log segment {path} at byte 0: it does not start with "
                          "a control frame (needed to rebuild a damaged epoch file)")


def _last_commit(directory: Path, chain: Chain, link: int | None
                 ) -> tuple[Committed | None, bool]:
    """The last commit point of ``chain`` before any record after seq ``link`` (None:
    the end of the chain), and whether nothing but a torn tail of the chain's last
    segment stopped the walk before."""
    point: Committed | None = None
    last_seq: int | None = None
    last_ts: int | None = None
    records = 0
    for seg in chain.segments:
        path = segment_path(directory, seg)
        try:
            with SegmentReader(path) as reader:
                for _, _, info in reader.forward(0, chain.end(seg, reader.size())):
                    if info.kind == Kind.DATA:
                        if link is not None and info.last_seq > link:
                            return point, True
                        last_seq, last_ts, records = info.last_seq, info.last_ts, records + 1
                    if info.flags & FLAG_COMMIT:
                        point = Committed(seg, info.end, last_seq, last_ts, records)
        except FrameError as exc:
            return point, seg == chain.segments[-1] and tail_is_torn(path, exc.offset)
        except OSError:
            return point, False
    return point, True
