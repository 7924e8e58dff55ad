"""Walking segments to find commits: shared by reconcile and by index-less readers.

:func:`walk` validates frames forward from a commit point and returns every later
commit point with the DATA records it commits, stopping at the first bad or
incomplete frame. :class:`ScanIndex` is the read-only stand-in for
:class:`storage_log.index.LogIndex` that a reader uses when a log has no usable
LMDB index: it walks the segments into memory and keeps walking as they grow.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from storage_log.frame import FLAG_COMMIT, FrameCodec, FrameError, Kind, decode_schema
from storage_log.index import EMPTY, Committed, Entry, Snapshot
from storage_log.segment import (
    SegmentReader,
    list_segments,
    read_trim_marker,
    segment_path,
)


@dataclass
class WalkResult:
    """The last commit point reached and what the walk learned up to it."""

    point: Committed
    schema_bytes: bytes | None
    token: bytes | None
    sealed: bool
    entries: list[Entry] = field(default_factory=list)  # DATA records committed on the way
    bad: tuple[int, int, str] | None = None  # (segment, offset, invariant) of a bad frame
    has_schema: dict[int, bool] = field(default_factory=dict)  # per segment, at commit points


def walk(directory: Path, segments: list[int], start: Committed, *,
         schema_bytes: bytes | None, token: bytes | None, sealed: bool) -> WalkResult:
    """Walk the frames of ``segments`` (sorted, starting with the one holding
    ``start`` if ``start`` is not empty) from the commit point ``start``.

    Checks every frame (see FrameCodec), and that DATA positions follow the
    previous record, that a record's seq is not below its segment's name, and that
    a segment's SCHEMA frame comes before its DATA frames and agrees with the log.
    """
    codec = FrameCodec()
    res = WalkResult(start, schema_bytes, token, sealed)
    p_schema_bytes, p_token, p_sealed = schema_bytes, token, sealed
    p_schema = decode_schema(schema_bytes) if schema_bytes is not None else None
    pending: list[Entry] = []
    last_seq, last_ts, records = start.last_seq, start.last_ts, start.records
    start_seg = start.segment if start.segment >= 0 else None
    for seg in segments:
        path = segment_path(directory, seg)
        begin = start.end if seg == start_seg else 0
        seg_schema = seg == start_seg and segment_has_schema(path, begin)
        try:
            with SegmentReader(path) as reader:
                for buf, base, info in reader.forward(begin, reader.size()):
                    if info.kind == Kind.DATA:
                        if not seg_schema:
                            raise FrameError(info.offset, "data frame before the segment's schema")
                        if last_seq is not None and info.first_seq <= last_seq:
                            raise FrameError(info.offset, f"seq {info.first_seq} <= {last_seq}")
                        if last_ts is not None and info.first_ts < last_ts:
                            raise FrameError(info.offset, f"ts {info.first_ts} < {last_ts}")
                        if info.first_seq < seg:
                            raise FrameError(info.offset, f"seq {info.first_seq} < segment name")
                        last_seq, last_ts = info.last_seq, info.last_ts
                        records += 1
                        pending.append(Entry(seg, info.offset, info.size, info.first_seq,
                                             info.last_seq, info.first_ts, info.last_ts,
                                             info.rows))
                    elif info.kind == Kind.SCHEMA:
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
            break
        except FileNotFoundError:
            res.bad = (seg, 0, "segment vanished during the walk")
            break
    return res


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
    """A read-only, in-memory index built by walking the segments (no LMDB).

    Used by readers of a log whose ``index/`` is missing or unusable: it never
    writes anything. Every :meth:`snapshot` continues the walk from the last commit
    point found, so a tailing reader sees new commits. The walk stops at the first
    invalid frame, so without its index a reader sees the log up to the first bad
    byte (a writable open tells a torn tail from corruption and repairs the index).
    Trimmed segments restart the walk from the first remaining segment.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reset()
        self.snapshot()

    def _reset(self) -> None:
        self._first_segment: int | None = None
        self._res = WalkResult(EMPTY, None, None, False)
        self._entries: list[Entry] = []
        self._seq_keys: list[int] = []
        self._ts_keys: list[tuple[int, int]] = []

    def close(self) -> None:
        self._entries = []

    def _refresh(self) -> None:
        segments = list_segments(self.directory)
        if self._first_segment is not None and (not segments
                                                or segments[0] != self._first_segment):
            self._reset()
        if not segments:
            return
        self._first_segment = segments[0]
        point = self._res.point
        if point.segment >= 0:
            segments = [s for s in segments if s >= point.segment]
        res = walk(self.directory, segments, point, schema_bytes=self._res.schema_bytes,
                   token=self._res.token, sealed=self._res.sealed)
        for e in res.entries:
            self._entries.append(e)
            self._seq_keys.append(e.last_seq)
            self._ts_keys.append((e.last_ts, e.last_seq))
        res.entries = []
        self._res = res

    def snapshot(self) -> Snapshot:
        self._refresh()
        r = self._res
        return Snapshot(committed=r.point,
                        first_seq=self._entries[0].first_seq if self._entries else None,
                        schema=r.schema_bytes, token=r.token, sealed=r.sealed,
                        trimmed=read_trim_marker(self.directory))

    def locate(self, *, after_seq: int | None = None, from_ts: int | None = None,
               at_seq: int | None = None) -> tuple[Snapshot, Entry | None]:
        snap = self.snapshot()
        if after_seq is not None:
            i = bisect.bisect_right(self._seq_keys, after_seq)
        elif at_seq is not None:
            i = bisect.bisect_left(self._seq_keys, at_seq)
        elif from_ts is not None:
            i = bisect.bisect_left(self._ts_keys, (from_ts, -(1 << 63)))
        else:
            i = 0
        return snap, self._entries[i] if i < len(self._entries) else None
