"""The columnar payload codec: exact round trips on random and adversarial records,
rejection of malformed blobs, and COLUMNAR frames through the frame codec and a log."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_log import columnar
from storage_log.frame import (
    COLUMNAR_MIN_ROWS,
    FLAG_COMMIT,
    Codec,
    FrameCodec,
    FrameError,
    parse_forward,
)
from storage_log.log import StreamLog

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
    codec = FrameCodec(1)
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
