"""Following a log with its commit tokens: records and tokens in commit order, look by look.

A commit may carry a token (``StreamLog.commit(token)``), with or without new
records: the token is a TOKEN frame after the commit's records, carrying the log's
last ``seq``/``ts`` at that commit. ``read_forward(tokens=True)`` and
``tail(tokens=True)`` (:class:`storage_log.reads.LogReads`) yield, between the
record batches, a :class:`CommitToken` for each such frame, in the order they were
committed. A :class:`Follower` is what both use: a reader that keeps the byte
position where its last look ended, so looking again reads only what was committed
since (a log that gets token-only commits while no record comes is not read again
from its last record at every look).

Which tokens a read ``after_seq = a`` yields: those whose ``seq >= a`` (a token
whose seq equals ``a`` sits after the record holding ``a``: it is delivered), and
all of them without ``after_seq``. Records are those with ``seq > a`` as without
tokens.

A token may be delivered again: a trim re-commits the latest token into a kept
segment, and a new read (or a look abandoned before its end) starts again from
``after_seq``; consumers treat a token they have seen as a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa

from storage_log.entry import Committed, Entry, Snapshot
from storage_log.epoch import Chain, read_chain
from storage_log.errors import LogTrimmedError
from storage_log.framing import FrameError, FrameInfo, Kind
from storage_log.reconcile import corrupt
from storage_log.segment import SegmentReader, read_trim_marker, segment_path
from storage_log.walk import check_link

if TYPE_CHECKING:
    from storage_log.reader import RecordReader

T = TypeVar("T")

__all__ = ["CommitToken", "Follower", "poll", "tail_items"]

#: frames smaller than this (every TOKEN frame) are decoded on the calling thread: a
#: token is a copy of its payload, not worth a hand-off to the codec's pool
INLINE_BYTES = 1 << 10
_NO_SCHEMA = pa.schema([])
_Frame = tuple[memoryview, int, FrameInfo, Path]
#: the index lookup of a log: a snapshot and the entry of a position (``LogReads._locate``)
Locate = Callable[..., tuple[Snapshot, Entry | None]]


class CommitToken(NamedTuple):
    """A commit's token, where it sits in the log.

    ``seq``/``ts``: the log's last committed record's at that commit (``-1``/``-1``
    when the log had no record yet); ``token``: the bytes given to ``commit``.
    """

    seq: int
    ts: int
    token: bytes


class Follower:
    """Reads the committed records after ``after_seq`` and the commit tokens among
    them, one :meth:`look` at a time (``StreamLog.follow`` makes one).

    The first look finds its start with one index lookup; each later look starts at
    the committed end the previous complete look read up to (bytes, not seqs), so a
    look that finds nothing new costs one index snapshot. :attr:`after_seq` is the
    last record's seq delivered (tokens at it and records after it come next).

    Thread safety: one thread.
    """

    def __init__(self, reader: RecordReader, snapshot: Callable[[], Snapshot],
                 locate: Locate, *, after_seq: int | None) -> None:
        self._reader = reader
        self.snapshot = snapshot
        self._locate = locate
        self.after_seq = after_seq
        self._pos: tuple[int, int] | None = None  # (segment, end) a complete look reached
        self._prev: int | None = None  # the log's last seq at _pos

    def look(self) -> Iterator[pa.RecordBatch | CommitToken]:
        """What is committed now and was not delivered by an earlier complete look:
        record batches and :class:`CommitToken` s, in commit order."""
        if self._pos is None:
            snap, start, prev = token_start(self.snapshot, self._locate, self.after_seq)
        else:
            snap = self.snapshot()
            start, prev = self._pos, self._prev
            if snap.committed.position <= start:
                return
        after = self.after_seq
        for item in read_items(self._reader, snap, start, prev=prev, after_seq=after):
            if not isinstance(item, CommitToken):
                self.after_seq = item.column("seq")[item.num_rows - 1].as_py()
            yield item
        c = snap.committed
        if c.segment >= 0:
            self._pos, self._prev = c.position, c.last_seq


def poll(look: Callable[[], Iterator[T]], done: Callable[[bool], bool], timeout: float
         ) -> Iterator[T]:
    """A tailing reader's loop: ``look()`` again and again, yielding what each brings,
    until ``done(got)`` (``got``: that look brought something) or nothing new came for
    ``timeout`` seconds; the waits between empty looks double from 1 ms up to 50 ms."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        got = False
        for item in look():
            got = True
            yield item
        if done(got):
            return
        now = time.monotonic()
        if got:
            deadline, delay = now + timeout, 0.001
            continue
        if now >= deadline:
            return
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, 0.05)


def tail_items(follower: Follower, timeout: float) -> Iterator[pa.RecordBatch | CommitToken]:
    """``LogReads.tail(tokens=True)``: ``follower``'s looks until the log is sealed and
    read, or nothing new was committed for ``timeout`` seconds."""
    return poll(follower.look, lambda got: not got and follower.snapshot().sealed, timeout)


