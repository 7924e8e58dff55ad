"""storage_log.notify: a write in a watched log directory wakes the waiter; nothing
else does; without inotify the wait is the fallback poll."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from storage_log.notify import CommitWatch


def test_a_write_in_a_watched_directory_wakes_the_waiter(tmp_path: Path) -> None:
    with CommitWatch([tmp_path], fallback_s=30.0) as watch:
        if not watch.notifying:
            pytest.skip("no inotify on this machine")
        seg = (tmp_path / "seg").open("ab")
        watch.wait(0)  # the creation's event
        assert watch.wait(0.05) is False  # nothing written: the timeout
        timer = threading.Timer(0.2, lambda: (seg.write(b"x"), seg.flush()))
        timer.start()
        assert watch.wait(20.0) is True  # True: woken by the write, not the timeout
        timer.join()
        seg.close()


def test_other_directories_and_missing_ones(tmp_path: Path) -> None:
    watched, other = tmp_path / "a", tmp_path / "b"
    watched.mkdir()
    other.mkdir()
    with CommitWatch([watched], fallback_s=30.0) as watch:
        if not watch.notifying:
            pytest.skip("no inotify on this machine")
        assert watch.add(tmp_path / "missing") is False
        (other / "seg").write_bytes(b"x")
        assert watch.wait(0.1) is False
        (watched / "seg.tmp").write_bytes(b"x")
        (watched / "seg.tmp").rename(watched / "seg")
        assert watch.wait(5.0) is True


def test_without_inotify_the_wait_is_the_fallback_poll(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEC_INOTIFY", "0")
    with CommitWatch([tmp_path], fallback_s=0.05) as watch:
        assert not watch.notifying
        assert watch.wait(0.01) is False  # a sleep: nothing can wake it
        assert not watch.add(tmp_path)
