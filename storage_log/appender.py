"""The write side of the segment files: pending frames, the active segment, fsync.

:class:`SegmentAppender` knows bytes and files, not positions or schemas: the
:class:`storage_log.log.StreamLog` checks what is appended and decides when a
commit happens; the appender writes the frames, rolls segments, and makes them
durable.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Literal, get_args

from storage_log.durable import fsync_dir
from storage_log.entry import Committed, Entry
from storage_log.framing import FLAG_COMMIT, Kind, PendingFrame
from storage_log.payload import PayloadCodec
from storage_log.segment import make_sid, segment_path, sid_epoch
from storage_log.sidefile import remove_side

FsyncMode = Literal["always", "interval", "never"]
#: the fsync modes of a writer, in the order messages list them
FSYNC_MODES: tuple[FsyncMode, ...] = get_args(FsyncMode)
FLUSH_BYTES = 8 << 20  # write appended frames to the file beyond this much
_IOV_MAX = 512


class SegmentAppender:
    """Appends frames to the newest segment of a log directory.

    Frames wait in memory (``pending``) until :meth:`flush`, which gives the last one
    the COMMIT flag when it ends a commit; a large backlog is written early (all but
    the newest frame, which must stay patchable). ``written`` lists the DATA frames
    already in the files but not yet committed (they become index entries at the
    commit). Segments rolled before a commit keep their descriptors in ``dirty``
    until the next fsync.

    Crash policy: nothing here is visible until the index moves the committed end,
    and :func:`storage_log.reconcile.reconcile` cuts whatever follows the last COMMIT
    frame, so a crash at any point is harmless. After a failed write the appender is
    ``failed`` and refuses further use.

    Thread safety: one thread (compression may run on the codec's workers).
    """

    def __init__(self, directory: Path, codec: PayloadCodec, *, fsync: FsyncMode,
                 fsync_interval: float) -> None:
        self.directory = directory
        self.codec = codec
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.segments: list[int] = []
        self.epoch = -1  # the writer's epoch, the only one whose segments it writes
        self.active = -1  # id of the segment appended to; -1: none yet
        self.size = 0  # bytes in the active segment file
        self.has_schema = False  # the active segment holds a SCHEMA frame
        self.pending: list[PendingFrame] = []
        self.pending_bytes = 0
        self.written: list[Entry] = []
        self.closed: dict[int, int] = {}  # segments this writer finished -> their size
        self.unsynced_written = 0  # bytes written since the last commit
        self.failed: BaseException | None = None
        self._fd = -1
        self._dirty: list[int] = []
        self._dir_dirty = False
        self._last_sync = time.monotonic()

    def open_active(self, segments: list[int]) -> None:
        """Take over the log's valid ``segments`` (after reconcile). Nothing is
        appended to them: the first write starts a segment of the writer's epoch."""
        self.segments = list(segments)

    def close(self) -> None:
        for fd in [*self._dirty, self._fd]:
            if fd >= 0:
                os.close(fd)
        self._dirty, self._fd = [], -1

    @property
    def uncommitted_bytes(self) -> int:
        return self.unsynced_written + self.pending_bytes

    def push(self, frame: PendingFrame) -> None:
        if frame.kind == Kind.DATA:  # another record before the commit: see background
            self.codec.background(self.pending)
        self.pending.append(frame)
        self.pending_bytes += frame.size
        if self.pending_bytes >= FLUSH_BYTES:
            self.flush(commit=False, keep_last=True)

    def new_segment(self, base: int) -> None:
        """Start segment ``base`` of our epoch (writing what is pending first)."""
        if self._fd >= 0:
            self.flush(commit=False)
            self.closed[self.active] = self.size  # complete: its final size
            if self.fsync == "never":
                os.close(self._fd)
            else:
                self._dirty.append(self._fd)
            self._fd = -1
        sid = make_sid(base, self.epoch)
        path = segment_path(self.directory, sid)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                           | getattr(os, "O_CLOEXEC", 0), 0o644)
        self.active, self.size = sid, 0
        self.has_schema = False
        self.segments.append(sid)
        self._dir_dirty = True

    def flush(self, *, commit: bool, keep_last: bool = False) -> None:
        """Write pending frames to the active segment (the last flagged COMMIT)."""
        frames = self.pending[:-1] if keep_last else self.pending
        if not frames:
            return
        try:
            for f in frames:
                if f.work is not None:
                    f.resolve()
                    self.codec.observe(f)
            parts: list[bytes | memoryview] = []
            offset = self.size
            last = len(frames) - 1
            for i, f in enumerate(frames):
                header, payload, footer = f.finish(FLAG_COMMIT if commit and i == last else 0)
                parts += (header, payload, footer)
                if f.kind == Kind.DATA:
                    self.written.append(Entry(self.active, offset, f.size, f.first_seq,
                                              f.last_seq, f.first_ts, f.last_ts, f.rows))
                offset += f.size
            _write_all(self._fd, parts)
        except BaseException as exc:
            self.failed = exc
            raise
        self.unsynced_written += offset - self.size
        self.size = offset
        self.pending = self.pending[-1:] if keep_last else []
        self.pending_bytes = sum(f.size for f in self.pending)

    def sync(self, *, force: bool = False) -> bool:
        """fsync per the mode (``force``: always); True if it did."""
        mode = self.fsync
        now = time.monotonic()
        if not force and (mode == "never" or (
                mode == "interval" and now - self._last_sync < self.fsync_interval)):
            return False
        try:
            for fd in self._dirty:
                os.fdatasync(fd)
                os.close(fd)
            self._dirty = []
            if self._fd >= 0:
                os.fdatasync(self._fd)
            if self._dir_dirty:
                fsync_dir(self.directory)
                self._dir_dirty = False
        except BaseException as exc:
            self.failed = exc
            raise
        self._last_sync = now
        return True

    def committed(self) -> None:
        """The index now covers everything written."""
        self.written = []
        self.unsynced_written = 0

    def discard(self, committed: Committed) -> None:
        """Cut frames written past the committed end (a close without commit)."""
        self.pending, self.pending_bytes = [], 0
        self.unsynced_written = 0
        if not self.written and self.size == committed.end and self.active == committed.segment:
            return
        self.written = []
        keep = committed.segment  # only our own epoch's files are ours to cut
        mine = self.epoch
        for s in [s for s in self.segments if s > keep and sid_epoch(s) == mine]:
            segment_path(self.directory, s).unlink(missing_ok=True)
            remove_side(self.directory, s)
        self.segments = [s for s in self.segments if s <= keep or sid_epoch(s) != mine]
        if keep >= 0 and sid_epoch(keep) == mine:
            os.truncate(segment_path(self.directory, keep), committed.end)

    def drop_segments(self, victims: list[int]) -> None:
        """Delete whole segments (trim), with their index side-files."""
        for s in victims:
            segment_path(self.directory, s).unlink()
            remove_side(self.directory, s)
        self.segments = [s for s in self.segments if s not in victims]
        fsync_dir(self.directory)


def _write_all(fd: int, parts: list[bytes | memoryview]) -> None:
    for i in range(0, len(parts), _IOV_MAX):
        chunk = parts[i:i + _IOV_MAX]
        total = sum(len(p) for p in chunk)
        n = os.writev(fd, chunk)
        if n < total:
            rest = memoryview(b"".join(chunk))[n:]
            while rest:
                rest = rest[os.write(fd, rest):]