def token_start(snapshot: Callable[[], Snapshot], locate: Locate, after_seq: int | None
                ) -> tuple[Snapshot, tuple[int, int] | None, int | None]:
    """A snapshot, the byte position to read the records after ``after_seq`` and the
    tokens at or after it from (None: the start of the log), and the log's last seq
    there if known: one index lookup."""
    if after_seq is None or after_seq < 0:  # the tokens before the first record too
        return snapshot(), None, None
    snap, entry = locate(at_seq=after_seq)
    if entry is None:
        c = snap.committed
        if c.last_seq is not None and c.last_seq >= after_seq:
            # the record holding after_seq was trimmed (and none came after it): its
            # tokens may be in the kept segments
            return snap, None, None
        # every record ends before after_seq: only new commits count
        return snap, (c.position if c.segment >= 0 else None), c.last_seq
    if entry.last_seq == after_seq:  # its tokens follow it
        return snap, (entry.segment, entry.offset + entry.size), entry.last_seq
    return snap, (entry.segment, entry.offset), None


def read_items(reader: RecordReader, snap: Snapshot, start: tuple[int, int] | None, *,
               prev: int | None, after_seq: int | None
               ) -> Iterator[pa.RecordBatch | CommitToken]:
    """Records with ``seq > after_seq`` and TOKEN frames with ``seq >= after_seq`` (all
    of them without ``after_seq``), in log order, from the byte position ``start``
    (``(segment, offset)``; None: the start of the log) to the committed end.

    ``prev``: the log's last seq at ``start`` if known (a control frame met before
    the first record must link to it). ``start`` is only where to begin reading: a
    frame before ``after_seq`` is skipped by its footer, undecoded.
    """
    c = snap.committed
    if after_seq is not None and snap.trimmed is not None and after_seq < snap.trimmed:
        raise LogTrimmedError(
            f"log {reader.directory}: records up to seq {snap.trimmed} were trimmed; "
            f"cannot read after seq {after_seq}")
    if c.segment < 0:
        return
    chain = read_chain(reader.directory)
    if start is None:
        segs = [s for s in chain.segments if s <= c.segment]
        if not segs:
            return
        start = (segs[0], 0)
    else:
        segs = [s for s in chain.segments if start[0] <= s <= c.segment]
        if not segs or segs[0] != start[0]:
            raise reader._gone(segment_path(reader.directory, start[0]),
                               c.last_seq if prev is None else prev, snap.trimmed)
    codec = reader.codec

    def item(buf: memoryview, info: FrameInfo, schema: pa.Schema, base: int
             ) -> pa.RecordBatch | CommitToken:
        if info.kind == Kind.TOKEN:
            seq = info.last_seq
            return CommitToken(seq, info.last_ts if seq >= 0 else -1,
                               bytes(codec.payload(buf, info, base)))
        return codec.decode_data(buf, info, schema, base)

    schema = reader.schema(snap.schema) or _NO_SCHEMA
    frames = _frames(reader, segs, start, c, chain, prev, after_seq)
    first = after_seq is not None  # the first record may hold seqs up to after_seq
    cut_at = -1 if after_seq is None else after_seq
    for got in reader._decoded(frames, schema, item, INLINE_BYTES):
        if first and not isinstance(got, CommitToken):
            first = False
            seq = got.column("seq").to_numpy()
            cut = got.slice(int(np.searchsorted(seq, cut_at, "right")))
            if cut.num_rows:
                yield cut
            continue
        yield got


def _frames(reader: RecordReader, segs: list[int], start: tuple[int, int], c: Committed,
            chain: Chain, prev: int | None, after_seq: int | None) -> Iterator[_Frame]:
    """The DATA frames ending after ``after_seq`` and the TOKEN frames at or after it,
    from ``start`` to the committed end ``c``; each control frame on the way must link
    to the records before it (no segment missing)."""
    skip = -1 if after_seq is None else after_seq
    directory = reader.directory
    for seg in segs:
        path = segment_path(directory, seg)
        try:
            segment = SegmentReader(path)
        except FileNotFoundError as exc:
            last = prev if seg == start[0] and prev is not None else c.last_seq
            raise reader._gone(path, last, read_trim_marker(directory)) from exc
        with segment:
            end = c.end if seg == c.segment else chain.end(seg, segment.size())
            begin = start[1] if seg == start[0] else 0
            try:
                for buf, base, info in segment.forward(begin, end):
                    if info.kind == Kind.DATA:
                        prev = info.last_seq
                        if prev > skip:
                            yield buf, base, info, path
                        continue
                    if prev is not None:
                        check_link(info, prev, -1)
                    if info.kind == Kind.TOKEN and info.last_seq >= skip:
                        yield buf, base, info, path
            except FrameError as exc:
                raise corrupt(path, exc.offset, exc.invariant) from exc
