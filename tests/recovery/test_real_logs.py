"""Recovery on real StreamLogs: crashes at every record boundary and at torn tails."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from cec.policy import PolicyConfig
from cec.windows import CountWindow, SessionWindow, TimeWindow
from recovery.ec import EventualCheckpoint, NothingToRecover
from recovery.errors import ReplayUnavailableError
from recovery.partition import recover_partition
from storage_log.log import StreamLog
from tests.recovery.harness import (
    OPERATORS,
    Scenario,
    check_state,
    make_stream,
    r_rows,
    random_scenario,
)
from tests.recovery.logs import (
    SEGMENT_BYTES,
    LoggedRun,
    cut_copy,
    global_size,
    log_bytes,
    read_all,
    run_logged,
    write_upstream,
)


def crash_at(
    scn: Scenario, logged: LoggedRun, up_dir: Path, out_dir: Path, offset: int, dest: Path
) -> int:
    """Cut the output log at ``offset``, recover, finish the input; returns N_c."""
    cut_copy(out_dir, dest, offset)
    op = scn.operator()
    res = recover_partition(dest, up_dir, op, fsync="never")
    original = logged.run
    records = original.records()
    if original.final.num_rows:
        records.append((-1, original.final))
    with res.output_log as out:
        surviving = list(out.read_forward())
        k = len(surviving)
        assert [b.equals(r) for b, (_, r) in zip(surviving, records, strict=False)] == [True] * k
        rec = res.reconstruction
        if isinstance(rec, NothingToRecover):
            assert k == 0
            n_c = 0
        else:
            assert isinstance(rec, EventualCheckpoint)
            last_batch = records[k - 1][0]
            check_state(
                scn,
                original,
                rec,
                op.state_at(),
                None if last_batch < 0 else last_batch,
                finished=last_batch < 0,
            )
            n_c = rec.n_c
        with StreamLog.open(up_dir) as up:
            for b in up.read_forward(after_seq=res.t_c):
                out.append(op.process(b))
                out.commit()
        out.append(op.finish())
        out.commit()
    final = read_all(dest)
    want = [*original.outputs, original.final]
    for types in ((1,), (2,)):
        assert r_rows(final, types).equals(r_rows(want, types)), (offset, types)
    return n_c


def setup_run(tmp_path: Path, scn: Scenario, inputs: list[pa.RecordBatch]) -> LoggedRun:
    write_upstream(tmp_path / "up", inputs)
    return run_logged(scn, tmp_path / "up", tmp_path / "out")


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("seed", range(3))
def test_crash_at_every_record_boundary(tmp_path: Path, seed: int, impl: str) -> None:
    rng = random.Random(100 + seed)
    scn = random_scenario(rng, impl)
    inputs = make_stream(rng.randint(40, 80), rng.randint(2, 6), seed, key_type=scn.key_type)
    logged = setup_run(tmp_path, scn, inputs)
    for j, offset in enumerate([0, *logged.boundaries]):
        crash_at(scn, logged, tmp_path / "up", tmp_path / "out", offset, tmp_path / f"c{j}")


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("seed", range(3))
def test_torn_tails(tmp_path: Path, seed: int, impl: str) -> None:
    rng = random.Random(200 + seed)
    scn = random_scenario(rng, impl)
    inputs = make_stream(600, rng.randint(5, 40), seed, key_type=scn.key_type, max_batch=12)
    logged = setup_run(tmp_path, scn, inputs)
    end = logged.boundaries[-1]
    for j in range(8):
        offset = rng.randrange(1, end)
        crash_at(scn, logged, tmp_path / "up", tmp_path / "out", offset, tmp_path / f"t{j}")


def test_edge_cases_on_real_logs(tmp_path: Path) -> None:
    # Crash before the first commit, N_c = 0, only G_open footprints, time windows.
    scn = Scenario(CountWindow(2, 2), PolicyConfig(mode="open-only"))
    inputs = make_stream(10, 1, 4, max_batch=1)
    logged = setup_run(tmp_path, scn, inputs)
    seen = {
        crash_at(scn, logged, tmp_path / "up", tmp_path / "out", off, tmp_path / f"c{j}")
        for j, off in enumerate([0, *logged.boundaries])
    }
    assert seen == {0, 1}
    scn = Scenario(TimeWindow(30, 10), PolicyConfig(mode="targets", q="1x", u=20))
    inputs = make_stream(120, 4, 5, ts_step=5)
    logged = setup_run(tmp_path / "time", scn, inputs)
    for j, off in enumerate(logged.boundaries[::3]):
        crash_at(scn, logged, tmp_path / "time/up", tmp_path / "time/out", off, tmp_path / f"t{j}")


def test_empty_and_missing_logs_are_a_fresh_start(tmp_path: Path) -> None:
    scn = Scenario(CountWindow(3, 3), PolicyConfig())
    res = recover_partition(tmp_path / "out", tmp_path / "up", scn.operator(), fsync="never")
    res.output_log.close()
    assert res.explain.fresh_start and res.t_c is None


def test_trimmed_upstream_is_replay_unavailable(tmp_path: Path) -> None:
    scn = Scenario(CountWindow(1000, 1000), PolicyConfig(mode="open-only"))
    inputs = make_stream(400, 3, 6, max_batch=10)
    logged = setup_run(tmp_path, scn, inputs)
    assert logged.boundaries
    with StreamLog.open(tmp_path / "up", writable=True, segment_bytes=4096) as up:
        assert up.trim(before_seq=int(inputs[-1].column("seq")[0].as_py())) > 0
    with pytest.raises(ReplayUnavailableError, match="T="):
        recover_partition(tmp_path / "out", tmp_path / "up", scn.operator(), fsync="never")
    # The failed recovery released the output log's writer lock.
    StreamLog.open(tmp_path / "out", writable=True).close()


def test_time_travel_on_a_real_log(tmp_path: Path) -> None:
    from recovery.partition import predict, recover_from_logs
    from tests.recovery.harness import MemLog

    scn = Scenario(CountWindow(4, 2), PolicyConfig(mode="targets", q=6, u=15))
    inputs = make_stream(300, 6, 21, max_batch=9)
    logged = setup_run(tmp_path, scn, inputs)
    records = [b for _, b in logged.run.records()]
    mem = MemLog(records)
    with StreamLog.open(tmp_path / "out") as out, StreamLog.open(tmp_path / "up") as up:
        for i, b in logged.run.records()[::5]:
            ts = int(b.column("ts")[-1].as_py())
            seq = int(b.column("seq")[0].as_py())
            assert (
                predict(out, up, at_ts=ts).to_dict()["extent"]
                == predict(mem, at_ts=ts).to_dict()["extent"]
            )
            op = scn.operator()
            res = recover_from_logs(out, up, op, at_seq=seq)
            assert isinstance(res.reconstruction, EventualCheckpoint)
            # the dry run counts exactly what the replay then read
            dry, real = predict(out, up, at_seq=seq).to_dict()["replay"], res.explain.to_dict()[
                "replay"]
            ec = res.reconstruction
            assert real["tuples"] > 0 or ec.t_c == ec.replay_after_seq
            assert {k: dry[k] for k in ("tuples", "batches", "bytes")} == \
                {k: real[k] for k in ("tuples", "batches", "bytes")}
            assert res.explain.to_dict()["extent"] == predict(mem, at_seq=seq).to_dict()["extent"]
            check_state(scn, logged.run, res.reconstruction, op.state_at(), i)


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("window", [TimeWindow(size_us=30, slide_us=10), SessionWindow(6)],
                         ids=["sliding", "session"])
def test_a_crash_between_the_ends_parts_is_exact(tmp_path: Path, impl: str,
                                                 window: TimeWindow | SessionWindow) -> None:
    """The task commits the end's closes in parts (``finish_parts``): a crash after any
    of them, recovered and finished again (in parts of another size), gives the
    failure-free output."""
    rng = random.Random(4100)
    scn = Scenario(window, PolicyConfig(mode="targets", q="1x", u=50), function="avg",
                   impl=impl)
    inputs = make_stream(80, 5, 3)
    write_upstream(tmp_path / "up", inputs)
    op = scn.operator()
    ends: list[int] = []  # the global byte offset after each commit of the end's parts
    with (StreamLog.open(tmp_path / "up") as up,
          StreamLog.open(tmp_path / "out", writable=True, create=True, fsync="never",
                         segment_bytes=SEGMENT_BYTES) as out):
        for b in up.read_forward():
            res = op.process(b)
            if res.num_rows:
                out.append(res)
                out.commit()
        for part in op.finish_parts(1):
            out.append(part)
            out.commit()
            ends.append(global_size(log_bytes(tmp_path / "out")))
    want = read_all(tmp_path / "out")
    assert len(ends) >= 3, ends  # windows open at the end: one part each
    for j, offset in enumerate(ends[:-1]):  # after a part, before the last
        dest = tmp_path / f"c{j}"
        cut_copy(tmp_path / "out", dest, offset)
        again = scn.operator()
        res = recover_partition(dest, tmp_path / "up", again, fsync="never")
        with res.output_log as out, StreamLog.open(tmp_path / "up") as up:
            for b in up.read_forward(after_seq=res.t_c):
                if (r := again.process(b)).num_rows:
                    out.append(r)
                    out.commit()
            for part in again.finish_parts(rng.randint(1, 4)):
                out.append(part)
                out.commit()
        got = read_all(dest)
        for types in ((1,), (2,)):
            assert r_rows(got, types).equals(r_rows(want, types)), (offset, types)
