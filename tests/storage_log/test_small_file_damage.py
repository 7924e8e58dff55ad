"""A damaged small file of a log is no dead end (issue 29, item 1).

Each small file a log keeps (``epochs/N``, ``log.id``, ``*.seg.idx``), one byte
flipped or cut short: a reader either reads the same rows or fails naming the repair
(``repair=True``, which ``cec recover --repair`` asks for); that repair then works
and leaves the log exact, the file put back. The writer lock is out of play
(``CEC_TEST_NO_WRITER_LOCK``) where a zombie writer is simulated, as between hosts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage_log import epoch
from storage_log.cache import ID_FILE, read_log_id
from storage_log.epoch import epoch_path, list_epochs, read_chain, read_epoch
from storage_log.errors import CorruptLogError, LogFencedError
from storage_log.log import StreamLog
from storage_log.segment import list_segments, segment_path
from storage_log.sidefile import side_path
from tests.storage_log.conftest import make_batch, rows


@pytest.fixture(autouse=True)
def no_flock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CEC_TEST_NO_WRITER_LOCK", "1")
    yield


def flip(path: Path, offset: int | None = None) -> None:
    """Flip one bit of one byte (the middle one by default): bit rot."""
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x04
    path.write_bytes(bytes(data))
    epoch._cache.clear()  # what comes next stands for another process


def cut(path: Path) -> None:
    """Cut the file to half its length."""
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    epoch._cache.clear()


DAMAGE: dict[str, Callable[[Path], None]] = {"flipped": flip, "truncated": cut}


def reads(log_dir: Path) -> tuple[list[int], bytes | None]:
    with StreamLog.open(log_dir) as r:
        return rows(r.read_forward()), r.last_token()


def three_writers(log_dir: Path) -> list[int]:
    """A log written by three writers in turn (epochs 1..3, several segments each),
    the second one left behind a zombie that wrote past the third's fence."""
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as a:
        for i in range(10):
            a.append(make_batch(i * 10, 10))
            a.commit(token=f"a{i}".encode())
    zombie = StreamLog.open(log_dir, writable=True, segment_bytes=4096)
    for i in range(10, 20):
        zombie.append(make_batch(i * 10, 10))
        zombie.commit(token=f"b{i}".encode())
    with StreamLog.open(log_dir, writable=True, segment_bytes=4096) as c:
        c.append(make_batch(200, 10))
        c.commit(token=b"c20")  # epoch 3, fenced at seq 199
        for i in range(40, 45):  # the zombie wakes up: past the fence, never read
            zombie.append(make_batch(i * 10 + 5000, 10))
        with pytest.raises(LogFencedError):
            zombie.commit(token=b"zombie")
        zombie.close()
        for i in range(21, 30):
            c.append(make_batch(i * 10, 10))
            c.commit(token=f"c{i}".encode())
    assert list_epochs(log_dir) == [1, 2, 3]
    return list(range(300))


@pytest.mark.parametrize("how", sorted(DAMAGE))
@pytest.mark.parametrize("which", [1, 2, 3])
def test_a_damaged_epoch_file_is_rebuilt_by_the_repair(log_dir: Path, how: str,
                                                        which: int) -> None:
    expected = three_writers(log_dir)
    assert reads(log_dir) == (expected, b"c29")
    before = read_epoch(log_dir, which).fence
    path = epoch_path(log_dir, which)
    DAMAGE[how](path)
    # every epoch file of the chain is read
    with pytest.raises(CorruptLogError, match=r"repair=True \(cec recover --from-log "
                       r"RUN --repair\) rebuilds it from the segments"):
        reads(log_dir)
    with pytest.raises(CorruptLogError, match=str(path)):
        StreamLog.open(log_dir, writable=True).close()
    with StreamLog.open(log_dir, writable=True, repair=True) as w:  # what --repair does
        report = w.reconcile_report
        assert report is not None and report.bytes_cut == 0
        assert rows(w.read_forward()) == expected
        assert len(report.files_rebuilt) == 1 and str(path) in report.files_rebuilt[0]
    assert reads(log_dir) == (expected, b"c29")
    assert read_epoch(log_dir, which).fence == before  # the fence the writer wrote
    with StreamLog.open(log_dir) as r:
        assert r.verify() == 30


def test_a_rebuilt_epoch_still_fences_its_zombie(log_dir: Path) -> None:
    """DESIGN §8 after a rebuild: the zombie of the epoch before it cannot commit, and
    what it wrote is never read."""
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as a:
        for i in range(5):
            a.append(make_batch(i * 10, 10))
            a.commit()
    zombie = StreamLog.open(log_dir, writable=True, segment_bytes=4096)
    zombie.append(make_batch(50, 10))
    zombie.commit()  # epoch 2
    with StreamLog.open(log_dir, writable=True, segment_bytes=4096) as b:
        b.append(make_batch(60, 10))
        b.commit()  # epoch 3, fenced at seq 59
    flip(epoch_path(log_dir, 3))
    with StreamLog.open(log_dir, writable=True, repair=True) as w:
        assert w.last_seq == 69
    zombie.append(make_batch(60, 100))
    with pytest.raises(LogFencedError, match="fenced by epoch 3"):
        zombie.commit()
    zombie.close()
    assert reads(log_dir)[0] == list(range(70))


