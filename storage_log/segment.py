"""Segment files: naming, listing, and walking their frames in large reads.

A segment is a plain file of back-to-back frames (see :class:`FrameCodec` for the
frame layout); it has no file header. It is named after the first sequence number
it holds, zero-padded to 20 digits (``00000000000000004711.seg``): every data record
in it has ``seq >= name`` and ``seq >`` every record of the previous segment. Only
the newest segment is ever appended to; older segments are immutable until trimmed.
The first frame of a segment that holds data is a SCHEMA frame written before its
first DATA frame (a segment of a log that has no records yet may start with a TOKEN
or SEAL frame, and is then named 0).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from storage_log.errors import CorruptLogError
from storage_log.frame import (
    FOOTER,
    FOOTER_SIZE,
    OVERHEAD,
    FrameError,
    FrameInfo,
    parse_backward,
    parse_forward,
)

SUFFIX = ".seg"
READ_CHUNK = 4 << 20


TRIM_MARKER = "TRIMMED"


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_trim_marker(directory: Path, trimmed: int) -> None:
    """Durably record that records up to ``trimmed`` are gone (before deleting them).

    The LMDB index records it too, but the index is derived and may be rebuilt from
    the segments, which alone cannot tell a trimmed log from one that started later.
    Written to a temporary file, fsync'ed, renamed over the old marker, directory
    fsync'ed: a crash leaves the old or the new marker, never a torn one.
    """
    path = directory / TRIM_MARKER
    tmp = directory / (TRIM_MARKER + ".tmp")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(f"trimmed {trimmed}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)


def read_trim_marker(directory: Path) -> int | None:
    """The last trimmed seq :func:`write_trim_marker` recorded; None if never trimmed.

    Raises :class:`CorruptLogError` naming the file if it does not hold one.
    """
    path = directory / TRIM_MARKER
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptLogError(f"trim marker {path}: unreadable: {exc}") from exc
    parts = text.split()
    if len(parts) != 2 or parts[0] != "trimmed" or not parts[1].lstrip("-").isdigit():
        raise CorruptLogError(f"trim marker {path} at byte 0: expected 'trimmed <seq>', "
                              f"found {text[:40]!r}")
    return int(parts[1])


def segment_name(base: int) -> str:
    return f"{base:020d}{SUFFIX}"


def segment_path(directory: Path, base: int) -> Path:
    return directory / segment_name(base)


def list_segments(directory: Path) -> list[int]:
    """Sorted bases of the segment files in ``directory``."""
    bases = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(SUFFIX) and name[: -len(SUFFIX)].isdigit():
            bases.append(int(name[: -len(SUFFIX)]))
    bases.sort()
    return bases


class SegmentReader:
    """Read-only access to one segment file through large positional reads.

    Thread safety: none (one reader per thread). The file is opened on construction
    and closed by :meth:`close` (also a context manager).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def read(self, offset: int, length: int) -> memoryview:
        data = os.pread(self._fd, length, offset)
        return memoryview(data)

    def forward(self, start: int, end: int, chunk: int = READ_CHUNK
                ) -> Iterator[tuple[memoryview, int, FrameInfo]]:
        """Frames from byte ``start`` up to ``end``, as (buffer, buffer base, frame).

        Raises FrameError at the first invalid frame, or an incomplete one before ``end``.
        """
        chunk = max(chunk, 4096)
        pos = start
        while pos < end:
            want = min(chunk, end - pos)
            buf = self.read(pos, want)
            if len(buf) < want:
                raise FrameError(pos + len(buf), f"segment ends before byte {end}")
            rel = 0
            while pos + rel < end:
                info = parse_forward(buf, rel, pos)
                if info is None:
                    break
                yield buf, pos, info
                rel = info.end - pos
            if rel:
                pos += rel
                continue
            # the first frame does not fit in the chunk: read exactly that frame
            if want == end - pos:
                raise FrameError(pos, "truncated frame (torn write)")
            need = OVERHEAD + int.from_bytes(buf[8:12], "little")
            if pos + need > end:
                raise FrameError(pos, "truncated frame (torn write)")
            big = self.read(pos, need)
            info = parse_forward(big, 0, pos) if len(big) == need else None
            if info is None:
                raise FrameError(pos, "truncated frame (torn write)")
            yield big, pos, info
            pos = info.end

    def backward(self, end: int, stop: int = 0, chunk: int = 256 << 10
                 ) -> Iterator[tuple[memoryview, int, FrameInfo]]:
        """Frames ending at or before ``end``, newest first, down to byte ``stop``.

        Reads ``chunk`` bytes at a time from the end (more when one frame is bigger).
        Raises FrameError at the first invalid frame.
        """
        chunk = max(chunk, 4096)
        cur = end
        while cur > stop:
            lo = max(stop, cur - chunk)
            buf = self.read(lo, cur - lo)
            if len(buf) < cur - lo:
                raise FrameError(lo + len(buf), f"segment ends before byte {cur}")
            rel = cur - lo
            while rel > 0:
                info = parse_backward(buf, rel, lo)
                if info is None:
                    break
                yield buf, lo, info
                rel = info.offset - lo
            if rel == 0 or rel < cur - lo:
                cur = lo + rel
                continue
            # the newest frame is bigger than the chunk: read exactly that frame
            if lo == stop:
                raise FrameError(cur - FOOTER_SIZE, f"frame would start before byte {stop}")
            need = FOOTER.unpack_from(buf, rel - FOOTER_SIZE)[5] + OVERHEAD
            if cur - need < stop:
                raise FrameError(cur - FOOTER_SIZE, f"frame would start before byte {stop}")
            big = self.read(cur - need, need)
            info = parse_backward(big, need, cur - need) if len(big) == need else None
            if info is None:
                raise FrameError(cur - FOOTER_SIZE, "frame does not fit its length")
            yield big, cur - need, info
            cur = info.offset
