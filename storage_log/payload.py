"""The payload codec: what a frame of a segment carries, encoded and decoded.

:class:`PayloadCodec` turns a record (an Arrow record batch) into the payload of a
DATA frame and back, choosing how to encode it (an Arrow IPC message compressed with
zstd, or the :mod:`storage_log.columnar` encodings of numeric columns), and makes the
payloads of control frames. The frame around a payload (header, footer, checks, the
byte layout) is :mod:`storage_log.framing`.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import xxhash
import zstandard

from storage_log import columnar
from storage_log.framing import (
    HEADER_SIZE,
    MAX_PAYLOAD,
    OVERHEAD,
    Codec,
    FrameError,
    FrameInfo,
    Kind,
    PendingFrame,
    pending,
)

__all__ = ["COLUMNAR_MIN_ROWS", "PACKED_MIN_ROWS", "PayloadCodec"]

#: records of at least this many rows of numeric columns are written COLUMNAR; below
#: it the per-column passes cost more than compressing the Arrow message
COLUMNAR_MIN_ROWS = 256
#: records of at least this many rows are written PACKED (each column's bytes are
#: compressed only if they compress); below it one zstd frame of the whole blob
#: compresses better
PACKED_MIN_ROWS = 4096


class PayloadCodec:
    """Encodes records into frames and decodes their payloads.

    A DATA payload is the Arrow IPC *record-batch message* of the record
    (``RecordBatch.serialize()``, no schema), zstd-compressed (codec 1), or, for a
    record of at least ``COLUMNAR_MIN_ROWS`` rows whose columns are all non-null
    integers or floats, the :mod:`storage_log.columnar` encoding of its columns,
    zstd-compressed (codec 2: the same record to the reader, a tenth of the
    compression work), or, from ``PACKED_MIN_ROWS`` rows, its layout-2 encoding
    (codec 3, not compressed as a whole: each column's bytes are bit-packed and
    zstd-compressed as they merit, :func:`storage_log.columnar.encode_packed`); the
    schema is written once per segment as a SCHEMA frame (uncompressed IPC schema
    message) before that segment's first DATA frame, and is mirrored in the LMDB
    metadata. A TOKEN payload is the caller's token bytes; a SEAL payload is empty.

    Decoding checks that a record has the rows its footer says.

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
        """The record's codec, payload and the payload's checksum."""
        codec, payload = (self._uncompressed(batch) if self._level == 0
                          else self._zstd(batch))
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"record payload of {len(payload)} bytes exceeds 4 GiB")
        return codec, payload, xxhash.xxh64(payload)

    def _zstd(self, batch: pa.RecordBatch) -> tuple[int, bytes]:
        """Levels 1-19: a large numeric record packed, its columns compressed where they
        shrink; a smaller one as a zstd frame of the columnar blob or the IPC message."""
        cctx = getattr(self._local, "cctx", None)
        if cctx is None:
            cctx = self._local.cctx = zstandard.ZstdCompressor(level=self._level)
        n = batch.num_rows
        if n >= PACKED_MIN_ROWS:
            payload = columnar.encode_packed(batch, cctx.compress)
            if payload is not None:
                return _PACKED, payload
        blob = columnar.encode(batch) if n >= COLUMNAR_MIN_ROWS else None
        codec = _ZSTD if blob is None else _COLUMNAR
        return codec, cctx.compress(batch.serialize() if blob is None else blob)

    @staticmethod
    def _uncompressed(batch: pa.RecordBatch) -> tuple[int, bytes]:
        """Level 0: a large numeric record in the packed layout with no column
        compressed (frame-of-reference, deltas and bit-packing only: 9 bytes a row of the
        growth benchmark's upstream records, against 32 raw and 5.6 with zstd, at half
        the encoding's CPU and three fifths of the decoding's: bench/upstream_codec.py),
        else the Arrow IPC message uncompressed (codec NONE). Both are read by every
        reader of the log format."""
        payload = (columnar.encode_packed(batch, None)
                   if batch.num_rows >= PACKED_MIN_ROWS else None)
        if payload is not None:
            return _PACKED, payload
        return _NONE, batch.serialize().to_pybytes()

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
        return pending(kind, Codec.NONE, payload, last_seq, last_seq, last_ts, last_ts, 0)

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


_NONE = int(Codec.NONE)
_ZSTD = int(Codec.ZSTD)
_COLUMNAR = int(Codec.COLUMNAR)
_PACKED = int(Codec.PACKED)
_frame_content_size = zstandard.frame_content_size
_read_record_batch = pa.ipc.read_record_batch
