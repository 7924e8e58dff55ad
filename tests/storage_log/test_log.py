"""The StreamLog API on real files: append/commit/read, positions, token, seal, trim."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from storage_log.cache import index_path
from storage_log.errors import (
    CorruptLogError,
    LogClosedError,
    LogLockedError,
    LogNotFoundError,
    LogOrderError,
    LogSchemaError,
    LogSealedError,
    LogTrimmedError,
)
from storage_log.log import StreamLog
from tests.storage_log.conftest import SCHEMA, make_batch, rows


def fill(log: StreamLog, n_records: int, per: int = 10, *, commit_every: int = 1) -> None:
    start = (log.last_seq + 1) if log.last_seq is not None else 0
    for i in range(n_records):
        log.append(make_batch(start + i * per, per))
        if (i + 1) % commit_every == 0:
            log.commit()
    log.commit()


def test_empty_log(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as log:
        assert log.schema is None and log.first_seq is None and log.last_seq is None
        assert log.last_ts is None and not log.sealed and log.last_token() is None
        assert list(log.read_forward()) == [] and list(log.read_backward()) == []
        assert list(log.tail(after_seq=None, timeout=0.01)) == []


def test_reader_needs_existing_log(log_dir: Path) -> None:
    with pytest.raises(LogNotFoundError):
        StreamLog.open(log_dir)
    log_dir.mkdir()
    with pytest.raises(LogNotFoundError, match="not a log"):
        StreamLog.open(log_dir)
    with StreamLog.open(log_dir, writable=True) as w:  # an existing empty directory is fine
        assert repr(w).endswith("writer)")
    with StreamLog.open(log_dir) as r:
        assert r.last_seq is None


def test_append_commit_read(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        fill(w, 30, commit_every=4)
        assert (w.first_seq, w.last_seq, w.last_ts) == (0, 299, 2990)
        assert w.schema == SCHEMA
        with StreamLog.open(log_dir) as r:
            assert rows(r.read_forward()) == list(range(300))
            assert rows(r.read_forward(after_seq=-1)) == list(range(300))
            assert rows(r.read_forward(after_seq=154)) == list(range(155, 300))
            assert rows(r.read_forward(after_seq=299)) == []
            assert rows(r.read_forward(from_ts=1545)) == list(range(155, 300))
            assert rows(r.read_forward(from_ts=0)) == list(range(300))
            assert rows(r.read_forward(from_ts=99999)) == []
            back = list(r.read_backward())
            assert back[0].column("seq")[0].as_py() == 290  # newest record first
            assert sorted(rows(back)) == list(range(300))
            assert rows(r.read_backward(before_seq=155))[:5] == [150, 151, 152, 153, 154]
            assert sorted(rows(r.read_backward(before_seq=155))) == list(range(155))
            assert rows(r.read_backward(before_seq=0)) == []
            assert sorted(rows(r.read_backward(before_seq=10**9))) == list(range(300))
            assert (r.first_seq, r.last_seq, r.last_ts) == (0, 299, 2990)


def test_readers_see_only_committed(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 5))
        w.commit()
        w.append(make_batch(5, 5))
        with StreamLog.open(log_dir) as r:
            assert rows(r.read_forward()) == [0, 1, 2, 3, 4]
            assert r.last_seq == 4 and w.last_seq == 9
            w.commit()
            assert rows(r.read_forward()) == list(range(10))


def test_uncommitted_appends_are_dropped_on_close(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 5))
        w.commit()
        w.append(make_batch(5, 5))
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.last_seq == 4
        assert rows(w.read_forward()) == [0, 1, 2, 3, 4]


def test_sparse_seq_and_equal_ts(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        seq = np.array([3, 7, 8, 20], dtype=np.int64)
        w.append(pa.record_batch([np.array([5, 5, 5, 6]), seq, seq * 1.0], schema=SCHEMA))
        w.append(pa.record_batch([np.array([6, 6]), np.array([21, 40]), np.array([0.0, 1.0])],
                                 schema=SCHEMA))
        w.commit()
        assert rows(w.read_forward(after_seq=7)) == [8, 20, 21, 40]
        assert rows(w.read_forward(after_seq=30)) == [40]
        assert rows(w.read_forward(from_ts=6)) == [20, 21, 40]
        assert rows(w.read_backward(before_seq=21)) == [3, 7, 8, 20]


@pytest.mark.parametrize(("batch", "why"), [
    (make_batch(5, 3), "not after"),
    (pa.record_batch([np.array([100, 90]), np.array([20, 21]), np.zeros(2)], schema=SCHEMA), "ts"),
    (pa.record_batch([np.array([100, 100]), np.array([21, 21]), np.zeros(2)], schema=SCHEMA),
     "seq does not increase"),
    (pa.record_batch([np.array([1]), np.array([30]), np.zeros(1)], schema=SCHEMA), "before"),
])
def test_order_is_enforced(log_dir: Path, batch: pa.RecordBatch, why: str) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 10))
        with pytest.raises(LogOrderError, match=why):
            w.append(batch)
        w.commit()
        assert w.last_seq == 9


def test_schema_is_enforced(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        with pytest.raises(LogSchemaError):
            w.append(pa.record_batch({"ts": pa.array([1], pa.int32()), "seq": [1]}))
        w.append(make_batch(0, 2))
        with pytest.raises(LogSchemaError):
            w.append(pa.record_batch({"ts": [100], "seq": [100]}))


def test_token_persists_across_reopen(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.commit(token=b"before-data")  # a token on an empty log
        assert w.last_token() == b"before-data"
        w.append(make_batch(0, 10))
        w.commit(token=b"batch-1")
        w.append(make_batch(10, 10))
        w.commit()  # no token: the last one stays
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.last_token() == b"batch-1" and w.last_seq == 19
        with StreamLog.open(log_dir) as r:
            assert r.last_token() == b"batch-1"
            assert rows(r.read_forward()) == list(range(20))


def test_seal(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 10))
        w.seal()  # commits the pending append
        assert w.sealed
        with pytest.raises(LogSealedError):
            w.append(make_batch(10, 1))
        w.seal()
    with StreamLog.open(log_dir) as r:
        assert r.sealed and r.last_seq == 9
        assert rows(r.tail(after_seq=None, timeout=30)) == list(range(10))  # returns at once
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.sealed


def test_second_writer_refused_with_pid(log_dir: Path) -> None:
    import os

    with StreamLog.open(log_dir, writable=True, create=True):
        with pytest.raises(LogLockedError, match=f"pid {os.getpid()}"):
            StreamLog.open(log_dir, writable=True)
        with StreamLog.open(log_dir) as r:  # readers are fine
            assert r.last_seq is None
    with StreamLog.open(log_dir, writable=True):  # released on close
        pass


def test_read_only_refuses_writes_and_closed_refuses_all(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True):
        pass
    r = StreamLog.open(log_dir)
    with pytest.raises(LogClosedError):
        r.append(make_batch(0, 1))
    r.close()
    with pytest.raises(LogClosedError):
        list(r.read_forward())


def test_segments_roll_and_trim(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        fill(w, 60, per=20, commit_every=3)
        w.commit(token=b"t")
        fill(w, 30, per=20, commit_every=3)
        segs = sorted(p.name for p in log_dir.glob("*.seg"))
        assert len(segs) > 4 and segs[0] == "00000000000000000000-00000001.seg"
        bases = [int(s[:20]) for s in segs]
        assert w.trim(before_seq=bases[2]) == 2
        assert w.first_seq == bases[2]
        assert w.trim(before_seq=bases[2]) == 0
        assert rows(w.read_forward()) == list(range(bases[2], 1800))
        assert rows(w.read_forward(after_seq=bases[2] - 1)) == list(range(bases[2], 1800))
        with pytest.raises(LogTrimmedError):
            list(w.read_forward(after_seq=5))
        assert sorted(rows(w.read_backward())) == list(range(bases[2], 1800))
        assert w._index is not None
        entries, committed = list(w._index.entries()), w._index.snapshot().committed
    # everything, token included, survives a rebuild from the remaining segments
    import shutil

    shutil.rmtree(index_path(log_dir))
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None and w.reconcile_report.rebuilt
        assert w.last_token() == b"t" and w.first_seq == bases[2]
        assert rows(w.read_forward()) == list(range(bases[2], 1800))
        assert w._index is not None
        assert list(w._index.entries()) == entries
        assert w._index.snapshot().committed == committed
        # the trim survives too: a rebuilt index still refuses positions trimmed away
        with pytest.raises(LogTrimmedError):
            list(w.read_forward(after_seq=5))
    shutil.rmtree(index_path(log_dir))
    with StreamLog.open(log_dir) as r:  # no index, read-only: the segment walk
        with pytest.raises(LogTrimmedError):
            list(r.read_forward(after_seq=5))
        assert rows(r.read_forward(after_seq=bases[2] - 1)) == list(range(bases[2], 1800))


def test_a_garbled_trim_marker_is_named(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        fill(w, 60, per=20, commit_every=3)
        bases = sorted(int(p.name[:20]) for p in log_dir.glob("*.seg"))
        assert w.trim(before_seq=bases[1]) == 1
    assert (log_dir / "TRIMMED").read_text() == f"trimmed {bases[1] - 1}\n"
    (log_dir / "TRIMMED").write_text("trimmed ??\n")
    import shutil

    shutil.rmtree(index_path(log_dir))
    with pytest.raises(CorruptLogError, match="TRIMMED"):
        StreamLog.open(log_dir, writable=True)


def test_large_record_bigger_than_chunks(log_dir: Path) -> None:
    rng = np.random.default_rng(1)
    big = pa.record_batch([np.arange(200_000), np.arange(200_000), rng.random(200_000)],
                          schema=SCHEMA)
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(-1 + 1, 1).slice(0, 0))  # empty: ignored
        w.append(big)
        w.append(make_batch(200_000, 3))
        w.commit()
        assert rows(w.read_backward(chunk_bytes=4096)) == [200_000, 200_001, 200_002,
                                                           *range(200_000)]
        assert rows(w.read_forward(after_seq=199_998)) == [199_999, 200_000, 200_001, 200_002]


def test_nullability_and_metadata_may_differ(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        strict = pa.schema([pa.field("ts", pa.int64(), nullable=False),
                            pa.field("seq", pa.int64(), nullable=False)])
        w.append(pa.record_batch({"ts": [1], "seq": [1]}, schema=strict))
        w.append(pa.record_batch({"ts": [2], "seq": [2]}).replace_schema_metadata({b"k": b"v"}))
        w.commit()
        assert w.schema == strict
        assert [b.schema for b in w.read_forward()] == [strict, strict]


def test_failed_first_append_fixes_nothing(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        with pytest.raises(LogOrderError):
            w.append(pa.record_batch({"ts": [1], "seq": [-3]}))
        assert w.schema is None
        w.append(make_batch(0, 3))
        w.commit()
        assert w.schema == SCHEMA


def test_index_map_grows(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import storage_log.index as index_mod

    monkeypatch.setattr(index_mod, "MAP_SIZE", 1 << 16)
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        for i in range(600):
            w.append(make_batch(i * 2, 2))
        w.commit()
        assert w._index is not None and w._index.env.info()["map_size"] > 1 << 16
        assert rows(w.read_forward(after_seq=1000)) == list(range(1001, 1200))


def test_crash_before_first_commit_leaves_an_empty_log(log_dir: Path) -> None:
    w = StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096)
    for i in range(20):
        w.append(make_batch(i * 50, 50))
    w._appender.flush(commit=False)
    w._appender.failed = RuntimeError("simulated crash")  # close must not tidy up
    w.close()
    assert list(log_dir.glob("*.seg"))
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None and w.reconcile_report.bytes_cut > 0
        assert w.last_seq is None and w.schema is None and not list(log_dir.glob("*.seg"))
        w.append(make_batch(7, 3))
        w.commit()
    with StreamLog.open(log_dir) as r:
        assert rows(r.read_forward()) == [7, 8, 9] and r.first_seq == 7


def test_fsync_modes_and_bad_options(log_dir: Path) -> None:
    from storage_log.errors import LogUsageError

    for mode in ("always", "interval", "never"):
        with StreamLog.open(log_dir, writable=True, create=True, fsync=mode,
                            fsync_interval=0.0) as w:
            w.append(make_batch((w.last_seq or -1) + 1, 5))
            w.commit()
    with StreamLog.open(log_dir) as r:
        assert rows(r.read_forward()) == list(range(15))
    with pytest.raises(LogUsageError) as exc:
        StreamLog.open(log_dir, writable=True, fsync="sometimes")
    assert exc.value.exit_code == 2


def test_uncommitted_bytes(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True, threads=0) as w:
        assert w.uncommitted_bytes == 0
        w.append(make_batch(0, 100))
        first = w.uncommitted_bytes
        assert first > 64
        w.append(make_batch(100, 100))
        assert w.uncommitted_bytes > first
        w.commit()
        assert w.uncommitted_bytes == 0


def test_seal_an_empty_log(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.seal()
        with pytest.raises(LogSealedError):
            w.commit(token=b"x")
    with StreamLog.open(log_dir) as r:
        assert r.sealed and r.schema is None and r.last_seq is None
        assert list(r.tail(after_seq=None, timeout=30)) == []
    import shutil

    shutil.rmtree(index_path(log_dir))
    with StreamLog.open(log_dir, writable=True) as w:  # the seal lives in the segments
        assert w.sealed


def test_forked_child_opens_its_own_environment(log_dir: Path) -> None:
    import os

    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 3))
        w.commit()
        with StreamLog.open(log_dir) as r:
            pid = os.fork()
            if pid == 0:  # child: the parent's environment is not reused
                code = 1
                try:
                    with StreamLog.open(log_dir) as child:
                        code = 0 if rows(child.read_forward()) == [0, 1, 2] else 2
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            assert r.last_seq == 2
