"""The frame codec: round trips (hypothesis), both walking directions, and rejection."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_log.framing import (
    FLAG_COMMIT,
    FOOTER_SIZE,
    HEADER_SIZE,
    OVERHEAD,
    FrameError,
    Kind,
    PendingFrame,
    decode_schema,
    encode_schema,
    parse_backward,
    parse_forward,
)
from storage_log.log import StreamLog
from storage_log.payload import PayloadCodec
from tests.storage_log.conftest import make_batch, rows

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
i64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _bytes(frame: PendingFrame, flags: int) -> bytes:
    return b"".join(bytes(p) for p in frame.finish(flags))


def test_overhead_is_64_bytes() -> None:
    assert (HEADER_SIZE, FOOTER_SIZE, OVERHEAD) == (12, 52, 64)
    frame = PayloadCodec.encode_control(Kind.SEAL, b"", 5, 6)
    assert len(_bytes(frame, 0)) == 64


@SETTINGS
@given(kind=st.sampled_from([Kind.SCHEMA, Kind.TOKEN, Kind.SEAL]),
       payload=st.binary(max_size=300), seq=i64, ts=i64, flags=st.sampled_from([0, FLAG_COMMIT]),
       lead=st.binary(max_size=20))
def test_control_frame_round_trip(kind: Kind, payload: bytes, seq: int, ts: int, flags: int,
                                  lead: bytes) -> None:
    data = lead + _bytes(PayloadCodec.encode_control(kind, payload, seq, ts), flags)
    buf = memoryview(data)
    fwd = parse_forward(buf, len(lead), 1000)
    bwd = parse_backward(buf, len(data), 1000)
    assert fwd == bwd and fwd is not None
    assert (fwd.kind, fwd.flags, fwd.last_seq, fwd.last_ts, fwd.rows) == (kind, flags, seq, ts, 0)
    assert fwd.offset == 1000 + len(lead) and fwd.size == len(payload) + OVERHEAD
    assert bytes(PayloadCodec().payload(buf, fwd, 1000)) == payload
    # every proper prefix is "incomplete", never a frame
    for cut in range(len(lead), len(data)):
        assert parse_forward(buf[:cut], len(lead)) is None


columns = st.lists(st.sampled_from(["f64", "i32", "str", "bin", "bool", "list"]),
                   max_size=4)


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    n = draw(st.integers(1, 60))
    start = draw(st.integers(0, 1 << 40))
    gaps = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    seq = start + np.cumsum(gaps, dtype=np.int64)
    ts_steps = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    ts = draw(st.integers(-(1 << 50), 1 << 50)) + np.cumsum(ts_steps, dtype=np.int64)
    cols: dict[str, pa.Array] = {"ts": pa.array(ts, pa.int64()), "seq": pa.array(seq, pa.int64())}
    for i, kind in enumerate(draw(columns)):
        if kind == "f64":
            vals = draw(st.lists(st.floats(allow_nan=False) | st.none(), min_size=n, max_size=n))
            cols[f"c{i}"] = pa.array(vals, pa.float64())
        elif kind == "i32":
            cols[f"c{i}"] = pa.array(draw(st.lists(st.integers(-(1 << 31), (1 << 31) - 1),
                                                   min_size=n, max_size=n)), pa.int32())
        elif kind == "str":
            cols[f"c{i}"] = pa.array(draw(st.lists(st.text(max_size=8) | st.none(),
                                                   min_size=n, max_size=n)), pa.string())
        elif kind == "bin":
            cols[f"c{i}"] = pa.array(draw(st.lists(st.binary(max_size=8), min_size=n,
                                                   max_size=n)), pa.binary())
        elif kind == "bool":
            cols[f"c{i}"] = pa.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        else:
            cols[f"c{i}"] = pa.array(draw(st.lists(st.lists(st.integers(0, 9), max_size=3),
                                                   min_size=n, max_size=n)))
    return pa.record_batch(cols)


@SETTINGS
@given(batch=batches(), level=st.integers(1, 3))
def test_data_frame_round_trip(batch: pa.RecordBatch, level: int) -> None:
    codec = PayloadCodec(level)
    seq = batch.column("seq").to_pylist()
    ts = batch.column("ts").to_pylist()
    frame = codec.encode_data(batch, seq[0], seq[-1], ts[0], ts[-1])
    data = memoryview(_bytes(frame, FLAG_COMMIT))
    info = parse_backward(data, len(data))
    assert info is not None and info == parse_forward(data, 0)
    assert (info.first_seq, info.last_seq, info.first_ts, info.last_ts, info.rows) == (
        seq[0], seq[-1], ts[0], ts[-1], batch.num_rows)
    schema = decode_schema(encode_schema(batch.schema))
    assert schema.equals(batch.schema)
    assert codec.decode_data(data, info, schema).equals(batch)


@SETTINGS
@given(data=st.data())
def test_any_single_byte_change_is_rejected(data: st.DataObject) -> None:
    frame = PayloadCodec.encode_control(Kind.TOKEN, data.draw(st.binary(max_size=40)), 1, 2)
    raw = bytearray(_bytes(frame, FLAG_COMMIT))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(1, 255))
    buf = memoryview(bytes(raw))
    for parse in (lambda: parse_forward(buf, 0), lambda: parse_backward(buf, len(buf))):
        with contextlib.suppress(FrameError):
            assert parse() is None  # a changed length may make the frame look incomplete


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
       commits=st.lists(st.booleans(), min_size=12, max_size=12),
       chunk=st.sampled_from([4096, 5000, 1 << 18]))
def test_log_round_trip(tmp_path_factory: pytest.TempPathFactory, sizes: list[int],
                        commits: list[bool], chunk: int) -> None:
    log_dir: Path = tmp_path_factory.mktemp("log") / "log"
    sent: list[pa.RecordBatch] = []
    visible = 0
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        seq = 0
        for i, n in enumerate(sizes):
            b = pa.record_batch({"ts": pa.array(np.arange(seq, seq + n) // 3, pa.int64()),
                                 "seq": pa.array(np.arange(seq, seq + n), pa.int64()),
                                 "x": pa.array([str(v) * (v % 7) for v in range(seq, seq + n)])})
            seq += n
            w.append(b)
            sent.append(b)
            if commits[i]:
                w.commit()
                visible = len(sent)
    with StreamLog.open(log_dir) as r:
        got = list(r.read_forward())
        assert got == sent[:visible]
        back = list(r.read_backward(chunk_bytes=chunk))
        assert back == sent[:visible][::-1]
        assert rows(r.read_forward(after_seq=5)) == [s for s in rows(sent[:visible]) if s > 5]


def test_frames_are_encoded_by_the_caller_unless_handed_to_a_worker_that_started() -> None:
    """With worker threads, a DATA frame is encoded when it is resolved (at the commit)
    unless :meth:`PayloadCodec.background` handed it to a worker first; a handed frame
    that no worker has started yet is cancelled and encoded by the caller, one a worker
    finished is taken from it. The bytes are the same in every case."""
    import threading

    codec = PayloadCodec(1, threads=2)
    inline = PayloadCodec(1, threads=0)
    gate = threading.Event()
    safety = threading.Timer(20, gate.set)  # a caller that waits would be freed by this
    safety.start()
    try:
        assert codec.pool is not None
        batch = make_batch(0, 5000)
        ref = _bytes(inline.encode_data(batch, 0, 4999, 0, 49990), FLAG_COMMIT)
        lazy = codec.encode_data(batch, 0, 4999, 0, 49990)
        assert lazy.work is not None and lazy.future is None
        assert lazy.size == lazy.estimate
        assert _bytes(lazy, FLAG_COMMIT) == ref and lazy.work is None

        blockers = [codec.pool.submit(gate.wait) for _ in range(2)]  # both workers busy
        queued = codec.encode_data(batch, 0, 4999, 0, 49990)
        codec.background([queued])
        assert queued.future is not None and not queued.future.running()
        queued.resolve()
        assert queued.work is None and not gate.is_set()  # did not wait for a worker
        assert _bytes(queued, FLAG_COMMIT) == ref
        gate.set()
        for b in blockers:
            b.result()

        done = codec.encode_data(batch, 0, 4999, 0, 49990)
        codec.background([done])
        assert done.future is not None
        done.future.result()  # a worker encoded it
        assert _bytes(done, FLAG_COMMIT) == ref
    finally:
        safety.cancel()
        gate.set()
        codec.close()
        inline.close()


@pytest.mark.parametrize("per_commit", [1, 3])
def test_worker_threads_write_the_same_bytes(tmp_path: Path, per_commit: int) -> None:
    """Records appended several per commit go to the workers (all but the newest);
    a log written with or without worker threads holds the same bytes."""
    sizes = [5000, 300, 70000, 20, 9000, 4096, 1]
    files = []
    for threads in (0, 2):
        path = tmp_path / f"t{threads}"
        with StreamLog.open(path, writable=True, create=True, threads=threads) as log:
            seq = 0
            for i, n in enumerate(sizes):
                log.append(make_batch(seq, n))
                seq += n
                pending = log._appender.pending
                if threads and per_commit > 1 and i % per_commit:
                    assert pending[-2].future is not None and pending[-1].future is None
                if i % per_commit == per_commit - 1:
                    log.commit(b"token %d" % i)
            log.commit()
            assert log.verify() == len(sizes)
        files.append(sorted((p.name, p.read_bytes()) for p in path.glob("*.seg")))
    assert files[0] == files[1]
