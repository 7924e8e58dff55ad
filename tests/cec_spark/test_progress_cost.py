"""The driver's progress view looks at a run's files only when they changed (issue 38
item 6, docs/CLUSTER.md "Control-plane cost"): a state file whose stat is unchanged is
not read or parsed again, an upstream log whose folder and active segment are unchanged
gets no new snapshot, and one look answers every question about it. Without Spark: the
files are written here (write_advisory, StreamLog), their mtimes set in the past so that
they count as settled (``RACY_S``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cec.ingest_token import IngestToken, encode_token
from cec_spark.driver import progress
from cec_spark.driver.looks import UpstreamPositions
from cec_spark.driver.progress import StateFiles
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.layout import RunLayout
from storage_log.log import StreamLog

SCHEMA = pa.schema([("seq", pa.int64()), ("ts", pa.int64()), ("item_id", pa.int64()),
                    ("item_price", pa.float64())])


def _age(*paths: Path, by: float = 30.0) -> None:
    """Set the paths' mtimes ``by`` seconds in the past (settled: not RACY_S-recent)."""
    then = time.time() - by
    for path in paths:
        os.utime(path, (then, then))


def _layout(tmp_path: Path) -> RunLayout:
    layout = RunLayout(tmp_path / "run")
    layout.state_file(0).parent.mkdir(parents=True)
    return layout


class CountingRead:
    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path: Path) -> dict[str, Any]:
        self.paths.append(path)
        return read_advisory(path)


