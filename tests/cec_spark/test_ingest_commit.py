"""The ingest writer's commits (cec_spark.ingest.writer.UpstreamWriter), without Spark.

The commits of a chunk run on threads, one per log, while the writer reads the next
batch; they must still precede the next append to the same log, each carry the token
of the last chunk they cover, end before ``write`` returns, and a failed commit must
fail the write (never be lost on a thread). Real logs on disk.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cec.ingest_token import decode_token
from cec_spark.errors import DriverSupersededError
from cec_spark.ingest import writer as writer_module
from cec_spark.ingest.logs import create_logs
from cec_spark.ingest.writer import (
    PART,
    JobChunks,
    UpstreamWriter,
    WriterConfig,
    open_upstream,
)
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.types import Chunk
from storage_log.log import StreamLog

ROWS = 100  # per chunk


def read_token(raw: bytes | None) -> int:
    """The last chunk a token says was committed, -1 for none."""
    tok = decode_token(raw)
    return -1 if tok is None else tok.chunk


class Recorded:
    """A log whose appends and commits are written down in ``events`` (in order, from
    any thread), with the thread that made them."""

    def __init__(self, log: StreamLog, p: int, events: list[tuple[str, int, str]],
                 fail_commit: int | None = None,
                 reading: dict[int, threading.Event] | None = None) -> None:
        self._log, self._p, self._events = log, p, events
        self._fail, self._commits = fail_commit, 0
        self._reading = reading or {}
        self.overlapped: list[bool] = []  # per commit: the next batch was being read

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def append(self, batch: pa.RecordBatch) -> None:
        self._events.append(("append", self._p, threading.current_thread().name))
        self._log.append(batch)

    def commit(self, token: bytes | None = None) -> None:
        self._commits += 1
        self._events.append(("start", self._p, threading.current_thread().name))
        nxt = self._reading.get(read_token(token) + 1)
        if nxt is not None:  # wait (10 s at most) for the writer to read the next batch
            self.overlapped.append(nxt.wait(10.0))
        if self._commits == self._fail:
            raise OSError(28, "No space left on device (injected)")
        self._log.commit(token)
        self._events.append(("commit", self._p, threading.current_thread().name))


def _chunks(n: int) -> list[Chunk]:
    return [Chunk(index=i, fmt="generator", file="", start=i * ROWS, stop=(i + 1) * ROWS,
                  first_seq=i * ROWS, rows=ROWS) for i in range(n)]


def _batches(n: int, events: list[tuple[str, int, str]], partitions: int,
             reading: dict[int, threading.Event] | None = None) -> Iterator[pa.RecordBatch]:
    """One batch per chunk (as the direct ingest reads a file), each row's partition
    its seq modulo ``partitions``; ``read`` is noted (and ``reading[i]`` set) before
    each batch is made."""
    for i in range(n):
        events.append(("read", i, threading.current_thread().name))
        if reading is not None:
            reading[i].set()
        seq = np.arange(i * ROWS, (i + 1) * ROWS, dtype=np.int64)
        yield pa.RecordBatch.from_arrays(
            [pa.array(seq * 10), pa.array(seq), pa.array(seq % 7), pa.array(seq * 0.5),
             pa.array((seq % partitions).astype(np.int32))],
            names=["ts", "seq", "key", "value", PART])


def _writer(tmp_path: Path, partitions: int, events: list[tuple[str, int, str]],
            chunks: list[Chunk], fail_commit: int | None = None,
            reading: dict[int, threading.Event] | None = None
            ) -> tuple[UpstreamWriter, list[StreamLog], RunLayout]:
    layout = RunLayout(tmp_path / "run")
    layout.state_file(0).parent.mkdir(parents=True)
    cfg = WriterConfig(str(layout.root), partitions, "always", "key", "value", trim=False)
    create_logs(layout, partitions, "always")
    logs = [open_upstream(cfg, p) for p in range(partitions)]
    wrapped: list[Any] = [Recorded(log, p, events, fail_commit, reading)
                          for p, log in enumerate(logs)]
    return UpstreamWriter(cfg, layout, wrapped, JobChunks.of(chunks)), logs, layout


@pytest.fixture(autouse=True)
def _commit_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small jobs leave the commit of their last 64 k rows to one commit at the end: here
    every chunk is committed by itself (a job of many 100 k-row files does so)."""
    monkeypatch.setattr(writer_module, "COMMIT_AT_END_ROWS", 0)


