"""Crash consistency on real files: torn writes, bit flips, SIGKILL, lost index."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage_log.cache import index_path
from storage_log.errors import CorruptLogError
from storage_log.index import LogIndex
from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch, rows

ROOT = Path(__file__).resolve().parents[2]


def _segments(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("*.seg"))


def _segment(log_dir: Path) -> Path:
    """The one segment of a log written by one writer."""
    (seg,) = _segments(log_dir)
    return seg


def test_torn_last_record_at_every_byte(tmp_path: Path) -> None:
    """A writer killed while writing its first record (a segment of its own epoch)
    leaves that segment torn at any byte: the next writer cuts it whole and carries on."""
    base = tmp_path / "base"
    with StreamLog.open(base, writable=True, create=True) as w:
        for i in range(3):
            w.append(make_batch(i * 4, 4))
            w.commit(token=f"t{i}".encode())
    (good,) = _segments(base)
    good_bytes = good.read_bytes()
    full = tmp_path / "full"
    shutil.copytree(base, full)
    with StreamLog.open(full, writable=True) as w:
        w.append(make_batch(12, 2))  # the last record: small, so every offset is tried
        w.commit(token=b"t3")
    first, torn_seg = _segments(full)
    torn = torn_seg.read_bytes()
    assert first.read_bytes() == good_bytes and len(torn) < 700
    for cut in range(len(torn)):
        case = tmp_path / f"c{cut}"
        shutil.copytree(full, case)
        (case / torn_seg.name).write_bytes(torn[:cut])
        if cut % 5:  # the index as it was before the torn commit (else: none, rebuilt)
            shutil.copytree(index_path(base), index_path(case))
        with StreamLog.open(case, writable=True) as w:
            report = w.reconcile_report
            assert report is not None and report.bytes_cut == cut
            assert rows(w.read_forward()) == list(range(12))
            assert w.last_token() == b"t2" and w.last_seq == 11
            w.append(make_batch(12, 2))  # and the writer carries on from there
            w.commit(token=b"t3")
        assert not (case / torn_seg.name).exists()
        with StreamLog.open(case) as r:
            assert rows(r.read_forward()) == list(range(14)) and r.last_token() == b"t3"
        shutil.rmtree(index_path(case))
        shutil.rmtree(case)


def test_uncommitted_but_written_records_are_cut(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 4))
        w.commit(token=b"a")
    (clean,) = _segments(log_dir)
    with StreamLog.open(log_dir, writable=True) as w:
        w.append(make_batch(4, 4))
        w.append(make_batch(8, 4))
        w._appender.flush(commit=False)  # written to the file, never committed
        w._appender.failed = RuntimeError("simulated crash")  # close must not tidy up
    first, written = _segments(log_dir)  # the second writer wrote a segment of its own
    assert first == clean and written.stat().st_size > 0
    cut = written.stat().st_size
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None
        assert w.reconcile_report.bytes_cut == cut
        assert rows(w.read_forward()) == [0, 1, 2, 3] and w.last_token() == b"a"


def test_committed_but_unindexed_records_are_indexed(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 4))
        w.commit()
    snapshot = tmp_path / "idx"
    shutil.copytree(index_path(log_dir), snapshot)
    with StreamLog.open(log_dir, writable=True) as w:
        for i in range(1, 4):
            w.append(make_batch(i * 4, 4))
            w.commit(token=f"t{i}".encode())
    shutil.rmtree(index_path(log_dir))
    shutil.copytree(snapshot, index_path(log_dir))  # crash after fsync, before the LMDB txn
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None
        assert w.reconcile_report.records_indexed == 3 and not w.reconcile_report.rebuilt
        assert w.reconcile_report.bytes_cut == 0
        assert rows(w.read_forward(after_seq=5)) == list(range(6, 16))
        assert w.last_token() == b"t3"


def test_a_clean_log_is_reconciled_without_writing_its_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writable open of a log whose index already is its committed end (a writer
    closed, or killed after its last commit, a torn tail past it or not) writes and
    syncs nothing in the index (a `cec recover` of P partitions opens 2P logs: the sync
    was most of an open's cost); an index behind the segments is stored and synced."""
    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        w.append(make_batch(0, 4))
        w.commit(token=b"a")
    snapshot = tmp_path / "idx"
    shutil.copytree(index_path(log_dir), snapshot)
    writes: list[str] = []
    for name in ("sync", "commit", "reset"):
        real = getattr(LogIndex, name)

        def counted(self: LogIndex, *a: object, _real: object = real, _name: str = name,
                    **k: object) -> object:
            writes.append(_name)
            return _real(self, *a, **k)  # type: ignore[operator]

        monkeypatch.setattr(LogIndex, name, counted)
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None and w.reconcile_report.bytes_cut == 0
        assert w.last_token() == b"a" and rows(w.read_forward()) == [0, 1, 2, 3]
        assert writes == []  # the open wrote nothing to the index
        w.append(make_batch(4, 4))
        w._appender.flush(commit=False)  # written, never committed: a torn tail
        w._appender.failed = RuntimeError("simulated crash")
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None and w.reconcile_report.bytes_cut > 0
        assert writes == []  # bytes past the commit point cut: the index is unchanged
        assert rows(w.read_forward()) == [0, 1, 2, 3] and w.last_token() == b"a"
        w.append(make_batch(4, 4))
        w.commit(token=b"b")
    writes.clear()
    shutil.rmtree(index_path(log_dir))
    shutil.copytree(snapshot, index_path(log_dir))  # the index one commit behind
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None and w.reconcile_report.records_indexed == 1
        assert writes == ["commit", "sync"]  # stored and synced
        assert rows(w.read_forward()) == list(range(8)) and w.last_token() == b"b"


