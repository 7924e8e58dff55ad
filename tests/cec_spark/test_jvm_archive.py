"""The driver JVM's class archive: where it goes, when it is written, used or discarded.

The JVM itself is exercised by every pipeline test (the first run of the suite writes
the archive, the others map it); here the decisions around it are tested with data:
a part file is kept only if the JVM that wrote it exited with status 0, parts of dead
processes are removed, and the whole thing can be turned off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cec_spark.run import jvm_archive


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CEC_JVM_ARCHIVE", raising=False)
    return tmp_path / "cache"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_first_start_writes_a_part_of_its_own(cache: Path) -> None:
    plan = jvm_archive.plan()
    assert plan is not None and plan.part is not None and plan.final is not None
    assert plan.part.parent == cache and plan.part.name.endswith(f".{os.getpid()}.part")
    assert f"-XX:ArchiveClassesAtExit={plan.part}" in plan.options
    assert jvm_archive.QUIET in plan.options
    assert plan.final.name == f"jvm-{jvm_archive.archive_key()}.jsa"


def test_a_finished_archive_is_mapped(cache: Path) -> None:
    first = jvm_archive.plan()
    assert first is not None and first.final is not None
    first.final.write_bytes(b"archive")
    plan = jvm_archive.plan()
    assert plan is not None and plan.part is None
    assert plan.options.startswith(f"-XX:SharedArchiveFile={first.final} ")


def test_parts_of_dead_processes_are_removed(cache: Path) -> None:
    cache.mkdir(parents=True)
    key = jvm_archive.archive_key()
    dead = cache / f"jvm-{key}.{_dead_pid()}.part"
    alive = cache / f"jvm-{key}.{os.getppid()}.part"
    other = cache / "notes.txt"
    for p in (dead, alive, other):
        p.write_bytes(b"x")
    jvm_archive.plan()
    assert not dead.exists() and alive.exists() and other.exists()


def test_disabled(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEC_JVM_ARCHIVE", "0")
    assert jvm_archive.plan() is None


class _Gateway:
    def __init__(self, code: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c",
                                      f"import sys; sys.stdin.read(); sys.exit({code})"],
                                     stdin=subprocess.PIPE)


@pytest.mark.parametrize("code", [0, 1])
def test_finish_keeps_the_part_only_after_a_clean_exit(cache: Path, code: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    plan = jvm_archive.plan()
    assert plan is not None and plan.part is not None and plan.final is not None
    plan.part.write_bytes(b"classes")
    gateway = _Gateway(code)  # exits when its stdin closes, as PythonGatewayServer does
    monkeypatch.setattr(SparkContext, "_gateway", gateway)
    monkeypatch.setattr(SparkContext, "_jvm", object())
    jvm_archive.finish(plan)
    assert gateway.proc.returncode == code
    assert SparkContext._gateway is None and SparkContext._jvm is None
    assert not plan.part.exists()
    assert plan.final.exists() == (code == 0)


def test_finish_without_a_dump_does_nothing(cache: Path) -> None:
    jvm_archive.finish(None)
    first = jvm_archive.plan()
    assert first is not None and first.final is not None
    first.final.write_bytes(b"archive")
    jvm_archive.finish(jvm_archive.plan())  # mapping an archive: nothing to wait for
    assert first.final.read_bytes() == b"archive"


def test_archives_of_other_keys_unused_for_long_are_removed(cache: Path) -> None:
    cache.mkdir(parents=True)
    key = jvm_archive.archive_key()
    mine = cache / f"jvm-{key}.jsa"
    recent, old = cache / "jvm-0000000000000001.jsa", cache / "jvm-0000000000000002.jsa"
    notes = cache / "notes.jsa.txt"
    month_ago = os.stat(cache).st_mtime - jvm_archive.UNUSED_S - 60
    for p in (mine, recent, old, notes):
        p.write_bytes(b"archive")
    for p in (mine, old, notes):
        os.utime(p, (month_ago, month_ago))
    plan = jvm_archive.plan()
    assert plan is not None and plan.part is None  # this key's own: used, not removed
    assert mine.exists() and recent.exists() and notes.exists() and not old.exists()
    # using it made it recent again: it outlives another month of disuse by others
    assert os.stat(mine).st_mtime > month_ago + jvm_archive.UNUSED_S
