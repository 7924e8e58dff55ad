"""Session windows through the ``cec`` commands, in real processes, under faults (issue 31).

One CSV input with ``allowed_lateness``: a share of the rows arrive late (after rows up
to the lateness newer) and, for some keys, a late row bridges the gap between two
sessions of its key, which become one. Its failure-free run (a module fixture, the one
reference) equals a pandas reference and Spark's own ``session_window`` on the same
rows; ``cec inspect extent``, its time travel (``--at``) and the recovery-time
objective are checked on it. Then, each against that reference or the same two
oracles: kill -9 of the whole run as a random partition's task dies at its first
group commit (mid-operator, asserted from its state file and upstream log), with a
torn output log (the last segment cut mid-record), and ``cec recover``; and a
``stream-dir`` run killed after the two sessions' rows and before the bridging row,
then ``cec recover --from-log --partitions 3`` (a rescale: the open sessions move with
their key groups and merge after the cut).

A test without Spark checks the rescale's handoff rule for sessions (a session ending
exactly at the handoff's ts is still open).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cec.errors import RecoveryError
from cec.operator import OperatorConfig, VectorOperator
from cec.policy import PolicyConfig
from cec.windows import SessionWindow
from cec_spark.recover.rescale import check_session_ends
from cec_spark.report import ExtentResult, RecoverResult, RunResult
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file
from recovery.rescale import handoff, partitions_of
from storage_log.log import StreamLog
from tests.cec_spark.helpers import alive, cec, read_export_csv, spec_text, start_cec, wait_for
from tests.cec_spark.test_rescale import behind, upstream_last_seqs
from tests.cli.test_pipeline_cli import checked

BASE = 1_700_000_000_000_000
GAP = "1s"
GAP_US = 1_000_000
LATENESS_US = 3_000_000
ROWS = 12_000
KEYS = 300
P = 2
BRIDGES = 20  # keys whose two sessions a late row merges
FUNCTION = "avg"


# ------------------------------------------------------------------------ references


def sessions_of(df: pd.DataFrame, gap: int = GAP_US) -> pd.DataFrame:
    """Sessions by pandas (the filter ``item_price >= 0`` applied): per key in time order,
    a new session where the step exceeds the gap; the export's columns."""
    df = df[df.item_price >= 0].sort_values(["item_id", "item_time"], kind="stable")
    step = df.groupby("item_id")["item_time"].diff()
    sid = (step.isna() | (step > gap)).cumsum()
    g = df.groupby(sid)
    out = pd.DataFrame({"key": g.item_id.first(), "window_start": g.item_time.min(),
                        "window_end": g.item_time.max() + gap,
                        "count": g.item_time.size(), "value": g.item_price.mean()})
    return out.sort_values(["key", "window_start"]).reset_index(drop=True)


def assert_same(got: pd.DataFrame, ref: pd.DataFrame, what: str) -> None:
    cols = ["key", "window_start", "window_end", "count"]
    got = got.sort_values(["key", "window_start"]).reset_index(drop=True)
    ref = ref.sort_values(["key", "window_start"]).reset_index(drop=True)
    assert len(got) == len(ref) > 0, what
    assert got[cols].astype("int64").values.tolist() == \
        ref[cols].astype("int64").values.tolist(), what
    np.testing.assert_allclose(got["value"].to_numpy(), ref["value"].to_numpy(),
                               rtol=1e-9, err_msg=what)