def _index_state(log_dir: Path) -> tuple[object, ...]:
    idx = LogIndex(index_path(log_dir), create=False)
    try:
        return (list(idx.entries()), idx.ts_keys(), idx.snapshot())
    finally:
        idx.close()


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_lost_index_is_rebuilt_identically(tmp_path: Path, damage: str) -> None:
    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        for i in range(40):
            w.append(make_batch(i * 10, 10))
            if i % 3 == 0:
                w.commit(token=str(i).encode())
        w.seal()
    before = _index_state(log_dir)
    if damage == "delete":
        shutil.rmtree(index_path(log_dir))
    else:
        (index_path(log_dir) / "data.mdb").write_bytes(os.urandom(8192))
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.reconcile_report is not None and w.reconcile_report.rebuilt
        assert w.reconcile_report.bytes_cut == 0
    assert _index_state(log_dir) == before


def _flip(path: Path, offset: int, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_bit_flips_are_detected_never_returned(tmp_path: Path) -> None:
    base = tmp_path / "base"
    with StreamLog.open(base, writable=True, create=True) as w:
        for i in range(6):
            w.append(make_batch(i * 20, 20))
            w.commit(token=b"tok")
        expected = rows(w.read_forward())
    size = _segment(base).stat().st_size
    rnd = random.Random(7)
    for trial in range(40):
        case = tmp_path / f"f{trial}"
        shutil.copytree(base, case)
        offset = rnd.randrange(size)
        _flip(_segment(case), offset, rnd.randrange(8))
        try:
            log = StreamLog.open(case, writable=True)
        except CorruptLogError as exc:
            assert "segment" in str(exc) and "byte" in str(exc)
            continue
        with log:
            got: list[int] = []
            with pytest.raises(CorruptLogError) as info:
                log.verify()
            assert "byte" in str(info.value)
            try:
                for b in log.read_forward():
                    got.extend(b.column("seq").to_pylist())
            except CorruptLogError:
                pass
            assert got == expected[: len(got)]
            back: list[int] = []
            try:
                for b in log.read_backward(chunk_bytes=4096):
                    back = b.column("seq").to_pylist() + back
            except CorruptLogError:
                pass
            assert back == expected[len(expected) - len(back):]
        shutil.rmtree(case)


def test_repair_cuts_at_the_first_bad_byte(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        for i in range(6):
            w.append(make_batch(i * 20, 20))
            w.commit()
        entries = list(w._index.entries())  # type: ignore[union-attr]
    victim = entries[3]
    _flip(_segment(log_dir), victim.offset + 30, 2)
    with StreamLog.open(log_dir) as r, pytest.raises(CorruptLogError, match="checksum"):
        list(r.read_forward())
    with StreamLog.open(log_dir, writable=True, repair=True) as w:
        report = w.reconcile_report
        assert report is not None and report.cut_at is not None
        assert report.cut_at[1] == victim.offset and "checksum" in (report.cut_reason or "")
        assert rows(w.read_forward()) == list(range(60))
        w.verify()


def test_corrupt_committed_tail_needs_repair(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True) as w:
        for i in range(3):
            w.append(make_batch(i * 20, 20))
            w.commit()
    seg = _segment(log_dir)
    _flip(seg, seg.stat().st_size - 70, 0)
    with pytest.raises(CorruptLogError, match=r"segment .*\.seg at byte \d+") as info:
        StreamLog.open(log_dir, writable=True)
    assert info.value.exit_code == 3
    with StreamLog.open(log_dir, writable=True, repair=True) as w:
        assert rows(w.read_forward()) == list(range(40))


WRITER = """
import sys, time
from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch
log = StreamLog.open(sys.argv[1], writable=True, create=True, fsync=sys.argv[2],
                     segment_bytes=64 << 10)
seq = log.last_seq + 1 if log.last_seq is not None else 0
print("ready", flush=True)
while True:
    for _ in range(3):
        log.append(make_batch(seq, 50))
        seq += 50
    log.commit(token=str(seq - 1).encode())
    print(seq - 1, flush=True)
    if len(sys.argv) > 3:
        time.sleep(float(sys.argv[3]))
"""


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("fsync", "lines"), [("never", 5), ("always", 40), ("never", 200)])
def test_sigkill_mid_append_reopens_consistent(tmp_path: Path, fsync: str, lines: int) -> None:
    from storage_log.errors import LogLockedError

    log_dir = tmp_path / "log"
    proc = _spawn(WRITER, str(log_dir), fsync)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(LogLockedError, match=f"pid {proc.pid}"):
            StreamLog.open(log_dir, writable=True)
        acked = -1
        for _ in range(lines):
            acked = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    with StreamLog.open(log_dir, writable=True) as w:
        last = w.last_seq
        assert last is not None and last >= acked
        assert w.last_token() == str(last).encode()  # token and data agree
        assert rows(w.read_forward()) == list(range(last + 1))
        w.verify()


TAILER = """
import sys, json
from storage_log.log import StreamLog
with StreamLog.open(sys.argv[1]) as log:
    print("ready", flush=True)
    seqs = []
    for b in log.tail(after_seq=None, timeout=20):
        seqs.extend(b.column("seq").to_pylist())
    print(json.dumps([seqs, log.sealed]), flush=True)
"""


def test_tailing_reader_in_another_process(tmp_path: Path) -> None:
    import json

    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=8192) as w:
        w.append(make_batch(0, 10))
        w.commit()
        proc = _spawn(TAILER, str(log_dir))
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "ready"
            for i in range(1, 60):
                w.append(make_batch(i * 10, 10))
                if i % 2:
                    w.commit()
                if i % 10 == 0:
                    time.sleep(0.02)
            w.seal()
            seqs, sealed = json.loads(proc.stdout.readline())
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
    assert sealed and seqs == list(range(600))


