"""BENCHMARKS.md from result files: every number comes from them, targets judged from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import report


def _fair(rows: int, speedup: float, ratio: float) -> dict[str, Any]:
    run = {"median": 10.0, "min": 9.0, "max": 11.0, "n": 5}
    return {"rows": rows, "keys": 100, "partitions": 4, "window": "10 s tumbling",
            "windows": 1234, "commit": "abc1234", "started": "2026-11-25 09:00 UTC",
            "load_end": 2.5, "definition": 2,
            "headline": "output complete and usable: cec run + cec export vs Spark",
            "sweep": [{"store": "hdfs", "rows_per_batch": "all", "files_per_trigger": 31,
                       "wall_s": 20.0, "load": 2.0}],
            "spark_best": {"store": "hdfs", "rows_per_batch": "all", "files_per_trigger": 31,
                           "wall_s": 20.0, "load": 2.0},
            "cec_runs": [{"wall_s": 10.0, "export_s": 1.0, "load": 2.0}],
            "cec": run, "cec_with_export": run, "spark": run, "speedup_median": speedup,
            "speedup_pairs": {"median": speedup, "min": speedup, "max": speedup, "n": 5},
            "speedup_run_only_median": speedup * 1.1,
            "recovery": {"kill_at": 0.5,
                         "cec": {"restart_s": 1.0, "recover_s": 0.8, "export_s": 0.2,
                                 "killed_at_rows": 2_000_000, "killed_at_fraction": 0.667,
                                 "load": 2.0},
                         "spark": {"restart_s": 10.0, "killed_at_rows": 2_000_000,
                                   "killed_at_fraction": 0.667, "load": 2.0},
                         "ratio": ratio}}


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_nothing_measured_says_so(tmp_path: Path) -> None:
    rows = report.targets(tmp_path)
    assert [(r[2], r[3]) for r in rows] == [("not measured", None)]
    md = report.benchmarks_md(tmp_path)
    assert "| not measured |" in md and "## cec vs Spark" not in md


def test_targets_met_and_missed_from_the_files(tmp_path: Path) -> None:
    _write(tmp_path / "fair" / "fair.json", _fair(3_000_000, 6.0, 0.1))
    _write(tmp_path / "fair-30m" / "fair.json", _fair(30_000_000, 7.5, 0.1))
    _write(tmp_path / "cluster" / "cluster.json", {
        "started": "2026-11-25 09:00 UTC", "commit": "abc1234", "load_start": 1.0,
        "cpus": 2, "runs": [
        {"workers": 1, "cores_per_worker": 2, "source_rows": 100, "whole_process_s": 10.0,
         "rows_per_s": 100.0, "kill_to_complete_s": 5.0, "completed_by": "run",
         "digest_free": "ab" * 32},
        {"workers": 2, "cores_per_worker": 1, "source_rows": 100, "whole_process_s": 12.0,
         "rows_per_s": 80.0, "kill_to_complete_s": 6.0, "completed_by": "run",
         "digest_free": "ab" * 32}]})
    _write(tmp_path / "results.json", {"fig5": {"ratios": {"fast": {"disk_vs_net": 0.31},
                                                           "slow": {"disk_vs_net": 0.8}}}})
    _write(tmp_path / "latency" / "latency.json", {
        "rate_rows_per_s": 50000, "file_ms": 100, "window_ms": 100, "poll_ms": 20,
        "partitions": 2, "seconds": 20, "load_avg_1m": 1.5,
        "row_latency": {"n": 10, "p50_ms": 300.0, "p99_ms": 1200.0, "max_ms": 1500.0},
        "close_latency": {"n": 5, "p50_ms": 200.0, "p99_ms": 900.0, "max_ms": 1000.0}})
    got = {r[0].split(",")[0].split(" (")[0]: (r[2], r[3]) for r in report.targets(tmp_path)}
    assert got["output complete and usable"] == (
        "6.0× (pairs 6.0–6.0×); 30,000,000 rows: 7.5× (growing)", True)
    assert got["recovery after kill -9"] == ("0.1", True)
    assert got["2 Workers ÷ 1 Worker"][1] is False and "0.80×" in got["2 Workers ÷ 1 Worker"][0]
    assert got["operator + output log on disk ÷ operator in memory"] == ("0.310; slow 0.800",
                                                                         True)
    lat = [v for k, v in got.items() if k.startswith("latency p99")]
    assert lat == [("1,200 ms (p50 300 ms)", False)]
    md = report.benchmarks_md(tmp_path)
    assert md.count("| met |") == 3 and md.count("| **missed** |") == 2
    assert "`fair-30m`" in md and "1-min load average 1.5 at the end" in md
    assert "| 2 | 1 | 12.0 | 80 | 0.80 | 6.0 | run |" in md
    assert "Headline, output complete and usable: cec run + cec export vs Spark" in md
    assert "the same row count" in md and "2,000,000 rows committed (66.7%)" in md
    assert "The Workers share the machine's 2 cores (when measured)" in md


def test_results_of_the_earlier_definitions_are_to_be_re_measured(tmp_path: Path) -> None:
    """Issue 29: a fair result without ``definition`` 2 (headline without ``cec export``,
    kills at different fractions) and a cluster result without date, commit, load and
    cores are not shown: their sections say so, their targets are not measured."""
    old = _fair(3_000_000, 6.0, 0.1)
    del old["definition"]
    _write(tmp_path / "fair" / "fair.json", old)
    _write(tmp_path / "cluster" / "cluster.json", [
        {"workers": w, "cores_per_worker": 2, "source_rows": 100, "whole_process_s": 10.0,
         "rows_per_s": 100.0, "kill_to_complete_s": 5.0, "completed_by": "run",
         "digest_free": "ab" * 32} for w in (1, 2)])
    rows = report.targets(tmp_path)
    assert all(r[2] == "not measured" and r[3] is None for r in rows), rows
    assert any(r[0].startswith("recovery after kill -9") for r in rows)
    assert any(r[0].startswith("2 Workers") for r in rows)
    md = report.benchmarks_md(tmp_path)
    assert md.count("to be re-measured") == 2
    assert "6.0×" not in md and "| 2 | 2 | 10.0 |" not in md
    assert "does not record started, commit, load_start, cpus" in md


def test_no_recovery_ratio_when_the_kills_landed_apart(tmp_path: Path) -> None:
    """cec killed at 100 % (it had processed everything between two state reports) and
    Spark at 66.7 %: not the same point, so no ratio and the target is not measured."""
    f = _fair(3_000_000, 6.0, 0.7)
    f["recovery"]["cec"]["killed_at_fraction"] = 1.0
    _write(tmp_path / "fair" / "fair.json", f)
    rows = {r[0].split(",")[0]: r for r in report.targets(tmp_path)}
    rec = rows["recovery after kill -9"]
    assert rec[3] is None and "apart" in rec[2]
    md = report.benchmarks_md(tmp_path)
    assert "no ratio: the kills landed 33% of the input apart" in md and "0.7**" not in md


def test_latency_targets_are_judged_by_the_cpu_of_other_processes() -> None:
    """Issue 39: a run that recorded others' CPU is judged by it, not by the load."""
    assert report._latency_condition({"quiet": True, "load_below_2": False}) == \
        ("on a quiet machine", True, "")
    cond, ok, why = report._latency_condition({"quiet": False, "load_below_2": True})
    assert cond == "on a quiet machine" and not ok and "other processes" in why
    assert report._latency_condition({"load_below_2": True}) == ("load < 2", True, "")
    cond, ok, why = report._latency_condition({"quiet": None, "load_below_2": False})
    assert (cond, ok) == ("load < 2", False) and "load >= 2" in why
