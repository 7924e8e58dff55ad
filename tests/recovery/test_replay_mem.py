"""Recovery of the real operator from in-memory logs: crash at every record boundary."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import recovery.upstream as upstream_mod
from cec.policy import PolicyConfig
from cec.windows import CountWindow, TimeWindow
from recovery.ec import EventualCheckpoint, NothingToRecover
from recovery.errors import ExtentError, ReplayUnavailableError
from recovery.explain import RateModel, RecoveryExplain
from recovery.partition import boundary_seq, predict, recover_from_logs
from tests.recovery.harness import (
    OPERATORS,
    MemLog,
    Run,
    Scenario,
    check_state,
    continue_run,
    make_stream,
    r_rows,
    random_scenario,
    run,
)


def crash_and_recover(
    scn: Scenario, original: Run, k: int, filter_replay: bool = True
) -> RecoveryExplain:
    """Keep the first k records of the output log, recover, finish, compare."""
    records = original.records()
    surviving = [b for _, b in records[:k]]
    up = MemLog(original.inputs)
    op = scn.operator()
    res = recover_from_logs(MemLog(surviving), up, op, filter_replay=filter_replay)
    rec = res.reconstruction
    if isinstance(rec, NothingToRecover):
        assert k == 0
        assert res.t_c is None
        next_out = 0
    else:
        assert isinstance(rec, EventualCheckpoint)
        check_state(scn, original, rec, op.state_at(), records[k - 1][0])
        next_out = rec.next_out_seq
    after = continue_run(op, up.read_forward(after_seq=res.t_c), next_out)
    want = [*original.outputs, original.final]
    for types in ((1,), (2,)):
        got = r_rows([*surviving, *after], types)
        assert got.equals(r_rows(want, types)), (k, types)
    return res.explain


SEEDS = range(24)


@pytest.mark.parametrize("seed", range(6))
def test_replay_filter_and_coalescing_are_exact(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny replay batches (every upstream record its own operator call, or several
    # coalesced), filter on and off: the recovered state and output are the same.
    monkeypatch.setattr(upstream_mod, "REPLAY_BATCH_ROWS", 1 + seed % 3 * 4)
    rng = random.Random(500 + seed)
    scn = random_scenario(rng, "reference")
    inputs = make_stream(rng.randint(40, 90), rng.randint(1, 6), seed, key_type=scn.key_type)
    original = run(scn, inputs)
    for k in range(0, len(original.records()) + 1, 2):
        on = crash_and_recover(scn, original, k)
        off = crash_and_recover(scn, original, k, filter_replay=False)
        assert on.replay.tuples == off.replay.tuples == off.replay.applied
        assert on.replay.applied <= on.replay.tuples


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("seed", SEEDS)
def test_crash_at_every_record_boundary(seed: int, impl: str) -> None:
    rng = random.Random(seed)
    scn = random_scenario(rng, impl)
    inputs = make_stream(
        rng.randint(20, 90), rng.randint(1, 8), seed, key_type=scn.key_type, sparse=seed % 2 == 0
    )
    original = run(scn, inputs)
    for k in range(len(original.records()) + 1):
        crash_and_recover(scn, original, k)


def test_n_c_zero_only_g_open_and_reopened_windows() -> None:
    # Tumbling count windows of 2 over one key: the log alternates G_open and R, so a
    # cut after an R has N_c = 0 and a cut after a G_open has only G_open footprints.
    scn = Scenario(CountWindow(2, 2), PolicyConfig(mode="open-only"))
    inputs = make_stream(12, 1, 3, max_batch=1)
    original = run(scn, inputs)
    kinds = set()
    for k in range(1, len(original.records()) + 1):
        explain = crash_and_recover(scn, original, k)
        kinds.add(explain.n_c)
        if explain.n_c == 0:
            assert explain.t_c == explain.replay_after_seq
            assert explain.replay.tuples == 0
    assert kinds == {0, 1}


def test_closed_and_reopened_inside_the_extent() -> None:
    # Key 0 is slow (one long window), key 1 fast: its windows close and reopen many
    # times inside the extent that key 0's old G_open holds open.
    rows = [
        {"ts": 100 + i, "seq": i, "key": 0 if i % 10 == 0 else 1, "value": float(i)}
        for i in range(40)
    ]
    table = pa.Table.from_pylist(rows, schema=make_stream(1, 1, 0)[0].schema)
    inputs = table.to_batches(max_chunksize=3)
    scn = Scenario(CountWindow(5, 5), PolicyConfig(mode="open-only"))
    original = run(scn, inputs)
    explain = crash_and_recover(scn, original, len(original.records()))
    assert explain.extent is not None and explain.extent.closed_skipped >= 3
    assert explain.replay_after_seq == 0


def test_time_windows_sliding() -> None:
    scn = Scenario(TimeWindow(20, 5), PolicyConfig(mode="targets", q="1x", u=10))
    inputs = make_stream(80, 3, 11, ts_step=4)
    original = run(scn, inputs)
    for k in range(len(original.records()) + 1):
        crash_and_recover(scn, original, k)


def test_empty_logs_are_a_fresh_start() -> None:
    scn = Scenario(CountWindow(3, 3), PolicyConfig())
    res = recover_from_logs(MemLog(), MemLog(), scn.operator())
    assert res.explain.fresh_start and res.t_c is None
    assert res.explain.to_dict()["fresh_start"] is True
    assert res.explain.extent is None and res.explain.extent_records == 0
    assert RecoveryExplain.from_dict(res.explain.to_dict()) == res.explain


def test_trimmed_upstream_and_output() -> None:
    scn = Scenario(CountWindow(50, 50), PolicyConfig(mode="open-only"))
    inputs = make_stream(60, 4, 5, max_batch=1)
    original = run(scn, inputs)
    records = [b for _, b in original.records()]
    assert len(records) == 4  # one G_open per key
    with pytest.raises(ReplayUnavailableError, match="trimmed"):
        recover_from_logs(MemLog(records), MemLog(inputs[3:]), scn.operator())
    with pytest.raises(ReplayUnavailableError, match="empty"):
        recover_from_logs(MemLog(records), MemLog(), scn.operator())
    with pytest.raises(ExtentError):
        recover_from_logs(MemLog(records[1:]), MemLog(inputs), scn.operator())
    # Dense seqs: an upstream trimmed to exactly T + 1 still holds all of (T, t_c].
    inputs = make_stream(60, 4, 5, max_batch=1, sparse=False)
    original = run(scn, inputs)
    records = [b for _, b in original.records()]
    op = scn.operator()
    res = recover_from_logs(MemLog(records), MemLog(inputs[1:]), op)
    assert res.explain.replay_after_seq == 0
    rec = res.reconstruction
    assert isinstance(rec, EventualCheckpoint)
    check_state(scn, original, rec, op.state_at(), original.records()[-1][0])
    with pytest.raises(ReplayUnavailableError, match="trimmed"):
        recover_from_logs(MemLog(records), MemLog(inputs[2:]), scn.operator())


def test_time_travel_replays_to_the_state_then() -> None:
    scn = Scenario(CountWindow(4, 2), PolicyConfig(mode="targets", q=5, u=8))
    inputs = make_stream(70, 5, 9)
    original = run(scn, inputs)
    records = original.records()
    out = MemLog([b for _, b in records])
    every = pa.Table.from_batches([b for _, b in records])
    t_now, seqs = every.column("t_now").to_pylist(), every.column("seq").to_pylist()
    for j in range(len(seqs)):
        # A position inside one input tuple's output snaps to the end of that output.
        end = max(s for s, t in zip(seqs, t_now, strict=True) if t == t_now[j])
        assert boundary_seq(out, seqs[j]) == end
    for i, batch in records:
        last = int(batch.column("seq")[-1].as_py())
        op = scn.operator()
        res = recover_from_logs(out, MemLog(inputs), op, at_seq=last)
        assert isinstance(res.reconstruction, EventualCheckpoint)
        check_state(scn, original, res.reconstruction, op.state_at(), i)
        ts = int(batch.column("ts")[-1].as_py())
        expect = every.filter(pc.less_equal(every.column("ts"), ts))
        by_ts = predict(out, MemLog(inputs), at_ts=ts)
        assert by_ts.t_c == expect.column("t_now")[-1].as_py()
        assert by_ts.next_out_seq == expect.column("seq")[-1].as_py() + 1


def test_time_travel_into_a_g_open_r_row() -> None:
    """Fast windows: a position of a stored G_open+R row's G_open snaps to its R."""
    scn = Scenario(CountWindow(1, 1), PolicyConfig(mode="open-only"))
    inputs = make_stream(40, 3, 5, max_batch=7)
    original = run(scn, inputs)
    records = original.records()
    out = MemLog([b for _, b in records])
    stored = pa.Table.from_batches([b for _, b in records]).column("seq").to_pylist()
    assert stored == list(range(1, 2 * len(stored), 2))  # every row holds two positions
    for s in range(2 * len(stored)):
        assert boundary_seq(out, s) == s | 1
    for i, batch in records:
        last = int(batch.column("seq")[-1].as_py())
        for at in (last - 1, last):  # the G_open and the R of the batch's last tuple
            op = scn.operator()
            res = recover_from_logs(out, MemLog(inputs), op, at_seq=at)
            assert isinstance(res.reconstruction, EventualCheckpoint)
            assert res.reconstruction.n_c == 0 and res.explain.next_out_seq == last + 1
            check_state(scn, original, res.reconstruction, op.state_at(), i)


def test_explain_reports_every_phase() -> None:
    scn = Scenario(CountWindow(10, 10), PolicyConfig(mode="targets", q="2x", u=100))
    inputs = make_stream(300, 30, 2, max_batch=20)
    original = run(scn, inputs, keep_states=False)
    res = recover_from_logs(
        MemLog([b for _, b in original.records()]), MemLog(inputs), scn.operator()
    )
    d = res.explain.to_dict()
    assert [p["name"] for p in d["phases"]] == ["reconcile", "scan", "load", "replay"]
    assert d["extent"]["records"] >= d["n_c"]
    assert d["replay"]["tuples"] > 0 and d["replay"]["bytes"] > 0
    assert all(p["estimated_s"] >= 0 for p in d["phases"])
    assert all(p["measured_s"] is None or p["cpu_s"] is not None for p in d["phases"])
    rates = RateModel.from_explain(res.explain)
    assert rates.replay_positions_per_s > 0 and rates.scan_records_per_s > 0
    import json

    # the task's explain crosses to the driver as JSON and comes back the same
    assert RecoveryExplain.from_dict(json.loads(json.dumps(d))) == res.explain
    assert d["estimated_s"] == sum(p["estimated_s"] for p in d["phases"])
