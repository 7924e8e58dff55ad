"""The columnar payload codec: exact round trips on random and adversarial records,
rejection of malformed blobs, and COLUMNAR frames through the frame codec and a log."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_log import columnar
from storage_log import payload as payload_mod
from storage_log.framing import FLAG_COMMIT, Codec, FrameError, parse_forward
from storage_log.log import StreamLog
from storage_log.payload import COLUMNAR_MIN_ROWS, PayloadCodec
from tests.storage_log.frames import packed_column_flags, record_frames

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(),
         pa.float32(), pa.float64()]


def _bits_equal(a: pa.RecordBatch, b: pa.RecordBatch) -> bool:
    """Equal to the bit (Arrow's equals treats NaN as unequal and -0.0 as 0.0)."""
    if not a.schema.equals(b.schema) or a.num_rows != b.num_rows:
        return False
    for x, y in zip(a.columns, b.columns, strict=True):
        w = x.type.bit_width // 8
        vx = np.frombuffer(x.buffers()[1], f"u{w}", len(x) + x.offset)[x.offset:]
        vy = np.frombuffer(y.buffers()[1], f"u{w}", len(y) + y.offset)[y.offset:]
        if not np.array_equal(vx, vy):
            return False
    return True


@st.composite
def column(draw: st.DrawFn, n: int) -> tuple[pa.DataType, np.ndarray]:
    t = draw(st.sampled_from(TYPES))
    w = t.bit_width // 8
    shape = draw(st.sampled_from(["random", "const", "step", "small", "extreme", "floaty",
                                  "almost", "bits"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    bits = rng.integers(0, 256, n * w, dtype=np.uint8).view(f"i{w}")
    if shape == "const":
        bits = np.full(n, bits[0] if n else 0, dtype=f"i{w}")
    elif shape == "step":
        start = draw(st.integers(-(1 << (8 * w - 1)), (1 << (8 * w - 1)) - 1))
        step = draw(st.integers(-3, 3))
        bits = (start + step * np.arange(n, dtype=np.int64)).astype(f"i{w}")
    elif shape == "small":
        bits = (rng.integers(-300, 300, n) + (bits[0] if n else 0)).astype(f"i{w}")
    elif shape == "almost":  # a step sequence but for one row: not arithmetic, though
        # its first, middle and last values say it could be
        start = draw(st.integers(-(1 << (8 * w - 1)), (1 << (8 * w - 1)) - 1))
        step = draw(st.integers(-3, 3))
        bits = (start + step * np.arange(n, dtype=np.int64)).astype(f"i{w}")
        if n > 3:
            i = draw(st.sampled_from([1, n // 2 - 1, n // 2 + 1, n - 2]))
            bits[i] = bits[i] + np.array(draw(st.sampled_from([1, -1, 7])), f"i{w}")
    elif shape == "bits":  # few distinct values
        bits = rng.integers(0, draw(st.sampled_from([2, 3, 4, 16, 17])), n).astype(f"i{w}")
    elif shape == "extreme":  # the ends of the range: deltas wrap modulo 2^64
        lo, hi = -(1 << (8 * w - 1)), (1 << (8 * w - 1)) - 1
        bits = rng.choice(np.array([lo, hi, 0, -1, 1], dtype=np.int64), n).astype(f"i{w}")
    if pa.types.is_floating(t) and shape == "floaty":
        special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 2.0**62, -(2.0**63), 1.5,
                            12345.0, 2.0**53 + 2], dtype=np.float64)
        f = np.where(rng.random(n) < 0.8, rng.integers(-10**6, 10**6, n).astype(np.float64),
                     rng.choice(special, n))
        bits = f.astype(t.to_pandas_dtype()).view(f"i{w}")
    return t, bits


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    n = draw(st.sampled_from([0, 1, 2, 3, 17, 300]))
    cols = draw(st.lists(column(n), min_size=1, max_size=8))
    arrays = [pa.Array.from_buffers(t, n, [None, pa.py_buffer(v.tobytes())]) for t, v in cols]
    if len(cols) > 1 and draw(st.booleans()):  # a repeated column (SAME)
        arrays.append(arrays[0])
    return pa.record_batch(arrays, names=[f"c{i}" for i in range(len(arrays))])


@SETTINGS
@given(batch=batches())
def test_round_trip_is_exact_to_the_bit(batch: pa.RecordBatch) -> None:
    blob = columnar.encode(batch)
    assert blob is not None
    assert _bits_equal(columnar.decode(blob, batch.schema), batch)
    ref = columnar.encode_reference(batch)  # the all-RAW oracle decodes the same
    assert ref is not None
    assert _bits_equal(columnar.decode(ref, batch.schema), batch)


def test_encodings_chosen_for_structure() -> None:
    n = 1000
    seq = np.arange(n, dtype=np.int64) * 2 + 7
    price = np.random.default_rng(1).integers(100, 5000, n).astype(np.float64)
    batch = pa.record_batch({
        "seq": seq, "same": seq.copy(), "const": np.full(n, 5, np.int64),
        "price": price, "half": price + 0.5, "key": seq % 3,
    })
    blob = columnar.encode(batch)
    assert blob is not None
    tags, pos = [], struct.calcsize("<IH")
    col = struct.Struct("<BBBqq")
    widths = {"seq": 0, "same": 0, "const": 0, "price": 2, "half": 8, "key": 1}
    for name in batch.schema.names:
        tag, flags, k, _, _ = col.unpack_from(blob, pos)
        tags.append((tag, flags))
        pos += col.size + (n * k if tag in (columnar.RAW, columnar.FOR) else
                           (n - 1) * k if tag == columnar.DELTA else 0)
        assert k == widths[name], name
    assert pos == len(blob)
    assert tags == [(columnar.DELTA, 0), (columnar.SAME, 0), (columnar.CONST, 0),
                    (columnar.FOR, columnar.F2I), (columnar.RAW, 0), (columnar.FOR, 0)]
    assert len(blob) < batch.nbytes / 3
    assert columnar.decode(blob, batch.schema).equals(batch)


def _tags(blob: bytes, n: int, ncols: int) -> list[tuple[int, int, int, int]]:
    """(tag, flags, width, a) of each column of a codec-2 blob."""
    out, pos = [], struct.calcsize("<IH")
    col = struct.Struct("<BBBqq")
    for _ in range(ncols):
        tag, flags, k, a, _b = col.unpack_from(blob, pos)
        out.append((tag, flags, k, a))
        pos += col.size + (n * k if tag in (columnar.RAW, columnar.FOR) else
                           (n - 1) * k if tag == columnar.DELTA else 0)
    assert pos == len(blob)
    return out


def test_same_column_found_by_address_or_by_value() -> None:
    n = 2000
    ts = np.cumsum(np.random.default_rng(2).integers(0, 30, n)).astype(np.int64)
    shared = pa.array(ts)
    batch = pa.record_batch([shared, shared, pa.array(ts.copy()), pa.array(ts + 1),
                             pa.array(ts.view(np.float64))], names=list("abcde"))
    blob = columnar.encode(batch)
    assert blob is not None
    tags = _tags(blob, n, 5)
    assert tags[0][:3] == (columnar.DELTA, 0, 1)
    assert tags[1] == (columnar.SAME, 0, 0, 0) and tags[2] == (columnar.SAME, 0, 0, 0)
    assert tags[3][0] == columnar.DELTA  # equal deltas, but not the same values
    assert tags[4][0] != columnar.SAME  # the same bits as another type: not SAME
    assert _bits_equal(columnar.decode(blob, batch.schema), batch)
    sliced = batch.slice(7, 1500)  # offsets into shared buffers
    blob = columnar.encode(sliced)
    assert blob is not None and _tags(blob, 1500, 5)[1][0] == columnar.SAME
    assert _bits_equal(columnar.decode(blob, sliced.schema), sliced)


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf"), -0.0, 2.0 ** 64])
def test_integral_floats_with_one_exception_stay_exact(bad: float) -> None:
    n = 1000
    for i in (1, n // 2, n - 2):  # first and last rows integral: the full check decides
        f = np.random.default_rng(i).integers(-5000, 5000, n).astype(np.float64)
        f[i] = bad
        batch = pa.record_batch({"f": f})
        blob = columnar.encode(batch)
        assert blob is not None
        assert _tags(blob, n, 1)[0][1] == 0  # not F2I
        assert _bits_equal(columnar.decode(blob, batch.schema), batch)


def test_unsupported_schemas_and_nulls_are_left_to_arrow() -> None:
    assert columnar.encode(pa.record_batch({"s": ["a", "b"]})) is None
    assert columnar.encode(pa.record_batch({"b": [True, False]})) is None
    assert columnar.encode(pa.record_batch({"x": pa.array([1, None], pa.int64())})) is None
    ts = pa.array([1, 2], pa.timestamp("us"))
    assert columnar.encode(pa.record_batch({"t": ts})) is None


def _good() -> tuple[bytes, pa.Schema]:
    batch = pa.record_batch({"a": np.arange(10, dtype=np.int64) ** 2, "b": np.ones(10)})
    blob = columnar.encode(batch)
    assert blob is not None
    return blob, batch.schema


@pytest.mark.parametrize("damage", ["short", "long", "columns", "tag", "ref", "width", "flags"])
def test_malformed_blob_is_a_value_error(damage: str) -> None:
    blob, schema = _good()
    raw = bytearray(blob)
    head = struct.calcsize("<IH")
    if damage == "short":
        raw = raw[:-3]
    elif damage == "long":
        raw += b"\0"
    elif damage == "columns":
        raw[4] = 3
    elif damage == "tag":
        raw[head] = 9
    elif damage == "ref":
        raw[head:head + 3] = bytes([columnar.SAME, 0, 0])
        raw[head + 3:head + 11] = struct.pack("<q", 5)
    elif damage == "width":
        raw[head + 2] = 3
    else:
        raw[head + 1] = 0x80
    with pytest.raises(ValueError):
        columnar.decode(bytes(raw), schema)
    with pytest.raises(ValueError):
        columnar.decode(blob, pa.schema([("a", pa.string()), ("b", pa.float64())]))


def _wide(n: int, start: int = 0) -> pa.RecordBatch:
    seq = np.arange(start, start + n, dtype=np.int64)
    return pa.record_batch({"ts": seq * 10, "seq": seq, "key": seq % 7,
                            "value": (seq % 1000).astype(np.float64)})


def test_frame_codec_writes_large_numeric_records_columnar() -> None:
    codec = PayloadCodec(1)
    for n, expect in [(COLUMNAR_MIN_ROWS, Codec.COLUMNAR), (COLUMNAR_MIN_ROWS - 1, Codec.ZSTD)]:
        batch = _wide(n)
        frame = codec.encode_data(batch, 0, n - 1, 0, (n - 1) * 10)
        data = memoryview(b"".join(bytes(p) for p in frame.finish(FLAG_COMMIT)))
        info = parse_forward(data, 0)
        assert info is not None and info.codec == expect
        assert codec.decode_data(data, info, batch.schema).equals(batch)
        if expect == Codec.COLUMNAR:  # a valid checksum over a bad blob: a FrameError
            bad = bytearray(data)
            bad[info.payload_offset + 2] ^= 0xFF
            with pytest.raises(FrameError):
                codec.decode_data(memoryview(bytes(bad)), info, batch.schema)


def test_log_of_columnar_records_reads_back(tmp_path: Path) -> None:
    batches = [_wide(5000, i * 5000) for i in range(6)]
    with StreamLog.open(tmp_path / "log", writable=True, create=True) as log:
        for b in batches:
            log.append(b)
            log.commit()
    with StreamLog.open(tmp_path / "log") as log:
        assert pa.Table.from_batches(list(log.read_forward())).equals(
            pa.Table.from_batches(batches))
        back = list(log.read_backward())
        assert pa.Table.from_batches(back[::-1]).equals(pa.Table.from_batches(batches))


# -- layout 2 (frame codec PACKED): bit-packed and per-column compressed ------------

_ZSTD = zstandard.ZstdCompressor(level=1)
_COL2 = struct.Struct("<BBBqqI")


def _tags2(blob: bytes) -> list[tuple[int, int, int, int]]:
    """(tag, flags, width, stored length) of each column of a layout-2 blob."""
    _, ncols = struct.unpack_from("<IH", blob)
    out, pos = [], struct.calcsize("<IH")
    for _ in range(ncols):
        tag, flags, k, _a, _b, length = _COL2.unpack_from(blob, pos)
        out.append((tag, flags, k, length))
        pos += _COL2.size + length
    assert pos == len(blob)
    return out


@SETTINGS
@given(batch=batches(), small=st.booleans())
def test_packed_round_trip_is_exact_to_the_bit(batch: pa.RecordBatch, small: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    if small:  # compress (or try to) even the short columns of these small records
        monkeypatch.setattr(columnar, "ZSTD_MIN_BYTES", 8)
        monkeypatch.setattr(columnar, "SAMPLE", 16)
    blob = columnar.encode_packed(batch, _ZSTD.compress)
    assert blob is not None
    assert _bits_equal(columnar.decode_packed(blob, batch.schema), batch)


def test_packed_bits_and_compression_chosen_per_column() -> None:
    n = 20000
    rng = np.random.default_rng(3)
    ts = np.cumsum(rng.integers(0, 40, n)).astype(np.int64)
    batch = pa.record_batch({
        "ts": ts, "key": rng.integers(0, 2, n), "type": rng.integers(0, 4, n).astype(np.int8),
        "part": rng.integers(0, 16, n), "price": rng.integers(0, 60000, n).astype(np.float64),
        "run": np.repeat(np.arange(n // 1000, dtype=np.int64), 1000) * 3,
        "walk": np.cumsum(rng.integers(0, 4, n)) + 10**12,
    })
    blob = columnar.encode_packed(batch, _ZSTD.compress)
    assert blob is not None
    tags = _tags2(blob)
    bits, zstd = columnar.BITS, columnar.ZSTD
    assert tags[0][:3] == (columnar.DELTA, zstd, 1)  # deltas < 40: a byte, compressible
    assert tags[1] == (columnar.FOR, bits, 1, n // 8)  # 0/1 at a bit, incompressible
    assert tags[2] == (columnar.FOR, bits, 2, n // 4)
    assert tags[3] == (columnar.FOR, bits, 4, n // 2)
    assert tags[4] == (columnar.FOR, columnar.F2I, 2, 2 * n)  # random: stored as is
    assert tags[5][:3] == (columnar.FOR, zstd, 1)  # runs of values below 60
    assert tags[6] == (columnar.DELTA, bits, 2, (n - 1 + 3) // 4)  # random steps 0..3
    assert len(blob) < len(_ZSTD.compress(columnar.encode(batch) or b""))
    assert _bits_equal(columnar.decode_packed(blob, batch.schema), batch)


@pytest.mark.parametrize("damage", ["flags", "bits_raw", "bits_width", "length", "zstd_body",
                                    "zstd_size", "short", "long"])
def test_malformed_packed_blob_is_a_value_error(damage: str) -> None:
    n = 5000
    rng = np.random.default_rng(4)
    batch = pa.record_batch({"key": rng.integers(0, 2, n),
                             "ts": np.cumsum(rng.integers(0, 9, n)).astype(np.int64)})
    blob = columnar.encode_packed(batch, _ZSTD.compress)
    assert blob is not None
    assert [t[:2] for t in _tags2(blob)] == [(columnar.FOR, columnar.BITS),
                                             (columnar.DELTA, columnar.BITS | columnar.ZSTD)]
    raw = bytearray(blob)
    c0 = struct.calcsize("<IH")  # first column's header
    c1 = c0 + _COL2.size + _tags2(blob)[0][3]  # second column's header
    if damage == "flags":
        raw[c0 + 1] |= 0x40
    elif damage == "bits_raw":
        raw[c0] = columnar.RAW
    elif damage == "bits_width":
        raw[c0 + 2] = 3
    elif damage == "length":  # a stored length that is not the values' size
        struct.pack_into("<I", raw, c0 + 19, _tags2(blob)[0][3] - 1)
    elif damage == "zstd_body":
        raw[c1 + _COL2.size + 8] ^= 0xFF
    elif damage == "zstd_size":  # a valid zstd frame of the wrong size
        other = _ZSTD.compress(b"\0" * 10)
        raw[c1 + _COL2.size:] = other
        struct.pack_into("<I", raw, c1 + 19, len(other))
    elif damage == "short":
        raw = raw[:-3]
    else:
        raw += b"\0"
    with pytest.raises(ValueError):
        columnar.decode_packed(bytes(raw), batch.schema)


#: a layout-1 blob written by the encoder before layout 2 existed (commit 0e52597):
#: ts, seq, key, c (int32), v (float64), same, x (float64) of 24 rows from seq 100
OLD_BLOB = bytes.fromhex(
    "180000000700030001e9030000000000000000000000000000000b131e29313c474f5a656d78838b96"
    "a1a9b4bfc7d2dde5040000640000000000000001000000000000000300010000000000000000000000"
    "000000000000010203040001020304000102030400010203040001020301000007000000000000000000"
    "000000000000030101000000000000000000000000000000000102030405060708090a000102030405"
    "060708090a000102020000000000000000000000000000000000000000080000000000000000000000"
    "00000000000000000000003940000000000040394000000000008039400000000000c0394000000000"
    "00003a400000000000403a400000000000803a400000000000c03a400000000000003b400000000000"
    "403b400000000000803b400000000000c03b400000000000003c400000000000403c40000000000080"
    "3c400000000000c03c400000000000003d400000000000403d400000000000803d400000000000c03d"
    "400000000000003e400000000000403e400000000000803e400000000000c03e40")


def _old_batch() -> pa.RecordBatch:
    seq = np.arange(100, 124, dtype=np.int64)
    return pa.record_batch({"ts": seq * 10 + seq % 3, "seq": seq, "key": seq % 5,
                            "c": np.full(24, 7, np.int32), "v": (seq % 11).astype(np.float64),
                            "same": seq * 10 + seq % 3, "x": seq.astype(np.float64) / 4})


def test_layout_1_blobs_of_the_previous_encoder_still_decode() -> None:
    batch = _old_batch()
    assert _bits_equal(columnar.decode(OLD_BLOB, batch.schema), batch)
    assert columnar.encode(batch) == OLD_BLOB  # and layout 1 is still written the same


def test_log_with_columnar_and_packed_frames_reads_back(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A log written before PACKED existed (COLUMNAR frames), continued by this version
    (PACKED frames), reads back whole, both ways."""
    path = tmp_path / "log"
    old = [_wide(5000, i * 5000) for i in range(3)]
    new = [_wide(5000, 15000 + i * 5000) for i in range(3)]
    with monkeypatch.context() as m:
        m.setattr(payload_mod, "PACKED_MIN_ROWS", 1 << 40)
        with StreamLog.open(path, writable=True, create=True) as log:
            for b in old:
                log.append(b)
                log.commit()
    with StreamLog.open(path, writable=True) as log:
        for b in new:
            log.append(b)
            log.commit()
    codecs = [codec for codec, _ in record_frames(path)]
    assert codecs == [Codec.COLUMNAR] * 3 + [Codec.PACKED] * 3
    with StreamLog.open(path) as log:
        assert log.verify() == 6
        assert pa.Table.from_batches(list(log.read_forward())).equals(
            pa.Table.from_batches(old + new))
        back = list(log.read_backward())
        assert pa.Table.from_batches(back[::-1]).equals(pa.Table.from_batches(old + new))


def test_level_0_writes_no_zstd_and_reads_back(tmp_path: Path) -> None:
    """``compression_level=0`` (an upstream log that caches a replayable source): a large
    numeric record is a PACKED frame none of whose columns is a zstd frame, a small one
    an uncompressed Arrow IPC message (codec NONE); both read back equal, forward,
    backward and verified, and the same records at level 1 take fewer bytes."""
    rng = np.random.default_rng(7)
    big = pa.record_batch({"ts": np.arange(20_000, dtype=np.int64) * 10,
                           "seq": np.arange(20_000, dtype=np.int64),
                           "key": rng.integers(0, 100_000, 20_000),
                           "value": rng.integers(1, 10_000, 20_000).astype(np.float64)})
    small = _wide(100, 20_000)
    sizes = {}
    for level in (0, 1):
        path = tmp_path / f"log{level}"
        with StreamLog.open(path, writable=True, create=True, compression_level=level) as log:
            for b in (big, small):
                log.append(b)
                log.commit()
        frames = record_frames(path)
        if level == 0:
            assert [c for c, _ in frames] == [Codec.PACKED, Codec.NONE]
            assert not any(f & columnar.ZSTD for f in packed_column_flags(frames[0][1]))
        else:
            assert any(f & columnar.ZSTD for f in packed_column_flags(frames[0][1]))
        sizes[level] = sum(len(p) for _, p in frames)
        with StreamLog.open(path) as log:
            assert log.verify() == 2
            want = pa.Table.from_batches([big, small])
            assert pa.Table.from_batches(list(log.read_forward())).equals(want)
            assert pa.Table.from_batches(list(log.read_backward())[::-1]).equals(want)
    assert sizes[1] < sizes[0] < big.nbytes + small.nbytes


def test_compression_level_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    from storage_log.errors import LogUsageError
    with pytest.raises(LogUsageError, match=r"compression_level must be 0\.\.19, not -1"):
        StreamLog.open(tmp_path / "log", writable=True, create=True, compression_level=-1)
