"""bench/memory_bench.py: its pure parts (the input's key/time layout and the open windows
it states, the exactness checks, the bytes-per-window arithmetic, the judgement, the
markdown); its measuring is bench/harness.py's (tests/bench/test_harness.py); no Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from bench import memory_bench as mb

MIB = 1 << 20


def all_columns(layout: mb.Layout) -> dict[str, np.ndarray]:
    parts = [layout.columns(i) for i in range(layout.files)]
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


@pytest.mark.parametrize(("rows", "keys", "file_rows"),
                         [(10_000, 5_000, 3_000), (1_000, 1_000, 1_000), (7, 1, 2),
                          (50_000, 12_345, 50_000)])
def test_layout_states_its_open_windows(rows: int, keys: int, file_rows: int) -> None:
    lay = mb.Layout(rows, keys, file_rows=file_rows)
    cols = all_columns(lay)
    ids, ts = cols["item_id"], cols["item_time"]
    assert len(ids) == rows and lay.files == -(-rows // file_rows)
    # every key in the first `keys` rows, in order; none outside [0, keys) after
    assert (ids[:keys] == np.arange(keys)).all()
    assert ids.min() == 0 and ids.max() == keys - 1
    # every row's time inside one day (the windows stay open until the end), ascending
    assert (np.diff(ts) > 0).all()
    assert (ts // mb.DAY_US == lay.window_start_us // mb.DAY_US).all()
    assert lay.window_start_us % mb.DAY_US == 0
    # the distinct (key, window) pairs: the stated open windows
    assert mb.open_windows_of(ids, ts, mb.DAY_US) == lay.open_windows == keys
    assert ((cols["item_price"] >= 1) & (cols["item_price"] < 10_000)).all()


def test_layout_is_reproducible_and_checked() -> None:
    a, b = mb.Layout(5_000, 100, file_rows=1_000), mb.Layout(5_000, 100, file_rows=1_000)
    for i in range(a.files):
        for c in ("item_id", "item_price", "item_time"):
            assert (a.columns(i)[c] == b.columns(i)[c]).all()
    assert not (a.columns(1)["item_id"] == a.columns(2)["item_id"]).all()
    with pytest.raises(ValueError, match="every key must be in the rows"):
        mb.Layout(10, 11)
    with pytest.raises(ValueError, match="one window"):
        mb.Layout(10, 5, step_us=mb.DAY_US // 5)
    with pytest.raises(IndexError):
        a.columns(a.files)
    small = mb.small_layout(mb.Layout(mb.ROWS, mb.KEYS))
    assert (small.rows, small.keys) == (10_000, 5_000)
    assert mb.small_layout(mb.Layout(mb.QUICK_ROWS, mb.QUICK_KEYS)).keys == 5_000
    assert mb.small_layout(mb.Layout(10**9, 1, step_us=1)).keys == 1


def test_open_windows_of_counts_pairs_across_windows() -> None:
    ids = np.array([1, 1, 2, 2, 1], dtype=np.int64)
    ts = np.array([0, 10, 0, mb.DAY_US, mb.DAY_US + 5], dtype=np.int64)
    assert mb.open_windows_of(ids, ts, mb.DAY_US) == 4  # (1,0) (2,0) (2,1) (1,1)
    assert mb.open_windows_of(ids[:2], ts[:2], mb.DAY_US) == 1
    assert mb.open_windows_of(ids[:0], ts[:0], mb.DAY_US) == 0


def test_data_written_and_reused(tmp_path: Path) -> None:
    lay = mb.Layout(2_500, 700, file_rows=1_000)
    folder = tmp_path / "data"
    assert mb.ensure_data(folder, lay) == 700
    files = sorted(folder.glob("part-*.parquet"))
    assert len(files) == 3 and pq.read_table(folder).num_rows == 2_500
    mtimes = [f.stat().st_mtime_ns for f in files]
    assert mb.ensure_data(folder, lay) == 700  # reused: its manifest matches
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    assert mb.ensure_data(folder, mb.Layout(2_500, 600, file_rows=1_000)) == 600  # remade
    ref = mb.reference(folder, [0, 5, 599])
    t = pq.read_table(folder).to_pandas()
    for k in (0, 5, 599):
        mine = t[t["item_id"] == k]["item_price"]
        assert ref.loc[k, "count"] == len(mine)
        assert ref.loc[k, "avg"] == pytest.approx(mine.mean(), rel=1e-12)


def summary(rows: int = 100, results: int = 40, **kw: Any) -> dict[str, Any]:
    return {"completed": True, "operator_tuples": rows, "late_rows": 0, "results": results,
            "per_partition": [{"g_open": results // 2}, {"g_open": results - results // 2}],
            **kw}


def test_counter_problems() -> None:
    assert mb.counter_problems(summary(), 100, 40) == []
    assert mb.counter_problems(summary(results=39), 100, 40) == [
        "39 results, not the 40 open windows", "39 windows opened (g_open), not 40"]
    got = mb.counter_problems(summary(completed=False, operator_tuples=99, late_rows=2),
                              100, 40)
    assert got == ["the run did not complete", "99 rows through the operators, not 100",
                   "2 late rows"]
    assert mb.counter_problems({}, 100, 40)[0] == "the run did not complete"


def export_of(ref: pd.DataFrame, start: int) -> pd.DataFrame:
    return pd.DataFrame({"key": ref.index.to_numpy(), "window_start": start,
                         "window_end": start + mb.DAY_US, "count": ref["count"].to_numpy(),
                         "value": ref["avg"].to_numpy()})


def test_export_problems() -> None:
    ref = pd.DataFrame({"count": [3, 2, 5], "avg": [1.5, 2.0, 7.25]},
                       index=pd.Index([0, 4, 9], name="item_id"))
    start = mb.START_US
    good = export_of(ref, start)
    assert mb.export_problems(good, ref, 10, 3, start) == []
    assert mb.export_problems(good, ref.iloc[:2], 10, 3, start) == []  # a sample
    bad = good.copy()
    bad.loc[1, "value"] = 2.0 + 1e-6
    bad.loc[2, "count"] = 4
    assert mb.export_problems(bad, ref, 10, 3, start) == [
        "the counts sum to 9, not 10 rows",
        "1 of the 3 sampled keys' counts differ from pandas'",
        "1 of the 3 sampled keys' averages differ from pandas'"]
    assert mb.export_problems(good, ref, 10, 4, start + 1) == [
        "3 windows exported, not 4", "3 windows do not start at "
        f"{start + 1} µs"]
    assert mb.export_problems(good.iloc[:2], ref, 5, 2, start) == [
        "1 of the 3 sampled keys not exported"]
    keys = mb.sample_keys(5_000_000)
    assert mb.SAMPLE_KEYS <= len(keys) <= mb.SAMPLE_KEYS + 2  # and the first and last
    assert keys[0] == 0 and keys[-1] == 4_999_999 and keys == sorted(set(keys))
    assert mb.sample_keys(3) == [0, 1, 2]


def rec(side: str, rnd: int, run: str, peak: int, *, open_windows: int = 5_000_000,
        status: str = "ok", exact: bool | None = True, others: float | None = 0.1
        ) -> dict[str, Any]:
    return {"side": side, "round": rnd, "run": run, "rows": 10_000_000 if run == "big"
            else 10_000, "keys": open_windows, "open_windows": open_windows,
            "status": status, "wall_s": 30.0, "workers_peak": peak,
            "daemon_peak": 30 * MIB, "worker_processes": 5, "largest_worker_peak": peak // 4,
            "load_start": 1.0, "load_end": 3.5, "others_cores": others, "exact": exact,
            "problems": [] if exact is not False else ["5 results, not the 6 open windows"],
            "checked": "counters"}


def test_bytes_per_window_and_rounds() -> None:
    assert mb.bytes_per_window(1_000 + 64 * 5_000_000, 1_000, 5_000_000) == 64.0
    assert mb.bytes_per_window(300 * MIB, 200 * MIB, 1_048_576) == 100.0
    with pytest.raises(ValueError):
        mb.bytes_per_window(1, 0, 0)
    small, big = 400 * MIB, 400 * MIB + 1_000_000_000
    runs = [rec("this", 0, "small", small, open_windows=5_000),
            rec("this", 0, "big", big),
            rec("base", 0, "small", small, open_windows=5_000),
            rec("base", 0, "big", small + 2_000_000_000),
            rec("this", 1, "small", small, open_windows=5_000),
            rec("this", 1, "big", 0, status="timeout")]
    rounds = mb.per_round(runs)
    assert [(r["side"], r["round"], r["bytes_per_window"]) for r in rounds] == [
        ("base", 0, 400.0), ("this", 0, 200.0)]
    assert rounds[1]["growth"] == 1_000_000_000 and rounds[1]["exact"]
    j = mb.judge(rounds, runs)
    assert j["state"] == "missed" and j["text"].startswith(
        "200 bytes per open window (median of 1 round(s): 200) at 5,000,000 open windows")
    assert "at most 0.10 cores" in j["text"]
    ok = [rec("this", 0, "small", small, open_windows=5_000),
          rec("this", 0, "big", small + 60 * 5_000_000)]
    assert mb.judge(mb.per_round(ok), ok)["state"] == "met"
    busy = [rec("this", 0, "small", small, open_windows=5_000, others=0.9),
            rec("this", 0, "big", small + 60 * 5_000_000)]
    assert mb.judge(mb.per_round(busy), busy)["state"] == "not judged"
    wrong = [rec("this", 0, "small", small, open_windows=5_000),
             rec("this", 0, "big", small + 60 * 5_000_000, exact=False)]
    assert mb.judge(mb.per_round(wrong), wrong)["state"] == "not measured"


def result(runs: list[dict[str, Any]], base: bool = False) -> dict[str, Any]:
    rounds = mb.per_round(runs)
    sides = [{"name": "this", "tree": None, "commit": "abc1234", "dirty": False}]
    if base:
        sides.append({"name": "base", "tree": "/tmp/base", "commit": "def5678",
                      "dirty": True})
    return {"command": "python bench/memory_bench.py --rounds 1", "started": "2026-11-27 "
            "21:30 UTC", "cpus": 2, "memory_gib": 23.4, "load_start": 0.5, "load_end": 2.0,
            "commit": "abc1234", "dirty": False, "sides": sides, "partitions": 4,
            "rounds": 1, "quick": False, "layout": vars(mb.Layout(10_000_000, 5_000_000)),
            "small_layout": vars(mb.Layout(10_000, 5_000)), "open_windows": 5_000_000,
            "runs": runs, "per_round": rounds, "judgement": mb.judge(rounds, runs),
            "failures": [f"this, round 0, big run: ok: {p}" for r in runs
                         for p in r["problems"]]}


def one_round_each(small: int) -> list[dict[str, Any]]:
    """A round of each side: 224 (this) and 336 (base) bytes per open window."""
    return [rec("this", 0, "small", small, open_windows=5_000),
            rec("this", 0, "big", small + 224 * 5_000_000),
            rec("base", 0, "small", small, open_windows=5_000),
            rec("base", 0, "big", small + 336 * 5_000_000)]


def test_markdown() -> None:
    small = 400 * MIB
    runs = one_round_each(small)
    md = mb.markdown(result(runs, base=True))
    assert md.startswith("# Peak memory per open window, as a user sees it (issue 40)")
    assert "10,000,000 rows, 5,000,000 keys" in md
    assert "**5,000,000 windows open until the end**" in md
    assert "the small run: 10,000 rows, 5,000 keys" in md
    assert "Sides: this: abc1234; base: def5678 (with uncommitted changes) (/tmp/base)." in md
    assert "Command: `python bench/memory_bench.py --rounds 1`" in md
    assert "| this | 0 | big | 5,000,000 | ok | 30.0 | 1,468.1 | 5 | 367.0 | 30.0 | 0.1 | " \
        "1.0→3.5 | yes (counters) |" in md
    assert "| this | 0 | 1,068.1 | 5,000,000 | **224** |" in md
    assert "| base | 0 | 1,602.2 | 5,000,000 | **336** |" in md
    assert "- this (abc1234): median **224** bytes per open window (224–224 over 1 " \
        "round(s))" in md
    assert "- this ÷ base, round by round: **0.67** (rounds: 0.67)" in md
    assert "bytes per open window (the Python workers' peak RSS growth): **missed** — " \
        "224 bytes per open window" in md
    assert "RUNS FAILED" not in md
    bad = [rec("this", 0, "small", small, open_windows=5_000),
           rec("this", 0, "big", small + 60 * 5_000_000, exact=False)]
    md = mb.markdown(result(bad))
    assert "**NO**: 5 results, not the 6 open windows (counters)" in md
    assert "## RUNS FAILED OR NOT EXACT" in md and "**not measured**" in md
    assert "this ÷ base" not in md


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert mb.main(["--rows", "10000", "--out", str(out), "--work", str(tmp_path)]) == 2
    assert mb.main(["--rows", "20000", "--keys", "30000", "--out", str(out),
                    "--work", str(tmp_path)]) == 2
    assert mb.main(["--quick", "--base", str(tmp_path), "--out", str(out),
                    "--work", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "more than the small run's 10,000" in err and "every key must be" in err
    assert "not a source tree of cec" in err
    assert not out.exists()


def test_benchmarks_md_shows_the_section_and_its_target(tmp_path: Path) -> None:
    import json

    from bench import report

    small = 400 * MIB
    runs = [rec("this", 0, "small", small, open_windows=5_000),
            rec("this", 0, "big", small + 60 * 5_000_000)]
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.json").write_text(json.dumps(result(runs)))
    md = report.benchmarks_md(tmp_path)
    assert "\n## Peak memory per open window, as a user sees it (issue 40)" in md
    assert ("| ≤ 64 bytes per open window (the Python workers' peak RSS growth) | "
            "(issue 40) | 60 bytes per open window") in md
    assert "| met | `python -m bench --only memory` |" in md


def test_bytes_per_window_by_pss_beside() -> None:
    runs = one_round_each(400 * MIB)
    for r, pss in zip(runs, (200 * MIB, 200 * MIB + 100 * 5_000_000, 200 * MIB,
                             200 * MIB + 200 * 5_000_000), strict=True):
        r["workers_peak_pss"] = pss
    rounds = mb.per_round(runs)
    assert [(r["side"], r["bytes_per_window"], r["bytes_per_window_pss"])
            for r in rounds] == [("base", 336.0, 200.0), ("this", 224.0, 100.0)]
    md = mb.markdown(result(runs, base=True))
    assert "| this | 0 | 1,068.1 | 5,000,000 | **224** | 100 |" in md
    assert "(224–224 over 1 round(s)); by Pss 100 (100–100)" in md
    assert "- by Pss, this ÷ base, round by round: 0.50 (rounds: 0.50)" in md
    # the judgement stays the measure (RSS)
    assert "**missed** — 224 bytes per open window" in md
    # a run without Pss (an older result, or no smaps_rollup): none by Pss, no ratio
    del runs[0]["workers_peak_pss"]
    rounds = mb.per_round(runs)
    assert [r["bytes_per_window_pss"] for r in rounds] == [200.0, None]
    md = mb.markdown(result(runs, base=True))
    assert "| this | 0 | 1,068.1 | 5,000,000 | **224** | – |" in md
    assert "by Pss, this ÷ base" not in md


def test_split_daemons_by_parent() -> None:
    from bench.harness import Proc

    def proc(pid: int) -> Proc:
        return Proc(pid, "py-worker", "python -m cec_spark.driver.daemon pyspark.worker",
                    0.0, 0.0, start=pid * 10, peak_rss=pid)

    daemon, w1, w2, orphan = proc(10), proc(11), proc(12), proc(13)
    parents = {(10, 100): 1, (11, 110): 10, (12, 120): 10}  # 1: the JVM; 13 not seen
    daemons, workers = mb.split_daemons([daemon, w1, w2, orphan], parents)
    assert [p.pid for p in daemons] == [10, 13] and [p.pid for p in workers] == [11, 12]
    assert mb.split_daemons([], {}) == ([], [])