def test_an_unchanged_state_file_is_not_read_again(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    read = CountingRead()
    states = StateFiles(layout, 2, read=read)
    write_advisory(layout.state_file(0), {"in_tuples": 5})
    _age(layout.state_file(0))
    assert states.all() == [{"in_tuples": 5}, {}]  # p1 has none: a stat, no read
    assert len(read.paths) == 1 and states.changed
    assert states.all() == [{"in_tuples": 5}, {}] and len(read.paths) == 1  # same look
    for _ in range(3):  # later looks, nothing changed: no read, no change said
        states.tick()
        assert states.all() == [{"in_tuples": 5}, {}]
        assert not states.changed
    assert len(read.paths) == 1
    # the task rewrites it (a rename: a new inode and size): read again, the new figures
    write_advisory(layout.state_file(0), {"in_tuples": 17, "r": 2})
    _age(layout.state_file(0), by=20.0)
    states.tick()
    assert states.get(0) == {"in_tuples": 17, "r": 2} and states.changed
    assert len(read.paths) == 2
    # partition 1 starts: its file is read once, then no more
    write_advisory(layout.state_file(1), {"in_tuples": 1})
    _age(layout.state_file(1))
    states.tick()
    assert states.all() == [{"in_tuples": 17, "r": 2}, {"in_tuples": 1}]
    states.tick()
    states.all()
    assert [p.name for p in read.paths] == ["p0000.json", "p0000.json", "p0001.json"]


def test_a_recent_or_old_read_is_read_again(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A file modified within RACY_S may change again with the same mtime: it is read at
    every look until it settles; and every file at least every RECHECK_S (an NFS
    attribute cache may hide a change)."""
    layout = _layout(tmp_path)
    read = CountingRead()
    states = StateFiles(layout, 1, read=read)
    write_advisory(layout.state_file(0), {"in_tuples": 1})  # just now: not settled
    states.get(0)
    states.tick()
    states.get(0)
    assert len(read.paths) == 2
    _age(layout.state_file(0))
    states.tick()
    states.get(0)  # the mtime changed: read, now settled
    states.tick()
    states.get(0)
    assert len(read.paths) == 3
    monkeypatch.setattr(progress, "RECHECK_S", 0.0)
    states.tick()
    states.get(0)
    assert len(read.paths) == 4


def _rows(seqs: list[int], ts: list[int]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(seqs, pa.int64()), pa.array(ts, pa.int64()),
                            pa.array([1] * len(seqs), pa.int64()),
                            pa.array([1.0] * len(seqs))], schema=SCHEMA)


def _token(next_seq: int, wm: int, late: int = 0) -> bytes:
    return encode_token(IngestToken(chunk=0, next_seq=next_seq, seq_end=100, late=late,
                                    watermark=wm))


def _age_log(path: Path) -> None:
    _age(path, *path.rglob("*"))


def test_an_unchanged_upstream_log_gets_no_new_snapshot(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    path = layout.upstream(0)
    path.parent.mkdir(parents=True)
    log = StreamLog.open(path, writable=True, create=True, fsync="never")
    empty = StreamLog.open(layout.upstream(1), writable=True, create=True, fsync="never")
    try:
        log.append(_rows([0, 1, 2], [10, 20, 30]))
        log.commit(_token(3, wm=25, late=1))
        _age_log(path)
        _age_log(layout.upstream(1))
        ups = UpstreamPositions(layout)
        try:
            # one snapshot answers the position, the watermark, the late rows, the time
            assert ups.get(0) == 2 and ups.watermark(0) == 25 and ups.late(0) == 1
            assert ups.operator(0, {"in_last_seq": 2}) == 30
            assert ups.get(1) is None and ups.watermark(1) is None  # an empty log
            assert ups.get(2) is None  # no log: nothing opened
            assert ups.snapshots == 2
            for _ in range(3):  # nothing committed: stats only
                ups.tick()
                assert (ups.get(0), ups.watermark(0), ups.late(0)) == (2, 25, 1)
                assert ups.get(1) is None and ups.get(2) is None
            assert ups.snapshots == 2
            log.append(_rows([3, 4], [40, 50]))  # a commit: the segment grows
            log.commit(_token(5, wm=45, late=3))
            _age_log(path)
            ups.tick()
            assert (ups.get(0), ups.watermark(0), ups.late(0)) == (4, 45, 3)
            assert ups.operator(0, {"in_last_seq": 4}) == 50
            assert ups.snapshots == 3
            empty.append(_rows([0], [7]))  # the empty log's first commit: a new segment
            empty.commit(_token(1, wm=7))
            _age_log(layout.upstream(1))
            ups.tick()
            assert ups.get(1) == 0 and ups.watermark(1) == 7 and ups.snapshots == 4
            ups.tick()
            assert ups.get(0) == 4 and ups.get(1) == 0 and ups.snapshots == 4
        finally:
            ups.close()
    finally:
        log.close()
        empty.close()


def test_a_record_boundary_is_timed_from_the_index(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's last tuple's time: a row that begins or ends a record (what an
    operator task that reads whole records reports) comes from the record's index entry,
    no record decoded; a row inside a record is read, to the same answer."""
    layout = _layout(tmp_path)
    path = layout.upstream(0)
    path.parent.mkdir(parents=True)
    log = StreamLog.open(path, writable=True, create=True, fsync="never")
    try:
        log.append(_rows([0, 1, 2], [10, 20, 30]))
        log.append(_rows([3, 5, 7], [40, 50, 60]))
        log.append(_rows([8], [70]))
        log.commit(_token(9, wm=65))
        ups = UpstreamPositions(layout)
        try:
            ups.get(0)
            reads: list[int | None] = []
            opened = ups._logs[0]
            real = opened.read_forward

            def counted(**kw: Any) -> Any:
                reads.append(kw.get("after_seq"))
                return real(**kw)

            monkeypatch.setattr(opened, "read_forward", counted)
            boundaries = {0: 10, 2: 30, 3: 40, 7: 60, 8: 70}
            for seq, ts in boundaries.items():
                assert ups.operator(0, {"in_last_seq": seq}) == ts
            assert reads == []
            assert ups.operator(0, {"in_last_seq": 1}) == 20  # inside a record: read
            assert ups.operator(0, {"in_last_seq": 5}) == 50
            assert ups.operator(0, {"in_last_seq": 4}) is None  # no such row
            assert ups.operator(0, {"in_last_seq": 9}) is None  # not committed
            assert ups.operator(0, {"in_last_seq": 6, "watermark_us": 55}) == 55
            assert reads == [0, 4, 3, 5]
        finally:
            ups.close()
    finally:
        log.close()


@pytest.mark.parametrize("live", [False, True], ids=["pipe", "terminal"])
def test_without_a_live_table_the_view_looks_when_the_metrics_are_due(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live: bool) -> None:
    """A busy run (every state file changes between ticks): to a pipe the view reads the
    state files only when the metrics file (every metrics.EVERY_S) or the plain line is
    due, and what it writes then is what the files say at that moment; on a terminal it
    looks every BUSY_LOOK_S, as the table shows every look."""
    from cec_spark.ingest.query import IngestProgress
    from cec_spark.run import metrics
    from tests.cec_spark.test_metrics import parse

    now = [1000.0]
    monkeypatch.setattr(progress, "time", type("Clock", (), {
        "monotonic": staticmethod(lambda: now[0]), "time": staticmethod(time.time)}))
    layout = _layout(tmp_path)
    view = progress.ProgressView(layout, 2, IngestProgress(), enabled=True)
    view.plain, view.live = not live, None
    redrawn: list[int] = []
    if live:
        view.live = type("Live", (), {"update": lambda _, t: redrawn.append(1)})()
    read = CountingRead()
    view.states = StateFiles(layout, 2, read=read)
    tuples = 0

    def tick() -> None:  # the driver loop's tick, each one after the tasks wrote
        nonlocal tuples
        tuples += 10
        for p in range(2):
            write_advisory(layout.state_file(p), {"in_tuples": tuples + p})
            _age(layout.state_file(p), by=30.0 - tuples / 100)  # a new mtime each time
        now[0] += 0.5
        view.refresh()

    for _ in range(8):  # 4 s of ticks: the metrics are due twice (ticks 1 and 5)
        tick()
    prom = parse((layout.metrics_dir / metrics.FILE).read_text())
    assert prom["cec_input_tuples_total", "1"] == 51  # the files at tick 5, when written
    if live:
        assert len(read.paths) == 2 * 8 and len(redrawn) == 8  # every look, redrawn
    else:
        assert len(read.paths) == 2 * 2  # only at the two metrics writes
    view.look(force=True)  # the last look (as the view's end does) reads them all again
    assert view.state_list() == [{"in_tuples": 80}, {"in_tuples": 81}]
