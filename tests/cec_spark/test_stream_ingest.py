"""The long-lived ingest of a stream folder (issue 28 part 1): one Spark task that stays
up, no Spark job per poll, with the per-poll path's semantics.

Without Spark: the key partition equals Spark's (recovery.rescale, itself tested equal to
Spark's), the plan crosses to the task as JSON unchanged, and what the task cannot match
is a fallback reason. With Spark, real `cec` processes: a filtered stream-folder run uses
the long-lived task and exports exactly the pandas reference and the per-poll path's
export; kill -9 of the whole run mid-stream and `cec recover` give the same export, with
one, two and four long-lived ingest tasks (issue 38 item 5: each owns a slice of the
logs).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cec.spec import load_spec
from cec_spark.ingest.project import Partitioner
from cec_spark.ingest.stream import (
    FALLBACK,
    fallback_reason,
    merge_states,
    plan_from_json,
    plan_json,
    stream_writers,
)
from cec_spark.rundir.run_file import settings_for
from cec_spark.source.types import Chunk, ColumnTypes, SourcePlan, WatchState
from recovery.rescale import partitions_of
from storage_log.errors import LogNotFoundError
from storage_log.log import StreamLog
from tests.cec_spark.helpers import (
    alive,
    cec,
    read_export_csv,
    reference_count_windows,
    spec_text,
    start_cec,
    task_states,
    wait_for,
    write_items_csv,
)

P = 2
WHERE = "item_price >= 0 AND item_id % 7 <> 3"
PER_POLL = FALLBACK.split(":")[1].strip()  # "the stream ingest runs one Spark job per poll"


def _spec(tmp_path: Path, *, extra_run: str = "", source: str = "", partitions: int = P
          ) -> Path:
    (tmp_path / "in").mkdir(exist_ok=True)
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text('kind = "stream-dir"\npath = "in"\nformat = "csv"\n'
                              f'time_field = "item_time"\npoll_ms = 50\n{source}',
                              where=WHERE, partitions=partitions, extra_run=extra_run))
    return spec


def _reference(df: pd.DataFrame) -> pd.DataFrame:
    kept = df[(df.item_price >= 0) & (df.item_id % 7 != 3)]
    return reference_count_windows(kept, 10, where_nonneg=False)


def _same_as_pandas(got: pd.DataFrame, ref: pd.DataFrame) -> None:
    cols = ["key", "window_start", "window_end", "count"]
    assert len(got) > 0 and got[cols].values.tolist() == ref[cols].values.tolist()
    assert np.allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9, atol=0.0)


def _drop(folder: Path, df: pd.DataFrame, i: int, lo: int, hi: int) -> None:
    _held(folder, df, i, lo, hi).rename(folder / f"f{i:04d}.csv")


def _held(folder: Path, df: pd.DataFrame, i: int, lo: int, hi: int) -> Path:
    """The file ``_drop`` would drop, written under its hidden name (not yet seen)."""
    tmp = folder / f".f{i:04d}.tmp"
    df.iloc[lo:hi].to_csv(tmp, index=False)
    return tmp


def _states(run: Path, partitions: int = P) -> list[dict[str, object]]:
    return task_states(run, partitions)


def _ingest_state(run: Path, name: str = "ingest.json") -> dict[str, object]:
    try:
        got: dict[str, object] = json.loads((run / "state" / name).read_text())
    except (OSError, ValueError):
        return {}
    return got


# --------------------------------------------------------------------------- no Spark


@pytest.mark.parametrize("groups", [None, 128])
def test_partitioner_equals_the_rescale_partition(groups: int | None) -> None:
    rng = np.random.default_rng(3)
    ints = [*rng.integers(-(1 << 62), 1 << 62, 500).tolist(), 0, -1, 7, 7, 7]
    strs = [f"k{i}" for i in rng.integers(0, 300, 500)] + ["", "é", "k1"]
    part = Partitioner(5, groups)
    for keys in (ints, strs):
        got = part(pa.array(keys)).to_numpy().tolist()
        if groups is None:  # pmod(xxhash64(key), P): the same as G = P
            want = partitions_of(keys, 5, 5).tolist()
        else:
            want = partitions_of(keys, 5, groups).tolist()
        assert got == want
    # Spark's xxhash64(NULL) is its seed, 42
    nulls = part(pa.array([None, 1], pa.int64())).to_numpy().tolist()
    g = groups or 5
    assert nulls[0] == (42 % g) * 5 // g


def test_plan_crosses_to_the_task_unchanged() -> None:
    cols = ColumnTypes(("item_id", "item_price", "item_time"), ("int64", "float64", "int64"))
    chunk = Chunk(0, "csv", "/x/f0.csv", 0, 10, 0, 10)
    plan = SourcePlan(cols, (chunk,), False, WatchState(("f0.csv",), 10, 123, "f0.csv:11"))
    back = plan_from_json(plan_json(plan))
    assert back.columns == cols and back.chunks == (chunk,) and not back.ended
    assert back.watch == plan.watch


def test_what_the_task_cannot_match_falls_back(tmp_path: Path) -> None:
    cols = ColumnTypes(("item_id", "item_price", "item_time"), ("int64", "float64", "int64"))
    for extra in ("", "ingest_tasks = 2"):  # several ingest tasks: several long-lived
        spec = load_spec(_spec(tmp_path, extra_run=extra))
        assert fallback_reason(spec, settings_for(spec, cols, None)) is None
    spec = load_spec(_spec(tmp_path, source='allowed_lateness = "1s"'))
    reason = fallback_reason(spec, settings_for(spec, cols, None))
    assert reason is not None and "allowed_lateness" in reason
    floats = ColumnTypes(cols.names, ("float64", "float64", "int64"))
    spec = load_spec(_spec(tmp_path))
    reason = fallback_reason(spec, settings_for(spec, floats, None))
    assert reason is not None and "item_id" in reason


def test_stream_writers_take_the_free_slots_and_say_why_fewer() -> None:
    assert stream_writers(1, 4, 6) == (1, None)
    assert stream_writers(2, 2, 4) == (2, None)
    assert stream_writers(4, 4, 8) == (4, None)
    n, why = stream_writers(4, 4, 6)  # local[P+2]: two slots beyond the operators
    assert n == 2 and why is not None and "give it 8" in why and "6 task slots" in why
    assert stream_writers(8, 2, 16) == (2, None)  # at most one per partition's log
    n, why = stream_writers(3, 4, 4)  # no free slot: one task, as every run had
    assert n == 1 and why is not None


def test_merge_states_stands_where_the_slowest_task_stands() -> None:
    a = {"chunks_done": 7, "source_rows": 7_000, "resumed_at": 0, "tuples": 300,
         "trimmed": 1, "rows_received": 310, "first_received": 5, "ended": True,
         "stopped": False, "writer_s": {"wait_s": 1.0, "commit_s": 0.5}}
    b = {"chunks_done": 5, "source_rows": 5_000, "resumed_at": 100, "tuples": 200,
         "trimmed": 0, "rows_received": 205, "first_received": None, "ended": False,
         "stopped": True, "writer_s": {"wait_s": 2.0}}
    got = merge_states([a, b])
    assert (got["chunks_done"], got["source_rows"], got["resumed_at"]) == (5, 5_000, 0)
    assert (got["tuples"], got["trimmed"], got["rows_received"]) == (500, 1, 515)
    assert got["first_received"] == 5 and not got["ended"] and got["stopped"]
    assert got["writer_s"] == {"wait_s": 3.0, "commit_s": 0.5}
    assert merge_states([a, {}]) == {}  # not every task has reported yet
    assert merge_states([a]) == a


# --------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_filtered_stream_uses_the_long_lived_ingest_and_exports_exactly(
        tmp_path: Path) -> None:
    df = write_items_csv(tmp_path / "all.csv", 12_000, keys=60, seed=9)
    spec = _spec(tmp_path)
    folder, run = tmp_path / "in", tmp_path / "run"
    _drop(folder, df, 0, 0, 3_000)
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log")
    wait_for(lambda: sum(int(s.get("in_tuples", 0)) for s in _states(run)) > 0, 180,  # type: ignore[call-overload]
             "the first file to be processed")
    for i, lo in enumerate(range(3_000, 12_000, 3_000), start=1):
        _drop(folder, df, i, lo, lo + 3_000)
        time.sleep(0.3)
    (folder / "_END").touch()
    assert proc.wait(180) == 0, (tmp_path / "run.log").read_text()[-3000:]
    log = (tmp_path / "run.log").read_text()
    assert PER_POLL not in log, log[-3000:]
    state = _ingest_state(run)
    assert state.get("ended") is True and int(state["polls"]) >= 2, state  # type: ignore[call-overload]
    assert state["source_rows"] == 12_000 and state["chunks_done"] == 4, state
    cec(["export", str(run), "--out", str(tmp_path / "long.csv")], check=True)
    _same_as_pandas(read_export_csv(tmp_path / "long.csv"), _reference(df))

    # the per-poll path (late = "drop" is what the long-lived task does not do; the
    # rows are in time order, so none is dropped), and two long-lived tasks: the same
    # bytes
    for name, extra_run, source, per_poll in (
            ("poll", "", 'late = "drop"\n', True), ("two", "ingest_tasks = 2", "", False)):
        other = tmp_path / name
        other.mkdir()
        spec2 = _spec(other, extra_run=extra_run, source=source)
        for i, lo in enumerate(range(0, 12_000, 3_000)):
            _drop(other / "in", df, i, lo, lo + 3_000)
        (other / "in" / "_END").touch()
        done = cec(["run", "pipeline", str(spec2), "--log-dir", str(other / "run")],
                   check=True)
        assert done.stderr.count(PER_POLL) == per_poll, done.stderr[-2000:]
        assert not per_poll or "late" in done.stderr, done.stderr[-2000:]
        cec(["export", str(other / "run"), "--out", str(other / "out.csv")], check=True)
        assert (other / "out.csv").read_bytes() == (tmp_path / "long.csv").read_bytes()
    assert _ingest_state(tmp_path / "two" / "run", "ingest.1.json").get("ended") is True


def _upstream_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in (run / "upstream").rglob("*.seg"))


def _upstream_last_seq(run: Path, partitions: int = P) -> int:
    """The highest source row committed to any upstream log (-1: none)."""
    last = -1
    for p in range(partitions):
        try:
            with StreamLog.open(run / "upstream" / f"p{p:04d}", threads=0) as log:
                last = max(last, -1 if log.last_seq is None else log.last_seq)
        except LogNotFoundError:  # the run's logs not created yet
            return -1
    return last


FILE_ROWS = 6_000  # 12 chunks of 500 rows


@pytest.mark.spark
@pytest.mark.parametrize("tasks", [1, 2, 4])
def test_kill9_mid_stream_then_recover_is_exact(tmp_path: Path, tasks: int) -> None:
    """The kill lands mid-ingest: once the first file is processed, a second file of
    12 chunks (500 rows) is dropped; as soon as the upstream logs grow (its job's
    commit), 2 to 5 more files are renamed into the folder and the run is killed at
    once, so the ingest's next poll and its job are cut off; afterwards the logs show
    that not every dropped chunk was ingested (asserted: where the kill landed).
    (A job commits once, at its end, up to 64 Ki rows: files dropped together and seen
    by one poll were all committed before the kill on a loaded CI machine.)

    With ``tasks`` > 1 long-lived ingest tasks (P = ``max(2, tasks)``, the slots for
    them given), each writes the logs of its slice; every task's state file says where
    it stands, and the run's figures merge them."""
    parts = max(P, tasks)
    df = write_items_csv(tmp_path / "all.csv", 10 * FILE_ROWS, keys=60, seed=13)
    several = f"ingest_tasks = {tasks}\nmaster = \"local[{parts + tasks},3]\"\n" \
        if tasks > 1 else ""
    spec = _spec(tmp_path, extra_run=f"segment_kb = 4\ntrim_lag_s = 0\n{several}",
                 source="chunk_rows = 500\n", partitions=parts)
    folder, run = tmp_path / "in", tmp_path / "run"
    _drop(folder, df, 0, 0, FILE_ROWS)
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log")
    wait_for(lambda: sum(int(s.get("in_tuples", 0)) for s in _states(run, parts)) > 0,  # type: ignore[call-overload]
             180, "the first file to be processed")
    seed = random.randrange(1 << 30)
    kill_after = random.Random(seed).randrange(3, 7)  # files 1..kill_after
    wait_for(lambda: _upstream_last_seq(run, parts) >= FILE_ROWS - 100, 60,
             "the first file ingested")
    idle = _upstream_bytes(run)
    held = [_held(folder, df, i, i * FILE_ROWS, (i + 1) * FILE_ROWS)
            for i in range(2, kill_after + 1)]  # written now, renamed in at the kill
    _drop(folder, df, 1, FILE_ROWS, 2 * FILE_ROWS)
    wait_for(lambda: _upstream_bytes(run) > idle, 60, "the ingest to write", step=0.001)
    for i, tmp in enumerate(held, start=2):
        tmp.rename(folder / f"f{i:04d}.csv")
    pids = [int(s["pid"]) for s in _states(run, parts) if "pid" in s]  # type: ignore[call-overload]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_for(lambda: not any(alive(pid) for pid in pids), 60, "orphaned workers to exit")
    names = ["ingest.json"] if tasks == 1 else [f"ingest.{w}.json" for w in range(tasks)]
    before = [_ingest_state(run, n) for n in names]
    landed = _upstream_last_seq(run, parts)
    dropped = (kill_after + 1) * FILE_ROWS
    # mid-ingest: the last chunk dropped (500 rows, about half kept) was not committed
    assert landed < dropped - 500, (landed, dropped)
    for i in range(kill_after + 1, 10):
        _drop(folder, df, i, i * FILE_ROWS, (i + 1) * FILE_ROWS)
    (folder / "_END").touch()
    rec = cec(["recover", "--from-log", str(run), "--json"], check=True)
    assert json.loads(rec.stdout)["resumed"]["completed"], rec.stdout
    assert PER_POLL not in rec.stderr, rec.stderr[-2000:]
    assert "long-lived task" not in rec.stderr, rec.stderr[-2000:]  # all tasks ran
    after = [_ingest_state(run, n) for n in names]
    assert [s.get("source_rows") for s in after] == [10 * FILE_ROWS] * tasks, after
    # each task received the rows of its logs only: together, every row kept once
    received = sum(int(s.get("rows_received", 0)) for s in after)  # type: ignore[call-overload]
    since = min(int(s.get("resumed_at", 0)) for s in after)  # type: ignore[call-overload]
    kept = df.iloc[since:]
    assert received <= len(kept[(kept.item_price >= 0) & (kept.item_id % 7 != 3)])
    print(f"seed={seed}: killed with files 1-{kill_after} dropped ({dropped} rows), the "
          f"upstream logs at row {landed}; ingest then: {before}")
    cec(["export", str(run), "--out", str(tmp_path / "out.csv")], check=True)
    _same_as_pandas(read_export_csv(tmp_path / "out.csv"), _reference(df))


