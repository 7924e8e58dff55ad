"""Framing: the header and footer around every payload of a segment, and their checks.

Everything written to a segment is a frame. A frame is self-delimiting in both
directions (the header gives the length going forward, the footer going backward)
and self-checking (an xxh64 over every byte except the checksum itself and the
trailing magic). This module packs (:class:`PendingFrame`) and validates
(:func:`parse_forward`, :func:`parse_backward`) frames; what a payload holds and how
it is encoded is :mod:`storage_log.payload`.

The on-disk layout of one frame, byte by byte. All integers are little-endian; ``P``
is the payload length.

==========  =====  ==========================================================
offset      size   field
==========  =====  ==========================================================
0           4      header magic ``b"CECr"``
4           1      format version (1)
5           1      kind: 1 DATA, 2 SCHEMA, 3 TOKEN, 4 SEAL
6           1      flags: bit 0 COMMIT (the frame ends a commit); others zero
7           1      codec: 0 none, 1 zstd, 2 columnar (each one zstd frame with
                   its content size), 3 packed (not compressed as a whole)
8           4      P, payload length (uint32)
12          P      payload
12+P        8      first_seq (int64)  \\
20+P        8      last_seq (int64)    | for DATA: of the record's rows;
28+P        8      first_ts (int64)    | control frames repeat the last
36+P        8      last_ts (int64)    /  data position before them (-1, 0 if none)
44+P        4      rows (uint32); 0 for control frames
48+P        4      P again (uint32), so a reader can step back from the end
52+P        8      xxh64 (seed 0) of payload ‖ bytes 0..11 ‖ bytes 12+P..51+P
60+P        4      footer magic ``b"rCEC"``
==========  =====  ==========================================================

Framing costs exactly 64 bytes per frame. Invariants checked on every read: both
magics, version, known kind, flags and codec, equal lengths in header and footer,
the checksum, and for DATA ``first_seq <= last_seq``, ``first_ts <= last_ts``,
``rows > 0``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import pyarrow as pa
import xxhash

FORMAT_VERSION = 1

HEADER_MAGIC = b"CECr"
FOOTER_MAGIC = b"rCEC"

#: header: magic, version, kind, flags, codec, payload length
HEADER = struct.Struct("<4sBBBBI")
#: footer: first_seq, last_seq, first_ts, last_ts, rows, payload length, checksum, magic
FOOTER = struct.Struct("<qqqqIIQ4s")
#: the part of the footer covered by the checksum
FOOTER_PREFIX = struct.Struct("<qqqqII")

HEADER_SIZE = HEADER.size  # 12
FOOTER_SIZE = FOOTER.size  # 52
OVERHEAD = HEADER_SIZE + FOOTER_SIZE  # 64 bytes of framing per record
MAX_PAYLOAD = (1 << 32) - 1

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


class Kind(IntEnum):
    """What a frame's payload holds."""

    DATA = 1  # one record: an Arrow IPC record-batch message (no schema)
    SCHEMA = 2  # the log's Arrow schema (IPC schema message)
    TOKEN = 3  # the caller's opaque commit token
    SEAL = 4  # end of stream; empty payload


class Codec(IntEnum):
    """How a frame's payload is compressed."""

    NONE = 0
    ZSTD = 1  # an Arrow IPC record-batch message, zstd-compressed
    COLUMNAR = 2  # a storage_log.columnar blob (layout 1), zstd-compressed
    PACKED = 3  # a storage_log.columnar layout-2 blob: each column compressed or not


#: header flag: this frame ends a commit (everything up to its end is committed)
FLAG_COMMIT = 0x01
_KNOWN_FLAGS = FLAG_COMMIT


class FrameError(Exception):
    """A frame that fails validation; internal, turned into a report or CorruptLogError.

    ``offset`` is the byte offset in the segment where the bad frame starts and
    ``invariant`` names the check that failed.
    """

    def __init__(self, offset: int, invariant: str) -> None:
        super().__init__(f"at byte {offset}: {invariant}")
        self.offset = offset
        self.invariant = invariant


class FrameInfo(NamedTuple):
    """A validated frame located in a segment (``offset`` is its first byte)."""

    offset: int
    size: int  # whole frame: header + payload + footer
    kind: int
    flags: int
    codec: int
    first_seq: int
    last_seq: int
    first_ts: int
    last_ts: int
    rows: int

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def payload_offset(self) -> int:
        return self.offset + HEADER_SIZE

    @property
    def payload_len(self) -> int:
        return self.size - OVERHEAD

    @property
    def committed(self) -> bool:
        return bool(self.flags & FLAG_COMMIT)


