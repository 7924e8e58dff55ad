"""Walking segments to find commits: shared by reconcile and by every reader's index.

:func:`walk` validates frames forward from a commit point and returns every later
commit point with the DATA records it commits, stopping at the first bad or
incomplete frame; :func:`tail_is_torn` tells an interrupted write from damage.
:mod:`storage_log.scan` re-exports the public names here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from storage_log.entry import Committed, Entry
from storage_log.framing import (
    FLAG_COMMIT,
    FOOTER,
    FOOTER_MAGIC,
    FOOTER_SIZE,
    HEADER,
    HEADER_MAGIC,
    HEADER_SIZE,
    OVERHEAD,
    FrameError,
    FrameInfo,
    Kind,
    decode_schema,
    parse_forward,
)
from storage_log.payload import PayloadCodec
from storage_log.segment import (
    SegmentReader,
    read_trim_marker,
    segment_path,
    sid_base,
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

    Checks every frame (see :mod:`storage_log.framing`), and that DATA positions
    follow the previous record, that a record's seq is not below its segment's name,
    and that a segment's SCHEMA frame comes before its DATA frames and agrees with
    the log. A complete segment with a usable index side-file (``sides``) is taken
    from it instead of being read (:mod:`storage_log.sidefile`).
    """
    w = _Walker(directory, start, schema_bytes, token, sealed, limits or {})
    start_seg = start.segment if start.segment >= 0 else None
    for seg in segments:
        begin = start.end if seg == start_seg else 0
        if sides and begin == 0 and seg != segments[-1] and w.take_side(seg):
            continue  # complete, and its side-file says what a walk would find
        if not w.walk_segment(seg, begin, seg == start_seg and
                              segment_has_schema(segment_path(directory, seg), begin)):
            break
    return w.res


class _Walker:
    """The state of one :func:`walk`: where the records end, what is pending a
    commit, and the result so far (``res``, as of the last commit point)."""

    def __init__(self, directory: Path, start: Committed, schema_bytes: bytes | None,
                 token: bytes | None, sealed: bool, limits: dict[int, int]) -> None:
        self.directory = directory
        self.limits = limits
        self.codec = PayloadCodec()
        self.res = WalkResult(start, schema_bytes, token, sealed)
        self.schema_bytes, self.token, self.sealed = schema_bytes, token, sealed
        self.schema = decode_schema(schema_bytes) if schema_bytes is not None else None
        self.pending: list[Entry] = []  # DATA records not committed yet
        self.last_seq, self.last_ts, self.records = start.last_seq, start.last_ts, start.records
        # Every control frame records where the log ended when it was written: a frame
        # that says more than the segments before it hold reveals a lost segment. From
        # the start of the log, the first may say anything up to the trim point.
        self.floor = _start_of(directory) if start.segment < 0 else -1

    def take_side(self, seg: int) -> bool:
        """Segment ``seg`` taken from its side-file, if one is usable."""
        side = _usable_side(self.directory, seg, self.limits.get(seg), self.last_seq,
                            self.last_ts, self.floor, self.schema)
        if side is None:
            return False
        res = self.res
        res.entries.extend(self.pending)  # a later commit covers everything before
        self.pending.clear()
        res.entries.extend(side.entries)
        self.records += len(side.entries)
        if side.entries:
            self.last_seq, self.last_ts = side.last_seq, side.last_ts
        if self.schema is None:
            self.schema, self.schema_bytes = decode_schema(side.schema), side.schema
        self.token = side.token if side.token is not None else self.token
        self.sealed = self.sealed or side.sealed
        res.point = Committed(seg, side.size, self.last_seq, self.last_ts, self.records)
        res.token, res.sealed, res.schema_bytes = self.token, self.sealed, self.schema_bytes
        res.has_schema[seg] = True
        self.floor = -1
        return True

    def walk_segment(self, seg: int, begin: int, has_schema: bool) -> bool:
        """The frames of segment ``seg`` from byte ``begin``; False if a bad frame (or
        a vanished file) stopped the walk (``res.bad`` says where)."""
        path = segment_path(self.directory, seg)
        size = -1
        limit = self.limits.get(seg)
        try:
            with SegmentReader(path) as reader:
                size = reader.size()
                if limit is not None and size < limit:
                    raise FrameError(size, f"segment is {size} bytes, shorter than the "
                                     f"{limit} bytes its epoch's successor fenced")
                for buf, base, info in reader.forward(begin, size if limit is None else limit):
                    has_schema = self.frame(seg, buf, base, info, has_schema)
        except FrameError as exc:
            res = self.res
            res.bad = (seg, exc.offset, exc.invariant)
            res.bad_size = size if size >= 0 else None
            # judged on the bytes the walk saw (a writer may have completed the frame since)
            res.torn = limit is None and tail_is_torn(path, exc.offset,
                                                      size if size >= 0 else None)
            return False
        except FileNotFoundError:
            self.res.bad = (seg, 0, "segment vanished during the walk")
            return False
        return True

    def frame(self, seg: int, buf: memoryview, base: int, info: FrameInfo,
              has_schema: bool) -> bool:
        """One valid frame of segment ``seg``; whether the segment has its schema now."""
        if info.kind == Kind.DATA:
            self.data(seg, info, has_schema)
        else:
            check_link(info, self.last_seq, self.floor)
        if info.kind == Kind.SCHEMA:
            self.schema_frame(bytes(self.codec.payload(buf, info, base)), info.offset)
            has_schema = True
        elif info.kind == Kind.TOKEN:
            self.token = bytes(self.codec.payload(buf, info, base))
        elif info.kind == Kind.SEAL:
            self.sealed = True
        if info.flags & FLAG_COMMIT:
            res = self.res
            res.point = Committed(seg, info.end, self.last_seq, self.last_ts, self.records)
            res.entries.extend(self.pending)
            self.pending.clear()
            res.token, res.sealed, res.schema_bytes = self.token, self.sealed, self.schema_bytes
            res.has_schema[seg] = has_schema
        return has_schema

    def data(self, seg: int, info: FrameInfo, has_schema: bool) -> None:
        """A DATA frame: in order after the records before it, then pending."""
        if not has_schema:
            raise FrameError(info.offset, "data frame before the segment's schema")
        if self.last_seq is not None and info.first_seq <= self.last_seq:
            raise FrameError(info.offset, f"seq {info.first_seq} <= {self.last_seq}")
        if self.last_ts is not None and info.first_ts < self.last_ts:
            raise FrameError(info.offset, f"ts {info.first_ts} < {self.last_ts}")
        if info.first_seq < sid_base(seg):
            raise FrameError(info.offset, f"seq {info.first_seq} < segment name")
        self.last_seq, self.last_ts = info.last_seq, info.last_ts
        self.records += 1
        self.pending.append(Entry(seg, info.offset, info.size, info.first_seq, info.last_seq,
                                  info.first_ts, info.last_ts, info.rows))

    def schema_frame(self, raw: bytes, offset: int) -> None:
        """A SCHEMA frame: a valid schema, the log's."""
        try:
            sch = decode_schema(raw)
        except (pa.ArrowException, ValueError) as exc:
            raise FrameError(offset, f"bad schema frame: {exc}") from exc
        if self.schema is not None and not sch.equals(self.schema):
            raise FrameError(offset, "schema differs from the log's")
        self.schema, self.schema_bytes = sch, raw


