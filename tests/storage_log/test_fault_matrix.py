"""The fault matrix of issue 17: truncate, flip or delete the first, a middle or the
last segment of a log, with this host's index kept or gone. One invariant per cell:
nothing says a log is whole when it lost committed records. verify, a reader and a
writable open each either raise CorruptLogError (naming the segment) or give back
every committed record.

Two cells cannot be told from a crash by the bytes alone, with no index left: the last
segment cut inside its last frame (what an interrupted write leaves) or deleted whole
(what a crash before a new segment's first byte leaves). There a
writable open cuts the log to its last whole commit, as after a crash, and the caller
finds what is missing from what is recorded outside the log (the pipeline: the other
partitions' ingest tokens and the output's t_c; both lead to the rows being read
again). That cell is asserted as such, not skipped.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from storage_log.cache import index_path
from storage_log.errors import CorruptLogError
from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch, rows

N, ROWS = 60, 20
ALL = list(range(N * ROWS))


def _log(log_dir: Path) -> list[Path]:
    with StreamLog.open(log_dir, writable=True, create=True, segment_bytes=4096) as w:
        for i in range(N):
            w.append(make_batch(i * ROWS, ROWS))
            w.commit(token=str(i).encode())
    segs = sorted(log_dir.glob("*.seg"))
    assert len(segs) >= 5
    return segs


def _truncate(seg: Path) -> None:
    size = seg.stat().st_size
    with seg.open("r+b") as fh:
        fh.truncate(size - 37)  # inside the last frame of the segment


def _flip(seg: Path) -> None:
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0x10
    seg.write_bytes(bytes(data))


def _delete(seg: Path) -> None:
    seg.unlink()


FAULTS: dict[str, Callable[[Path], None]] = {"truncate": _truncate, "flip": _flip,
                                              "delete": _delete}
WHERE = {"first": 0, "middle": 2, "last": -1}


def _outcome(fn: Callable[[], list[int]]) -> list[int] | str:
    try:
        return fn()
    except CorruptLogError as exc:
        return str(exc)


def _read(log_dir: Path) -> list[int]:
    with StreamLog.open(log_dir) as r:
        return rows(r.read_forward())


def _verify(log_dir: Path) -> list[int]:
    with StreamLog.open(log_dir) as r:
        r.verify()
        return rows(r.read_forward())


def _write_open(log_dir: Path) -> list[int]:
    with StreamLog.open(log_dir, writable=True) as w:
        return rows(w.read_forward())


@pytest.mark.parametrize("index", [True, False], ids=["index", "no-index"])
@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("fault", list(FAULTS))
def test_no_loss_goes_unnoticed(tmp_path: Path, fault: str, where: str, index: bool
                                ) -> None:
    log_dir = tmp_path / "log"
    segs = _log(log_dir)
    victim = segs[WHERE[where]]
    FAULTS[fault](victim)
    if not index:
        shutil.rmtree(index_path(log_dir))
    crash_like = fault in ("truncate", "delete") and where == "last" and not index
    for name, check in (("verify", _verify), ("read", _read), ("writable open", _write_open)):
        got = _outcome(lambda check=check: check(log_dir))  # type: ignore[misc]
        if isinstance(got, str):
            assert "corrupt log segment" in got or "records missing" in got, (name, got)
            continue
        if crash_like:  # the bytes are those of an interrupted write: a prefix of commits
            assert got == ALL[:len(got)] and len(got) % ROWS == 0, name
            continue
        assert got == ALL, f"{name} lost records silently after {fault} of the {where} " \
                           f"segment ({'with' if index else 'without'} index)"
