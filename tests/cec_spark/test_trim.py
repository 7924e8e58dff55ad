"""Upstream trimming: the ``replay_after_seq`` an operator task reports, and the ingest's trim.

It must never pass what a recovery from the committed output log replays
after (its ``T``), or that recovery would find its upstream records deleted. These
tests recover for real from the output log at every batch boundary of a stream and
compare; no Spark.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from cec.operator import OperatorConfig
from cec.operator.vector import VectorOperator
from cec.policy import PolicyConfig
from cec.windows import CountWindow, TimeWindow, WindowSpec
from cec_spark.ingest.logs import create_logs, trim_upstream
from cec_spark.ingest.writer import WriterConfig, open_upstream
from cec_spark.run.trim import ReplayAfterSeq
from cec_spark.rundir.advisory import write_advisory
from cec_spark.rundir.layout import RunLayout
from recovery.partition import recover_partition
from recovery.upstream import upstream_trim_before
from storage_log.errors import LogTrimmedError
from storage_log.log import StreamLog
from tests.recovery.harness import FakeClock, make_stream


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


WINDOWS: dict[str, WindowSpec] = {"count": CountWindow(4, 4), "sliding count": CountWindow(6, 2),
                                  "time": TimeWindow(12, 6)}


def _operator(mode: str, window: str = "count") -> VectorOperator:
    return VectorOperator(OperatorConfig(
        window=WINDOWS[window], policy=PolicyConfig(mode=mode, q=24, u=40),  # type: ignore[arg-type]
        clock=FakeClock()))


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("mode", ["targets", "open-only"])
def test_replay_after_seq_never_passes_the_T_of_a_recovery_from_the_committed_output(
        tmp_path: Path, mode: str, window: str) -> None:
    stream = make_stream(600, keys=9, seed=5, max_batch=9)
    up = StreamLog.open(tmp_path / "up", writable=True, create=True, fsync="never")
    out = StreamLog.open(tmp_path / "out", writable=True, create=True, fsync="never")
    op = _operator(mode, window)
    replay_after_seq = ReplayAfterSeq(0.0, None, clock=Clock())
    checked = equal = 0
    pending: list[int | None] = []  # appended, not committed: noted once committed
    for i, batch in enumerate(stream):
        up.append(batch)
        up.commit()
        result = op.process(batch)
        if not result.num_rows:
            continue
        out.append(result)
        pending.append(ReplayAfterSeq.of(op, result))
        if i % 3:  # up to 3 records share a commit, as a task's working off a backlog
            continue
        out.commit()
        for value in pending:
            replay_after_seq.add(value)
        pending = []
        out.close()
        rec = recover_partition(tmp_path / "out", tmp_path / "up", _operator(mode, window),
                      fsync="never")
        rec.output_log.close()
        out = StreamLog.open(tmp_path / "out", writable=True, fsync="never")
        value = replay_after_seq.value()
        assert value is not None and rec.replay_after_seq is not None
        assert value <= rec.replay_after_seq, (i, value, rec.replay_after_seq)
        checked += 1
        equal += value == rec.replay_after_seq
    out.close()
    up.close()
    assert checked > 25
    assert equal == checked  # every open window has a G row: the replay_after_seq is exactly T


def test_replay_after_seq_lags_by_lag_s() -> None:
    clock = Clock()
    replay_after_seq = ReplayAfterSeq(10.0, 3, clock=clock)
    op = _operator("open-only")
    for i, batch in enumerate(make_stream(200, keys=3, seed=1, sparse=False)):
        clock.now = float(i)
        op.process(batch)
        out = pa.RecordBatch.from_pydict({"t_now": pa.array([op.t_now], pa.int64())})
        replay_after_seq.add(ReplayAfterSeq.of(op, out))
    assert op.t_now is not None
    clock.now += 0.5
    # the newest note at least 10 s old; before any note is that old, the start value
    assert replay_after_seq.value() is not None and replay_after_seq.value() < op.t_now - op.u
    assert ReplayAfterSeq(10.0, 3, clock=Clock()).value() == 3
    clock.now += 100.0
    assert replay_after_seq.value() == op.t_now - op.u


def test_trim_drops_whole_segments_up_to_the_reported_replay_after_seq(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "run")
    layout.state_file(0).parent.mkdir(parents=True)
    cfg = WriterConfig(str(layout.root), 2, "never", "key", "value", segment_bytes=4096)
    create_logs(layout, 2, "never")  # the driver's part: executors only open logs
    logs = [open_upstream(cfg, p) for p in range(2)]
    seqs = []
    for batch in make_stream(3000, keys=5, seed=2, max_batch=40):
        seqs += batch.column("seq").to_pylist()
        for log in logs:
            log.append(batch)
            log.commit()
    replay_after_seq = seqs[len(seqs) // 2]
    write_advisory(layout.state_file(0), {"replay_after_seq": replay_after_seq})
    # no replay_after_seq reported: nothing trimmed
    write_advisory(layout.state_file(1), {"in_tuples": 5})
    assert trim_upstream(layout, logs) > 0
    assert logs[1].first_seq == seqs[0]
    assert seqs[0] < logs[0].first_seq <= upstream_trim_before(replay_after_seq)
    after = [s for b in logs[0].read_forward(after_seq=replay_after_seq)
             for s in b.column("seq").to_pylist()]
    assert after == [s for s in seqs if s > replay_after_seq]
    with pytest.raises(LogTrimmedError):
        next(iter(logs[0].read_forward(after_seq=seqs[0])))
    for log in logs:
        log.close()
