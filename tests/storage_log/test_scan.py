"""Readers of a log without a usable index walk the segments, read-only."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from storage_log.cache import index_path
from storage_log.log import StreamLog
from storage_log.scan import ScanIndex
from tests.storage_log.conftest import make_batch, rows


def _write(log_dir: Path) -> None:
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        for i in range(30):
            w.append(make_batch(i * 10, 10, stride=1))
            if i % 4 == 3:
                w.commit(token=str(i).encode())
        w.commit()


def _tree(path: Path) -> dict[str, tuple[int, float]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime) for p in path.iterdir()}


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_reader_without_index_matches_indexed_reader(tmp_path: Path, damage: str) -> None:
    log_dir = tmp_path / "log"
    _write(log_dir)
    with StreamLog.open(log_dir) as r:
        queries = {
            "all": rows(r.read_forward()),
            "after": rows(r.read_forward(after_seq=123)),
            "ts": rows(r.read_forward(from_ts=1555)),
            "back": rows(r.read_backward()),
            "back_before": rows(r.read_backward(before_seq=77)),
            "meta": (r.first_seq, r.last_seq, r.last_ts, r.last_token(), r.sealed),
        }
    if damage == "delete":
        shutil.rmtree(index_path(log_dir))
    else:
        (index_path(log_dir) / "data.mdb").write_bytes(os.urandom(4096))
    before = _tree(log_dir)
    with StreamLog.open(log_dir) as r:
        assert isinstance(r._index, ScanIndex)
        assert rows(r.read_forward()) == queries["all"]
        assert rows(r.read_forward(after_seq=123)) == queries["after"]
        assert rows(r.read_forward(from_ts=1555)) == queries["ts"]
        assert rows(r.read_backward()) == queries["back"]
        assert rows(r.read_backward(before_seq=77)) == queries["back_before"]
        assert (r.first_seq, r.last_seq, r.last_ts, r.last_token(), r.sealed) == queries["meta"]
    assert _tree(log_dir) == before  # nothing created, nothing changed


def test_index_less_reader_follows_a_writer_and_stops_at_a_torn_tail(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    _write(log_dir)
    shutil.rmtree(index_path(log_dir))
    seg = sorted(log_dir.glob("*.seg"))[-1]
    with seg.open("ab") as f:
        f.write(b"CECr\x01\x01\x00\x01garbage")  # a torn frame after the last commit
    with StreamLog.open(log_dir) as r:
        assert r.last_seq == 299
        with StreamLog.open(log_dir, writable=True) as w:  # rebuilds the index, cuts the tail
            assert w.reconcile_report is not None and w.reconcile_report.bytes_cut == 15
            w.append(make_batch(300, 5))
            w.commit()
            w.seal()
        assert rows(r.tail(after_seq=290, timeout=5)) == list(range(291, 305))
        assert r.sealed
