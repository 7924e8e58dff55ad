"""The read side: committed records forward, backward, and a full verification.

:class:`RecordReader` turns an index snapshot (the committed end) and a start
position into decoded record batches, walking the segment files in large reads.
:class:`LogReads` is the read API of :class:`storage_log.log.StreamLog` on top of it.
With ``tokens=True`` the forward reads also yield the commit tokens, in commit order
between the records (:mod:`storage_log.follow`); without it they are as they always
were (the same code path: the records' hot path pays nothing for tokens).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar, overload

import numpy as np
import pyarrow as pa

from storage_log.entry import Committed, Entry, Snapshot
from storage_log.epoch import Chain, read_chain
from storage_log.errors import CorruptLogError, LogClosedError, LogTrimmedError, LogUsageError
from storage_log.follow import CommitToken, Follower, tail_items
from storage_log.framing import FrameError, FrameInfo, Kind, decode_schema
from storage_log.payload import PayloadCodec
from storage_log.reconcile import corrupt
from storage_log.segment import SegmentReader, read_trim_marker, segment_path
from storage_log.walk import check_link

if TYPE_CHECKING:
    from storage_log.index import LogIndex
    from storage_log.scan import ScanIndex

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


class LogReads:
    """The read API of a log: committed records, found through the log's index (its
    LMDB index for a writer, a :class:`~storage_log.scan.ScanIndex` for a reader) and
    read by a :class:`RecordReader`. :class:`storage_log.log.StreamLog` derives from it
    and sets the three attributes."""

    path: Path
    _index: LogIndex | ScanIndex | None
    _reader: RecordReader

    def _snapshot(self) -> Snapshot:
        if self._index is None:
            raise LogClosedError(f"log {self.path} is closed")
        return self._index.snapshot()

    def _locate(self, **kw: int | None) -> tuple[Snapshot, Entry | None]:
        if self._index is None:
            raise LogClosedError(f"log {self.path} is closed")
        return self._index.locate(**kw)

    @overload
    def read_forward(self, *, after_seq: int | None = ..., from_ts: int | None = ...,
                     tokens: Literal[False] = ...) -> Iterator[pa.RecordBatch]: ...

    @overload
    def read_forward(self, *, after_seq: int | None = ..., from_ts: int | None = ...,
                     tokens: bool = ...) -> Iterator[pa.RecordBatch | CommitToken]: ...

    def read_forward(self, *, after_seq: int | None = None, from_ts: int | None = None,
                     tokens: bool = False) -> Iterator[pa.RecordBatch | CommitToken]:
        """Committed records with ``seq > after_seq`` (or ``ts >= from_ts``), oldest first.

        The start is one index lookup; the first batch is trimmed to the exact
        position. Raises LogTrimmedError if ``after_seq`` lies in trimmed segments
        (``from_ts`` before the first kept record starts at that record).

        ``tokens=True`` (with ``after_seq`` or nothing, not ``from_ts``) also yields,
        between the records, a :class:`~storage_log.follow.CommitToken` for each commit
        that carried a token, in commit order: those with ``seq >= after_seq`` (a token
        at ``after_seq`` sits after the record holding it), all of them without
        ``after_seq`` (also those committed before the first record, at seq -1).
        """
        if after_seq is not None and from_ts is not None:
            raise LogUsageError("read_forward takes after_seq or from_ts, not both")
        if tokens:
            if from_ts is not None:
                raise LogUsageError("read_forward(tokens=True) takes after_seq, not from_ts")
            return Follower(self, after_seq=after_seq).look()
        snap, entry = self._locate(after_seq=after_seq, from_ts=from_ts)
        return self._reader.forward(snap, entry, after_seq=after_seq, from_ts=from_ts)

    def read_backward(self, *, before_seq: int | None = None, chunk_bytes: int = 256 << 10
                      ) -> Iterator[pa.RecordBatch]:
        """Committed records with ``seq < before_seq``, newest record first.

        Rows inside a batch stay in forward order. The segments are read from the end
        in ``chunk_bytes`` reads and walked by the frame footers; the index is used
        only to find ``before_seq``.
        """
        if before_seq is not None:
            snap, entry = self._locate(at_seq=before_seq)
        else:
            snap, entry = self._snapshot(), None
        return self._reader.backward(snap, entry, before_seq=before_seq,
                                     chunk_bytes=chunk_bytes)

    def verify(self) -> int:
        """Check every committed frame of every segment; return the number of records.

        Validates each frame (magics, lengths, checksum), the order of positions
        across records, and decodes every record, checking its rows against its
        footer. Raises CorruptLogError naming the segment, byte and invariant.
        """
        return self._reader.verify(self._snapshot())

    @overload
    def tail(self, *, after_seq: int | None, timeout: float,
             tokens: Literal[False] = ...) -> Iterator[pa.RecordBatch]: ...

    @overload
    def tail(self, *, after_seq: int | None, timeout: float,
             tokens: bool = ...) -> Iterator[pa.RecordBatch | CommitToken]: ...

    def tail(self, *, after_seq: int | None, timeout: float, tokens: bool = False
             ) -> Iterator[pa.RecordBatch | CommitToken]:
        """Committed records after ``after_seq``, waiting for new commits.

        Stops when the log is sealed and everything is read, or when no new record
        was committed for ``timeout`` seconds (call again to keep following). New
        commits are found by polling the index (1 ms, backing off to 50 ms).

        ``tokens=True``: the commit tokens too, as :meth:`read_forward` yields them (a
        token-only commit counts as new); each look reads on from where the last one
        ended (:class:`~storage_log.follow.Follower`), so no token comes twice in one
        call (a trim's re-commit of the latest token aside).
        """
        if tokens:
            return tail_items(self, after_seq, timeout)
        return self._tail(after_seq, timeout)

    def _tail(self, after_seq: int | None, timeout: float) -> Iterator[pa.RecordBatch]:
        pos = after_seq
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            snap, entry = self._locate(after_seq=pos)
            got = False
            for batch in self._reader.forward(snap, entry, after_seq=pos):
                got = True
                pos = batch.column("seq")[-1].as_py()
                yield batch
            if snap.sealed:
                return
            now = time.monotonic()
            if got:
                deadline, delay = now + timeout, 0.001
                continue
            if now >= deadline:
                return
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.05)
