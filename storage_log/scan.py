"""Walking segments to find commits: shared by reconcile and by index-less readers.

:func:`walk` validates frames forward from a commit point and returns every later
commit point with the DATA records it commits, stopping at the first bad or
incomplete frame. :class:`ScanIndex` is the index of every reader: the host's LMDB
index of the log where there is a usable one (read-only), continued in memory by
walking the segments from its committed end, so that a reader on any host sees every
commit, whoever wrote it and wherever.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from storage_log.entry import EMPTY, Committed, Entry, Snapshot
from storage_log.epoch import Chain, read_chain
from storage_log.errors import CorruptLogError
from storage_log.frame import (
    FLAG_COMMIT,
    FOOTER,
    FOOTER_MAGIC,
    FOOTER_SIZE,
    HEADER,
    HEADER_MAGIC,
    HEADER_SIZE,
    OVERHEAD,
    FrameCodec,
    FrameError,
    FrameInfo,
    Kind,
    decode_schema,
    parse_forward,
)
from storage_log.index import LogIndex
from storage_log.segment import (
    SegmentReader,
    read_trim_marker,
    segment_path,
    sid_base,
    sid_epoch,
)
from storage_log.sidefile import SideFile, read_side


@dataclass
class WalkResult:
    """The last commit point reached and what the walk learned up to it."""

    point: Committed
    schema_bytes: bytes | None
    token: bytes | None
    sealed: bool
    entries: list[Entry] = field(default_factory=list)  # DATA records committed on the way
    bad: tuple[int, int, str] | None = None  # (segment, offset, invariant) of a bad frame
    torn: bool = False  # the bad frame is an interrupted write, not damaged data
    has_schema: dict[int, bool] = field(default_factory=dict)  # per segment, at commit points
    bad_size: int | None = None  # the size of the bad frame's segment as the walk saw it


def walk(directory: Path, segments: list[int], start: Committed, *,
         schema_bytes: bytes | None, token: bytes | None, sealed: bool,
         limits: dict[int, int] | None = None, sides: bool = True) -> WalkResult:
    """Walk the frames of ``segments`` (sorted, starting with the one holding
    ``start`` if ``start`` is not empty) from the commit point ``start``; a segment in
    ``limits`` (fenced by a newer epoch) is read only up to that byte.

    Checks every frame (see FrameCodec), and that DATA positions follow the
    previous record, that a record's seq is not below its segment's name, and that
    a segment's SCHEMA frame comes before its DATA frames and agrees with the log.
    A complete segment with a usable index side-file (``sides``) is taken from it
    instead of being read (:mod:`storage_log.sidefile`).
    """
    codec = FrameCodec()
    res = WalkResult(start, schema_bytes, token, sealed)
    p_schema_bytes, p_token, p_sealed = schema_bytes, token, sealed
    p_schema = decode_schema(schema_bytes) if schema_bytes is not None else None
    pending: list[Entry] = []
    last_seq, last_ts, records = start.last_seq, start.last_ts, start.records
    start_seg = start.segment if start.segment >= 0 else None
    # Every control frame records where the log ended when it was written: a frame
    # that says more than the segments before it hold reveals a lost segment. From
    # the start of the log, the first may say anything up to the trim point.
    floor = _start_of(directory) if start_seg is None else -1
    for seg in segments:
        path = segment_path(directory, seg)
        begin = start.end if seg == start_seg else 0
        if sides and begin == 0 and seg != segments[-1]:  # complete: its side-file?
            side = _usable_side(directory, seg, (limits or {}).get(seg), last_seq,
                                last_ts, floor, p_schema)
            if side is not None:
                res.entries.extend(pending)  # a later commit covers everything before
                pending.clear()
                res.entries.extend(side.entries)
                records += len(side.entries)
                if side.entries:
                    last_seq, last_ts = side.last_seq, side.last_ts
                if p_schema is None:
                    p_schema, p_schema_bytes = decode_schema(side.schema), side.schema
                p_token = side.token if side.token is not None else p_token
                p_sealed = p_sealed or side.sealed
                res.point = Committed(seg, side.size, last_seq, last_ts, records)
                res.token, res.sealed, res.schema_bytes = p_token, p_sealed, p_schema_bytes
                res.has_schema[seg] = True
                floor = -1
                continue
        seg_schema = seg == start_seg and segment_has_schema(path, begin)
        size = -1
        try:
            with SegmentReader(path) as reader:
                size = reader.size()
                limit = (limits or {}).get(seg)
                if limit is not None and size < limit:
                    raise FrameError(size, f"segment is {size} bytes, shorter than the "
                                     f"{limit} bytes its epoch's successor fenced")
                end = size if limit is None else limit
                for buf, base, info in reader.forward(begin, end):
                    if info.kind == Kind.DATA:
                        if not seg_schema:
                            raise FrameError(info.offset, "data frame before the segment's schema")
                        if last_seq is not None and info.first_seq <= last_seq:
                            raise FrameError(info.offset, f"seq {info.first_seq} <= {last_seq}")
                        if last_ts is not None and info.first_ts < last_ts:
                            raise FrameError(info.offset, f"ts {info.first_ts} < {last_ts}")
                        if info.first_seq < sid_base(seg):
                            raise FrameError(info.offset, f"seq {info.first_seq} < segment name")
                        last_seq, last_ts = info.last_seq, info.last_ts
                        records += 1
                        pending.append(Entry(seg, info.offset, info.size, info.first_seq,
                                             info.last_seq, info.first_ts, info.last_ts,
                                             info.rows))
                    else:
                        check_link(info, last_seq, floor)
                    if info.kind == Kind.SCHEMA:
                        raw = bytes(codec.payload(buf, info, base))
                        try:
                            sch = decode_schema(raw)
                        except (pa.ArrowException, ValueError) as exc:
                            raise FrameError(info.offset, f"bad schema frame: {exc}") from exc
                        if p_schema is not None and not sch.equals(p_schema):
                            raise FrameError(info.offset, "schema differs from the log's")
                        p_schema, p_schema_bytes, seg_schema = sch, raw, True
                    elif info.kind == Kind.TOKEN:
                        p_token = bytes(codec.payload(buf, info, base))
                    elif info.kind == Kind.SEAL:
                        p_sealed = True
                    if info.flags & FLAG_COMMIT:
                        res.point = Committed(seg, info.end, last_seq, last_ts, records)
                        res.entries.extend(pending)
                        pending.clear()
                        res.token, res.sealed, res.schema_bytes = p_token, p_sealed, p_schema_bytes
                        res.has_schema[seg] = seg_schema
        except FrameError as exc:
            res.bad = (seg, exc.offset, exc.invariant)
            res.bad_size = size if size >= 0 else None
            # judged on the bytes the walk saw (a writer may have completed the frame since)
            res.torn = (limits or {}).get(seg) is None and tail_is_torn(
                path, exc.offset, size if size >= 0 else None)
            break
        except FileNotFoundError:
            res.bad = (seg, 0, "segment vanished during the walk")
            break
    return res


def _usable_side(directory: Path, seg: int, limit: int | None, last_seq: int | None,
                 last_ts: int | None, floor: int, schema: pa.Schema | None
                 ) -> SideFile | None:
    """The side-file of ``seg`` if it describes the bytes the chain holds of it and
    continues the log where the walk stands (else the segment is walked)."""
    try:
        size = os.stat(segment_path(directory, seg)).st_size
    except FileNotFoundError:
        return None
    if limit is not None and size < limit:
        return None
    side = read_side(directory, seg, size if limit is None else limit)
    if side is None:
        return None
    said = side.link
    if not (said == (-1 if last_seq is None else last_seq)
            or (last_seq is None and said <= floor)):
        return None  # a gap before it: the walk reports it
    prev_seq, prev_ts = last_seq, last_ts
    for e in side.entries:
        if (prev_seq is not None and e.first_seq <= prev_seq) or e.first_seq < sid_base(seg) \
                or (prev_ts is not None and e.first_ts < prev_ts) or e.segment != seg:
            return None
        prev_seq, prev_ts = e.last_seq, e.last_ts
    if schema is not None:
        try:
            if not decode_schema(side.schema).equals(schema):
                return None
        except (pa.ArrowException, ValueError):
            return None
    return side


def _start_of(directory: Path) -> int:
    """The last seq before the log's first record: the trim point, or -1."""
    trimmed = read_trim_marker(directory)
    return -1 if trimmed is None else trimmed


