"""A columnar payload codec for records of fixed-width numeric columns (pure, no I/O).

(Over 400 lines: the encodings, their choice and the decoder that must invert each
exactly are one format definition, read whole.)

The output of a windowed aggregate is wide and redundant: sixteen 8-byte columns of
which several repeat each other (a fast window's ``ts``, ``first_ts`` and
``last_ts``; ``sum``, ``min``, ``max`` and ``value``), are constant over a record
(``type``, ``cnt``) or grow by small steps (``seq``, ``ts``). A general-purpose
compressor pays for every raw byte of it: zstd on the Arrow IPC message ran at about
350 MB/s here, and that was 95 % of the time an operator spent appending its output
(issue 16). This codec first removes what is structural, with a few vectorized NumPy
passes per column, and hands only the remainder to zstd:

``CONST``      every row holds one value (stored once);
``SAME``       bit-identical to an earlier column of the record (stored as its index);
``FOR``        value − min fits in 1, 2 or 4 bytes ("frame of reference");
``DELTA``      row-to-row difference − min difference fits in 0, 1, 2 or 4 bytes
               (0: an arithmetic sequence, nothing stored per row);
``RAW``        the little-endian values as they are.

A float64 column whose every value is an integer (prices in cents, counts, sums of
integers) is encoded as the integers it holds (flag ``F2I``) when that is exact to the
bit (``-0.0`` and NaN are not). All arithmetic is modulo 2^64 on the values' bit
patterns, so every encoding is lossless for every input, overflow included.

Layout 1 (:func:`encode`, little-endian)::

    u32 rows, u16 columns, then per column:
      u8 tag, u8 flags, u8 width k, i64 a, i64 b, then m*k bytes
    m = rows (FOR, RAW), rows - 1 (DELTA), 0 (CONST, SAME);
    RAW: k = the type's byte width; CONST: a = the value; SAME: a = the column index;
    FOR: a = min; DELTA: a = first value, b = min difference.

The blob is zstd-compressed as a whole by the caller (frame codec COLUMNAR, see
:mod:`storage_log.payload`).

Layout 2 (:func:`encode_packed`, frame codec PACKED, for large records) has the same
columns and one more header field, the number of bytes stored for the column::

      u8 tag, u8 flags, u8 width k, i64 a, i64 b, u32 length, then length bytes

and two more flags: ``BITS`` (FOR and DELTA values below 16 packed at k = 1, 2 or 4
bits, ceil(m*k/8) bytes, first value in the lowest bits of a byte) and ``ZSTD`` (the
bytes are one zstd frame of the m*k or packed bytes, with its content size). A
column is compressed only if a sample of it compresses: zstd spent most of its time
on bytes it could not shrink (random prices) or on a 0/1 key byte by byte. The
blob is not compressed as a whole.

A record whose schema has a column that is not a non-null fixed-width integer or
float is not encoded here (``encode`` returns None) and stays an Arrow IPC message.

:func:`encode_reference` / :func:`decode` and :func:`encode_packed` /
:func:`decode_packed` round-trips are checked against Arrow's own equality in
``tests/storage_log/test_columnar.py`` on random and adversarial records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import zstandard

RAW, CONST, SAME, FOR, DELTA = 0, 1, 2, 3, 4
F2I = 0x01
BITS = 0x02  # layout 2: k is a width in bits (1, 2 or 4), the values packed
ZSTD = 0x04  # layout 2: the column's bytes are one zstd frame (with its content size)

_HEAD = struct.Struct("<IH")
_COL = struct.Struct("<BBBqq")
_COL2 = struct.Struct("<BBBqqI")
#: layout 2: a column's bytes are compressed only if there are this many and if
#: compressing the first ``SAMPLE`` of them saves a tenth
ZSTD_MIN_BYTES = 2048
SAMPLE = 4096

#: one encoded column: tag, flags, width k, a, b, its bytes (None: none), and for FOR
#: and DELTA the largest value stored (what a bit width must hold)
_Spec = tuple[int, int, int, int, int, "np.ndarray | None", int]
_SIGNED = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_WIDTHS = (1, 2, 4)
_PROBE = 256  # rows whose differences are looked at before all of them


def supported(schema: pa.Schema) -> bool:
    """True if every column of ``schema`` is a fixed-width integer or float."""
    return all(pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in schema)


def _values(col: pa.Array) -> tuple[np.ndarray, int]:
    """The column's values as signed integers of its byte width (a view, no copy), and
    the address of its first value."""
    width = col.type.bit_width // 8
    buf = col.buffers()[1]
    assert buf is not None
    arr = np.frombuffer(buf, dtype=_SIGNED[width], count=len(col) + col.offset)
    return arr[col.offset:], buf.address + col.offset * width


def _fit(span: int) -> int:
    """The byte width (1, 2, 4) that holds 0..span, or 0 if none does."""
    for k in _WIDTHS:
        if span < (1 << (8 * k)):
            return k
    return 0


def encode(batch: pa.RecordBatch) -> bytes | None:
    """The columnar blob (layout 1) of ``batch``, or None if its schema or nulls are
    not handled."""
    specs = _specs(batch)
    if specs is None:
        return None
    parts: list[bytes | memoryview] = [_HEAD.pack(batch.num_rows, len(specs))]
    for tag, flags, k, a, b, body, _ in specs:
        parts.append(_COL.pack(tag, flags, k, a, b))
        if body is not None:
            parts.append(body.data)
    return b"".join(parts)


def encode_packed(batch: pa.RecordBatch, compress: Callable[[memoryview], bytes] | None
                  ) -> bytes | None:
    """The layout-2 blob of ``batch`` (None as :func:`encode`): the columns of layout 1,
    each header followed by the length of the column's bytes, which are

    * for FOR and DELTA values below 16, packed at 1, 2 or 4 bits a value (flag BITS;
      little-endian inside a byte: the first value in the lowest bits);
    * at least ``ZSTD_MIN_BYTES`` of them: ``compress``'s zstd frame of them (flag
      ZSTD) when a ``SAMPLE``-byte prefix shrinks by a tenth or more and the whole
      does too; otherwise as they are.

    Unlike a zstd frame of the whole blob, bytes that do not compress (random prices,
    a 0/1 key) cost no compression work (issue 16: that was most of zstd's time).
    ``compress`` None: no column is compressed.
    """
    specs = _specs(batch)
    if specs is None:
        return None
    parts: list[bytes | memoryview] = [_HEAD.pack(batch.num_rows, len(specs))]
    for tag, flags0, k0, a, b, values, top in specs:
        if values is None:
            parts.append(_COL2.pack(tag, flags0, k0, a, b, 0))
            continue
        flags, k, body = flags0, k0, values
        if k == 1 and tag != RAW and top < 16:
            k = 1 if top < 2 else 2 if top < 4 else 4
            body = _pack(values, k)
            flags |= BITS
        raw = body.view(np.uint8).data
        size = len(raw)
        if compress is not None and size >= ZSTD_MIN_BYTES and (
                size < 2 * SAMPLE or len(compress(raw[:SAMPLE])) <= 0.9 * SAMPLE):
            packed = compress(raw)
            if len(packed) <= 0.9 * size:
                parts += (_COL2.pack(tag, flags | ZSTD, k, a, b, len(packed)), packed)
                continue
        parts += (_COL2.pack(tag, flags, k, a, b, size), raw)
    return b"".join(parts)


def _specs(batch: pa.RecordBatch) -> list[_Spec] | None:
    """Every column's encoding, or None if the schema or nulls are not handled.

    Each column costs a handful of vectorized passes: a column whose values live at the
    same address as an earlier one's is SAME without a comparison, an integral float
    column is tried as integers only if its first and last values are integral, and
    only the chosen encoding's bytes are materialized.
    """
    cols = batch.columns
    if not supported(batch.schema) or any(c.null_count for c in cols):
        return None
    n = batch.num_rows
    specs: list[_Spec] = []
    at: dict[tuple[int, int], int] = {}  # (type id, address) -> an earlier column's index
    ends: dict[tuple[int, int, int], list[int]] = {}  # (type id, first, last) -> indices
    values: list[np.ndarray] = []
    for col in cols:
        v, addr = _values(col)
        width = v.dtype.itemsize
        if n == 0:
            specs.append((RAW, 0, width, 0, 0, None, 0))
            continue
        tid = col.type.id
        same = at.setdefault((tid, addr), len(values))
        if same == len(values):  # not at an earlier column's address: equal to one?
            key = (tid, int(v[0]), int(v[-1]))
            twins = ends.setdefault(key, [])
            same = next((i for i in twins if bool((values[i] == v).all())), -1)
            twins.append(len(values))
        values.append(v)
        if same >= 0:
            specs.append((SAME, 0, 0, same, 0, None, 0))
            continue
        if pa.types.is_floating(col.type):
            ints = _float_ints(v) if width == 8 else None
            out = _integers(ints, F2I, width) if ints is not None else None
        else:
            out = _integers(v, 0, width)
        specs.append(out or _raw(v))
    return specs


def _float_ints(v: np.ndarray) -> np.ndarray | None:
    """The int64 values of a float64 column (as bits ``v``) if converting them back gives
    the same bits for every row (so ``-0.0``, NaN, infinities and fractions are not);
    None otherwise."""
    f = v.view(np.float64)
    for x in (float(f[0]), float(f[-1])):  # the common case, fractions, costs no pass
        if not (x.is_integer() and abs(x) < 2.0 ** 62):
            return None
    with np.errstate(invalid="ignore"):  # NaN, inf: whatever they become fails the check
        ints = f.astype(np.int64)
    if not bool((ints.astype(np.float64).view(np.int64) == v).all()):
        return None
    return ints


def _raw(v: np.ndarray) -> _Spec:
    return (RAW, 0, v.dtype.itemsize, 0, 0, np.ascontiguousarray(v), 0)


def _integers(v: np.ndarray, flags: int, width: int) -> _Spec | None:  # noqa: PLR0911, PLR0912 - one pass, for speed
    """The cheapest of CONST, FOR and DELTA for ``v``; None if none is smaller than RAW.

    Ties go to CONST, then FOR. Statistics are computed only where they can change the
    choice (the first, second and last values rule out an arithmetic sequence; a value
    range that fits one byte leaves DELTA nothing to win), then only the chosen
    encoding's bytes are materialized.
    """
    n = len(v)
    if n == 0:
        return None
    first = int(v[0])
    if n == 1:
        return (CONST, flags, 0, first, 0, None, 0)
    last, step = int(v[-1]), int(v[1]) - first
    lo = hi = 0
    have_range = False
    if step == 0 and last == first:
        lo, hi, have_range = int(v.min()), int(v.max()), True
        if lo == hi:
            return (CONST, flags, 0, first, 0, None, 0)
    d: np.ndarray | None = None
    dlo = dhi = 0
    # an arithmetic sequence (modulo 2^64, like the decoder's sum) that is not constant
    # has step != 0 and v[i] - first == i * step at i = mid and n - 1
    mid = n // 2
    if step and (last - first - (n - 1) * step) % (1 << 64) == 0 \
            and (int(v[mid]) - first - mid * step) % (1 << 64) == 0:
        d, dlo, dhi = _diffs(v)
        if dlo == dhi:
            return (DELTA, flags, 0, first, dlo, None, 0)
    if not have_range:
        lo, hi = int(v.min()), int(v.max())
    best_k = _fit(hi - lo)
    # FOR of a one-byte column is no smaller than RAW, but layout 2 packs small values
    use_for = 0 < best_k < width or (best_k == 1 and hi - lo < 16)
    delta_may_win = not (use_for and best_k == 1)  # no DELTA (0 ruled out) is smaller
    if delta_may_win and use_for and d is None and n > 2 * _PROBE:
        # the differences of a prefix span no more than all of them: if they need
        # best_k bytes already, DELTA cannot be smaller than FOR (random values)
        _, plo, phi = _diffs(v[:_PROBE])
        delta_may_win = 0 < _fit(phi - plo) < best_k
    if delta_may_win:
        if d is None:
            d, dlo, dhi = _diffs(v)
        k = _fit(dhi - dlo)
        if k and k <= width and not (use_for and best_k <= k):
            if dlo:
                np.subtract(d, np.int64(dlo), out=d)
            return (DELTA, flags, k, first, dlo, d.astype(_UNSIGNED[k]), dhi - dlo)
    if use_for:
        vals = v if lo == 0 else v - np.array(lo, v.dtype)
        return (FOR, flags, best_k, lo, 0, vals.astype(_UNSIGNED[best_k]), hi - lo)
    return None


def _diffs(v: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Row-to-row differences of ``v`` as int64 (modulo 2^64), their min and max."""
    v64 = v.astype(np.int64, copy=False)
    d = np.subtract(v64[1:], v64[:-1])
    return d, int(d.min()), int(d.max())


def decode(blob: bytes | memoryview | pa.Buffer, schema: pa.Schema) -> pa.RecordBatch:
    """The record encoded by :func:`encode`; raises ValueError on a malformed blob."""
    return _decode(blob, schema, packed=False)


def decode_packed(blob: bytes | memoryview | pa.Buffer, schema: pa.Schema
                  ) -> pa.RecordBatch:
    """The record encoded by :func:`encode_packed`; raises ValueError on a malformed
    blob (a column that does not decompress to its size included)."""
    return _decode(blob, schema, packed=True)


def _decode(blob: bytes | memoryview | pa.Buffer, schema: pa.Schema, *, packed: bool  # noqa: PLR0912 - each check of a blob in byte order
            ) -> pa.RecordBatch:
    mv = memoryview(blob)
    if len(mv) < _HEAD.size:
        raise ValueError("columnar payload shorter than its header")
    n, ncols = _HEAD.unpack_from(mv, 0)
    if ncols != len(schema):
        raise ValueError(f"columnar payload has {ncols} columns, the schema {len(schema)}")
    col_struct = _COL2 if packed else _COL
    known = F2I | BITS | ZSTD if packed else F2I
    pos = _HEAD.size
    cols: list[np.ndarray] = []
    arrays: list[pa.Array] = []
    for j, field in enumerate(schema):
        name = field.name
        if not (pa.types.is_integer(field.type) or pa.types.is_floating(field.type)):
            raise ValueError(f"column {name!r}: type {field.type} is not columnar")
        width = field.type.bit_width // 8
        if pos + col_struct.size > len(mv):
            raise ValueError(f"column {name!r}: header cut short")
        tag, flags, k, a, b, *stored = col_struct.unpack_from(mv, pos)
        pos += col_struct.size
        if flags & ~known:
            raise ValueError(f"column {name!r}: unknown flags {flags:#x}")
        m = n if tag in (RAW, FOR) else max(n - 1, 0) if tag == DELTA else 0
        size = (m * k + 7) // 8 if flags & BITS else m * k
        length = stored[0] if packed else size
        if pos + length > len(mv):
            raise ValueError(f"column {name!r}: values cut short")
        raw = mv[pos:pos + length]
        pos += length
        if flags & ZSTD:
            raw = _decompress(raw, size, name)
        elif length != size:
            raise ValueError(f"column {name!r}: {length} bytes stored, {size} expected")
        if flags & BITS:
            if tag not in (FOR, DELTA) or k not in (1, 2, 4):
                raise ValueError(f"column {name!r}: {k}-bit values of encoding {tag}")
            raw, k = _unpack(raw, k, m).data, 1
        if tag == SAME:
            if not 0 <= a < j or cols[a].dtype.itemsize != width:
                raise ValueError(f"column {name!r}: bad reference {a}")
            bits = cols[a]
        else:
            bits = _decode_column(tag, flags & ~(BITS | ZSTD), k, a, b, raw, n, width, name)
        cols.append(bits)
        arrays.append(pa.Array.from_buffers(field.type, n, [None, pa.py_buffer(bits)]))
    if pos != len(mv):
        raise ValueError(f"columnar payload has {len(mv) - pos} bytes past its columns")
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _decompress(raw: memoryview, size: int, name: str) -> memoryview:
    try:
        if zstandard.frame_content_size(raw) != size:
            raise ValueError(f"column {name!r}: zstd frame is not of {size} bytes")
        return memoryview(_ARROW_ZSTD.decompress(raw, size, asbytes=False))
    except (zstandard.ZstdError, pa.ArrowException, OSError) as exc:  # Arrow: OSError
        raise ValueError(f"column {name!r}: zstd frame does not decompress: {exc}") from exc


_ARROW_ZSTD = pa.Codec("zstd")  # thread-safe; decompresses into Arrow's memory pool


def _pack(values: np.ndarray, k: int) -> np.ndarray:
    """uint8 ``values`` below 2^k packed ``8 // k`` to a byte, the first lowest."""
    if k == 1:
        return np.packbits(values, bitorder="little")
    per = 8 // k
    pad = -len(values) % per
    if pad:
        values = np.concatenate([values, np.zeros(pad, np.uint8)])
    group = values.reshape(-1, per)
    out = group[:, 0].copy()
    for j in range(1, per):
        out |= group[:, j] << np.uint8(j * k)
    return out


def _unpack(raw: memoryview, k: int, m: int) -> np.ndarray:
    """The ``m`` uint8 values :func:`_pack` packed into ``raw``."""
    data = np.frombuffer(raw, np.uint8)
    if k == 1:
        return np.unpackbits(data, count=m, bitorder="little")
    per = 8 // k
    out = np.empty((len(data), per), np.uint8)
    mask = np.uint8((1 << k) - 1)
    for j in range(per):
        np.bitwise_and(data >> np.uint8(j * k), mask, out=out[:, j])
    return out.reshape(-1)[:m]


def _decode_column(tag: int, flags: int, k: int, a: int, b: int, raw: memoryview, n: int,  # noqa: PLR0912 - a branch per tag
                   width: int, name: str) -> np.ndarray:
    """The bit pattern of one column, as signed integers of ``width`` bytes."""
    out_t = _SIGNED[width]
    if tag == RAW:
        if k != width:
            raise ValueError(f"column {name!r}: raw width {k} != {width}")
        v = np.frombuffer(raw, dtype=out_t).copy()
    elif tag == CONST:
        v = np.full(n, a, dtype=np.int64)
    elif tag == FOR:
        if k not in _WIDTHS:
            raise ValueError(f"column {name!r}: width {k}")
        v = np.frombuffer(raw, dtype=_UNSIGNED[k]).astype(np.int64)
        v += np.int64(a)
    elif tag == DELTA:
        if k not in (0, *_WIDTHS):
            raise ValueError(f"column {name!r}: width {k}")
        if n == 0:
            v = np.empty(0, dtype=np.int64)
        else:
            d = (np.full(n - 1, b, dtype=np.int64) if k == 0 else
                 np.frombuffer(raw, dtype=_UNSIGNED[k]).astype(np.int64) + np.int64(b))
            v = np.empty(n, dtype=np.int64)
            v[0] = a
            np.cumsum(d, out=v[1:])
            v[1:] += np.int64(a)
    else:
        raise ValueError(f"column {name!r}: unknown encoding {tag}")
    if flags & F2I:
        if width != 8:
            raise ValueError(f"column {name!r}: F2I on a {width}-byte column")
        return v.astype(np.float64).view(np.int64)
    if flags:
        raise ValueError(f"column {name!r}: unknown flags {flags:#x}")
    return v.astype(out_t, copy=False)


def encode_reference(batch: pa.RecordBatch) -> bytes | None:
    """A short oracle for tests: every column RAW (the decoder must accept it too)."""
    if not supported(batch.schema) or any(c.null_count for c in batch.columns):
        return None
    parts: list[bytes | memoryview] = [_HEAD.pack(batch.num_rows, batch.num_columns)]
    for col in batch.columns:
        v = _values(col)[0]
        parts += (_COL.pack(RAW, 0, v.dtype.itemsize, 0, 0), np.ascontiguousarray(v).data)
    return b"".join(parts)


__all__ = ["decode", "encode", "encode_reference", "supported"]