@pytest.mark.spark
def test_one_of_two_ingest_tasks_killed_is_retried_alone_and_exact(tmp_path: Path) -> None:
    """Two long-lived ingest tasks; task 1's process dies (kill -9 at a named point:
    its third commit with a token) while task 0 goes on: Spark runs task 1 again, which
    resumes from its own logs' tokens, and the run ends exact without a recovery."""
    df = write_items_csv(tmp_path / "all.csv", 8 * FILE_ROWS, keys=60, seed=17)
    spec = _spec(tmp_path, extra_run='ingest_tasks = 2\nmaster = "local[4,3]"\n',
                 source="chunk_rows = 500\n")
    folder, run, mark = tmp_path / "in", tmp_path / "run", tmp_path / "mark"
    mark.mkdir()
    _drop(folder, df, 0, 0, FILE_ROWS)
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log",
                     env={"CEC_CRASH_AT": "ingest.after_token@3%i1",
                          "CEC_CRASH_MARK": str(mark)})
    try:
        for i in range(1, 8):  # one file per poll: a commit each
            wait_for(lambda i=i: _upstream_last_seq(run) >= i * FILE_ROWS - 200, 120,  # type: ignore[misc]
                     f"file {i - 1} ingested")
            _drop(folder, df, i, i * FILE_ROWS, (i + 1) * FILE_ROWS)
        (folder / "_END").touch()
        rc = proc.wait(300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert rc == 0, log[-3000:]
    marks = [m for m in mark.iterdir() if m.name.startswith("ingest.after_token.")]
    assert len(marks) == 1, sorted(m.name for m in mark.iterdir())  # one process died there
    died = dict(line.split("=", 1) for line in marks[0].read_text().splitlines())
    assert died["tag"] == "i1" and "pyspark.worker" in died["argv"], died
    states = [_ingest_state(run, f"ingest.{w}.json") for w in range(2)]
    assert all(s.get("ended") for s in states), states
    # the retried task 1 started at its own logs' resume row, past the start
    assert int(states[1]["resumed_at"]) > 0 and int(states[0]["resumed_at"]) == 0, states  # type: ignore[call-overload]
    cec(["export", str(run), "--out", str(tmp_path / "out.csv")], check=True)
    _same_as_pandas(read_export_csv(tmp_path / "out.csv"), _reference(df))
