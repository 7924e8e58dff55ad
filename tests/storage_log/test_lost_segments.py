"""A lost segment is found, never skipped (issue 17: verify said "ok" with 20 % gone).

Every control frame (the SCHEMA frame that opens a segment, TOKEN, SEAL) records where
the log ended when it was written, so a missing segment shows as a gap wherever the
log is read: the writable open's walk, verify, forward and backward reads, with or
without this host's index.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from storage_log.cache import index_path
from storage_log.errors import CorruptLogError
from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch, rows

MISSING = "records missing"


def _log(log_dir: Path) -> list[Path]:
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        for i in range(60):
            w.append(make_batch(i * 20, 20))
            w.commit(token=str(i).encode())
    segs = sorted(log_dir.glob("*.seg"))
    assert len(segs) >= 5
    return segs


def _read_back(log: StreamLog) -> list[int]:
    back: list[int] = []
    for b in log.read_backward(chunk_bytes=4096):
        back = b.column("seq").to_pylist() + back
    return back


@pytest.mark.parametrize("index", [True, False])
def test_a_deleted_middle_segment(log_dir: Path, index: bool) -> None:
    segs = _log(log_dir)
    segs[2].unlink()
    if not index:
        shutil.rmtree(index_path(log_dir))
    if not index:  # walking the segments finds the gap: no reader sees a shorter log
        with pytest.raises(CorruptLogError, match=MISSING):
            StreamLog.open(log_dir)
    else:
        with StreamLog.open(log_dir) as r:
            with pytest.raises(CorruptLogError, match=MISSING):
                r.verify()
            # the index still lists the lost records: reading across the gap fails
            with pytest.raises(CorruptLogError, match=MISSING):
                rows(r.read_forward())
            with pytest.raises(CorruptLogError, match=MISSING):
                _read_back(r)
    if not index:
        with pytest.raises(CorruptLogError, match=MISSING):
            StreamLog.open(log_dir, writable=True)


def test_a_deleted_first_segment_without_a_trim(log_dir: Path) -> None:
    segs = _log(log_dir)
    segs[0].unlink()
    shutil.rmtree(index_path(log_dir))
    with pytest.raises(CorruptLogError, match=MISSING):
        StreamLog.open(log_dir, writable=True)
    with pytest.raises(CorruptLogError, match=MISSING):
        StreamLog.open(log_dir)  # a reader without an index walks into the gap too


def test_a_trimmed_log_is_not_a_lost_one(log_dir: Path) -> None:
    _log(log_dir)
    with StreamLog.open(log_dir, writable=True, segment_bytes=4096) as w:
        assert w.trim(before_seq=600) >= 2
    shutil.rmtree(index_path(log_dir))
    with StreamLog.open(log_dir) as r:
        n = r.verify()
        got = rows(r.read_forward(after_seq=700))
        assert got == list(range(701, 1200)) and n > 0
    with StreamLog.open(log_dir, writable=True) as w:
        assert w.last_seq == 1199
