"""bench/standby_bench.py: its pure parts (no Spark, no process started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import standby_bench as sb

REPO = Path(__file__).resolve().parents[2]


def test_spark_batch_files_puts_a_boundary_at_the_kill_point() -> None:
    assert sb.spark_batch_files(30, 0.5) == 5  # 15 files before the kill: 3 batches of 5
    assert sb.spark_batch_files(30, 0.5, most=3) == 3
    assert sb.spark_batch_files(30, 0.6) == 9  # 18 files: 2 batches of 9
    assert sb.spark_batch_files(30, 0.51) == 1  # 15.3 files: no boundary but every file


def test_kill_fractions_are_seeded_and_within_bounds() -> None:
    a = sb.kill_fractions(27, 20)
    assert a == sb.kill_fractions(27, 20)
    assert a != sb.kill_fractions(28, 20)
    assert len(a) == 20 and all(0.10 <= x <= 0.85 for x in a)


def test_standby_pid_and_suggested_rto_parse_the_cli_lines() -> None:
    text = "cec: something\ncec: standby started (pid 4242); its messages: /r/standby.log\n"
    assert sb.standby_pid(text) == 4242
    assert sb.standby_pid("cec: starting") is None
    msg = ("items.toml: [checkpoint].rto = 1 s is below the floor of 3.6 s, the quickest "
           "...: no recovery here can be that quick; ask for at least 5 s")
    assert sb.suggested_rto(msg) == 5.0
    assert sb.suggested_rto("ask for at least 2.5s") == 2.5
    assert sb.suggested_rto("refused") is None


def test_items_spec_drops_q_and_u_and_sets_the_rows() -> None:
    text = (REPO / "cli" / "examples" / "items.toml").read_text()
    out = sb.items_spec(text, 300_000)
    assert "rows = 300000\n" in out and "rows = 3000000" not in out
    assert 'Q = "2x"' not in out and "U = 1000000" not in out
    assert "CI_ms = 5" in out  # the rest of [checkpoint] stays
    with pytest.raises(ValueError, match="Q"):
        sb.items_spec(out, 10)


def test_caught_up_needs_every_partition_after_the_kill() -> None:
    sts = [{"caught_up_at": 101.0}, {"caught_up_at": 100.4}]
    assert sb.caught_up_s(sts, 2, 100.0) == pytest.approx(1.0)
    assert sb.caught_up_s(sts, 3, 100.0) is None  # a partition has no state yet
    assert sb.caught_up_s([{"caught_up_at": 99.0}, {"caught_up_at": 101.0}], 2,
                          100.0) is None  # caught up before the kill: the old driver's
    assert sb.caught_up_s([{}, {"caught_up_at": 101.0}], 2, 100.0) is None


def test_takeover_parts_are_steps_and_times_since_the_kill() -> None:
    tk = {"detected_at": 10.05, "claimed_at": 10.10, "tasks_began_at": 10.5,
          "tasks_recovered_at": 11.0, "ended_at": 13.0, "driver": 2}
    p = sb.takeover_parts(tk, 10.0)
    assert p["detect_s"] == pytest.approx(0.05) and p["claim_s"] == pytest.approx(0.05)
    assert p["start_s"] == pytest.approx(0.4) and p["recover_s"] == pytest.approx(0.5)
    assert p["end_s"] == pytest.approx(2.0)
    assert p["recover_since_kill_s"] == pytest.approx(1.0)
    missing = sb.takeover_parts({"detected_at": 10.2, "tasks_began_at": 10.7}, 10.0)
    assert missing == {"detect_s": 0.2, "detect_since_kill_s": 0.2, "start_s": 0.5,
                       "start_since_kill_s": 0.7}


def test_task_phases_keep_the_slowest_task_per_phase() -> None:
    sts = [{"recovered": {"phases": [{"name": "ec", "measured_s": 0.2},
                                     {"name": "replay", "measured_s": 0.1}]}},
           {"recovered": {"phases": [{"name": "ec", "measured_s": 0.3}]}}, {}]
    assert sb.task_phases(sts) == {"ec": 0.3, "replay": 0.1}


def test_kill_ratio_only_for_kills_close_together() -> None:
    a = {"n": 3, "median": 1.0, "frac_median": 0.50}
    assert sb.kill_ratio(a, {"n": 3, "median": 8.0, "frac_median": 0.52}) == 0.125
    assert sb.kill_ratio(a, {"n": 3, "median": 8.0, "frac_median": 0.60}) is None
    assert sb.kill_ratio(a, {"n": 0, "median": None}) is None


def test_part1_summary_takes_flinks_kill_point_from_its_checkpoint() -> None:
    def run(t: float, frac: float, **more: Any) -> dict[str, Any]:
        return {"restart_s": t, "killed_at_fraction": frac, "load": 1.0, **more}

    p1: dict[str, Any] = {"rows": 1000, "runs": {
        "a": [run(2.0, 0.5, to_exit_s=1.5, parts={"detect_s": 0.1,
                                                    "recover_since_kill_s": 0.9}),
              run(4.0, 0.52, takeover_s=3.0, parts={"detect_s": 0.3,  # the earlier name
                                                     "recover_since_kill_s": 1.1})],
        "b": [run(10.0, 0.5), run(12.0, 0.5)], "c": [run(30.0, 0.6)],
        "d": [run(20.0, 1.0, checkpoint_rows=510)]}}
    sb.summarize1(p1)
    assert p1["summary"]["a"]["median"] == 3.0
    assert p1["summary"]["d"]["frac_median"] == 0.51  # not the 100 % its sources read
    assert p1["ratios"] == {"a/b": 0.273, "a/c": None, "a/d": 0.15}
    # Spark was killed later (0.6 > 0.51): (a)/(c) is at most 3/30
    assert p1["ratio_bounds"] == {"a/b": None, "a/c": 0.1, "a/d": 0.15}
    assert p1["summary"]["a_to_exit"]["median"] == 2.25  # kill -> the standby's exit
    assert p1["summary"]["a_takeover"]["median"] == 1.0  # kill -> every task recovered
    assert "a_takeover_only" not in p1["summary"]
    assert p1["parts_median"] == {"detect_s": 0.2, "recover_since_kill_s": 1.0}
    assert p1["others_cores"] is None  # the runs recorded none


def _res() -> dict[str, Any]:
    kill = {"frac": 0.3, "killed_at_fraction": 0.31, "measured_s": 0.8, "within_1s": True,
            "parts": {"detect_s": 0.01, "claim_s": 0.02, "start_s": 0.3, "recover_s": 0.4},
            "load": 1.0}
    summ = {k: {"n": 1, "median": m, "min": m, "max": m, "frac_median": 0.5, "loads": [1.0]}
            for k, m in (("a", 1.2), ("b", 9.0), ("c", 20.0), ("d", 12.0))}
    summ["a_to_exit"] = {"n": 1, "median": 0.9}
    summ["a_takeover"] = {"n": 1, "median": 0.5}
    return {"quick": False, "command": "python -m bench.standby_bench", "cpus": 2,
            "commit": "abc", "started": "now", "load_start": 0.5, "load_end": 0.7,
            "part1": {"rows": 3_000_000, "kill_at": 0.5, "windows": 10, "reference_run_s": 9,
                      "spark_store": "hdfs", "spark_rows_per_batch": 500_000,
                      "flink": "measured", "summary": summ,
                      "ratios": {"a/b": 0.133, "a/c": 0.06, "a/d": 0.1},
                      "parts_median": {"detect_s": 0.01, "detect_since_kill_s": 0.01},
                      "runs": {"a": [{"killed_at_fraction": 0.5, "ready_after_start_s": 4,
                                      "ready_at_fraction": 0.1, "task_phases": {},
                                      "load": 1.0}], "b": [], "c": [], "d": []}},
            "part2": {"spec": "items", "rows": 3_000_000, "objective": "1s", "refused": None,
                      "kills": [kill], "within_1s_share": 1.0,
                      "measured": {"median": 0.8, "max": 0.8}},
            "part3": {"rows": 3_000_000, "reps": 1, "ratio": 1.02,
                      "ratio_pairs": {"min": 1.02, "max": 1.02},
                      "standby": {"median": 10.2, "min": 10.2, "max": 10.2},
                      "none": {"median": 10.0, "min": 10.0, "max": 10.0},
                      "runs": {"standby": [{"load": 1.0}], "none": [{"load": 1.0}]},
                      "standby_cpu_warm_s": 5.0, "standby_cpu_waiting_s": 0.1}}


def test_targets_judge_each_measure() -> None:
    rows = sb.targets(_res())
    assert [met for *_, met in rows] == [True, True, True, True]
    res = _res()
    res["part1"]["ratios"]["a/d"] = None
    res["part1"]["flink"] = "not measured: no java"
    flink = sb.targets(res)[1]
    assert flink[3] is None and "no java" in flink[2]


def test_targets_are_not_judged_at_quick_sizes_or_under_load() -> None:
    res = _res()
    assert sb.judged(res) is None
    res["load_end"] = 12.5
    rows = sb.targets(res)
    assert all(met is None and "load 12.5: not judged" in got for _, _, got, met in rows)
    res = _res()
    res["quick"] = True
    assert sb.judged(res) == "--quick sizes"
    res = _res()
    res["earlier"] = {"part3": {"load_start": 7.0, "load_end": 3.0, "command": "x"}}
    assert sb.judged(res) == "load 7.0"
    assert "Part 3 is kept from an earlier run (`x`" in sb.markdown(res)
    res["earlier"] = {"part3": {"load_start": 1.0, "load_end": 1.0,
                                "command": "python -m bench.standby_bench --quick"}}
    assert sb.judged(res) == "--quick sizes"


def test_markdown_has_every_part_and_says_a_loaded_machine() -> None:
    md = sb.markdown(_res())
    assert "### 1." in md and "### 2." in md and "### 3." in md
    assert "not quiet" not in md
    res = _res()
    res["load_start"] = 9.0
    assert "not quiet" in sb.markdown(res)


def test_labels_say_what_was_timed() -> None:
    """Issue 39: kill -> the standby's exit includes running the rest of the input; the
    takeover alone is kill -> every task recovered."""
    row = sb.targets(_res())[0][2]
    assert "kill → every task recovered 0.5 s" in row
    assert "kill → standby's exit, the rest of the input run to its end, 0.9 s" in row
    assert "takeover alone" not in sb.markdown(_res())
    old = _res()  # a result summarized before a_takeover: the parts' median
    summ = old["part1"]["summary"]
    del summ["a_takeover"]
    summ["a_takeover_only"] = summ.pop("a_to_exit")
    old["part1"]["parts_median"]["recover_since_kill_s"] = 2.269
    assert "every task recovered 2.269 s" in sb.targets(old)[0][2]
    assert "run to its end, 0.9 s" in sb.targets(old)[0][2]


def test_quiet_is_judged_by_the_cpu_of_other_processes() -> None:
    res = _res()
    res["load_start"] = res["load_end"] = 9.0  # the load alone judges no longer
    for run in [*res["part1"]["runs"]["a"], *res["part2"]["kills"],
                *res["part3"]["runs"]["standby"], *res["part3"]["runs"]["none"]]:
        run["others_cores"] = 0.1
    assert sb.others(res) == 0.1 and sb.judged(res) is None
    assert "not quiet" not in sb.markdown(res)
    res["part2"]["kills"][0]["others_cores"] = 0.7
    assert sb.judged(res) == "other processes used up to 0.70 cores during a run"
    assert "other processes used up to 0.70 cores" in sb.markdown(res)
    assert all(met is None for *_, met in sb.targets(res))
    del res["part3"]["runs"]["none"][0]["others_cores"]  # a run without: the load judges
    assert sb.others(res) is None and sb.judged(res) == "load 9.0"


def test_a_standby_started_before_the_run_is_judged_on_its_own_targets() -> None:
    """Issue 41 item 4: the run with a ready standby started before it, against the run
    without one (≤ 1.1), and the following standby's CPU against the run's (≤ 0.05)."""
    res = _res()
    p3 = res["part3"]
    p3["before"] = {"median": 10.5, "min": 10.4, "max": 10.6}
    p3["runs"]["before"] = [{"load": 1.0}]
    p3.update(ratio_before=1.05, ratio_before_pairs={"min": 1.05, "max": 1.05},
              before_waiting_core_share=0.03, before_cpu_of_run=0.07)
    rows = sb.targets(res)
    assert rows[-2][1:] == ("≤ 1.1", "1.05", True), rows[-2]
    assert rows[-1][1:] == ("≤ 0.05", "0.07", False), rows[-1]
    md = sb.markdown(res)
    assert "| before | 10.5 | 10.4 | 10.6 | 1.0 |" in md
    assert "**1.05** (pairs 1.05–1.05)" in md and "0.03 of a core" in md
    assert "0.07 of the run's CPU" in md
    assert len(sb.targets(_res())) == 4  # a result without the arm: as before


def test_an_idle_runs_hot_standby_is_judged_by_its_share_of_a_core() -> None:
    """Issue 41: a ready standby waits at ≤ 0.02 of a core (part 4: the run idle, the
    standby's hot tasks following its output logs)."""
    res = _res()
    res["part4"] = {"partitions": 4, "seconds": 30.0, "standby_cpu_s": 0.45,
                    "standby_core_share": 0.015, "run_cpu_s": 3.0, "run_core_share": 0.1,
                    "load": 1.0, "others_cores": 0.05}
    row = sb.targets(res)[-1]
    assert row[1:] == ("≤ 0.02 of a core", "0.015", True), row
    assert "**0.015 of a core**" in sb.markdown(res)
    assert sb.part_others(res["part4"]) == 0.05


def test_kill_to_every_task_recovered_is_judged_at_its_95th_percentile() -> None:
    """Issue 41: kill -> every task recovered <= 0.5 s, p95 of part 2's kills."""
    res = _res()
    res["part2"]["kills"] = [{"parts": {"recover_since_kill_s": 0.3 + i / 100}}
                             for i in range(20)]  # 0.30 .. 0.49
    row = next(r for r in sb.targets(res) if "every task recovered, with" in r[0])
    assert row[1:] == ("≤ 0.5 s", "0.480 s (median 0.395 s)", True), row
    for k in res["part2"]["kills"][-2:]:  # the 19th of 20 sorted is the p95
        k["parts"]["recover_since_kill_s"] = 0.9
    row = next(r for r in sb.targets(res) if "every task recovered, with" in r[0])
    assert row[3] is False, row