def late_items(seed: int = 31) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows in arrival order, the bridging rows): times in order but 5 % of the rows
    delayed by up to the lateness, and per bridge key sessions [t, t+0.3 s] and
    [t+1.9 s, t+2.2 s] bridged by a row at t+1.1 s that arrives 2.5 s late (after the
    second session's rows)."""
    rng = np.random.default_rng(seed)
    ts = BASE + np.cumsum(rng.integers(0, 3000, ROWS))
    df = pd.DataFrame({"item_id": rng.integers(0, KEYS, ROWS),
                       "item_price": np.round(rng.uniform(-5.0, 100.0, ROWS), 2),
                       "item_time": ts})
    delay = np.where(rng.random(ROWS) < 0.05, rng.integers(0, LATENESS_US - 1, ROWS), 0)
    extra, bridges = [], []
    span = int(ts[-1] - ts[0]) - 3_000_000
    for j in range(BRIDGES):
        t = BASE + 100_000 + j * span // BRIDGES
        k = 10_000 + j
        for dt, d in ((0, 0), (300_000, 0), (1_900_000, 0), (2_200_000, 0)):
            extra.append((k, float(j + 1), t + dt, d))
        bridges.append((k, 50.0, t + 1_100_000, 2_500_000))
    more = pd.DataFrame(extra + bridges, columns=["item_id", "item_price", "item_time",
                                                  "delay"])
    df["delay"] = delay
    df = pd.concat([df, more], ignore_index=True)
    df = df.assign(arrival=df.item_time + df.delay).sort_values("arrival", kind="stable")
    rows = df[["item_id", "item_price", "item_time"]].reset_index(drop=True)
    bridge = pd.DataFrame(bridges, columns=["item_id", "item_price", "item_time", "delay"])
    return rows, bridge[["item_id", "item_price", "item_time"]]


def check_arrivals(rows: pd.DataFrame, bridge: pd.DataFrame) -> None:
    """The input is what the test says: no row late beyond the lateness, some rows out
    of order, and each bridging row arrives after its key's second session."""
    t = rows.item_time.to_numpy()
    before = np.maximum.accumulate(np.concatenate([[t[0]], t[:-1]]))
    assert (t >= before - LATENESS_US).all() and (t < before).sum() > 100
    for b in bridge.itertuples():
        pos = rows.index[(rows.item_id == b.item_id) & (rows.item_time == b.item_time)]
        later = rows.index[(rows.item_id == b.item_id) & (rows.item_time > b.item_time)]
        assert len(pos) == 1 and (later < pos[0]).all() and len(later) == 2


def check_bridged(ref: pd.DataFrame, rows: pd.DataFrame, bridge: pd.DataFrame) -> None:
    """Each bridge key is one session of 5 with its bridging row, two without it."""
    keys = set(bridge.item_id)
    merged = ref[ref.key.isin(keys)]
    assert len(merged) == BRIDGES and (merged["count"] == 5).all()
    without = rows.merge(bridge, how="left", indicator=True)
    split = sessions_of(without[without._merge == "left_only"].drop(columns="_merge"))
    assert (split[split.key.isin(keys)].groupby("key").size() == 2).all()


def spark_sessions(spark: Any, csv: str, gap: str) -> pd.DataFrame:
    """Spark's own ``session_window`` over the same rows (a batch query)."""
    from pyspark.sql import functions as F

    df = (spark.read.option("header", True).option("inferSchema", True).csv(csv)
          .where("item_price >= 0").withColumn("t", F.timestamp_micros("item_time")))
    out = (df.groupBy("item_id", F.session_window("t", gap).alias("w"))
           .agg(F.count("*").alias("count"), F.avg("item_price").alias("value"))
           .select(F.col("item_id").alias("key"),
                   F.unix_micros("w.start").alias("window_start"),
                   F.unix_micros("w.end").alias("window_end"), "count", "value"))
    return out.toPandas()


# ------------------------------------------------------------------------ fixtures


SOURCE = ('kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 1000\n'
          f'allowed_lateness = "{LATENESS_US // 1000}ms"')
WINDOW = f'{{ kind = "session", gap = "{GAP}" }}'


class Reference:
    def __init__(self, folder: Path, rows: pd.DataFrame, bridge: pd.DataFrame,
                 spec: Path, run: Path, export: Path, summary: dict[str, Any]) -> None:
        self.folder, self.rows, self.bridge = folder, rows, bridge
        self.spec, self.run, self.export, self.summary = spec, run, export, summary


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from cec_spark.run.session import build_session

    session = build_session("local[2]", P)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """The failure-free run of the late input (rto instead of Q and U)."""
    d = tmp_path_factory.mktemp("sessions")
    rows, bridge = late_items()
    check_arrivals(rows, bridge)
    rows.to_csv(d / "items.csv", index=False)
    spec = d / "sessions.toml"
    text = spec_text(SOURCE, window=WINDOW, function=FUNCTION, partitions=P)
    spec.write_text(text.replace('Q = "2x"\nU = 1000000\n', 'rto = "60s"\n'))
    run = d / "ref"
    out = cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"], check=True)
    summary = checked(out.stdout, RunResult)
    assert summary["completed"] and summary["source_rows"] == len(rows)
    cec(["export", str(run), "--out", str(d / "ref.csv")], check=True)
    return Reference(d, rows, bridge, spec, run, d / "ref.csv", summary)


# ------------------------------------------------------------------------ tests


@pytest.mark.spark
def test_late_bridging_rows_merge_sessions_as_pandas_and_spark_do(
        reference: Reference, spark: Any) -> None:
    ref = sessions_of(reference.rows)
    check_bridged(ref, reference.rows, reference.bridge)
    got = read_export_csv(reference.export)
    assert_same(got, ref, "export vs pandas")
    assert_same(spark_sessions(spark, str(reference.folder / "items.csv"), "1 second"), ref,
                "Spark's session_window vs pandas")


def _sessions_open_at(rows: pd.DataFrame, t_c: int) -> set[tuple[int, int]]:
    """The sessions open once the stream's tuples up to position ``t_c`` are applied:
    ``rows`` are one partition's, with ``seq``; a session (of the tuples so far) is open
    unless a later tuple of the partition passed its end (ts ascends along seq)."""
    seen = rows[rows.seq <= t_c]
    if seen.empty:
        return set()
    now = int(seen.item_time.max())
    s = sessions_of(seen)
    return {(int(k), int(w)) for k, w in
            s.loc[s.window_end >= now, ["key", "window_start"]].itertuples(index=False)}


@pytest.mark.spark
def test_inspect_extent_time_travel_and_rto_of_a_session_run(reference: Reference) -> None:
    """``cec inspect extent`` now and ``--at`` a moment of the input: every partition's
    open sessions (N_c) are those pandas finds open at its ``t_c``, its oldest
    footprints are sessions open then; the run with ``rto`` predicts its recovery within
    the objective."""
    run = reference.run
    _spec, settings = read_run_file(RunLayout(run))
    assert settings.key_groups is not None
    # the stream: every row (none is late beyond the lateness) in (ts, row) order, seq =
    # its rank, before the filter; then each key's partition
    stream = reference.rows.reset_index(names="row").sort_values(
        ["item_time", "row"], kind="stable").reset_index(drop=True)
    stream["seq"] = np.arange(len(stream))
    stream = stream[stream.item_price >= 0]
    part = partitions_of(stream.item_id.tolist(), P, settings.key_groups)
    ts = stream.item_time.to_numpy()
    moments = [int(ts[len(ts) // 3]), int(ts[2 * len(ts) // 3])]
    for at in moments:
        doc = checked(cec(["inspect", "extent", str(run), "--at", str(at), "--json"],
                          check=True).stdout, ExtentResult)
        assert doc["at_us"] == at
        for e in doc["partitions"]:
            mine = stream[part == e["partition"]]
            assert not e["empty"] and e["t_c_ts_us"] <= at
            row = mine[mine.seq == e["t_c"]]
            assert len(row) == 1 and int(row.item_time.iloc[0]) == e["t_c_ts_us"]
            want = _sessions_open_at(mine, e["t_c"])
            assert e["n_c"] == len(want) > 0, (at, e["partition"])
            assert e["replay_after_seq"] <= e["t_c"] and e["u"] == e["t_c"] - e["replay_after_seq"]
            for fp in e["oldest"]:
                assert (int(fp["key"]), int(fp["win_start"])) in want, fp
    # now: the run is complete (every session closed at the end), with its objective
    doc = checked(cec(["inspect", "extent", str(run), "--json"], check=True).stdout,
                  ExtentResult)
    assert doc["rto_s"] == 60.0 and doc["fixed_s"] is not None
    for e in doc["partitions"]:
        assert e["sealed"] and e["counts"]["R"] > 0 and e["counts"]["G_open"] > 0
        if e["q"] is not None:
            assert e["predicted_recovery_s"] == pytest.approx(
                doc["fixed_s"] + e["q"] / e["ec_records_per_s"]
                + e["u"] / e["replay_positions_per_s"], rel=1e-3)
            assert e["within_objective"] is True
    layout = RunLayout(run)
    for p in range(P):
        info = read_advisory(layout.state_file(p))["rto"]
        assert info["objective_s"] == 60.0 and info["feasible"] is True
        assert info["predicted_s"] <= 60.0


def _states(run: Path) -> list[dict[str, Any]]:
    """The operator tasks' state files (those written so far)."""
    out = []
    for f in sorted((run / "state").glob("p[0-9]*.json")):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(f.read_text()))
    return out


def _kill(proc: Any, run: Path) -> None:
    pids = [int(s["pid"]) for s in _states(run) if "pid" in s]
    with contextlib.suppress(ProcessLookupError):  # a run that finished first is gone
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_for(lambda: not any(alive(pid) for pid in pids), 60, "orphaned workers to exit")


CRASH = "operator.after_group_commit"  # a group of output committed, its state not yet


@pytest.mark.spark
def test_kill9_at_a_random_moment_and_a_torn_output_log_then_recover(
        reference: Reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-operator, asserted: the run ingests and processes its 12,100 rows within
    ~0.5 s of its ~16 (one upstream record per partition), so a kill after a random
    delay landed before the first batch or after the last. A random partition's task
    dies at its first group commit (the output committed, its state file not yet
    written: ``CEC_CRASH_AT`` with a mark), and the test kills -9 the run's whole
    process group as soon as the mark appears; afterwards that partition's upstream log
    is ahead of what its state file says it processed."""
    run, mark = tmp_path / "run", tmp_path / "mark"
    mark.mkdir()
    seed = random.randrange(1 << 30)
    victim_p = random.Random(seed).randrange(P)
    monkeypatch.setenv("CEC_CRASH_AT", f"{CRASH}%p{victim_p}")
    monkeypatch.setenv("CEC_CRASH_MARK", str(mark))
    proc = start_cec(["run", "pipeline", str(reference.spec), "--log-dir", str(run),
                      "--json"], tmp_path / "run.log")
    monkeypatch.delenv("CEC_CRASH_AT")
    monkeypatch.delenv("CEC_CRASH_MARK")
    wait_for(lambda: any(mark.glob(f"{CRASH}.*")) or proc.poll() is not None, 180,
             f"partition {victim_p}'s task at {CRASH}", step=0.001)
    _kill(proc, run)
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "run.log").read_text()[-3000:]
    died = next(mark.glob(f"{CRASH}.*")).read_text()
    assert f"tag=p{victim_p}\n" in died and "pyspark.worker" in died, died
    # mid-operator: the committed group is in no state file
    ups = upstream_last_seqs(run, P)
    assert victim_p in behind(run, P), (ups, _states(run))
    # the torn write: the last segment of the fullest output log cut inside its last
    # record (a few bytes before its end)
    segs = {p: sorted((run / "output" / f"p{p:04d}").glob("*.seg")) for p in range(P)}
    victim = max(range(P), key=lambda p: segs[p][-1].stat().st_size if segs[p] else 0)
    assert segs[victim], f"no output yet (seed {seed})"
    last = segs[victim][-1]
    size = last.stat().st_size
    assert size > 64, f"nothing written yet (seed {seed})"
    os.truncate(last, size - 7)
    rec = cec(["recover", "--from-log", str(run), "--json"], check=True)
    result = checked(rec.stdout, RecoverResult)
    assert result["resumed"]["completed"], (seed, result)
    torn = result["partitions"][victim]
    assert torn.get("repaired") or torn["reconcile"]["bytes_cut"] > 0, torn
    print(f"seed={seed}: partition {victim_p} killed at {CRASH}, the run's group at "
          f"once (upstream at {ups}); partition {victim} torn")
    out = tmp_path / "export.csv"
    cec(["export", str(run), "--out", str(out)], check=True)
    assert out.read_bytes() == reference.export.read_bytes()


STREAM_L_US = 8_500_000


@pytest.mark.spark
def test_a_bridging_row_after_a_kill_merges_sessions_across_a_rescale(
        tmp_path: Path, spark: Any) -> None:
    """A stream folder, lateness 8.5 s, gap 1 s. File 1 holds rows up to 10 s, among
    them key 7's sessions [1.0 s, 1.2 s] and [3.0 s, 3.2 s]; the run is killed once it
    processed what the lateness releases (rows before 1.5 s: the first session, not
    the second, which the ingest holds back); file 2 brings the row at 2.1 s that
    bridges them (late, within the lateness) and the rows up to 20 s. ``cec recover
    --from-log --partitions 3`` moves the open sessions to 3 partitions, and the export
    has key 7's one merged session and equals pandas and Spark's ``session_window``."""
    rng = np.random.default_rng(7)

    def filler(lo: int, hi: int, n: int) -> pd.DataFrame:
        return pd.DataFrame({"item_id": rng.integers(0, 40, n),
                             "item_price": np.round(rng.uniform(0.0, 100.0, n), 2),
                             "item_time": np.sort(rng.integers(lo, hi, n)) + BASE})

    k = 7_000
    sess = pd.DataFrame({"item_id": [k] * 4, "item_price": [1.0, 2.0, 3.0, 4.0],
                         "item_time": BASE + np.array([1_000_000, 1_200_000, 3_000_000,
                                                       3_200_000])})
    first = pd.concat([filler(0, 10_000_000, 3000), sess]).sort_values(
        "item_time", kind="stable")
    bridge = pd.DataFrame({"item_id": [k], "item_price": [10.0],
                           "item_time": [BASE + 2_100_000]})
    second = pd.concat([bridge, filler(10_000_000, 20_000_000, 3000)])
    assert int(bridge.item_time[0]) >= int(first.item_time.max()) - STREAM_L_US  # not late
    live = tmp_path / "live"
    live.mkdir()
    first.to_csv(live / "f-000.csv", index=False)
    spec = tmp_path / "stream.toml"
    spec.write_text(spec_text(
        f'kind = "stream-dir"\npath = "{live}"\ntime_field = "item_time"\npoll_ms = 50\n'
        f'allowed_lateness = "{STREAM_L_US // 1000}ms"', window=WINDOW,
        function=FUNCTION, partitions=P))
    run = tmp_path / "run"
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log")
    watermark = int(first.item_time.max()) - STREAM_L_US
    released = int(((first.item_time < watermark) & (first.item_price >= 0)).sum())
    wait_for(lambda: sum(int(s.get("in_tuples", 0)) for s in _states(run)) >= released
             or proc.poll() is not None, 180, f"the {released} released rows processed")
    time.sleep(1.0)  # their output committed
    assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
    _kill(proc, run)
    # what the operators consumed holds the first session of key 7, not the second
    seen: list[int] = []
    for p in range(P):
        with StreamLog.open(RunLayout(run).upstream_of(0, p)) as up:
            for b in up.read_forward():
                t = b.to_pandas()
                seen += t.loc[t.item_id == k, "ts"].astype(int).tolist()
    assert sorted(seen) == [BASE + 1_000_000, BASE + 1_200_000], seen
    second.to_csv(live / "f-001.csv", index=False)
    (live / "_END").touch()
    rec = cec(["recover", "--from-log", str(run), "--partitions", "3", "--json"], check=True)
    result = checked(rec.stdout, RecoverResult)
    assert result["resumed"]["completed"], result
    assert result["rescale"]["to_partitions"] == 3
    assert sum(result["rescale"]["windows_per_partition"]) > 0  # open sessions moved
    handed = []  # the first record of each new output log: the sessions handed over
    for p in range(3):
        with StreamLog.open(RunLayout(run).output_of(1, p)) as log:
            head = next(iter(log.read_forward()), None)
            if head is not None:
                handed += zip(head.column("key").to_pylist(),
                              head.column("win_start").to_pylist(),
                              head.column("cnt").to_pylist(), strict=True)
    assert (k, BASE + 1_000_000, 2) in handed  # key 7's first session, open at the cut
    out = tmp_path / "export.csv"
    cec(["export", str(run), "--out", str(out)], check=True)
    got = read_export_csv(out)
    rows = pd.concat([first, second], ignore_index=True)
    ref = sessions_of(rows)
    assert ref[ref.key == k][["window_start", "window_end", "count"]].values.tolist() == \
        [[BASE + 1_000_000, BASE + 4_200_000, 5]]
    assert_same(got, ref, "export vs pandas")
    assert_same(spark_sessions(spark, str(live / "*.csv"), "1 second"), ref,
                "Spark's session_window vs pandas")


# ------------------------------------------------------------------------ no Spark


def _open_sessions(tuples: list[tuple[int, int, int, float]], gap: int) -> pa.Table:
    op = VectorOperator(OperatorConfig(window=SessionWindow(gap), function="sum",
                                       policy=PolicyConfig(mode="open-only")))
    op.process(pa.RecordBatch.from_pydict(
        {"ts": [t[0] for t in tuples], "seq": [t[1] for t in tuples],
         "key": [t[2] for t in tuples], "value": [t[3] for t in tuples]},
        schema=pa.schema([("ts", pa.int64()), ("seq", pa.int64()), ("key", pa.int64()),
                          ("value", pa.float64())])))
    return op.open_windows()


def test_rescale_hands_over_a_session_that_ends_exactly_at_the_handoff_ts() -> None:
    """Old partition 0's last tuple (key 2, ts 100) leaves key 1's session [90, 100]
    open (a tuple at exactly its end would join it); partition 1 went on to ts 150, so
    the handoff's ts is 100: the session is handed over (the time windows' ``<=`` would
    refuse it), and one ending before it is refused, naming both."""
    gap = 10
    q0 = _open_sessions([(80, 0, 1, 1.0), (90, 1, 1, 2.0), (100, 2, 2, 5.0)], gap)
    q1 = _open_sessions([(120, 3, 3, 1.0), (150, 4, 3, 1.0)], gap)
    assert sorted(q0.column("win_end").to_pylist()) == [100, 110]
    ts = 100
    check_session_ends([q0, q1], ts)  # accepted
    with pytest.raises(ValueError, match="time window ending at 100"):
        handoff([q0, q1], cut=4, ts=ts, partitions=2, groups=8, function="sum",
                key_type="int64", window_kind="time")
    records = handoff([q0, q1], cut=4, ts=ts, partitions=1, groups=8, function="sum",
                      key_type="int64", window_kind="session", session_gap=gap)
    assert records[0].num_rows == 3
    with pytest.raises(RecoveryError, match="session ending at 100 is still open at ts 101"):
        check_session_ends([q0, q1], 101)
    check_session_ends([q0.slice(0, 0)], 10**6)  # nothing handed over: nothing to check
    # the records carry the sessions' own state
    got = records[0].to_pydict()
    assert sorted(zip(got["key"], got["win_start"], got["win_end"], got["cnt"],
                      strict=True)) == [(1, 80, 100, 2), (2, 100, 110, 1), (3, 150, 160, 1)]
    assert got["t_now"] == [4, 4, 4] and got["n_open"] == [3, 3, 3]
