"""The followed eventual checkpoint (issue 41 item 2) equals the backward scan's.

A hot standby's task keeps its partition's EC up to date by reading the output log
forward (:class:`recovery.followed.FollowedEC`); a takeover then loads it instead of
scanning the log backwards. Held against :func:`recovery.ec.reconstruct` on the
reference and vectorized operators' logs (random scenarios: count and time windows,
every policy mode, int and string keys, every function), after every record, with
compactions forced often, and seeded from a backward scan half way.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cec.policy import PolicyConfig
from cec.windows import SessionWindow
from recovery.checkpoint import EventualCheckpoint, NothingToRecover, Reconstruction
from recovery.ec import reconstruct
from recovery.errors import InconsistentLogError
from recovery.followed import FollowedEC
from recovery.partition import recover_partition
from tests.recovery.harness import OPERATORS, Scenario, make_stream, random_scenario, run
from tests.recovery.logs import cut_copy, read_all, run_logged, write_upstream


def _same(got: Reconstruction, want: Reconstruction, where: str) -> None:
    if isinstance(want, NothingToRecover):
        assert isinstance(got, NothingToRecover), where
        return
    assert isinstance(got, EventualCheckpoint) and isinstance(want, EventualCheckpoint), where
    assert (got.n_c, got.t_c, got.t_c_ts, got.replay_after_seq, got.last_out_seq) == (
        want.n_c, want.t_c, want.t_c_ts, want.replay_after_seq, want.last_out_seq), where
    assert got.table.sort_by("seq").equals(want.table.sort_by("seq")), where
    g, w = got.extent, want.extent
    assert (g.records, g.windows_found, g.g_open_found, g.g_check_found, g.replay_length,
            g.oldest) == (w.records, w.windows_found, w.g_open_found, w.g_check_found,
                          w.replay_length, w.oldest), where


def _records(scn: Scenario, seed: int) -> list[pa.RecordBatch]:
    inputs = make_stream(300, keys=6, seed=seed, key_type=scn.key_type)
    done = run(scn, inputs, keep_states=False)
    return [b for b in [*done.outputs, done.final] if b.num_rows]


@pytest.mark.parametrize("impl", sorted(OPERATORS))
@pytest.mark.parametrize("seed", range(12))
def test_the_followed_ec_is_the_backward_scans_after_every_record(impl: str, seed: int
                                                                  ) -> None:
    rng = random.Random(seed)
    scn = random_scenario(rng, impl)
    records = _records(scn, seed)
    followed = FollowedEC(compact_rows=rng.choice([1, 8, 64]))
    _same(followed.checkpoint(), reconstruct([]), f"{scn} before any record")
    for i, rec in enumerate(records):
        followed.see(rec)
        _same(followed.checkpoint(), reconstruct(reversed(records[:i + 1])),
              f"{scn} after record {i}")


@pytest.mark.parametrize("seed", range(6))
def test_seeded_from_a_backward_scan_then_followed(seed: int) -> None:
    rng = random.Random(100 + seed)
    scn = random_scenario(rng, "vector" if "vector" in OPERATORS else "reference")
    records = _records(scn, seed)
    half = len(records) // 2
    followed = FollowedEC(compact_rows=4)
    followed.seed(reconstruct(reversed(records[:half])))
    for i in range(half, len(records)):
        followed.see(records[i])
        _same(followed.checkpoint(), reconstruct(reversed(records[:i + 1])),
              f"{scn} after record {i}")


def test_session_windows_followed() -> None:
    scn = Scenario(SessionWindow(gap_us=12), PolicyConfig(mode="targets", q=3, u=5),
                   impl="vector" if "vector" in OPERATORS else "reference")
    records = _records(scn, 5)
    followed = FollowedEC(compact_rows=2)
    for i, rec in enumerate(records):
        followed.see(rec)
        _same(followed.checkpoint(), reconstruct(reversed(records[:i + 1])), f"record {i}")


def test_records_out_of_order_or_a_missing_footprint_are_refused() -> None:
    rng = random.Random(3)
    scn = random_scenario(rng)
    records = _records(scn, 3)
    followed = FollowedEC()
    followed.see(records[1])
    with pytest.raises(InconsistentLogError, match="not in seq order"):
        followed.see(records[0])
    # a log whose footprints were lost (here: its G rows dropped) does not add up
    lost = FollowedEC()
    for rec in records:
        lost.see(rec.filter(pa.compute.equal(rec.column("type"), 1)))
    last_open = [int(r.column("n_open")[r.num_rows - 1].as_py()) for r in records
                 if r.filter(pa.compute.equal(r.column("type"), 1)).num_rows]
    assert last_open and last_open[-1] > 0  # count windows (seed 3): some stay open
    with pytest.raises(InconsistentLogError, match="windows are open"):
        lost.checkpoint()


def _recover(scn: Scenario, up: Path, out: Path, followed: FollowedEC | None
             ) -> tuple[Any, Any]:
    op = scn.operator()
    res = recover_partition(out, up, op, fsync="never", followed=followed)
    res.output_log.close()
    return res, op.state_at()


@pytest.mark.parametrize("seed", range(4))
def test_recover_partition_with_a_followed_ec_is_the_scans(tmp_path: Path, seed: int
                                                           ) -> None:
    """On real logs: a standby followed the output log up to some record, the run wrote
    more, the writer died with a torn tail; the recovery that reads on from the followed
    EC gives the operator state of the one that scans backwards. A followed EC past
    the log's end (the tail it held was cut) is not used: the scan is."""
    rng = random.Random(200 + seed)
    scn = random_scenario(rng, "vector" if "vector" in OPERATORS else "reference")
    up, out = tmp_path / "up", tmp_path / "out"
    write_upstream(up, make_stream(300, keys=6, seed=seed, key_type=scn.key_type))
    logged = run_logged(scn, up, out, keep_states=False)
    records = read_all(out)
    assert len(records) >= 4, len(records)
    k = rng.randrange(1, len(records) - 2)  # the standby read records[:k] ...
    cut = logged.boundaries[len(records) - 2] + 5  # ... the log ends torn after k+2..
    for name, upto in (("behind", k), ("past the cut", len(records))):
        dest = tmp_path / f"out-{name}"
        cut_copy(out, dest, cut)
        plain = tmp_path / f"plain-{name}"
        cut_copy(out, plain, cut)
        followed = FollowedEC(compact_rows=rng.choice([1, 16]))
        for rec in records[:upto]:
            followed.see(rec)
        hot, hot_state = _recover(scn, up, dest, followed)
        cold, cold_state = _recover(scn, up, plain, None)
        assert hot_state == cold_state, name
        assert hot.t_c == cold.t_c and hot.replay_after_seq == cold.replay_after_seq, name
        said = "followed by a hot standby" in hot.explain.reason
        assert said == (name == "behind"), (name, hot.explain.reason)
