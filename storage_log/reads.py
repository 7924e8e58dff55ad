"""The read API of a log: :class:`LogReads`, which :class:`storage_log.log.StreamLog`
derives from.

Records forward (``read_forward``), backward (``read_backward``), following new
commits (``tail``, :meth:`LogReads.follow`) and a full check (``verify``), found through
the log's index and read by a :class:`storage_log.reader.RecordReader`. With
``tokens=True`` the forward reads also yield the commit tokens, in commit order
between the records (:mod:`storage_log.follow`); without it they take the records'
code path, which pays nothing for tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

import pyarrow as pa

from storage_log.entry import Entry, Snapshot
from storage_log.errors import LogClosedError, LogUsageError
from storage_log.follow import CommitToken, Follower, poll, tail_items
from storage_log.reader import RecordReader

if TYPE_CHECKING:
    from storage_log.index import LogIndex
    from storage_log.scan import ScanIndex


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
            return self.follow(after_seq=after_seq).look()
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
            return tail_items(self.follow(after_seq=after_seq), timeout)
        return self._tail(after_seq, timeout)

    def follow(self, *, after_seq: int | None) -> Follower:
        """A :class:`~storage_log.follow.Follower` of the committed records after
        ``after_seq`` and the commit tokens among them: each ``look()`` yields what was
        committed since the previous one (what a caller that waits its own way, e.g.
        on :class:`storage_log.notify.CommitWatch`, uses instead of :meth:`tail`)."""
        return Follower(self._reader, self._snapshot, self._locate, after_seq=after_seq)

    def _tail(self, after_seq: int | None, timeout: float) -> Iterator[pa.RecordBatch]:
        pos, sealed = after_seq, False

        def look() -> Iterator[pa.RecordBatch]:
            nonlocal pos, sealed
            snap, entry = self._locate(after_seq=pos)
            sealed = snap.sealed  # sealed before this look: it reads the log to its end
            for batch in self._reader.forward(snap, entry, after_seq=pos):
                pos = batch.column("seq")[-1].as_py()
                yield batch

        return poll(look, lambda got: sealed, timeout)
