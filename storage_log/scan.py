"""The index of every reader (:class:`ScanIndex`): the host's LMDB index of the log
where there is a usable one (read-only), continued in memory by walking the segments
from its committed end (:func:`storage_log.walk.walk`, re-exported here with the
walk's other names), so that a reader on any host sees every commit, whoever wrote it
and wherever.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path

from storage_log.cache import ID_FILE, index_path
from storage_log.entry import EMPTY, Entry, Snapshot
from storage_log.epoch import Chain, read_chain
from storage_log.errors import CorruptLogError, LogNotFoundError
from storage_log.framing import FrameError
from storage_log.index import IndexCorrupt, LogIndex
from storage_log.lock import LOCK_NAME
from storage_log.segment import (
    SegmentReader,
    list_segments,
    read_trim_marker,
    segment_path,
    sid_epoch,
)
from storage_log.walk import WalkResult, check_link, segment_has_schema, tail_is_torn, walk

__all__ = [
    "ScanIndex",
    "WalkResult",
    "check_link",
    "open_scan_index",
    "segment_has_schema",
    "tail_is_torn",
    "walk",
]


class ScanIndex:
    """A reader's index: the host's LMDB index (if usable), continued in memory.

    ``base`` is the LMDB index of this host, opened read-only, or None. Every
    :meth:`snapshot` reads the log's epoch chain and walks the segments from the last
    commit point known (the base's committed end when it is further and on the
    chain), so a tailing reader sees new commits whoever writes them, on whatever
    host. The walk stops at the first invalid frame. In the chain's last segment (not
    fenced) that may be a write in progress, so a reader sees the log up to it (a
    writable open tells a torn tail from corruption); in any other segment it is
    damage, and the snapshot raises CorruptLogError (a reader never sees a shorter
    log). A base whose committed end is not on the chain (the log was taken over since)
    is ignored, and trimmed segments restart the walk from the first remaining one.

    Never writes anything.
    """

    def __init__(self, directory: Path, base: LogIndex | None = None) -> None:
        self.directory = directory
        self.base = base
        self._reset()
        try:
            self.snapshot()
        except BaseException:
            self.close()  # the caller never gets this object: release the base index
            raise

    def _reset(self) -> None:
        self._first_segment: int | None = None
        self._res = WalkResult(EMPTY, None, None, False)
        self._from_base = False  # entries up to the walk's start are in the base
        self._entries: list[Entry] = []
        self._seq_keys: list[int] = []
        self._ts_keys: list[tuple[int, int]] = []

    def close(self) -> None:
        self._entries = []
        if self.base is not None:
            self.base.close()
            self.base = None

    def _adopt_base(self, chain: Chain) -> None:
        """Start (again) from the base's committed end when it is ahead and valid."""
        if self.base is None:
            return
        b = self.base.snapshot()
        seg = b.committed.segment
        if seg >= 0 and seg not in chain.segments and sid_epoch(seg) == chain.epoch \
                and (b.committed.last_seq is None or
                     b.committed.last_seq > (read_trim_marker(self.directory) or -1)) \
                and not segment_path(self.directory, seg).exists():  # (not just created
            # after the chain was listed)
            # this host saw commits up to a segment of the current writer that is gone
            raise CorruptLogError(
                f"corrupt log segment {segment_path(self.directory, seg)} at byte 0: the "
                f"segment is missing, but it held commits up to seq "
                f"{b.committed.last_seq} (records lost; not trimmed)")
        if b.committed.position <= self._res.point.position or not chain.holds(b.committed):
            return
        self._entries, self._seq_keys, self._ts_keys = [], [], []
        self._res = WalkResult(b.committed, b.schema, b.token, b.sealed)
        self._from_base = True

    def _refresh(self) -> Chain:
        chain = read_chain(self.directory)
        segments = chain.segments
        if (self._first_segment is not None and (not segments
                                                 or segments[0] != self._first_segment)) \
                or not chain.holds(self._res.point):
            self._reset()
        self._adopt_base(chain)
        if not segments:
            return chain
        self._first_segment = segments[0]
        point = self._res.point
        if point.segment >= 0:
            segments = [s for s in segments if s >= point.segment]
        res = walk(self.directory, segments, point, schema_bytes=self._res.schema_bytes,
                   token=self._res.token, sealed=self._res.sealed, limits=chain.limits)
        if res.bad is not None and (not res.torn or res.bad[0] in chain.limits
                                    or self._lost_before_next(chain, res)):
            # a whole frame that fails (not a write cut short), a bad frame in a segment
            # a newer epoch fenced, or a cut-short frame before records that the next
            # segment says were written: damage, never the end of the log
            seg, offset, invariant = res.bad
            raise CorruptLogError(
                f"corrupt log segment {segment_path(self.directory, seg)} at byte {offset}: "
                f"{invariant}. The damage lies before the committed end; a writable open "
                "with repair=True (cec recover --from-log RUN --repair) truncates it there, "
                "losing the records from that byte on")
        for e in res.entries:
            self._entries.append(e)
            self._seq_keys.append(e.last_seq)
            self._ts_keys.append((e.last_ts, e.last_seq))
        res.entries = []
        self._res = res
        return chain

    def _lost_before_next(self, chain: Chain, res: WalkResult) -> bool:
        """A cut-short frame in a segment that a later one follows is damage once the
        later segment has a whole first frame: a writer finishes a segment before it
        creates the next, so only a later segment still without one may be a roll in
        progress seen half-way."""
        assert res.bad is not None
        i = chain.segments.index(res.bad[0]) if res.bad[0] in chain.segments else -1
        if i < 0 or i + 1 >= len(chain.segments):
            return False
        path = segment_path(self.directory, chain.segments[i + 1])
        try:
            with SegmentReader(path) as reader:
                info = next((f[2] for f in reader.forward(0, reader.size())), None)
            if info is None:
                return False
            # the next segment exists, so the bad one is final now: if it is longer than
            # when the walk read it, the walk read it while it was being written
            now = os.stat(segment_path(self.directory, res.bad[0])).st_size
        except (OSError, FrameError):
            return False
        return res.bad_size is not None and now == res.bad_size

    def snapshot(self) -> Snapshot:
        self._refresh()
        r = self._res
        first = self._entries[0].first_seq if self._entries else None
        if self._from_base and self.base is not None:
            first = self.base.snapshot().first_seq
        return Snapshot(committed=r.point, first_seq=first,
                        schema=r.schema_bytes, token=r.token, sealed=r.sealed,
                        trimmed=read_trim_marker(self.directory))

    def locate(self, *, after_seq: int | None = None, from_ts: int | None = None,
               at_seq: int | None = None) -> tuple[Snapshot, Entry | None]:
        snap = self.snapshot()
        if self._from_base and self.base is not None:
            _, entry = self.base.locate(after_seq=after_seq, from_ts=from_ts, at_seq=at_seq)
            if entry is not None and (not self._entries
                                      or entry.last_seq < self._entries[0].first_seq):
                return snap, entry
        if after_seq is not None:
            i = bisect.bisect_right(self._seq_keys, after_seq)
        elif at_seq is not None:
            i = bisect.bisect_left(self._seq_keys, at_seq)
        elif from_ts is not None:
            i = bisect.bisect_left(self._ts_keys, (from_ts, -(1 << 63)))
        else:
            i = 0
        return snap, self._entries[i] if i < len(self._entries) else None


def open_scan_index(directory: Path, index_root: str | os.PathLike[str] | None) -> ScanIndex:
    """A reader's index of the log in ``directory``: this host's LMDB index of it, if
    there is one (``index_root``: :func:`storage_log.cache.index_root`), continued by a
    walk. LogNotFoundError if ``directory`` holds no log."""
    if not ((directory / ID_FILE).exists() or (directory / LOCK_NAME).exists()
            or list_segments(directory)):
        raise LogNotFoundError(f"{directory} is not a log (no {ID_FILE}, lock or "
                               "segment files)")
    base: LogIndex | None = None
    local = index_path(directory, index_root)
    if local is not None:
        try:
            base = LogIndex(local, create=False)
        except (FileNotFoundError, IndexCorrupt):
            base = None  # none on this host yet: walk the segments
    return ScanIndex(directory, base)