@dataclass
class PendingFrame:
    """An encoded frame whose flags (the commit bit) are fixed only when it is written.

    The checksum covers the payload first, so the payload is hashed once at append
    time and the hash state is copied to finish the header and footer later. With
    worker threads a DATA frame is not encoded yet (``work``) or is being encoded on a
    worker (``future``, see :meth:`storage_log.payload.PayloadCodec.background`);
    :meth:`resolve` makes it encoded, and until then :attr:`size` is an estimate.
    """

    kind: int
    codec: int
    payload: bytes | memoryview
    first_seq: int
    last_seq: int
    first_ts: int
    last_ts: int
    rows: int
    payload_hash: xxhash.xxh64 | None
    future: Future[tuple[int, bytes, xxhash.xxh64]] | None = None
    estimate: int = 0
    raw_size: int = 0
    work: Callable[[], tuple[int, bytes, xxhash.xxh64]] | None = None

    @property
    def size(self) -> int:
        if self.work is not None:
            return self.estimate
        return OVERHEAD + len(self.payload)

    def resolve(self) -> None:
        """Encode the frame now: on the calling thread if it was never handed to a
        worker or no worker has started it (the job is cancelled), else wait for the
        worker. Waiting for a worker that has not started would only add two thread
        hand-offs."""
        work = self.work
        if work is None:
            return
        future = self.future
        cancelled = future is None or future.cancel()
        result = work() if cancelled or future is None else future.result()
        self.codec, self.payload, self.payload_hash = result
        self.work = self.future = None

    def finish(self, flags: int) -> tuple[bytes, bytes | memoryview, bytes]:
        """Return (header, payload, footer) ready to be written."""
        self.resolve()
        assert self.payload_hash is not None
        n = len(self.payload)
        header = HEADER.pack(HEADER_MAGIC, FORMAT_VERSION, self.kind, flags, self.codec, n)
        prefix = FOOTER_PREFIX.pack(
            self.first_seq, self.last_seq, self.first_ts, self.last_ts, self.rows, n
        )
        h = self.payload_hash.copy()
        h.update(header)
        h.update(prefix)
        footer = prefix + struct.pack("<Q4s", h.intdigest(), FOOTER_MAGIC)
        return header, self.payload, footer


def pending(kind: Kind, codec: Codec, payload: bytes, first_seq: int, last_seq: int,
            first_ts: int, last_ts: int, rows: int) -> PendingFrame:
    """A frame of an already encoded payload (a control frame), its payload hashed now."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds 4 GiB")
    return PendingFrame(int(kind), int(codec), payload, first_seq, last_seq, first_ts,
                        last_ts, rows, xxhash.xxh64(payload))


def encode_schema(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize())


def decode_schema(data: bytes | memoryview) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


_KINDS = frozenset(int(k) for k in Kind)
_CODECS = frozenset(int(c) for c in Codec)


def _check(buf: memoryview, start: int, base: int, header: tuple[bytes, int, int, int, int, int],
           footer: tuple[int, int, int, int, int, int, int, bytes]) -> FrameInfo:
    """Validate a frame whose header and footer were unpacked; ``start`` is buffer-relative."""
    off = start + base
    magic, version, kind, flags, codec, plen = header
    first_seq, last_seq, first_ts, last_ts, rows, flen, checksum, fmagic = footer
    if magic != HEADER_MAGIC:
        raise FrameError(off, "header magic")
    if fmagic != FOOTER_MAGIC:
        raise FrameError(off, "footer magic")
    if version != FORMAT_VERSION:
        raise FrameError(off, f"format version {version} (expected {FORMAT_VERSION})")
    if kind not in _KINDS:
        raise FrameError(off, f"unknown frame kind {kind}")
    if codec not in _CODECS:
        raise FrameError(off, f"unknown codec {codec}")
    if flags & ~_KNOWN_FLAGS:
        raise FrameError(off, f"unknown flags {flags:#x}")
    if plen != flen:
        raise FrameError(off, f"header length {plen} != footer length {flen}")
    p0 = start + HEADER_SIZE
    p1 = p0 + plen
    h = xxhash.xxh64(buf[p0:p1])
    h.update(buf[start:p0])
    h.update(buf[p1:p1 + FOOTER_PREFIX.size])
    if h.intdigest() != checksum:
        raise FrameError(off, "xxh64 checksum mismatch")
    if kind == Kind.DATA and (rows == 0 or first_seq > last_seq or first_ts > last_ts):
        raise FrameError(off, "data frame positions (rows > 0, first <= last)")
    return FrameInfo(off, plen + OVERHEAD, kind, flags, codec, first_seq, last_seq,
                     first_ts, last_ts, rows)


def parse_forward(buf: memoryview, start: int, base: int = 0) -> FrameInfo | None:
    """The frame starting at ``buf[start]``; None if the buffer ends inside it.

    Raises FrameError if the bytes there are not a valid frame.
    """
    n = len(buf)
    if n - start < HEADER_SIZE:
        return None
    header = HEADER.unpack_from(buf, start)
    if header[0] != HEADER_MAGIC:
        raise FrameError(start + base, "header magic")
    end = start + header[5] + OVERHEAD
    if end > n:
        return None
    footer = FOOTER.unpack_from(buf, end - FOOTER_SIZE)
    return _check(buf, start, base, header, footer)


def parse_backward(buf: memoryview, end: int, base: int = 0) -> FrameInfo | None:
    """The frame ending at ``buf[end]``; None if it starts before ``buf[0]``.

    Raises FrameError if the bytes there are not a valid frame.
    """
    if end < FOOTER_SIZE:
        return None
    footer = FOOTER.unpack_from(buf, end - FOOTER_SIZE)
    if footer[7] != FOOTER_MAGIC:
        raise FrameError(end + base - FOOTER_SIZE, "footer magic")
    start = end - footer[5] - OVERHEAD
    if start < 0:
        if start + base < 0:
            raise FrameError(end + base - FOOTER_SIZE, "footer length runs before the segment")
        return None
    header = HEADER.unpack_from(buf, start)
    return _check(buf, start, base, header, footer)
