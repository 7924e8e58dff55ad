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