def _usable_side(directory: Path, seg: int, limit: int | None, last_seq: int | None,
                 last_ts: int | None, floor: int, schema: pa.Schema | None
                 ) -> SideFile | None:
    """The side-file of ``seg`` if it describes the bytes the chain holds of it and
    continues the log where the walk stands (else the segment is walked)."""
    try:
        size = os.stat(segment_path(directory, seg)).st_size
    except FileNotFoundError:
        return None
    side = None if limit is not None and size < limit else \
        read_side(directory, seg, size if limit is None else limit)
    if side is None or not _side_continues(side, seg, last_seq, last_ts, floor):
        return None  # a gap or a disorder before it: the walk reports it
    return side if schema is None or _same_schema(side.schema, schema) else None


def _side_continues(side: SideFile, seg: int, last_seq: int | None, last_ts: int | None,
                    floor: int) -> bool:
    """Whether ``side``'s records follow the walk's last position in order."""
    said = side.link
    if not (said == (-1 if last_seq is None else last_seq)
            or (last_seq is None and said <= floor)):
        return False
    prev_seq, prev_ts = last_seq, last_ts
    for e in side.entries:
        if (prev_seq is not None and e.first_seq <= prev_seq) or e.first_seq < sid_base(seg) \
                or (prev_ts is not None and e.first_ts < prev_ts) or e.segment != seg:
            return False
        prev_seq, prev_ts = e.last_seq, e.last_ts
    return True


def _same_schema(raw: bytes, schema: pa.Schema) -> bool:
    try:
        return bool(decode_schema(raw).equals(schema))
    except (pa.ArrowException, ValueError):
        return False


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
        with SegmentReader(path) as reader:  # the first frame only: 4 KiB, not 4 MiB
            for _, _, info in reader.forward(0, end, chunk=4096):
                if info.kind in (Kind.SCHEMA, Kind.DATA):
                    return info.kind == Kind.SCHEMA
    except (FrameError, OSError):
        return False
    return False
