"""Writer epochs: a zombie writer's bytes are never read; readers on any host see the chain.

The writer lock (``flock``) is out of play here (``CEC_TEST_NO_WRITER_LOCK``), as it is
between hosts on NFS: only epochs keep the log exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_log import epoch
from storage_log.epoch import list_epochs, read_chain
from storage_log.errors import LogFencedError, LogLockedError
from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch, rows


@pytest.fixture(autouse=True)
def no_flock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CEC_TEST_NO_WRITER_LOCK", "1")
    yield


def test_a_zombie_writer_is_fenced(log_dir: Path) -> None:
    zombie = StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096)
    for i in range(10):
        zombie.append(make_batch(i * 10, 10))
        zombie.commit(token=f"z{i}".encode())
    # the zombie freezes; the retry opens the log on "another host" and takes over
    with StreamLog.open(log_dir, writable=True, segment_bytes=4096) as retry:
        assert retry.last_seq == 99 and retry.epoch is None  # no epoch before a write
        retry.append(make_batch(100, 10))
        retry.commit(token=b"r0")
        assert retry.epoch == 2 and list_epochs(log_dir) == [1, 2]
        # the zombie wakes up: its frames reach its own files, then its commit fails
        for i in range(10, 40):  # enough to roll segments of its epoch
            zombie.append(make_batch(i * 10 + 5000, 10))
        with pytest.raises(LogFencedError, match="fenced by epoch 2"):
            zombie.commit(token=b"zombie")
        for i in range(11, 30):
            retry.append(make_batch(i * 10, 10))
            retry.commit(token=f"r{i}".encode())
    zombie.close()
    expected = list(range(300))
    with StreamLog.open(log_dir) as r:  # a reader (any host) reads the chain only
        assert rows(r.read_forward()) == expected
        assert r.verify() == 30 and r.last_token() == b"r29"
        back: list[int] = []
        for b in r.read_backward(chunk_bytes=4096):
            back = b.column("seq").to_pylist() + back
        assert back == expected
    chain = read_chain(log_dir)
    zombie_segs = [p for p in log_dir.glob("*-00000001.seg")]
    assert len(zombie_segs) > len([s for s in chain.segments if s & 0xFFFFFF == 1])
    with StreamLog.open(log_dir, writable=True) as w:  # a writer after all of it
        assert w.last_seq == 299 and w.reconcile_report is not None
        assert rows(w.read_forward(after_seq=290)) == list(range(291, 300))


def test_a_fence_in_an_older_epoch_skips_the_epochs_between(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as a:
        a.append(make_batch(0, 10))
        a.commit()
    b = StreamLog.open(log_dir, writable=True)  # loads seq 0..9
    c = StreamLog.open(log_dir, writable=True)  # loads seq 0..9 too
    b.append(make_batch(10, 10))
    b.commit(token=b"b")  # epoch 2, fenced at a's end
    c.append(make_batch(10, 5))  # epoch 3, fenced at a's end: b's record is not on it
    c.commit(token=b"c")
    with pytest.raises(LogFencedError):
        b.append(make_batch(20, 1))
        b.commit()
    b.close()
    c.close()
    with StreamLog.open(log_dir) as r:
        assert rows(r.read_forward()) == list(range(15)) and r.last_token() == b"c"


def test_two_writers_racing_for_one_epoch(log_dir: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as a:
        a.append(make_batch(0, 10))
        a.commit()
    b = StreamLog.open(log_dir, writable=True)
    c = StreamLog.open(log_dir, writable=True)
    try:
        b.append(make_batch(10, 1))  # takes epoch 2
        # c listed the epochs just before b created 2: it tries 2 as well, and loses
        monkeypatch.setattr(epoch, "list_epochs", lambda _d: [1])
        with pytest.raises(LogLockedError, match="another writer took epoch 2 first"):
            c.append(make_batch(10, 1))
    finally:
        b.close()
        c.close()


def test_a_reader_on_another_host_follows_commits(log_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-host-cache"  # that host has never seen the log
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        w.append(make_batch(0, 10))
        w.commit()
        with StreamLog.open(log_dir, index_root=other) as r:
            assert r.last_seq == 9
            got: list[int] = []
            for i in range(1, 20):
                w.append(make_batch(i * 10, 10))
                w.commit()
                for b in r.tail(after_seq=got[-1] if got else None, timeout=0.01):
                    got.extend(b.column("seq").to_pylist())
            assert got == list(range(200)) and r.last_seq == 199
    with StreamLog.open(log_dir, writable=True) as w2:
        w2.append(make_batch(200, 10))
        w2.commit()
    with StreamLog.open(log_dir, index_root=other) as r:
        assert rows(r.read_forward(after_seq=150)) == list(range(151, 210))
    assert not other.exists()  # readers never write an index
