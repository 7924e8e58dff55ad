"""The read side: committed records forward, backward, and a full verification.

:class:`RecordReader` turns an index snapshot (the committed end) and a start
position into decoded record batches, walking the segment files in large reads.
:class:`storage_log.reads.LogReads` is the read API of
:class:`storage_log.log.StreamLog` on top of it; the reads with the commit tokens
(:mod:`storage_log.follow`) use its decoding (:meth:`RecordReader._decoded`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

from storage_log.entry import Committed, Entry, Snapshot
from storage_log.epoch import Chain, read_chain
from storage_log.errors import CorruptLogError, LogTrimmedError
from storage_log.framing import FrameError, FrameInfo, Kind, decode_schema
from storage_log.payload import PayloadCodec
from storage_log.reconcile import corrupt
from storage_log.segment import SegmentReader, read_trim_marker, segment_path
from storage_log.walk import check_link

READ_AHEAD = 4  # records decoded ahead of the consumer on the codec's worker threads
#: backward reads decode records smaller than this (whole frame, compressed) on the
#: calling thread: for small records, handing the work to a worker costs about as much
#: CPU as the decoding itself (futures, locks, GIL hand-offs: ~25 us a record), and
#: the backward scan of recovery is measured per CPU second
INLINE_BYTES = 64 << 10
_Frame = tuple[memoryview, int, FrameInfo, Path]
_Item = TypeVar("_Item")


class RecordReader:
    """Reads committed records of the log in ``directory``.

    Every read is bounded by the snapshot's committed end, so it never returns a
    record that is not committed, and checks every frame it touches (a bad one raises
    CorruptLogError naming the segment, byte and invariant; the records before it
    are still returned first). With worker threads in the codec, up to
    :data:`READ_AHEAD` records are decoded ahead of the consumer.

    Thread safety: one thread per instance.
    """

    def __init__(self, directory: Path, codec: PayloadCodec) -> None:
        self.directory = directory
        self.codec = codec
        self._schemas: dict[bytes, pa.Schema] = {}

    def schema(self, raw: bytes | None) -> pa.Schema | None:
        if raw is None:
            return None
        schema = self._schemas.get(raw)
        if schema is None:
            schema = self._schemas[raw] = decode_schema(raw)
        return schema

    # -- forward ------------------------------------------------------------------

    def forward(self, snap: Snapshot, entry: Entry | None, *, after_seq: int | None = None,
                from_ts: int | None = None) -> Iterator[pa.RecordBatch]:
        """Records from ``entry`` (the first ending after the position) to the end."""
        c = snap.committed
        schema = self.schema(snap.schema)
        if after_seq is not None and snap.trimmed is not None and after_seq < snap.trimmed:
            raise LogTrimmedError(
                f"log {self.directory}: records up to seq {snap.trimmed} were trimmed; "
                f"cannot read after seq {after_seq}")
        if entry is None or c.last_seq is None or schema is None or entry.last_seq > c.last_seq:
            return
        chain = read_chain(self.directory)
        segs = [s for s in chain.segments if entry.segment <= s <= c.segment]
        if not segs or segs[0] != entry.segment:
            raise self._gone(segment_path(self.directory, entry.segment), entry.last_seq,
                             snap.trimmed)
        first = True
        for decoded in self._decode(self._frames_forward(segs, entry, c, chain), schema):
            batch = decoded
            if first:
                first = False
                batch = _trim_front(decoded, after_seq, from_ts)
                if batch.num_rows == 0:
                    continue
            yield batch

    def _gone(self, path: Path, last_seq: int | None, trimmed: int | None) -> Exception:
        """A segment the index lists is gone: trimmed (LogTrimmedError) when the trim
        marker covers its records, else lost (CorruptLogError)."""
        if trimmed is not None and last_seq is not None and last_seq <= trimmed:
            return LogTrimmedError(f"log {self.directory}: segment {path.name} was trimmed")
        return CorruptLogError(f"corrupt log segment {path} at byte 0: the segment is "
                               "missing but not trimmed (records lost)")

    def _frames_forward(self, segs: list[int], entry: Entry, c: Committed, chain: Chain
                        ) -> Iterator[_Frame]:
        """The DATA frames from ``entry`` to the committed end ``c``; each control
        frame on the way must link to the records before it (no segment missing)."""
        prev: int | None = None
        for seg in segs:
            path = segment_path(self.directory, seg)
            try:
                reader = SegmentReader(path)
            except FileNotFoundError as exc:
                last = entry.last_seq if seg == entry.segment else c.last_seq
                raise self._gone(path, last, read_trim_marker(self.directory)) from exc
            with reader:
                end = c.end if seg == c.segment else chain.end(seg, reader.size())
                start = entry.offset if seg == entry.segment else 0
                try:
                    for buf, base, info in reader.forward(start, end):
                        if info.kind == Kind.DATA:
                            prev = info.last_seq
                            yield buf, base, info, path
                        elif prev is not None:
                            check_link(info, prev, -1)
                except FrameError as exc:
                    raise corrupt(path, exc.offset, exc.invariant) from exc

    # -- backward -----------------------------------------------------------------

    def backward(self, snap: Snapshot, entry: Entry | None, *, before_seq: int | None,
                 chunk_bytes: int) -> Iterator[pa.RecordBatch]:
        """Records before ``before_seq`` (``entry``: the first ending at or after it),
        newest first, walking the frame footers from the end in ``chunk_bytes`` reads."""
        c = snap.committed
        schema = self.schema(snap.schema)
        if c.last_seq is None or schema is None:
            return
        if entry is not None and before_seq is not None:
            start_seg = entry.segment
            start = entry.offset + (entry.size if entry.first_seq < before_seq else 0)
        else:
            start_seg, start = c.segment, c.end
        chain = read_chain(self.directory)
        segs = [s for s in chain.segments if s <= start_seg]
        frames = self._frames_backward(segs, start_seg, start, chunk_bytes, chain)
        for decoded in self._decode(frames, schema, inline_below=INLINE_BYTES):
            batch = decoded
            if before_seq is not None:
                seq = decoded.column("seq").to_numpy()
                if int(seq[-1]) >= before_seq:
                    batch = decoded.slice(0, int(np.searchsorted(seq, before_seq, "left")))
                    if batch.num_rows == 0:
                        continue
            yield batch

    def _frames_backward(self, segs: list[int], start_seg: int, start: int,
                         chunk_bytes: int, chain: Chain) -> Iterator[_Frame]:
        """The DATA frames ending at or before ``start`` in ``start_seg``, newest first.

        A control frame says where the log ended when it was written: the next DATA
        frame met going backwards must end exactly there (no segment missing)."""
        expect: int | None = None
        for seg in reversed(segs):
            path = segment_path(self.directory, seg)
            try:
                reader = SegmentReader(path)
            except FileNotFoundError:
                return  # trimmed under us: the log now starts later
            with reader:
                end = start if seg == start_seg else chain.end(seg, reader.size())
                try:
                    for buf, base, info in reader.backward(end, 0, chunk_bytes):
                        if expect is not None and info.last_seq != expect:
                            raise FrameError(info.offset, (
                                f"records missing: a frame after this record says the "
                                f"log ended at seq {expect}, this record ends at "
                                f"{info.last_seq} (a segment deleted or lost?)"))
                        if info.kind != Kind.DATA:
                            expect = info.last_seq
                            continue
                        expect = None
                        yield buf, base, info, path
                except FrameError as exc:
                    raise corrupt(path, exc.offset, exc.invariant) from exc

    # -- decoding -----------------------------------------------------------------

    def _decode(self, frames: Iterator[_Frame], schema: pa.Schema, *, inline_below: int = 0
                ) -> Iterator[pa.RecordBatch]:
        """Decode DATA frames in order, up to READ_AHEAD at a time on the codec's pool.

        Frames smaller than ``inline_below`` bytes are decoded on the calling thread
        (after the records already handed to the pool). Frames already read are still
        returned before an error met further on.
        """
        return self._decoded(frames, schema, self.codec.decode_data, inline_below)

    def _decoded(self, frames: Iterator[_Frame], schema: pa.Schema,
                 decode: Callable[[memoryview, FrameInfo, pa.Schema, int], _Item],
                 inline_below: int) -> Iterator[_Item]:
        """:meth:`_decode` with ``decode`` turning each frame into what is yielded."""
        pool = self.codec.pool  # None: every frame is decoded on the calling thread

        def inline(buf: memoryview, base: int, info: FrameInfo, path: Path) -> _Item:
            try:
                return decode(buf, info, schema, base)
            except FrameError as exc:
                raise corrupt(path, exc.offset, exc.invariant) from exc

        window: deque[tuple[Future[_Item], Path]] = deque()

        def result(item: tuple[Future[_Item], Path]) -> _Item:
            fut, path = item
            try:
                return fut.result()
            except FrameError as exc:
                raise corrupt(path, exc.offset, exc.invariant) from exc

        try:
            for buf, base, info, path in frames:
                if pool is None or info.size < inline_below:
                    while window:
                        yield result(window.popleft())
                    yield inline(buf, base, info, path)
                    continue
                window.append((pool.submit(decode, buf, info, schema, base), path))
                if len(window) > READ_AHEAD:
                    yield result(window.popleft())
        except GeneratorExit:
            for fut, _ in window:
                fut.cancel()
            raise
        except BaseException:
            while window:
                yield result(window.popleft())
            raise
        while window:
            yield result(window.popleft())

    # -- verification ---------------------------------------------------------------

    def verify(self, snap: Snapshot) -> int:
        """Check every frame of every segment of the chain; return the number of records.

        Not bounded by what a reader's walk found (it stops at the first bad byte):
        every segment of the chain is read to its end (a fenced one to its fence).
        Only a torn tail at the very end of the last segment passes, and only after
        everything the snapshot calls committed. Checks each frame, that every
        control frame links to the records before it (a lost segment is a gap), the
        order of positions, and decodes every record against its footer.
        """
        from storage_log.walk import tail_is_torn  # noqa: PLC0415 - reconcile imports us

        c = snap.committed
        schema = self.schema(snap.schema)
        n = 0
        last_seq: int | None = None
        last_ts: int | None = None
        chain = read_chain(self.directory)
        floor = -1 if snap.trimmed is None else snap.trimmed
        reached = (-1, 0)
        for k, seg in enumerate(chain.segments):
            path = segment_path(self.directory, seg)
            with SegmentReader(path) as reader:
                end = chain.end(seg, reader.size())
                if seg in chain.limits and end < chain.limits[seg]:
                    raise corrupt(path, end, f"segment is {end} bytes, shorter than the "
                                  f"{chain.limits[seg]} bytes its epoch's successor fenced")
                try:
                    for buf, base, info in reader.forward(0, end):
                        reached = (seg, info.end)
                        if info.kind != Kind.DATA:
                            check_link(info, last_seq, floor)
                            if info.kind == Kind.SCHEMA and schema is None:
                                schema = decode_schema(bytes(self.codec.payload(buf, info,
                                                                                base)))
                            continue
                        if last_seq is not None and info.first_seq <= last_seq:
                            raise FrameError(info.offset, f"seq {info.first_seq} <= {last_seq}")
                        if last_ts is not None and info.first_ts < last_ts:
                            raise FrameError(info.offset, f"ts {info.first_ts} < {last_ts}")
                        if schema is None:
                            raise FrameError(info.offset, "data frame but no schema")
                        batch = self.codec.decode_data(buf, info, schema, base)
                        seq = batch.column("seq").to_numpy()
                        ts = batch.column("ts").to_numpy()
                        if (int(seq[0]), int(seq[-1]), int(ts[0]), int(ts[-1])) != (
                                info.first_seq, info.last_seq, info.first_ts, info.last_ts):
                            raise FrameError(info.offset, "rows disagree with the footer")
                        last_seq, last_ts = info.last_seq, info.last_ts
                        n += 1
                except FrameError as exc:
                    last = k == len(chain.segments) - 1
                    if not (last and seg not in chain.limits and tail_is_torn(path, exc.offset)
                            and (seg, exc.offset) >= c.position):
                        raise corrupt(path, exc.offset, exc.invariant) from exc
        if c.segment >= 0 and reached < c.position:
            path = segment_path(self.directory, c.segment)
            raise corrupt(path, c.end, "the log ends before its committed end (records "
                          f"up to seq {c.last_seq} were committed; a segment lost?)")
        return n


def _trim_front(batch: pa.RecordBatch, after_seq: int | None, from_ts: int | None
                ) -> pa.RecordBatch:
    if after_seq is not None:
        seq = batch.column("seq").to_numpy()
        return batch.slice(int(np.searchsorted(seq, after_seq, "right")))
    if from_ts is not None:
        ts = batch.column("ts").to_numpy()
        return batch.slice(int(np.searchsorted(ts, from_ts, "left")))
    return batch