def test_a_damaged_newest_epoch_without_segments(log_dir: Path) -> None:
    """A writer that took an epoch and wrote nothing committed: its fence is the end
    of the older chain."""
    with StreamLog.open(log_dir, writable=True, create=True) as a:
        a.append(make_batch(0, 10))
        a.commit(token=b"t")
    w = StreamLog.open(log_dir, writable=True)
    w.append(make_batch(10, 10))  # takes epoch 2, no commit
    w.close()  # its segment is cut: epoch 2 has none
    assert list_epochs(log_dir) == [1, 2]
    assert all(s & 0xFFFFFF == 1 for s in list_segments(log_dir))
    cut(epoch_path(log_dir, 2))
    with pytest.raises(CorruptLogError, match="rebuilds it from the segments"):
        reads(log_dir)
    with StreamLog.open(log_dir, writable=True, repair=True) as r:
        assert r.reconcile_report is not None and r.reconcile_report.files_rebuilt
    assert reads(log_dir) == (list(range(10)), b"t")
    fence = read_epoch(log_dir, 2).fence
    assert fence is not None and fence.last_seq == 9


def test_an_epoch_file_whose_segments_cannot_tell_stays_reported(log_dir: Path) -> None:
    """The older segments do not reach where the epoch's first segment says the log
    ended (a segment of the older epoch is gone too): exit 3, naming both."""
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as a:
        for i in range(40):
            a.append(make_batch(i * 10, 10))
            a.commit()
    with StreamLog.open(log_dir, writable=True, segment_bytes=4096) as b:
        b.append(make_batch(400, 10))
        b.commit()
    older = [s for s in list_segments(log_dir) if s & 0xFFFFFF == 1]
    assert len(older) >= 2
    segment_path(log_dir, older[-1]).unlink()
    flip(epoch_path(log_dir, 2))
    with pytest.raises(CorruptLogError, match="cannot be rebuilt: the older segments hold "
                       "no commit at seq 399"):
        StreamLog.open(log_dir, writable=True, repair=True).close()


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_log_id_costs_an_index_rebuild(log_dir: Path, how: str) -> None:
    with StreamLog.open(log_dir, writable=True, create=True) as a:
        for i in range(5):
            a.append(make_batch(i * 10, 10))
            a.commit(token=b"t")
    if how == "flipped":  # the prefix: a flip in the hex digits may give another id
        flip(log_dir / ID_FILE, 0)
    else:
        cut(log_dir / ID_FILE)
    with pytest.raises(CorruptLogError):
        read_log_id(log_dir)
    assert reads(log_dir) == (list(range(50)), b"t")  # a reader walks the segments
    with StreamLog.open(log_dir, writable=True) as w:  # any writer gives a new id
        report = w.reconcile_report
        assert report is not None and report.rebuilt and report.bytes_cut == 0
        assert any(ID_FILE in f for f in report.files_rebuilt)
        w.append(make_batch(50, 10))
        w.commit(token=b"u")
    assert read_log_id(log_dir) is not None
    assert reads(log_dir) == (list(range(60)), b"u")


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_side_file_costs_a_walk(log_dir: Path, how: str,
                                          tmp_path: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as a:
        for i in range(40):
            a.append(make_batch(i * 10, 10))
            a.commit(token=f"t{i}".encode())
    sides = [side_path(log_dir, s) for s in list_segments(log_dir)
             if side_path(log_dir, s).exists()]
    assert len(sides) >= 2
    DAMAGE[how](sides[0])
    # another host (no index): it trusts only side-files that check
    with StreamLog.open(log_dir, index_root=tmp_path / "other-host") as r:
        assert rows(r.read_forward()) == list(range(400)) and r.last_token() == b"t39"
    with StreamLog.open(log_dir, writable=True, index_root=tmp_path / "third") as w:
        assert rows(w.read_forward()) == list(range(400))
    with StreamLog.open(log_dir) as r:
        assert r.verify() == 40


def test_old_epoch_files_without_a_checksum_are_read(log_dir: Path) -> None:
    """Epoch files written before the checksum line: the JSON line alone."""
    with StreamLog.open(log_dir, writable=True, create=True) as a:
        a.append(make_batch(0, 10))
        a.commit()
    with StreamLog.open(log_dir, writable=True) as b:
        b.append(make_batch(10, 10))
        b.commit()
    path = epoch_path(log_dir, 2)
    body = path.read_text().splitlines()[0]
    path.write_text(body)
    assert json.loads(body)["epoch"] == 2
    assert read_chain(log_dir).epoch == 2
    assert reads(log_dir)[0] == list(range(20))
