"""Index side-files (issue 15): a host without the log's index loads each complete
segment's side-file instead of reading it, and a side-file never changes what is read:
a damaged, stale or missing one is walked past as before."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from storage_log import scan
from storage_log.cache import index_path
from storage_log.log import StreamLog
from storage_log.segment import SegmentReader
from tests.storage_log.conftest import make_batch, rows

N, ROWS = 60, 20


def _log(log_dir: Path) -> list[Path]:
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        for i in range(N):
            w.append(make_batch(i * ROWS, ROWS))
            w.commit(token=str(i).encode())
    shutil.rmtree(index_path(log_dir))  # as on a host that never saw the log
    return sorted(log_dir.glob("*.seg"))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Which segments a walk read frame by frame."""
    seen: Counter[str] = Counter()
    real = SegmentReader.forward

    def forward(self: SegmentReader, *a: Any, **kw: Any) -> Any:
        seen[Path(self.path).name] += 1
        return real(self, *a, **kw)

    monkeypatch.setattr(scan.SegmentReader, "forward", forward)
    return seen


def test_complete_segments_are_loaded_not_read(tmp_path: Path, reads: Counter[str]) -> None:
    segs = _log(tmp_path / "log")
    assert len(segs) >= 5
    assert sorted(p.name for p in (tmp_path / "log").glob("*.idx")) == \
        sorted(p.name + ".idx" for p in segs[:-1])  # every complete segment has one
    with StreamLog.open(tmp_path / "log") as r:
        assert r.last_seq == N * ROWS - 1 and r.last_token() == str(N - 1).encode()
        assert set(reads) == {segs[-1].name}  # only the active segment was walked
        assert rows(r.read_forward()) == list(range(N * ROWS))
        assert r.verify() == N
    reads.clear()
    with StreamLog.open(tmp_path / "log", writable=True) as w:  # a writer on a new host
        assert set(reads) == {segs[-1].name}
        w.append(make_batch(N * ROWS, ROWS))
        w.commit()


@pytest.mark.parametrize("damage", ["checksum", "stale", "missing"])
def test_a_bad_side_file_is_walked_past(tmp_path: Path, reads: Counter[str],
                                        damage: str) -> None:
    segs = _log(tmp_path / "log")
    side = segs[1].with_name(segs[1].name + ".idx")
    if damage == "checksum":
        text = side.read_text()
        side.write_text(text.replace('"sealed":false', '"sealed":true'))
    elif damage == "stale":  # the segment grew or shrank since: the size does not match
        with segs[1].open("ab") as fh:
            fh.write(b"\0" * 3)
    else:
        side.unlink()
    if damage == "stale":
        from storage_log.errors import CorruptLogError
        with pytest.raises(CorruptLogError):  # the walk reads the segment: zeros are damage
            StreamLog.open(tmp_path / "log")
        return
    with StreamLog.open(tmp_path / "log") as r:
        assert segs[1].name in reads  # read frame by frame
        assert not r.sealed and rows(r.read_forward()) == list(range(N * ROWS))


def test_trim_and_repair_remove_side_files(tmp_path: Path) -> None:
    segs = _log(tmp_path / "log")
    with StreamLog.open(tmp_path / "log", writable=True) as w:
        assert w.trim(before_seq=400) >= 1
    left = {p.name for p in (tmp_path / "log").glob("*.idx")}
    assert all((tmp_path / "log" / n[:-4]).exists() for n in left)
    assert segs[0].name + ".idx" not in left
