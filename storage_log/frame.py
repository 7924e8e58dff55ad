"""The frame: one record of a segment file, and its byte layout.

Everything written to a segment is a frame. A frame is self-delimiting in both
directions (the header gives the length going forward, the footer going backward)
and self-checking (an xxh64 over every byte except the checksum itself and the
trailing magic).
"""

from __future__ import annotations

import functools
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import pyarrow as pa
import xxhash
import zstandard

from storage_log import columnar

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


#: records of at least this many rows of numeric columns are written COLUMNAR; below
#: it the per-column passes cost more than compressing the Arrow message
COLUMNAR_MIN_ROWS = 256
#: records of at least this many rows are written PACKED (each column's bytes are
#: compressed only if they compress); below it one zstd frame of the whole blob
#: compresses better
PACKED_MIN_ROWS = 4096


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
    worker (``future``, see :meth:`FrameCodec.background`); :meth:`resolve` makes it
    encoded, and until then :attr:`size` is an estimate.
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


class FrameCodec:
    """Encodes and decodes frames. The on-disk layout of one frame, byte by byte.

    All integers are little-endian. ``P`` is the payload length.

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

    Framing costs exactly 64 bytes per frame. A DATA payload is the Arrow IPC
    *record-batch message* of the record (``RecordBatch.serialize()``, no schema),
    zstd-compressed (codec 1), or, for a record of at least ``COLUMNAR_MIN_ROWS``
    rows whose columns are all non-null integers or floats, the
    :mod:`storage_log.columnar` encoding of its columns, zstd-compressed (codec 2:
    the same record to the reader, a tenth of the compression work), or, from
    ``PACKED_MIN_ROWS`` rows, its layout-2 encoding (codec 3, not compressed as a
    whole: each column's bytes are bit-packed and zstd-compressed as they merit,
    :func:`storage_log.columnar.encode_packed`); the schema
    is written once per segment as a SCHEMA frame (uncompressed IPC schema
    message) before that segment's first DATA frame, and is mirrored in the LMDB
    metadata. A TOKEN payload is the caller's token bytes;
    a SEAL payload is empty.

    Invariants checked on every read: both magics, version, known kind, flags and
    codec, equal lengths in header and footer, the checksum, and for DATA
    ``first_seq <= last_seq``, ``first_ts <= last_ts``, ``rows > 0``.

    Thread safety: encoding may run on the instance's worker threads (``threads``),
    each with its own zstd compressor; call the methods from one thread.
    """

    def __init__(self, level: int = 1, threads: int = 0) -> None:
        self._level = level
        self._local = threading.local()
        self._arrow_zstd = pa.Codec("zstd")
        self.pool = ThreadPoolExecutor(threads, "storage_log-zstd") if threads > 1 else None
        self.ratio = 4.0  # running compressed/raw estimate, for sizes of pending frames
        self._row_width: tuple[pa.Schema, int | None] | None = None

    def close(self) -> None:
        if self.pool is not None:
            # never wait for ourselves (a last reference dropped on a worker thread)
            own = threading.current_thread().name.startswith("storage_log-zstd")
            self.pool.shutdown(wait=not own, cancel_futures=True)
            self.pool = None

    # -- encode -----------------------------------------------------------------

    def _compress(self, batch: pa.RecordBatch) -> tuple[int, bytes, xxhash.xxh64]:
        cctx = getattr(self._local, "cctx", None)
        if cctx is None:
            cctx = self._local.cctx = zstandard.ZstdCompressor(level=self._level)
        n = batch.num_rows
        if n >= PACKED_MIN_ROWS:
            payload = columnar.encode_packed(batch, cctx.compress)
            if payload is not None:
                if len(payload) > MAX_PAYLOAD:
                    raise ValueError(f"record payload of {len(payload)} bytes exceeds 4 GiB")
                return _PACKED, payload, xxhash.xxh64(payload)
        blob = columnar.encode(batch) if n >= COLUMNAR_MIN_ROWS else None
        codec = _ZSTD if blob is None else _COLUMNAR
        payload = cctx.compress(batch.serialize() if blob is None else blob)
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"record payload of {len(payload)} bytes exceeds 4 GiB")
        return codec, payload, xxhash.xxh64(payload)

    def encode_data(self, batch: pa.RecordBatch, first_seq: int, last_seq: int,
                    first_ts: int, last_ts: int) -> PendingFrame:
        """Encode one record; with worker threads, the encoding is left to
        :meth:`background` or to :meth:`PendingFrame.resolve`, whichever comes first."""
        frame = PendingFrame(int(Kind.DATA), int(Codec.ZSTD), b"", first_seq, last_seq,
                             first_ts, last_ts, batch.num_rows, None)
        if self.pool is None:
            frame.codec, frame.payload, frame.payload_hash = self._compress(batch)
        else:
            frame.raw_size = self._raw_size(batch)
            frame.work = functools.partial(self._compress, batch)
            frame.estimate = OVERHEAD + int(frame.raw_size / self.ratio)
        return frame

    def _raw_size(self, batch: pa.RecordBatch) -> int:
        """The record's size in memory, for estimates: rows times the row width when
        every column is a fixed-width number (``batch.nbytes`` walks every buffer)."""
        schema = batch.schema
        known = self._row_width
        if known is None or not known[0].equals(schema):
            width = (sum(f.type.bit_width for f in schema) // 8
                     if columnar.supported(schema) else None)
            known = self._row_width = (schema, width)
        return batch.num_rows * known[1] if known[1] is not None else int(batch.nbytes)

    def background(self, frames: list[PendingFrame]) -> None:
        """Hand the not yet encoded ``frames`` to the worker threads.

        Called when another record is appended before a commit: the caller appends
        several records per commit, so their encoding can overlap with its work. A
        record committed right after it was appended is encoded by the committing
        thread (no worker would start before the commit needs it; waking one only
        costs hand-offs).
        """
        pool = self.pool
        if pool is None:
            return
        for f in frames:
            if f.work is not None and f.future is None:
                f.future = pool.submit(f.work)

    def observe(self, frame: PendingFrame) -> None:
        """Learn the compression ratio from a resolved frame (for size estimates)."""
        if frame.raw_size and frame.payload:
            self.ratio = 0.8 * self.ratio + 0.2 * (frame.raw_size / len(frame.payload))

    @staticmethod
    def encode_control(kind: Kind, payload: bytes, last_seq: int, last_ts: int
                       ) -> PendingFrame:
        return _pending(kind, Codec.NONE, payload, last_seq, last_seq, last_ts, last_ts, 0)

    # -- decode -----------------------------------------------------------------

    def payload(self, buf: memoryview, info: FrameInfo, base: int = 0) -> pa.Buffer | memoryview:
        """The decompressed payload of ``info``; ``buf[0]`` is byte ``base`` of the segment.

        zstd payloads are decompressed by Arrow's codec into an aligned buffer from
        Arrow's memory pool (its allocator reuses memory, which makes replay faster
        than allocating a fresh ``bytes`` per record).
        """
        start = info.payload_offset - base
        raw = buf[start:start + info.payload_len]
        if info.codec in (_ZSTD, _COLUMNAR):
            try:
                size = zstandard.frame_content_size(raw)
                if size < 0:
                    return pa.py_buffer(zstandard.ZstdDecompressor().decompress(raw))
                return self._arrow_zstd.decompress(raw, size, asbytes=False)
            except (zstandard.ZstdError, pa.ArrowException) as exc:
                raise FrameError(info.offset, f"zstd payload does not decompress: {exc}") from exc
        return raw

    def decode_data(self, buf: memoryview, info: FrameInfo, schema: pa.Schema,
                    base: int = 0) -> pa.RecordBatch:
        offset, size, _, _, codec = info[:5]
        if codec == _PACKED:
            start = offset - base + HEADER_SIZE
            try:
                batch = columnar.decode_packed(buf[start:start + size - OVERHEAD], schema)
            except ValueError as exc:
                raise FrameError(offset, f"packed payload does not decode: {exc}") from exc
        elif codec == _COLUMNAR:
            try:
                batch = columnar.decode(self.payload(buf, info, base), schema)
            except ValueError as exc:
                raise FrameError(offset, f"columnar payload does not decode: {exc}") from exc
        elif codec == _ZSTD:  # inlined: records may be small and many
            start = offset - base + HEADER_SIZE
            raw = buf[start:start + size - OVERHEAD]
            try:
                n = _frame_content_size(raw)
                data = (self._arrow_zstd.decompress(raw, n, asbytes=False) if n >= 0 else
                        pa.py_buffer(zstandard.ZstdDecompressor().decompress(raw)))
            except (zstandard.ZstdError, pa.ArrowException) as exc:
                raise FrameError(offset, f"zstd payload does not decompress: {exc}") from exc
        else:
            payload = self.payload(buf, info, base)
            data = payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload)
        if codec not in (_COLUMNAR, _PACKED):
            try:
                batch = _read_record_batch(data, schema)
            except (pa.ArrowException, ValueError) as exc:
                raise FrameError(info.offset,
                                 f"payload is not an Arrow record batch: {exc}") from exc
        if batch.num_rows != info.rows:
            raise FrameError(info.offset, f"rows {batch.num_rows} != footer rows {info.rows}")
        return batch


def _pending(kind: Kind, codec: Codec, payload: bytes, first_seq: int, last_seq: int,
             first_ts: int, last_ts: int, rows: int) -> PendingFrame:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds 4 GiB")
    return PendingFrame(int(kind), int(codec), payload, first_seq, last_seq, first_ts,
                        last_ts, rows, xxhash.xxh64(payload))


def encode_schema(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize())


def decode_schema(data: bytes | memoryview) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


_ZSTD = int(Codec.ZSTD)
_COLUMNAR = int(Codec.COLUMNAR)
_PACKED = int(Codec.PACKED)
_frame_content_size = zstandard.frame_content_size
_read_record_batch = pa.ipc.read_record_batch

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
