"""Segment files: naming, listing, and walking their frames in large reads.

A segment is a plain file of back-to-back frames (see :mod:`storage_log.framing` for the
frame layout); it has no file header. It is named after the first sequence number
it holds, zero-padded to 20 digits, and the writer epoch that wrote it
(``00000000000000004711-00000003.seg``; a log written before epochs existed has
``00000000000000004711.seg``, epoch 0): every data record in it has ``seq >= base``
and ``seq >`` every record of the previous segment of the chain (see
:mod:`storage_log.epoch`). A writer appends only to segments of its own epoch; older
segments are immutable until trimmed. The first frame of a segment that holds data is
a SCHEMA frame written before its first DATA frame (a segment of a log that has no
records yet may start with a TOKEN or SEAL frame).

In memory and in the index a segment is one int, its **segment id**
``sid = base << 24 | epoch`` (:func:`make_sid`): ids sort by base, then by epoch,
which is the order of the chain, so "this segment or a later one" is ``>=``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from storage_log.durable import write_durable
from storage_log.errors import CorruptLogError
from storage_log.framing import (
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


def write_trim_marker(directory: Path, trimmed: int) -> None:
    """Durably record that records up to ``trimmed`` are gone (before deleting them).

    The LMDB index records it too, but the index is derived and may be rebuilt from
    the segments, which alone cannot tell a trimmed log from one that started later.
    Written durably (:func:`storage_log.durable.write_durable`): a crash leaves the
    old or the new marker, never a torn one.
    """
    write_durable(directory / TRIM_MARKER, f"trimmed {trimmed}\n")


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


EPOCH_BITS = 24
MAX_EPOCH = (1 << EPOCH_BITS) - 1


def make_sid(base: int, epoch: int) -> int:
    """The segment id of segment ``base`` of writer epoch ``epoch``."""
    return (base << EPOCH_BITS) | epoch


def sid_base(sid: int) -> int:
    """The first sequence number a segment may hold (its name)."""
    return sid >> EPOCH_BITS


def sid_epoch(sid: int) -> int:
    return sid & MAX_EPOCH


def segment_name(sid: int) -> str:
    epoch = sid_epoch(sid)
    if epoch == 0:
        return f"{sid_base(sid):020d}{SUFFIX}"
    return f"{sid_base(sid):020d}-{epoch:08d}{SUFFIX}"


def segment_path(directory: Path, sid: int) -> Path:
    return directory / segment_name(sid)


def parse_segment_name(name: str) -> int | None:
    """The segment id of a file name, None if it is not a segment's."""
    if not name.endswith(SUFFIX):
        return None
    stem = name[: -len(SUFFIX)]
    base, _, epoch = stem.partition("-")
    if len(base) != 20 or not base.isdigit() or (epoch and not epoch.isdigit()):
        return None
    return make_sid(int(base), int(epoch) if epoch else 0)


def list_segments(directory: Path) -> list[int]:
    """Sorted ids of every segment file in ``directory`` (of every epoch, in the
    chain or not: :func:`storage_log.epoch.read_chain` selects the valid ones)."""
    sids = []
    for entry in os.scandir(directory):
        sid = parse_segment_name(entry.name)
        if sid is not None:
            sids.append(sid)
    sids.sort()
    return sids


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
