"""StreamLog: the persistent, checksummed, LMDB-indexed stream log of one stream.

A log is a directory (which may be on a shared file system: NFS, Lustre, a FUSE
mount)::

    LOG/
      log.id                              the log's identity (storage_log.cache)
      epochs/00000001                     writer epochs and their fences (storage_log.epoch)
      00000000000000000000-00000001.seg   segment files of frames (storage_log.segment,
      00000000000000052311-00000001.seg   byte layout in storage_log.frame.FrameCodec)
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
or the new commit visible after the next writable open.

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
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import numpy as np
import pyarrow as pa

from storage_log.appender import FsyncMode, SegmentAppender
from storage_log.cache import ID_FILE, cache_name, ensure_log_id, index_path
from storage_log.cache import index_root as cache_root
from storage_log.entry import Committed, Entry, Snapshot
from storage_log.epoch import LogFencedError, fenced_by, take_epoch
from storage_log.errors import (
    LogClosedError,
    LogNotFoundError,
    LogOrderError,
    LogSchemaError,
    LogSealedError,
    LogUsageError,
    LogWriteError,
)
from storage_log.frame import FrameCodec, Kind, encode_schema
from storage_log.index import IndexCorrupt, LogIndex
from storage_log.lock import LOCK_NAME, WriterLock
from storage_log.reader import RecordReader
from storage_log.reconcile import ReconcileReport, TailState, open_index, reconcile
from storage_log.scan import ScanIndex
from storage_log.segment import fsync_dir, list_segments, sid_base, write_trim_marker
from storage_log.sidefile import SideFile, write_side

_FSYNC_MODES = ("always", "interval", "never")


class StreamLog:
    """One stream's log; see the module docstring for the directory and its rules.

    Open it with :meth:`open`. Attributes ``schema``, ``first_seq``, ``last_seq``,
    ``last_ts`` and ``sealed`` describe, for a writer, everything appended (committed
    or not) and, for a reader, the committed log at the time of the access.
    ``reconcile_report`` tells what a writable open cut or re-indexed (None for
    readers). The files are written by a :class:`SegmentAppender` and read by a
    :class:`RecordReader`; this class checks positions and schemas and runs the
    commit protocol.
    """

    reconcile_report: ReconcileReport | None

    def __init__(self, path: Path, index: LogIndex | ScanIndex, *, lock: WriterLock | None,
                 fsync: FsyncMode, segment_bytes: int, fsync_interval: float,
                 compression_level: int, threads: int = 0) -> None:
        self.path = path
        self._index: LogIndex | ScanIndex | None = index
        self._lock = lock
        self._segment_bytes = segment_bytes
        self._codec = FrameCodec(compression_level, threads)
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
        self._sides: dict[int, _SideDraft] = {}  # this writer's segments, for side-files

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
        ``fsync="interval"``; ``compression_level`` (zstd, 1-3);
        ``threads``, worker threads that compress appended records in the
        background when several are appended per commit (all but the newest; a
        commit encodes on its own thread what no worker has started) and decode
        records ahead of a reader (default: 2 if the machine has 2 cores or more;
        0 or 1: everything on the calling thread);
        ``index_root``, this host's index cache (:func:`storage_log.cache.index_root`).
        """
        if threads is None:
            threads = 2 if (os.cpu_count() or 1) >= 2 else 0
        if not 1 <= compression_level <= 19:
            raise LogUsageError(f"compression_level must be 1..19, not {compression_level}")
        if fsync not in _FSYNC_MODES:
            raise LogUsageError(f"fsync must be one of {', '.join(_FSYNC_MODES)}, not {fsync!r}")
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
                raise _write_error(directory, "create", exc) from exc
        if not writable:
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
            index: LogIndex | ScanIndex = ScanIndex(directory, base)
            return cls(directory, index, lock=None, fsync="never",
                       segment_bytes=segment_bytes, fsync_interval=fsync_interval,
                       compression_level=compression_level, threads=threads)
        try:
            return cls._open_writer(directory, fsync=fsync, segment_bytes=segment_bytes,
                                    repair=repair, fsync_interval=fsync_interval,
                                    compression_level=compression_level, threads=threads,
                                    index_root=index_root)
        except OSError as exc:
            raise _write_error(directory, "open for writing", exc) from exc

    @classmethod
    def _open_writer(cls, directory: Path, *, fsync: str, segment_bytes: int, repair: bool,
                     fsync_interval: float, compression_level: int, threads: int,
                     index_root: str | os.PathLike[str] | None) -> StreamLog:
        lock = WriterLock(directory)
        try:
            report = ReconcileReport()
            ident = ensure_log_id(directory)
            index = open_index(cache_root(index_root) / cache_name(directory, ident), report,
                               force_rebuild=repair)
            try:
                state = reconcile(directory, index, report, repair=repair)
            except BaseException:
                index.close()
                raise
        except BaseException:
            lock.release()
            raise
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
            raise _write_error(self.path, "append to", exc) from exc

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
        batch = self._conform(batch)
        self._check_schema(batch.schema)
        first_seq, last_seq, first_ts, last_ts = self._check_order(batch)
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
            out.push(FrameCodec.encode_control(
                Kind.SCHEMA, self._schema_bytes, link, self._last_ts or 0))
            out.has_schema = True
            self._sides[out.active] = _SideDraft(link)
        out.push(self._codec.encode_data(batch, first_seq, last_seq, first_ts, last_ts))
        if self._first_seq is None:
            self._first_seq = first_seq
        self._last_seq, self._last_ts = last_seq, last_ts
        self._records += 1

    def commit(self, token: bytes | None = None) -> None:
        """Make everything appended durable (per ``fsync``) and visible, with ``token``."""
        self._check_write()
        if token is not None and not isinstance(token, bytes | bytearray | memoryview):
            raise LogUsageError(f"a commit token is bytes, not {type(token).__name__}")
        try:
            self._commit(token)
        except OSError as exc:
            raise _write_error(self.path, "commit to", exc) from exc

    def seal(self) -> None:
        """Commit what is pending and mark the end of the stream; appends then fail."""
        self._check_write(allow_sealed=True)
        if self._sealed:
            return
        try:
            self._commit(None, seal=True)
        except OSError as exc:
            raise _write_error(self.path, "seal", exc) from exc

    def trim(self, *, before_seq: int) -> int:
        """Delete whole segments holding only records with ``seq < before_seq``.

        Commits pending appends first. Never deletes the segment holding the
        committed end. Returns how many segments were deleted.
        """
        try:
            return self._trim(before_seq)
        except OSError as exc:
            raise _write_error(self.path, "trim", exc) from exc

    def _trim(self, before_seq: int) -> int:
        self._check_write(allow_sealed=True)
        out = self._appender
        if out.pending or out.written:
            self._commit(None)
        segs = out.segments
        victims = [s for i, s in enumerate(segs[:-1])
                   if sid_base(segs[i + 1]) <= before_seq and s < self._committed.segment]
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
            out.push(FrameCodec.encode_control(Kind.TOKEN, bytes(token), last_seq, last_ts))
        if seal:
            out.push(FrameCodec.encode_control(Kind.SEAL, b"", last_seq, last_ts))
        if out.active < 0:
            self._take_epoch()
            out.new_segment(self._last_seq + 1 if self._last_seq is not None else 0)
        out.flush(commit=True)
        index = self._writer_index()
        if out.sync() and out.fsync != "always":
            index.sync()
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
        self._note_sides(written, token, seal, committed.segment)
        self._committed = committed
        if token is not None:
            self._token = bytes(token)
        if seal:
            self._sealed = True

    def _note_sides(self, written: list[Entry], token: bytes | None, seal: bool,
                    current: int) -> None:
        """Track what this writer committed into each of its segments; once a segment is
        complete and committed (the commit point moved past it), write its side-file."""
        out = self._appender
        for e in written:
            draft = self._sides.get(e.segment)
            if draft is not None:
                draft.entries.append(e)
        draft = self._sides.get(out.active)
        if draft is not None:
            if token is not None:
                draft.token = bytes(token)
            draft.sealed = draft.sealed or seal
        for sid in [s for s in self._sides if s < current and s in out.closed]:
            d = self._sides.pop(sid)
            last = d.entries[-1] if d.entries else None
            with contextlib.suppress(OSError):  # a side-file is an optimisation only
                write_side(self.path, SideFile(
                    sid, out.closed[sid], d.link, tuple(d.entries),
                    last.last_seq if last else None, last.last_ts if last else None,
                    d.token, d.sealed, self._schema_bytes or b""))

    def _take_epoch(self) -> None:
        """Before the first write: a new epoch, fencing the log where we loaded it."""
        if self._epoch is None:
            try:
                self._epoch = take_epoch(self.path, self._committed)
            except OSError as exc:  # disk full, read-only: nothing was written yet
                raise _write_error(self.path, "take a writer epoch of", exc) from exc
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

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch with the log's schema: same names and types are required;
        nullability flags and metadata may differ (Spark varies them) and are taken
        from the log's schema."""
        log_schema = self._schema
        schema = batch.schema
        if log_schema is None or schema.equals(log_schema):
            return batch
        if schema.names == log_schema.names and schema.types == log_schema.types:
            for f, lf in zip(schema, log_schema, strict=True):
                if f.nullable and not lf.nullable and batch.column(f.name).null_count:
                    raise LogSchemaError(f"column {f.name!r} has nulls; the log's field is "
                                         "not nullable")
            return pa.RecordBatch.from_arrays(batch.columns, schema=log_schema)
        raise LogSchemaError(
            f"batch schema differs from the log's:\n{schema}\nlog:\n{log_schema}")

    def _check_schema(self, schema: pa.Schema) -> None:
        if self._schema is not None:
            return
        for name in ("ts", "seq"):
            idx = schema.get_field_index(name)
            if idx < 0 or schema.field(idx).type != pa.int64():
                raise LogSchemaError(f"a logged batch needs an int64 column {name!r}: {schema}")
        for f in schema:
            if pa.types.is_dictionary(f.type):
                raise LogSchemaError(f"dictionary column {f.name!r} cannot be logged")

    def _check_order(self, batch: pa.RecordBatch) -> tuple[int, int, int, int]:
        seq_col = batch.column("seq")
        ts_col = batch.column("ts")
        if seq_col.null_count or ts_col.null_count:
            raise LogOrderError("ts and seq must not be null")
        seq = seq_col.to_numpy()
        ts = ts_col.to_numpy()
        first_seq, last_seq = int(seq[0]), int(seq[-1])
        first_ts, last_ts = int(ts[0]), int(ts[-1])
        if self._last_seq is not None and first_seq <= self._last_seq:
            raise LogOrderError(
                f"seq {first_seq} is not after the log's last seq {self._last_seq} "
                f"(log {self.path})")
        if first_seq < 0:
            raise LogOrderError(f"seq {first_seq} is negative")
        if self._last_ts is not None and first_ts < self._last_ts:
            raise LogOrderError(
                f"ts {first_ts} (seq {first_seq}) is before the log's last ts {self._last_ts}")
        if len(seq) > 1:
            bad = np.flatnonzero(seq[1:] <= seq[:-1])
            if len(bad):
                i = int(bad[0]) + 1
                raise LogOrderError(f"seq does not increase inside the batch at row {i} "
                                    f"({int(seq[i - 1])} then {int(seq[i])})")
            bad = np.flatnonzero(ts[1:] < ts[:-1])
            if len(bad):
                i = int(bad[0]) + 1
                raise LogOrderError(f"ts decreases inside the batch at row {i} "
                                    f"(seq {int(seq[i])}: {int(ts[i - 1])} then {int(ts[i])})")
        return first_seq, last_seq, first_ts, last_ts

    # -- reading ------------------------------------------------------------------

    # -- reading ------------------------------------------------------------------

    def _writer_index(self) -> LogIndex:
        if not isinstance(self._index, LogIndex):
            raise LogClosedError(f"log {self.path} is not open for writing")
        return self._index

    def _snapshot(self) -> Snapshot:
        if self._index is None:
            raise LogClosedError(f"log {self.path} is closed")
        return self._index.snapshot()

    def _locate(self, **kw: int | None) -> tuple[Snapshot, Entry | None]:
        if self._index is None:
            raise LogClosedError(f"log {self.path} is closed")
        return self._index.locate(**kw)

    def read_forward(self, *, after_seq: int | None = None, from_ts: int | None = None
                     ) -> Iterator[pa.RecordBatch]:
        """Committed records with ``seq > after_seq`` (or ``ts >= from_ts``), oldest first.

        The start is one index lookup; the first batch is trimmed to the exact
        position. Raises LogTrimmedError if ``after_seq`` lies in trimmed segments
        (``from_ts`` before the first kept record starts at that record).
        """
        if after_seq is not None and from_ts is not None:
            raise LogUsageError("read_forward takes after_seq or from_ts, not both")
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

    def tail(self, *, after_seq: int | None, timeout: float) -> Iterator[pa.RecordBatch]:
        """Committed records after ``after_seq``, waiting for new commits.

        Stops when the log is sealed and everything is read, or when no new record
        was committed for ``timeout`` seconds (call again to keep following). New
        commits are found by polling the index (1 ms, backing off to 50 ms).
        """
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




@dataclass
class _SideDraft:
    """What a writer committed into one of its segments so far (see storage_log.sidefile)."""

    link: int
    entries: list[Entry] = field(default_factory=list)
    token: bytes | None = None
    sealed: bool = False


def _write_error(path: Path, what: str, exc: OSError) -> LogWriteError:
    """A refused write as one clear error: the log, the file, the cause, what to do."""
    where = f" ({exc.filename})" if exc.filename else ""
    return LogWriteError(
        f"cannot {what} log {path}: {exc.strerror or exc}{where}. Nothing committed is "
        "lost: make room or make it writable (the index cache too: CEC_INDEX_DIR), "
        "then resume (cec recover --from-log RUN)")
