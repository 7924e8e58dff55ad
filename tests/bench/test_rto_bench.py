"""bench/rto.py's summary and its section of BENCHMARKS.md (from a result file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import report, rto


def _kill(measured: float, objective: float) -> dict[str, Any]:
    return {"frac": 0.5, "killed_at_tuples": 1_500_000, "predicted_s": 21.0,
            "measured_s": measured, "within": measured <= objective, "startup_s": 15.0,
            "startup_recover_s": 15.0, "task_recovery_s": 0.8, "q_at_kill": 5,
            "u_at_kill": 7, "load": 4.5}


def _result() -> dict[str, Any]:
    none = [{"wall_s": 20.0, "elapsed_s": 15.0, "steady_s": 8.0, "operator_s": 4.0,
             "g_check": 100, "load": 4.0}]
    ok = {"rto_s": 30.0, "refused": None, "kills": [_kill(20.0, 30), _kill(31.0, 30)],
          "free": [{"wall_s": 22.0, "elapsed_s": 16.0, "steady_s": 8.8, "operator_s": 5.0,
                    "g_check": 40, "probes": 2, "probe_s": 0.5, "load": 4.0}]}
    refused = {"rto_s": 1.0, "refused": "cec: x: [checkpoint].rto = 1 s is below the floor "
               "of 15.0 s, ...", "kills": [], "free": []}
    for s in (ok, refused):
        rto.summarize(s, none)
    return {"started": "2026-11-25 13:00 UTC", "commit": "abc", "load_start": 4.0,
            "load_end": 5.0, "cpus": 2, "rows": 3_000_000, "partitions": 4, "quick": True,
            "startup_history_at_start": {"path": "/h/startup.json", "entries": 7,
                                         "oldest": "2026-11-25 09:00:00",
                                         "newest": "2026-11-25 12:59:00",
                                         "slowest_s": 66.0, "quickest_s": 15.0},
            "none": none, "settings": [refused, ok]}


def test_summary_share_within_and_cost_against_no_objective() -> None:
    res = _result()
    ok = res["settings"][1]
    assert ok["within_share"] == 0.5 and ok["measured_max_s"] == 31.0
    assert ok["measured_median_s"] == 25.5 and ok["predicted_median_s"] == 21.0
    assert ok["wall_s_vs_none"] == 1.1 and ok["steady_s_vs_none"] == 1.1
    assert ok["operator_s_vs_none"] == 1.25
    assert ok["g_check_median"] == 40


def test_report_section_and_targets(tmp_path: Path) -> None:
    path = tmp_path / "rto" / "rto.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_result()))
    rows = {r[0]: r for r in report.targets(tmp_path)}
    refused = rows["recovery within rto = 1 s after kill -9 (process start to caught up)"]
    assert refused[3] is None and "refused at start" in refused[2]
    ok = rows["recovery within rto = 30 s after kill -9 (process start to caught up)"]
    assert ok[3] is False and ok[2].startswith("50% of 2")
    md = report.benchmarks_md(tmp_path)
    assert "## Recovery-time objective" in md
    assert ("start-up history (/h/startup.json) as found at the start, not edited: 7 "
            "start-ups from 2026-11-25 09:00:00 to 2026-11-25 12:59:00") in md
    assert "| 1 s | refused |" in md and "below the floor of 15.0 s" in md
    assert ("| 30 s | accepted | 2 | 50% | 25.5 | 31.0 | 21.0 | 22.0 (1.1) | 8.8 (1.1) | "
            "5.0 (1.25) | 40 | 2 (0.5) |") in md


def test_the_bench_spec_is_the_builtin_workload_without_its_targets(tmp_path: Path) -> None:
    plain, bare = rto.specs(tmp_path)
    assert 'Q = "2x"' in plain.read_text() and "Q =" not in bare.read_text()
    assert plain.read_text().replace(rto.TARGETS, "") == bare.read_text()


def test_a_result_without_its_start_up_history_is_to_be_re_measured(tmp_path: Path) -> None:
    """Issue 29: the last result was measured after the loaded start-up history had been
    moved aside; one that does not record the history it started from is not shown."""
    old = _result()
    del old["startup_history_at_start"]
    path = tmp_path / "rto" / "rto.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    rows = [r for r in report.targets(tmp_path) if "rto" in r[4]]
    assert [(r[2], r[3]) for r in rows] == [("not measured", None)]
    md = report.benchmarks_md(tmp_path)
    assert "to be re-measured with the fixed definition" in md
    assert "| 30 s | accepted |" not in md and "25.5" not in md


def test_history_summary_reads_without_editing(tmp_path: Path) -> None:
    path = tmp_path / "startup.json"
    text = json.dumps({"run": [{"s": 14.0, "at": "2026-11-25 22:01:29", "load": 1.5},
                               {"s": 80.5, "at": "2026-11-25 22:13:46", "load": 8.4}],
                       "recover": [{"s": 30.0, "at": "2026-11-25 21:00:00", "load": 3.0}]})
    path.write_text(text)
    assert rto.history_summary(path) == {
        "path": str(path), "entries": 3, "oldest": "2026-11-25 21:00:00",
        "newest": "2026-11-25 22:13:46", "slowest_s": 80.5, "quickest_s": 14.0}
    assert path.read_text() == text
    assert rto.history_summary(tmp_path / "none.json")["entries"] == 0
