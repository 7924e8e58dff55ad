"""bench/growth_bench.py: its pure parts (sizes, settings, ratios, marginal rates, the
judgement, the tables); its measuring is bench/harness.py's (tests/bench/test_harness.py);
no Spark, no Flink."""

from __future__ import annotations

from typing import Any

import pytest

from bench import growth_bench as g

M = 1_000_000


def run(rows: int, system: str, rnd: int | str, wall: float, *, status: str = "ok",
        equal: bool | None = True, load: float = 1.0, peak: int = 2**30,
        kinds: dict[str, int] | None = None) -> dict[str, Any]:
    return {"rows": rows, "system": system, "round": rnd, "wall_s": wall, "cpu_s": wall * 1.5,
            "status": status, "equal": equal, "load_start": load, "load_end": load,
            "setting": f"{system} setting", "peak_rss_total": peak,
            "peak_rss_kind": kinds if kinds is not None else {"driver": peak // 4,
                                                              "jvm": peak // 2}}


def test_sizes_memory_and_settings_parse() -> None:
    assert g.parse_sizes("30, 0.3,3,3") == [300_000, 3 * M, 30 * M]
    with pytest.raises(ValueError, match="million rows"):
        g.parse_sizes("0.3,lots")
    with pytest.raises(ValueError, match="at least 1 row"):
        g.parse_sizes("0")
    table = g.parse_memory(g.SPARK_MEMORY)
    assert table == [(3 * M, "2g"), (30 * M, "14g"), (100 * M, "20g")]
    assert [g.memory_for(r, table) for r in (300_000, 3 * M, 3 * M + 1, 30 * M, 100 * M,
                                             300 * M)] == ["2g", "2g", "14g", "14g", "20g",
                                                           "20g"]
    assert g.memory_for(10**12, g.parse_memory("4g")) == "4g"
    with pytest.raises(ValueError, match="JVM size"):
        g.parse_memory("3:lots")
    st = g.parse_spark_setting("rocksdb:1000000")
    assert (st.store, st.rows_per_batch, st.files_per_trigger(30 * M)) == ("rocksdb", M, 10)
    everything = g.parse_spark_setting("hdfs:all")
    assert everything.files_per_trigger(3 * M) == 31  # 30 files and the sentinel's
    assert everything.files_per_trigger(250_000) == 4
    assert everything.label == "hdfs, all rows/batch"
    with pytest.raises(ValueError, match="hdfs\\|rocksdb"):
        g.parse_spark_setting("memory:all")


def test_the_sweep_size_and_the_rotated_order() -> None:
    assert g.sweep_size([300_000, 3 * M, 30 * M]) == 3 * M
    assert g.sweep_size([300_000, 30 * M]) == 30 * M
    assert g.sweep_size([300_000]) == 300_000
    sides = ["cec", "spark", "flink"]
    assert [g.rotation(sides, i) for i in range(4)] == [
        ["cec", "spark", "flink"], ["spark", "flink", "cec"], ["flink", "cec", "spark"],
        ["cec", "spark", "flink"]]


def test_ratios_are_taken_round_by_round_over_finished_equal_runs() -> None:
    runs = [run(3 * M, "cec", 0, 10.0), run(3 * M, "spark", 0, 20.0),
            run(3 * M, "cec", 1, 8.0), run(3 * M, "spark", 1, 24.0),
            run(3 * M, "cec", 2, 9.0), run(3 * M, "spark", 2, 99.0, status="timeout"),
            run(3 * M, "cec", 3, 9.0), run(3 * M, "spark", 3, 30.0, equal=False),
            run(3 * M, "spark", "sweep", 1.0)]  # the sweep's runs are not in the pairs
    assert g.pair_ratios(runs, 3 * M, "spark") == [2.0, 3.0]
    assert g.median_wall(runs, 3 * M, "cec") == 9.0
    assert g.median_wall(runs, 3 * M, "spark") == 22.0
    assert g.pair_ratios(runs, 3 * M, "flink") == []


def test_marginal_rate_between_consecutive_sizes() -> None:
    assert g.marginal(3 * M, 9.0, 30 * M, 29.0) == pytest.approx(27 * M / 20)
    assert g.marginal(3 * M, 9.0, 30 * M, 9.0) is None  # the wall did not grow
    runs = [run(300_000, "cec", 0, 5.0), run(3 * M, "cec", 0, 8.0),
            run(30 * M, "cec", 0, 20.0, status="out of memory"), run(100 * M, "cec", 0, 30.0)]
    rates = g.marginals(runs, [300_000, 3 * M, 30 * M, 100 * M], "cec")
    assert rates == [(300_000, 3 * M, pytest.approx(2.7 * M / 3)),
                     (3 * M, 100 * M, pytest.approx(97 * M / 22))]


def _big(spark: float, flink: float, cec30: float = 10.0, cec100: float = 25.0,
         load: float = 1.0, cec100_status: str = "ok") -> list[dict[str, Any]]:
    return [run(3 * M, "cec", 0, 4.0, load=load), run(30 * M, "cec", 0, cec30, load=load),
            run(30 * M, "spark", 0, spark, load=load),
            run(30 * M, "flink", 0, flink, load=load),
            run(100 * M, "cec", 0, cec100, status=cec100_status, load=load,
                peak=3 * 2**30, kinds={"driver": 2**29, "py-worker": 2**31})]


def test_judgement_met_missed_not_judged_and_not_measured() -> None:
    sizes = [3 * M, 30 * M, 100 * M]
    met = {j["target"]: j for j in g.judge(_big(spark=60.0, flink=40.0), sizes)}
    assert [j["state"] for j in met.values()] == ["met", "met", "met", "met"]
    spark = met["30 M rows ≥ 5× Spark"]["text"]
    assert spark.startswith("6.00× round by round") and "60.0 s ÷ 10.0 s" in spark
    assert "CSV" in met["30 M rows ≥ 3× Flink"]["text"]  # the handicap beside the ratio
    assert "4.67 M rows/s from 30 M to 100 M" in met[
        "cec's marginal rate ≥ 4 M rows/s"]["text"]
    assert "3.00 GiB for the process tree" in met[
        "100 M rows complete, peak memory reported"]["text"]
    assert "py-worker 2.00" in met["100 M rows complete, peak memory reported"]["text"]

    missed = g.judge(_big(spark=40.0, flink=20.0, cec30=20.0, cec100_status="timeout"),
                     sizes)
    assert [j["state"] for j in missed] == ["missed"] * 4
    # the 100 M run timed out: the marginal rate is the one from 3 M to 30 M rows
    assert "1.69 M rows/s from 3 M to 30 M" in missed[2]["text"]
    assert "0/1 cec runs finished" in missed[3]["text"] and "timeout" in missed[3]["text"]

    busy = g.judge(_big(spark=60.0, flink=40.0, load=4.5), sizes)
    assert [j["state"] for j in busy] == ["not judged"] * 4
    assert "4.50" in busy[0]["text"]

    small = g.judge([run(300_000, "cec", 0, 5.0)], [300_000])
    assert [j["state"] for j in small] == ["not measured"] * 4
    failed = _big(spark=60.0, flink=40.0)
    failed[2]["status"] = "out of memory"
    why = g.judge(failed, sizes)[0]
    assert why["state"] == "not measured" and "spark: out of memory" in why["text"]


def test_the_size_table_and_the_report() -> None:
    runs = [run(3 * M, "cec", 0, 9.0), run(3 * M, "spark", 0, 18.0),
            run(3 * M, "flink", 0, 13.5), run(3 * M, "cec", 1, 11.0, load=2.5),
            run(3 * M, "spark", 1, 22.0, status="timeout"), run(3 * M, "flink", 1, 16.5)]
    text = g.size_table(runs, 3 * M, ["cec", "spark", "flink"])
    assert "| cec | cec setting | 2/2 | 10.00 (9.00–11.00) |" in text
    assert "| Spark | spark setting | 1/2 (timeout) | 18.00 |" in text
    assert "1.00–2.50" in text
    assert "Spark ÷ cec, round by round: **2.00×** (rounds: 2.00)" in text
    assert "Flink ÷ cec, round by round: **1.50×** (rounds: 1.50, 1.50) — Flink reads" in text
    res = {"runs": runs, "sizes": [3 * M], "sides": ["cec", "spark", "flink"], "cpus": 2,
           "memory_gib": 23.4, "commit": "abc", "started": "now", "pairs": 2,
           "command": "python bench/growth_bench.py", "sweep": [], "judgement":
           g.judge(runs, [3 * M]), "spark_setting": "hdfs, all rows/batch",
           "flink_parallelism": 2, "differences": ["3,000,000 rows, spark: row 0 ..."]}
    md = g.report(res)
    assert "## 3,000,000 rows" in md and "## Marginal rate" in md
    assert "## OUTPUTS DIFFER" in md and "Kept: Spark hdfs, all rows/batch" in md


def test_disk_needed_counts_only_what_is_not_there() -> None:
    sides = ["cec", "spark", "flink"]
    fresh = g.disk_needed([3 * M, 30 * M], 3 * M, sides, set(), set())
    per = g.DISK_PER_ROW
    assert fresh == (per["parquet"] * 33 * M + per["csv"] * (2 * 3 * M + 30 * M)
                     + 30 * M * (per["cec"] + per["spark"] + per["flink"]))
    kept = g.disk_needed([3 * M, 30 * M], 3 * M, sides, {3 * M, 30 * M},
                         {(3 * M, 1), (3 * M, 2), (30 * M, 2)})
    assert kept == 30 * M * (per["cec"] + per["spark"] + per["flink"])


def test_a_system_skipped_after_failing_says_why() -> None:
    runs = [run(30 * M, "cec", 0, 10.0), run(30 * M, "spark", 0, 1800.0, status="timeout"),
            run(100 * M, "cec", 0, 25.0),
            {"rows": 100 * M, "system": "spark", "round": "skipped",
             "status": "skipped (every run failed at 30,000,000 rows)"}]
    text = g.size_table(runs, 100 * M, ["cec", "spark"])
    assert "- Spark: skipped (every run failed at 30,000,000 rows)" in text
    assert "| Spark |" not in text  # no row of numbers for it
    why = g.judge(runs, [30 * M, 100 * M])[0]
    assert why["state"] == "not measured" and "spark: timeout" in why["text"]
    assert g._why_none(runs, 100 * M, "spark") == \
        "spark skipped (every run failed at 30,000,000 rows)"


def test_judged_by_the_cpu_of_other_processes_when_runs_recorded_it() -> None:
    sizes = [3 * M, 30 * M, 100 * M]
    quiet = _big(spark=60.0, flink=40.0, load=4.5)  # the runs' own load: judged anyway
    for r in quiet:
        r["others_cores"] = 0.1
    states = [j["state"] for j in g.judge(quiet, sizes)]
    assert states == ["met"] * 4
    assert "other processes used at most 0.10 cores" in g.judge(quiet, sizes)[0]["text"]
    quiet[1]["others_cores"] = 0.6  # another process took 0.6 of a core in one run
    judged = g.judge(quiet, sizes)
    assert judged[0]["state"] == "not judged" and "0.60 cores" in judged[0]["text"]
    # a run without the measure: judged by the load, as before
    del quiet[1]["others_cores"]
    assert g.judge(quiet, sizes)[0]["state"] == "not judged"