def check_link(info: FrameInfo, last_seq: int | None, floor: int) -> None:
    """A control frame must say the log ended where the records before it end (with
    none before it: at or before ``floor``, the trim point or -1)."""
    said = info.last_seq
    if said == (-1 if last_seq is None else last_seq) or (last_seq is None and said <= floor):
        return
    have = "the start of the log" if last_seq is None else f"seq {last_seq}"
    raise FrameError(info.offset, f"records missing: this frame was written when the log "
                     f"ended at seq {said}, but the records before it end at {have} "
                     "(a segment deleted or lost?)")


def tail_is_torn(path: Path, offset: int, size: int | None = None) -> bool:
    """Whether the bytes of a segment from ``offset`` on, where a frame failed to
    validate, are an interrupted write (a torn tail) rather than damaged data.

    A crash mid-write leaves an incomplete last frame, or zeros or garbage up to the
    end of the file, never a complete frame after it. So it is damage when the frame
    at ``offset`` is complete (its header and footer magics and lengths agree, read
    from either end of the file) or when any valid frame follows it. Torn is decided
    from the bytes alone: it does not depend on an index that another host may have
    and this one lacks (issue 17: a flipped bit in the last committed record was cut
    as a torn tail when the index was missing).
    Only the first ``size`` bytes count when given (what a reader's walk saw: a writer
    may have completed the frame since).
    """
    try:
        with SegmentReader(path) as reader:
            if size is None:
                size = reader.size()
            rest = bytes(reader.read(offset, size - offset))
    except OSError:
        return False
    n = len(rest)
    if n >= HEADER_SIZE:
        head = HEADER.unpack_from(rest, 0)
        end = HEADER_SIZE + head[5] + FOOTER_SIZE
        if head[0] == HEADER_MAGIC and end <= n and rest[end - 4:end] == FOOTER_MAGIC:
            return False  # a whole frame was written there: its content is damaged
    if n >= FOOTER_SIZE and rest[n - 4:] == FOOTER_MAGIC:
        flen = FOOTER.unpack_from(rest, n - FOOTER_SIZE)[5]
        if n - flen - OVERHEAD == 0:
            return False  # the file ends with the whole frame that starts at offset
    view = memoryview(rest)
    pos = rest.find(HEADER_MAGIC, 1)
    while pos != -1:
        try:
            if parse_forward(view, pos) is not None:
                return False  # a valid frame after the bad one: written data is damaged
        except FrameError:
            pass
        pos = rest.find(HEADER_MAGIC, pos + 1)
    return True


def segment_has_schema(path: Path, end: int) -> bool:
    """Whether a SCHEMA frame occurs in the first ``end`` bytes of a segment."""
    if end <= 0:
        return False
    try:
        with SegmentReader(path) as reader:
            for _, _, info in reader.forward(0, end):
                if info.kind in (Kind.SCHEMA, Kind.DATA):
                    return info.kind == Kind.SCHEMA
    except (FrameError, OSError):
        return False
    return False


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