def test_rebuild_refuses_corruption_in_an_older_segment(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        for i in range(40):
            w.append(make_batch(i * 10, 10))
            w.commit()
        entries = list(w._index.entries())  # type: ignore[union-attr]
    victim = [e for e in entries if e.segment == entries[0].segment][2]
    seg0 = sorted(log_dir.glob("*.seg"))[0]
    _flip(seg0, victim.offset + 20, 5)
    shutil.rmtree(index_path(log_dir))
    # with the complete segments' side-files an open does not read them (as with an
    # index): the damage is found when the record is read, and by verify
    assert list(log_dir.glob("*.seg.idx"))
    with StreamLog.open(log_dir) as r:
        with pytest.raises(CorruptLogError, match=f"{seg0.name} at byte {victim.offset}"):
            r.verify()
        with pytest.raises(CorruptLogError, match=f"{seg0.name} at byte {victim.offset}"):
            rows(r.read_forward())
    for side in log_dir.glob("*.seg.idx"):  # without them the open reads every segment
        side.unlink()
    shutil.rmtree(index_path(log_dir), ignore_errors=True)
    with pytest.raises(CorruptLogError, match=f"{seg0.name} at byte {victim.offset}"):
        StreamLog.open(log_dir, writable=True)
    # an index-less reader finds the damage too: a bad frame in a segment that a later
    # one follows is never the end of the log (it used to read up to it, silently)
    with pytest.raises(CorruptLogError, match=f"{seg0.name} at byte {victim.offset}"):
        StreamLog.open(log_dir)
    with StreamLog.open(log_dir, writable=True, repair=True) as w:
        assert w.reconcile_report is not None and w.reconcile_report.cut_at == (
            seg0.name, victim.offset)
        assert len(list(log_dir.glob("*.seg"))) == 1
        assert rows(w.read_forward()) == list(range(victim.first_seq))


def test_readers_during_appends_and_rolls_in_another_process(tmp_path: Path) -> None:
    import threading

    log_dir = tmp_path / "log"
    proc = _spawn(WRITER, str(log_dir), "never", "0.003")
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        int(proc.stdout.readline())  # a first commit
        drain = threading.Thread(target=proc.stdout.read, daemon=True)
        drain.start()
        with StreamLog.open(log_dir) as r:
            deadline = time.monotonic() + 1.0
            checks = 0
            while (time.monotonic() < deadline or checks < 3
                   or len(list(log_dir.glob("*.seg"))) < 3) and time.monotonic() < deadline + 20:
                fwd = rows(r.read_forward())
                assert fwd == list(range(len(fwd)))  # a committed prefix, whole records
                back: list[int] = []
                for b in r.read_backward(chunk_bytes=4096):
                    back = b.column("seq").to_pylist() + back
                assert back == list(range(len(back))) and len(back) >= len(fwd)
                tail_from = fwd[-1] - 75
                assert rows(r.read_forward(after_seq=tail_from))[:1] == [tail_from + 1]
                checks += 1
                time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    drain.join(5)
    proc.stdout.close()
    assert checks >= 3 and len(list(log_dir.glob("*.seg"))) >= 3
