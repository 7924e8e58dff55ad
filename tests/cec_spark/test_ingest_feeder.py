"""A writer's input cut by its JVM's death is not its end (cec_spark/ingest/feeder.py).

bench/standby_bench.py once saw a killed run lose 900 k rows: the ingest writer's
Python worker read a clean end of its Arrow input when the driver JVM was killed, and
committed the job's last chunk complete with a tenth of its rows; the resumed ingest
then skipped the rest. Here: the feeder check on real processes (alive, exited and not
reaped, gone, a pid reused), and the writer refusing to commit a job's last chunks when
its feeder is dead, while what it had committed stays.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import cec_spark.ingest.writer as writer_module
from cec.errors import CecError
from cec_spark.ingest.feeder import Feeder
from tests.cec_spark.test_ingest_row_resume import (
    _batches,
    _chunks,
    _last_token,
    _layout,
    _seqs,
    _write,
)


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_feeder_is_alive_until_it_exits_and_a_zombie_is_dead() -> None:
    proc = _child()
    try:
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        start = int(stat[stat.rfind(")") + 2:].split()[19])
        feeder = Feeder(proc.pid, start)
        assert feeder.alive()
        assert not Feeder(proc.pid, start + 1).alive()  # another process, the same pid
        proc.kill()  # the signal is delivered asynchronously: wait for the zombie
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/stat").read_text().split(")")[-1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        assert not feeder.alive()  # exited, not reaped
    finally:
        proc.kill()
        proc.wait()
    assert not feeder.alive()  # reaped: gone
    assert Feeder(None, None).alive()  # not found (no JVM above): never refuses


def test_find_names_no_jvm_above_a_test_process() -> None:
    assert Feeder.find().pid is None  # pytest's ancestors run no java


def test_a_writer_whose_feeder_died_commits_no_chunk_it_did_not_see_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four chunks; the input ends after the first chunk and a half with the feeder
    dead: the first chunk is committed (its end was seen), the rest is not, so a
    resume reads from there."""
    partitions, chunks = 2, _chunks(4)
    layout = _layout(tmp_path, partitions)
    part = lambda s: s % 2  # noqa: E731
    rows = _batches(chunks, part, per_chunk=2)
    cut = (b for i, b in enumerate(rows) if i < 3)  # chunk 0 whole, half of chunk 1
    monkeypatch.setattr(writer_module, "COMMIT_AT_END_ROWS", 0)  # a commit per chunk,
    monkeypatch.setattr(writer_module, "WM_EVERY_S", 0.0)  # and within one per batch
    monkeypatch.setattr(writer_module.Feeder, "find",
                        classmethod(lambda cls: Feeder(2**22 + 7, 0)))  # no such pid
    commits: dict[int, list[Any]] = {}
    with pytest.raises(CecError, match=r"JVM that fed it .* exited"):
        _write(layout, partitions, chunks, cut, commits)
    for p in range(partitions):
        tok = _last_token(layout, p)
        assert tok.chunk == 0, tok  # chunk 0 only; chunk 1 not claimed complete
        assert tok.row is None or tok.row <= chunks[1].first_seq + chunks[1].rows // 2
        assert max(_seqs(layout, p)) < chunks[2].first_seq


def test_without_the_check_the_cut_input_would_claim_every_chunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contrast: the same cut input with a feeder alive (as the writer saw it
    before the check) commits the job's last chunk complete: rows lost on resume."""
    partitions, chunks = 2, _chunks(4)
    layout = _layout(tmp_path, partitions)
    rows = _batches(chunks, lambda s: s % 2, per_chunk=2)
    monkeypatch.setattr(writer_module, "COMMIT_AT_END_ROWS", 0)
    monkeypatch.setattr(writer_module, "WM_EVERY_S", 0.0)
    _write(layout, partitions, chunks, (b for i, b in enumerate(rows) if i < 3), {})
    assert all(_last_token(layout, p).chunk == 3 for p in range(partitions))
    assert all(max(_seqs(layout, p)) < chunks[2].first_seq for p in range(partitions))
