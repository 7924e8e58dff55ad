"""StreamLog: the persistent, checksummed, LMDB-indexed stream log of one stream.

(Over 400 lines: the writer's state and its commit protocol are one class, read whole.)

A log is a directory (which may be on a shared file system: NFS, Lustre, a FUSE
mount)::

    LOG/
      log.id                              the log's identity (storage_log.cache)
      epochs/00000001                     writer epochs and their fences (storage_log.epoch)
      00000000000000000000-00000001.seg   segment files of frames (storage_log.segment,
      00000000000000052311-00000001.seg   byte layout in storage_log.framing)
      lock                                the writer lock on one host; holds the pid
      TRIMMED                             after a trim: "trimmed <last dropped seq>",
                                          written durably before segments are deleted

and each host keeps its LMDB index of the log (storage_log.index.LogIndex) in its own
cache directory, ``<index root>/<log id>/`` (:func:`storage_log.cache.index_path`).

Invariants: ``seq`` strictly increases and ``ts`` never decreases along the log,
within and across records; all records have one schema with int64 ``ts`` and
``seq`` columns (no nulls, ``seq >= 0``); only committed records are indexed and
visible to readers; the segments alone determine the committed state (the index is
a cache, rebuilt or reconciled on every writable open).

Commit protocol: ``commit()`` writes the pending frames (the last one flagged
COMMIT, or a TOKEN frame carrying the token), makes the segments durable according
to ``fsync`` and only then, in one LMDB transaction, adds the index entries and
moves the committed end and the token. A crash at any point leaves either the old
or the new commit visible after the next writable open. A TOKEN frame carries the
log's last seq/ts; a commit may carry a token and no new record; ``read_forward``
and ``tail`` with ``tokens=True`` yield each token where it was committed
(:mod:`storage_log.follow`).

Durability modes: ``always`` (fdatasync at every commit; the default), ``interval``
(at most every ``fsync_interval`` seconds: a commit is visible before it is durable,
and a machine crash may lose the last interval), ``never`` (leave it to the OS).

Thread safety: one thread per StreamLog object. Any number of reader objects (in
this process or others) may read while one writer appends.

Writers: one per log, fenced by epochs. ``flock`` on ``lock`` keeps a second writer
out on one host; across hosts a writer takes a new epoch before its first write
(:func:`storage_log.epoch.take_epoch`), writes only segments of its epoch, and its
fence makes whatever an older writer (a zombie) writes afterwards invisible. A writer
whose epoch was superseded fails its next commit with ``LogFencedError``.

Readers (``writable=False``) never modify anything, never take a lock and never begin
an LMDB write transaction. They use this host's index of the log if there is a usable
one (read-only) and continue it by walking the segments (:class:`ScanIndex`), so they
see every commit of the chain whoever wrote it, on this host or another; without a
local index the first open walks the whole log (it stops at the first invalid frame of
the last segment; one in an earlier segment is CorruptLogError).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType

import pyarrow as pa

from storage_log.appender import FSYNC_MODES, FsyncMode, SegmentAppender
from storage_log.batch import check_schema, conform, positions
from storage_log.durable import fsync_dir
from storage_log.entry import Committed
from storage_log.epoch import fenced_by, take_epoch
from storage_log.errors import (
    LogClosedError,
    LogFencedError,
    LogNotFoundError,
    LogSchemaError,
    LogSealedError,
    LogUsageError,
    write_error,
)
from storage_log.faults import crash_point
from storage_log.framing import Kind, encode_schema
from storage_log.index import LogIndex
from storage_log.lock import WriterLock
from storage_log.payload import PayloadCodec
from storage_log.reader import RecordReader
from storage_log.reads import LogReads
from storage_log.reconcile import ReconcileReport, TailState, open_for_writing
from storage_log.scan import ScanIndex, open_scan_index
from storage_log.segment import sid_base, write_trim_marker
from storage_log.sidefile import SideDrafts


class StreamLog(LogReads):
    """One stream's log; see the module docstring for the directory and its rules.

    Open it with :meth:`open`. Attributes ``schema``, ``first_seq``, ``last_seq``,
    ``last_ts`` and ``sealed`` describe, for a writer, everything appended (committed
    or not) and, for a reader, the committed log at the time of the access.
    ``reconcile_report`` tells what a writable open cut or re-indexed (None for
    readers). The files are written by a :class:`SegmentAppender` and read by a
    :class:`RecordReader`; this class checks positions and schemas and runs the
    commit protocol. The reads (``read_forward``, ``read_backward``, ``verify``,
    ``tail``, ``follow``) are those of :class:`storage_log.reads.LogReads`.
    """

    reconcile_report: ReconcileReport | None

    def __init__(self, path: Path, index: LogIndex | ScanIndex, *, lock: WriterLock | None,
                 fsync: FsyncMode, segment_bytes: int, fsync_interval: float,
                 compression_level: int, threads: int = 0) -> None:
        self.path = path
        self._index: LogIndex | ScanIndex | None = index
        self._lock = lock
        self._segment_bytes = segment_bytes
        self._codec = PayloadCodec(compression_level, threads)
        self._reader = RecordReader(path, self._codec)
        self._appender = SegmentAppender(path, self._codec, fsync=fsync,
                                         fsync_interval=fsync_interval)
        self.reconcile_report = None
        # the writer's view: everything appended, committed or not
        self._schema: pa.Schema | None = None
        self._schema_bytes: bytes | None = None
        self._committed = Committed(-1, 0, None, None, 0)
        self._first_seq: int | None = None
        self._last_seq: int | None = None
        self._last_ts: int | None = None
        self._records = 0
        self._token: bytes | None = None
        self._sealed = False
        self._epoch: int | None = None  # taken before the first write
        self._sides = SideDrafts(path)  # this writer's segments, for side-files

    # -- opening and closing ------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, writable: bool = False,
             create: bool = False, fsync: str = "always", segment_bytes: int = 64 << 20,
             repair: bool = False, fsync_interval: float = 1.0,
             compression_level: int = 1, threads: int | None = None,
             index_root: str | os.PathLike[str] | None = None) -> StreamLog:
        """Open (``create``: create if absent) the log at ``path``.

        ``writable`` takes the writer lock (:class:`LogLockedError` names the holder's
        pid) and reconciles the log with its index (see ``reconcile_report``).
        ``repair`` lets a writable open cut a log damaged before its committed end
        (otherwise :class:`CorruptLogError`). Readers never modify files.

        Extra knobs (not in the architecture contract): ``fsync_interval`` for
        ``fsync="interval"``; ``compression_level`` (zstd, 1-19; 0: no zstd, the
        packed layout's columns as they are: the ingest's upstream logs of a replayable
        source, a cache of it);
        ``threads``, worker threads that compress appended records in the
        background when several are appended per commit (all but the newest; a
        commit encodes on its own thread what no worker has started) and decode
        records ahead of a reader (default: 2 if the machine has 2 cores or more;
        0 or 1: everything on the calling thread);
        ``index_root``, this host's index cache (:func:`storage_log.cache.index_root`).
        """
        if threads is None:
            threads = 2 if (os.cpu_count() or 1) >= 2 else 0
        if not 0 <= compression_level <= 19:
            raise LogUsageError(f"compression_level must be 0..19, not {compression_level}")
        if fsync not in FSYNC_MODES:
            raise LogUsageError(f"fsync must be one of {', '.join(FSYNC_MODES)}, not {fsync!r}")
        if segment_bytes < 4096:
            raise LogUsageError(f"segment_bytes must be at least 4096, not {segment_bytes}")
        directory = Path(path)
        if not directory.is_dir():
            if not (create and writable):
                raise LogNotFoundError(f"no log at {directory} (open it writable with create=True)")
            try:
                directory.mkdir(parents=True, exist_ok=True)
                fsync_dir(directory.parent)
            except OSError as exc:
                raise write_error(directory, "create", exc) from exc
        if not writable:
            return cls(directory, open_scan_index(directory, index_root), lock=None,
                       fsync="never",
                       segment_bytes=segment_bytes, fsync_interval=fsync_interval,
                       compression_level=compression_level, threads=threads)
        try:
            return cls._open_writer(directory, fsync=fsync, segment_bytes=segment_bytes,
                                    repair=repair, fsync_interval=fsync_interval,
                                    compression_level=compression_level, threads=threads,
                                    index_root=index_root)
        except OSError as exc:
            raise write_error(directory, "open for writing", exc) from exc

    @classmethod
    def _open_writer(cls, directory: Path, *, fsync: str, segment_bytes: int, repair: bool,
                     fsync_interval: float, compression_level: int, threads: int,
                     index_root: str | os.PathLike[str] | None) -> StreamLog:
        lock, index, report, state = open_for_writing(directory, repair=repair,
                                                      index_root=index_root)
        log = cls(directory, index, lock=lock, fsync=fsync,  # type: ignore[arg-type]
                  segment_bytes=segment_bytes, fsync_interval=fsync_interval,
                  compression_level=compression_level, threads=threads)
        log.reconcile_report = report
        log._load(state)
        return log

    def _load(self, state: TailState) -> None:
        self._committed = state.committed
        self._schema, self._schema_bytes = state.schema, state.schema_bytes
        self._token, self._sealed = state.token, state.sealed
        self._first_seq = state.first_seq
        self._last_seq, self._last_ts = state.committed.last_seq, state.committed.last_ts
        self._records = state.committed.records
        self._appender.open_active(state.segments)

    def close(self) -> None:
        """Close the log. A writer drops what it appended but did not commit."""
        if self._index is None:
            return
        appender = self._appender
        try:
            if self._lock is not None and appender.failed is None:
                appender.discard(self._committed)
                if appender.fsync == "interval":
                    appender.sync(force=True)
        finally:
            appender.close()
            self._codec.close()
            self._index.close()
            self._index = None
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def __repr__(self) -> str:
        mode = "closed" if self._index is None else ("writer" if self.writable else "reader")
        return f"StreamLog({str(self.path)!r}, {mode})"

    def __enter__(self) -> StreamLog:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        if getattr(self, "_index", None) is not None:
            with contextlib.suppress(Exception):
                self.close()

    # -- attributes ---------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return self._lock is not None

    @property
    def schema(self) -> pa.Schema | None:
        if self.writable:
            return self._schema
        return self._reader.schema(self._snapshot().schema)

    @property
    def first_seq(self) -> int | None:
        return self._first_seq if self.writable else self._snapshot().first_seq

    @property
    def last_seq(self) -> int | None:
        return self._last_seq if self.writable else self._snapshot().committed.last_seq

    @property
    def last_ts(self) -> int | None:
        return self._last_ts if self.writable else self._snapshot().committed.last_ts

    @property
    def sealed(self) -> bool:
        return self._sealed if self.writable else self._snapshot().sealed

    @property
    def committed_seq(self) -> int | None:
        """The last committed seq (what readers can see)."""
        return self._snapshot().committed.last_seq

    @property
    def uncommitted_bytes(self) -> int:
        """Encoded bytes appended since the last commit (for commit-by-size policies)."""
        return self._appender.uncommitted_bytes if self.writable else 0

    def last_token(self) -> bytes | None:
        """The token of the last commit that carried one (None if never)."""
        if self.writable:
            return self._token
        return self._snapshot().token

    # -- writing ------------------------------------------------------------------

    def append(self, batch: pa.RecordBatch) -> None:
        """Append one record (not visible until :meth:`commit`). Empty batches are ignored.

        Raises LogOrderError if ``ts``/``seq`` break the log's order and LogSchemaError
        if the schema differs from the log's.
        """
        try:
            self._append(batch)
        except OSError as exc:
            raise write_error(self.path, "append to", exc) from exc

    def _append(self, batch: pa.RecordBatch) -> None:
        self._check_write()
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
            if batch is None:
                return
        if not isinstance(batch, pa.RecordBatch):
            raise LogSchemaError(f"append takes a pyarrow.RecordBatch, not {type(batch).__name__}")
        if batch.num_rows == 0:
            return
        batch = conform(batch, self._schema)
        if self._schema is None:
            check_schema(batch.schema)
        first_seq, last_seq, first_ts, last_ts = positions(batch, self._last_seq,
                                                           self._last_ts, self.path)
        if self._schema is None:
            self._schema = batch.schema
            self._schema_bytes = encode_schema(batch.schema)
        out = self._appender
        if out.active < 0 or (out.has_schema and
                              out.size + out.pending_bytes >= self._segment_bytes):
            self._take_epoch()
            out.new_segment(first_seq)
        if not out.has_schema:
            assert self._schema_bytes is not None
            link = self._last_seq if self._last_seq is not None else -1
            out.push(PayloadCodec.encode_control(
                Kind.SCHEMA, self._schema_bytes, link, self._last_ts or 0))
            out.has_schema = True
            self._sides.start(out.active, link)
        out.push(self._codec.encode_data(batch, first_seq, last_seq, first_ts, last_ts))
        if self._first_seq is None:
            self._first_seq = first_seq
        self._last_seq, self._last_ts = last_seq, last_ts
        self._records += 1
        crash_point("log.after_append")

    def commit(self, token: bytes | None = None) -> None:
        """Make everything appended durable (per ``fsync``) and visible, with ``token``."""
        self._check_write()
        if token is not None and not isinstance(token, bytes | bytearray | memoryview):
            raise LogUsageError(f"a commit token is bytes, not {type(token).__name__}")
        try:
            self._commit(token)
        except OSError as exc:
            raise write_error(self.path, "commit to", exc) from exc

    def seal(self) -> None:
        """Commit what is pending and mark the end of the stream; appends then fail."""
        self._check_write(allow_sealed=True)
        if self._sealed:
            return
        try:
            self._commit(None, seal=True)
        except OSError as exc:
            raise write_error(self.path, "seal", exc) from exc

    def trim(self, *, before_seq: int) -> int:
        """Delete whole segments holding only records with ``seq < before_seq``.

        Commits pending appends first. Never deletes the segment holding the
        committed end, nor the one holding the last record (and the commit tokens
        after it): a log keeps at least its last record, and a reader after it gets
        the tokens committed since (token-only commits of later writers sit in
        segments of their own; trimmed with that record, a log had no record left,
        and a writable open rebuilt it without its last seq). Returns how many
        segments were deleted.
        """
        try:
            return self._trim(before_seq)
        except OSError as exc:
            raise write_error(self.path, "trim", exc) from exc

    def _trim(self, before_seq: int) -> int:
        self._check_write(allow_sealed=True)
        out = self._appender
        if out.pending or out.written:
            self._commit(None)
        segs = out.segments
        last = self._committed.last_seq
        upto = before_seq if last is None else min(before_seq, last)
        victims = [s for i, s in enumerate(segs[:-1])
                   if sid_base(segs[i + 1]) <= upto and s < self._committed.segment]
        if not victims:
            return 0
        if self._token is not None:  # keep the latest token in a kept segment
            self._commit(self._token)
        index = self._writer_index()
        dropped = index.drop_before(sid_base(segs[len(victims)]))
        trimmed = index.snapshot().trimmed
        if trimmed is not None:  # durable before the segments go (the index is derived)
            write_trim_marker(self.path, trimmed)
        c = self._committed
        self._records -= dropped
        self._committed = Committed(c.segment, c.end, c.last_seq, c.last_ts, c.records - dropped)
        index.commit([], self._committed)
        out.drop_segments(victims)
        self._first_seq = index.snapshot().first_seq
        return len(victims)

    def _commit(self, token: bytes | None, *, seal: bool = False) -> None:
        """The commit protocol: frames, fsync, then one index transaction."""
        out = self._appender
        if not out.pending and token is None and not seal:
            return
        last_seq = self._last_seq if self._last_seq is not None else -1
        last_ts = self._last_ts if self._last_ts is not None else 0
        if token is not None:
            out.push(PayloadCodec.encode_control(Kind.TOKEN, bytes(token), last_seq, last_ts))
        if seal:
            out.push(PayloadCodec.encode_control(Kind.SEAL, b"", last_seq, last_ts))
        if out.active < 0:
            self._take_epoch()
            out.new_segment(self._last_seq + 1 if self._last_seq is not None else 0)
        out.flush(commit=True)
        crash_point("log.before_commit")
        index = self._writer_index()
        if out.sync() and out.fsync != "always":
            index.sync()
        crash_point("log.between_fsyncs")
        self._check_fence()
        committed = Committed(out.active, out.size, self._last_seq, self._last_ts,
                              self._records)
        written = list(out.written)
        try:
            index.commit(out.written, committed,
                         schema=self._schema_bytes if self._committed.last_seq is None
                         else None, token=token, sealed=seal)
        except BaseException as exc:
            out.failed = exc
            raise
        out.committed()
        self._sides.note(written, token, seal, active=out.active, current=committed.segment,
                         closed=out.closed, schema_bytes=self._schema_bytes or b"")
        self._committed = committed
        if token is not None:
            self._token = bytes(token)
        if seal:
            self._sealed = True

    def _take_epoch(self) -> None:
        """Before the first write: a new epoch, fencing the log where we loaded it."""
        if self._epoch is None:
            try:
                self._epoch = take_epoch(self.path, self._committed)
            except OSError as exc:  # disk full, read-only: nothing was written yet
                raise write_error(self.path, "take a writer epoch of", exc) from exc
            self._appender.epoch = self._epoch

    @property
    def epoch(self) -> int | None:
        """This writer's epoch (None until its first write, and for readers)."""
        return self._epoch

    def _check_fence(self) -> None:
        """Fail if a newer writer took the log over (we are a zombie)."""
        assert self._epoch is not None
        newer = fenced_by(self.path, self._epoch)
        if newer is not None:
            exc = LogFencedError(
                f"log {self.path}: this writer (epoch {self._epoch}, pid {os.getpid()}) was "
                f"fenced by epoch {newer.epoch} (host {newer.host}, pid {newer.pid}): "
                "another writer took the log over; nothing written after that is read")
            self._appender.failed = exc
            raise exc

    def _check_write(self, *, allow_sealed: bool = False) -> None:
        if self._index is None:
            raise LogClosedError(f"log {self.path} is closed")
        if self._lock is None:
            raise LogClosedError(f"log {self.path} is open read-only")
        failed = self._appender.failed
        if failed is not None:
            raise LogClosedError(
                f"log {self.path} failed to write ({failed!r}); close and reopen it"
            ) from failed
        if self._sealed and not allow_sealed:
            raise LogSealedError(f"log {self.path} is sealed (its stream has ended)")

    def _writer_index(self) -> LogIndex:
        if not isinstance(self._index, LogIndex):
            raise LogClosedError(f"log {self.path} is not open for writing")
        return self._index
