"""A host's index cache loses the indexes of logs that are gone (storage_log.cache).

Real logs written and reopened in a cache root of their own; deleted, moved and
re-created run directories; indexes older than the origin file; the daily stamp.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from storage_log import cache
from storage_log.cache import ID_FILE, ORIGIN, STAMP, TRASH, cache_name, prune, prune_daily
from storage_log.log import StreamLog
from tests.storage_log.conftest import make_batch, rows


def _write(log: Path, root: Path, first: int = 0, n: int = 10) -> None:
    with StreamLog.open(log, writable=True, create=True, index_root=root) as w:
        w.append(make_batch(first, n))
        w.commit()


def _indexes(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir()}


def _name(log: Path) -> str:
    return cache_name(log, (log / ID_FILE).read_text().split()[1])


def test_each_index_records_its_log(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    log = tmp_path / "run" / "a"
    _write(log, root)
    assert (root / _name(log) / ORIGIN).read_text() == os.path.realpath(log)
    assert (root / STAMP).is_file()  # the first writer of the day looked


def test_the_indexes_of_deleted_moved_and_recreated_logs_go(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    kept, deleted, moved, recreated = (tmp_path / "run" / n for n in "abcd")
    for log in (kept, deleted, moved, recreated):
        _write(log, root)
    names = {log.name: _name(log) for log in (kept, deleted, moved, recreated)}
    assert _indexes(root) == set(names.values())

    shutil.rmtree(deleted)
    moved.rename(tmp_path / "run" / "c2")
    shutil.rmtree(recreated)
    _write(recreated, root, n=3)  # another log (another id) at the same path
    new = _name(recreated)

    removed = prune(root)
    assert sorted(removed) == sorted([names["b"], names["c"], names["d"]])
    assert _indexes(root) == {names["a"], new}
    with StreamLog.open(kept, index_root=root) as r:  # the kept index still serves
        assert rows(r.read_forward()) == list(range(10))
    with StreamLog.open(tmp_path / "run" / "c2", writable=True, index_root=root) as w:
        assert w.last_seq == 9  # the moved log: its index rebuilt from the segments
    assert prune(root) == []  # nothing else to do


def test_what_is_not_ours_or_not_readable_stays(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    log = tmp_path / "run" / "a"
    _write(log, root)
    index = root / _name(log)
    (root / "notes").mkdir()
    (root / "0123-x").mkdir()
    (root / "a-file").write_text("x")
    (log / ID_FILE).write_text("cec-log not-hex\n")  # damaged: its writer renews it
    assert prune(root) == []
    assert index.is_dir() and (root / "notes").is_dir() and (root / "a-file").is_file()


def test_an_index_without_origin_goes_only_when_old(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    log = tmp_path / "run" / "a"
    _write(log, root)
    index = root / _name(log)
    (index / ORIGIN).unlink()  # as an index made before origins were recorded
    shutil.rmtree(log)
    assert prune(root) == []  # unknown log, recently used: kept
    old = (index / "data.mdb").stat().st_mtime - cache.LEGACY_AGE_S - 60
    os.utime(index / "data.mdb", (old, old))
    assert prune(root) == [index.name] and not index.exists()


def test_a_pass_stopped_halfway_is_finished(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    log = tmp_path / "run" / "a"
    _write(log, root)
    left = root / f"{TRASH}0123456789abcdef0123456789abcdef-0123456789ab"
    (left / "sub").mkdir(parents=True)
    (left / "data.mdb").write_bytes(b"\0" * 100)
    assert prune(root) == []
    assert not left.exists() and (root / _name(log)).is_dir()


def test_one_pass_a_day(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    gone = tmp_path / "gone"
    _write(gone, root)
    for thread in cache._PRUNING:  # the writer's own pass (nothing gone yet)
        thread.join(30)
    shutil.rmtree(gone)
    assert prune_daily(root) is None  # the stamp is fresh: no pass
    assert len(_indexes(root)) == 1
    day_ago = os.stat(root / STAMP).st_mtime - cache.PRUNE_EVERY_S - 1
    os.utime(root / STAMP, (day_ago, day_ago))
    thread = prune_daily(root)
    assert thread is not None and thread.daemon
    thread.join(30)
    assert _indexes(root) == set()
    assert os.stat(root / STAMP).st_mtime > day_ago + cache.PRUNE_EVERY_S