def test_commits_overlap_the_next_read_and_precede_the_next_append(tmp_path: Path) -> None:
    partitions, n = 3, 6
    events: list[tuple[str, int, str]] = []
    chunks = _chunks(n)
    reading = {i: threading.Event() for i in range(n)}
    writer, logs, layout = _writer(tmp_path, partitions, events, chunks, reading=reading)
    writer.write(_batches(n, events, partitions, reading))
    # each commit of chunk k < n - 1 waited for the read of batch k + 1 to begin, which
    # happened while it waited: the reading overlaps the commits (a writer that waited
    # for its commits before reading on would have made each of them time out)
    for w in writer.logs:
        assert w.overlapped == [True] * (n - 1)  # type: ignore[union-attr]
    for log in logs:
        log.close()
    # every chunk's commit ran on the writer's threads, not the reading thread
    reader = events[0][2]
    commits = [e for e in events if e[0] == "commit"]
    assert commits and all(name != reader and name.startswith("cec-ingest-commit")
                           for _, _, name in commits)
    # per log: append(s) of chunk k, then its commit, before any append of chunk k + 1
    for p in range(partitions):
        mine = [e[0] for e in events if e[0] != "read" and e[1] == p]
        assert mine == ["append", "start", "commit"] * n, (p, mine)
    # and every commit of chunk k ended before batch k + 1 was appended
    kinds = [(e[0], e[1]) for e in events]
    for k in range(n - 1):
        commits_k = [i for i, e in enumerate(kinds) if e[0] == "commit"][k * partitions:
                                                                         (k + 1) * partitions]
        first_append_next = [i for i, e in enumerate(kinds) if e[0] == "append"][
            (k + 1) * partitions]
        assert max(commits_k) < first_append_next, (k, kinds)
    # the logs hold every row of their partition, committed with the last chunk's token
    for p in range(partitions):
        with StreamLog.open(layout.upstream(p)) as log:
            seqs = [s for b in log.read_forward() for s in b.column("seq").to_pylist()]
            assert seqs == [s for s in range(n * ROWS) if s % partitions == p]
            assert read_token(log.last_token()) == n - 1
            assert log.committed_seq == seqs[-1]


def test_a_failed_commit_fails_the_write_and_nothing_after_it_is_committed(
        tmp_path: Path) -> None:
    partitions, n = 2, 5
    events: list[tuple[str, int, str]] = []
    writer, logs, layout = _writer(tmp_path, partitions, events, _chunks(n), fail_commit=3)
    with pytest.raises(OSError, match="injected"):
        writer.write(_batches(n, events, partitions))
    for log in logs:
        log.close()
    # the third commit of each log failed: the write stopped at the next append, so
    # no log holds a commit past the second chunk
    for p in range(partitions):
        with StreamLog.open(layout.upstream(p)) as log:
            assert read_token(log.last_token()) <= 1
            seqs = [s for b in log.read_forward() for s in b.column("seq").to_pylist()]
            assert seqs == [s for s in range(2 * ROWS) if s % partitions == p]


def _stopping(n: int, partitions: int, at: int, act: Any) -> Iterator[pa.RecordBatch]:
    """The batches of :func:`_batches`; ``act()`` runs as batch ``at`` is read."""
    for i, batch in enumerate(_batches(n, [], partitions)):
        if i == at:
            act()
        yield batch


def test_a_stop_ends_the_job_at_the_next_chunk_with_whole_chunks_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "LOOK_EVERY_S", 0.0)
    partitions, n = 2, 6
    writer, logs, layout = _writer(tmp_path, partitions, [], _chunks(n))
    writer.write(_stopping(n, partitions, 2, lambda: layout.stop_file.write_text("")))
    for log in logs:
        log.close()
    # batch 2 was read (and appended) when the STOP file appeared: its chunk is the
    # last committed, nothing of the chunks after it was read or written
    assert writer.stopped
    for p in range(partitions):
        with StreamLog.open(layout.upstream(p)) as log:
            assert read_token(log.last_token()) == 2
            seqs = [s for b in log.read_forward() for s in b.column("seq").to_pylist()]
            assert seqs == [s for s in range(3 * ROWS) if s % partitions == p]


def test_a_newer_driver_ends_the_job_at_the_next_chunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "LOOK_EVERY_S", 0.0)
    partitions, n = 2, 5
    writer, logs, layout = _writer(tmp_path, partitions, [], _chunks(n))
    writer.cfg = dataclasses.replace(writer.cfg, driver=1)

    def newer() -> None:
        layout.drivers_dir.mkdir(exist_ok=True)
        (layout.drivers_dir / "00000002").write_text('{"host": "h", "pid": 1}')

    with pytest.raises(DriverSupersededError, match="number 2"):
        writer.write(_stopping(n, partitions, 1, newer))
    for log in logs:
        log.close()
    for p in range(partitions):
        with StreamLog.open(layout.upstream(p)) as log:
            assert read_token(log.last_token()) == 1
