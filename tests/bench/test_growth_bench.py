"""bench/growth_bench.py: its pure parts (sizes, settings, ratios, marginal rates, the
judgement, the tables); its measuring is bench/harness.py's (tests/bench/test_harness.py);
no Spark, no Flink."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import growth_bench as g

M = 1_000_000


def run(rows: int, system: str, rnd: int | str, wall: float, *, status: str = "ok",
        equal: bool | None = True, load: float = 1.0, peak: int = 2**30,
        kinds: dict[str, int] | None = None, inp: str = "csv") -> dict[str, Any]:
    return {"rows": rows, "input": inp, "system": system, "round": rnd, "wall_s": wall,
            "cpu_s": wall * 1.5,
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


def test_rounds_per_size() -> None:
    sizes = [3 * M, 30 * M, 100 * M]
    assert g.parse_pairs("3", sizes) == {3 * M: 3, 30 * M: 3, 100 * M: 3}
    assert g.parse_pairs("3:3,30:3,100:1", sizes) == {3 * M: 3, 30 * M: 3, 100 * M: 1}
    with pytest.raises(ValueError, match=r"missing: 100 M"):
        g.parse_pairs("3:3,30:3", sizes)
    with pytest.raises(ValueError, match="at least 1 round"):
        g.parse_pairs("3:3,30:0,100:1", sizes)
    with pytest.raises(ValueError, match="expected K or SIZE_M:K"):
        g.parse_pairs("three", sizes)
    assert g.pairs_text(3) == "3"
    assert g.pairs_text({str(3 * M): 3, str(100 * M): 1}) == "3 at 3 M, 1 at 100 M"
    assert g.pairs_text({str(3 * M): 2, str(30 * M): 2}) == "2"


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
         load: float = 1.0, cec100_status: str = "ok", cec3: float = 4.0
         ) -> list[dict[str, Any]]:
    return [run(3 * M, "cec", 0, cec3, load=load), run(3 * M, "spark", 0, 18.0, load=load),
            run(3 * M, "flink", 0, 17.0, load=load),
            run(30 * M, "cec", 0, cec30, load=load),
            run(30 * M, "spark", 0, spark, load=load),
            run(30 * M, "flink", 0, flink, load=load),
            run(100 * M, "cec", 0, cec100, status=cec100_status, load=load,
                peak=3 * 2**30, kinds={"driver": 2**29, "py-worker": 2**31})]


TARGETS = ["30 M rows ≥ 5× Spark", "30 M rows ≥ 5× Flink", "3 M rows ≥ 4× Spark",
           "3 M rows ≥ 4× Flink", "cec's marginal rate ≥ 4 M rows/s from 30 M to 100 M rows"]


def test_judgement_met_missed_not_judged_and_not_measured() -> None:
    sizes = [3 * M, 30 * M, 100 * M]
    met = {j["target"]: j for j in g.judge(_big(spark=60.0, flink=55.0), sizes)}
    assert list(met) == TARGETS  # issue 40's targets, in its order
    assert [j["state"] for j in met.values()] == ["met"] * 5
    spark = met["30 M rows ≥ 5× Spark"]["text"]
    assert spark.startswith("6.00× round by round") and "60.0 s ÷ 10.0 s" in spark
    assert met["30 M rows ≥ 5× Flink"]["text"].startswith("5.50×")
    assert met["3 M rows ≥ 4× Spark"]["text"].startswith("4.50×")
    assert met["3 M rows ≥ 4× Flink"]["text"].startswith("4.25×")
    assert "4.67 M rows/s (median walls 10.0 s at 30 M, 25.0 s at 100 M rows)" in met[
        TARGETS[4]]["text"]  # 70 M rows in 15 s

    missed = g.judge(_big(spark=40.0, flink=20.0, cec30=20.0, cec100=40.0, cec3=5.0), sizes)
    assert [j["state"] for j in missed] == ["missed"] * 5
    assert missed[2]["text"].startswith("3.60×") and missed[3]["text"].startswith("3.40×")
    assert "3.50 M rows/s" in missed[4]["text"]  # 70 M rows in 20 s

    # the 100 M run timed out: no marginal rate (not the one from 3 M to 30 M rows)
    out = g.judge(_big(spark=60.0, flink=55.0, cec100_status="timeout"), sizes)[4]
    assert out["state"] == "not measured" and "100 M rows (cec: timeout)" in out["text"]

    busy = g.judge(_big(spark=60.0, flink=40.0, load=4.5), sizes)
    assert [j["state"] for j in busy] == ["not judged"] * 5
    assert "4.50" in busy[0]["text"]

    small = g.judge([run(300_000, "cec", 0, 5.0)], [300_000])
    assert [j["state"] for j in small] == ["not measured"] * 5
    assert "30 M and 100 M rows not both run" in small[4]["text"]
    failed = _big(spark=60.0, flink=40.0)
    failed[4]["status"] = "out of memory"
    why = g.judge(failed, sizes)[0]
    assert why["state"] == "not measured" and "spark: out of memory" in why["text"]


def test_the_targets_are_judged_on_the_csv_table_only() -> None:
    sizes = [3 * M, 30 * M, 100 * M]
    runs = _big(spark=40.0, flink=40.0)  # CSV: 4× at 30 M, missed
    # the parquet table's Spark is far slower: it does not make the CSV target met
    runs += [run(30 * M, "cec", 0, 10.0, inp="parquet"),
             run(30 * M, "spark", 0, 90.0, inp="parquet")]
    judged = g.judge(runs, sizes)
    assert judged[0]["state"] == "missed" and judged[0]["text"].startswith("4.00×")
    only_parquet = g.judge(runs, sizes, inputs=["parquet"])
    assert [j["target"] for j in only_parquet] == TARGETS
    assert {j["state"] for j in only_parquet} == {"not measured"}
    assert "CSV table (every side on the same file) was not run" in only_parquet[0]["text"]


def test_the_size_table_and_the_report() -> None:
    runs = [run(3 * M, "cec", 0, 9.0), run(3 * M, "spark", 0, 18.0),
            run(3 * M, "flink", 0, 13.5), run(3 * M, "cec", 1, 11.0, load=2.5),
            run(3 * M, "spark", 1, 22.0, status="timeout"), run(3 * M, "flink", 1, 16.5),
            run(3 * M, "cec", 0, 8.0, inp="parquet"),
            run(3 * M, "spark", 0, 12.0, inp="parquet")]
    csv = g.of_input(runs, "csv")
    text = g.size_table(csv, 3 * M, ["cec", "spark", "flink"])
    assert "| cec | cec setting | 2/2 | 10.00 (9.00–11.00) |" in text
    assert "| Spark | spark setting | 1/2 (timeout) | 18.00 |" in text
    assert "| Flink | flink setting | 2/2 |" in text
    assert "1.00–2.50" in text
    assert "Spark ÷ cec, round by round: **2.00×** (rounds: 2.00)" in text
    assert "Flink ÷ cec, round by round: **1.50×** (rounds: 1.50, 1.50)\n" in text
    parquet = g.size_table(g.of_input(runs, "parquet"), 3 * M, ["cec", "spark"])
    assert "Spark ÷ cec, round by round: **1.50×** (rounds: 1.50)" in parquet
    res = {"runs": runs, "sizes": [3 * M], "sides": ["cec", "spark", "flink"],
           "inputs": ["csv", "parquet"], "cpus": 2, "memory_gib": 23.4, "commit": "abc",
           "started": "now", "pairs": 2, "command": "python bench/growth_bench.py",
           "sweep": [{**run(3 * M, "spark", "sweep", 30.0, inp="parquet"),
                      "setting": "hdfs, 100,000 rows/batch"}],
           "sweep_rows": 3 * M, "judgement": g.judge(runs, [3 * M]),
           "targets_issue": g.TARGETS_ISSUE,
           "spark_settings": {"csv": "hdfs, one CSV file: one micro-batch",
                              "parquet": "hdfs, all rows/batch"},
           "flink_parallelism": 2, "differences": ["3,000,000 rows, spark: row 0 ..."]}
    md = g.report(res)
    # a table per input, the CSV one (the headline, all three sides) first
    csv_at = md.index("## CSV input: every side reads the same file")
    parquet_at = md.index("## Parquet input: cec and Spark (a second table)")
    assert csv_at < parquet_at
    assert md.count("### 3,000,000 rows") == 2 and md.count("### Marginal rate") == 2
    assert "**2.00×**" in md[csv_at:parquet_at] and "**1.50×** (rounds: 1.50)\n" in (
        md[parquet_at:])
    assert "| Flink |" in md[csv_at:parquet_at] and "| Flink" not in md[parquet_at:]
    assert "Flink is not run: its PyPI wheel has no parquet format" in md[parquet_at:]
    assert "items.csv" in md[csv_at:parquet_at]
    assert "| parquet | Spark | hdfs, 100,000 rows/batch | ok | 30.00 |" in md
    assert ("Kept: Spark on csv: hdfs, one CSV file: one micro-batch; Spark on parquet: "
            "hdfs, all rows/batch; Flink parallelism 2.") in md
    assert ("## Targets (issue 40; judged on the CSV table, every side on the same file; "
            "this machine)") in md
    assert "## OUTPUTS DIFFER" in md


def test_results_from_before_the_input_option_are_still_rendered() -> None:
    runs = [run(3 * M, "cec", 0, 9.0), run(3 * M, "flink", 0, 18.0)]
    for r in runs:
        del r["input"]  # recorded before --input: the parquet table's, Flink on CSV
    assert g.of_input(runs, "parquet") == runs and g.of_input(runs, "csv") == []
    res = {"runs": runs, "sizes": [3 * M], "sides": ["cec", "flink"], "cpus": 2,
           "memory_gib": 23.4, "commit": "abc", "started": "now", "pairs": 1,
           "command": "python bench/growth_bench.py", "sweep": [],
           "judgement": [{"target": "30 M rows ≥ 3× Flink", "state": "met", "text": "x"}],
           "spark_setting": "hdfs, all rows/batch", "flink_parallelism": 2}
    md = g.report(res)
    assert "| Flink (CSV input) |" in md and "— Flink reads the same rows as CSV" in md
    assert "## Targets (issue 30; this machine)" in md and "## CSV input" not in md
    assert "Kept: Spark hdfs, all rows/batch; Flink parallelism 2." in md


def test_the_input_option_and_what_each_side_reads() -> None:
    assert g.parse_input("both") == ["csv", "parquet"]  # the headline first
    assert g.parse_input("csv") == ["csv"] and g.parse_input("parquet") == ["parquet"]
    with pytest.raises(ValueError, match="csv, parquet or both"):
        g.parse_input("orc")
    sides = ["cec", "spark", "flink"]
    assert g.sides_of("csv", sides) == sides
    assert g.sides_of("parquet", sides) == ["cec", "spark"]  # Flink reads no parquet
    assert g.sides_of("csv", ["flink", "cec"]) == ["flink", "cec"]
    assert [st.label for st in g.spark_candidates("csv")] == [
        "hdfs, all rows/batch", "rocksdb, all rows/batch"]  # one file: one micro-batch
    assert len(g.spark_candidates("parquet")) == 6
    fixed = g.parse_spark_setting("rocksdb:1000000")
    assert g.spark_on("parquet", fixed) == fixed
    assert g.spark_on("csv", fixed) == g.SparkSetting("rocksdb", None)
    assert g.spark_label("csv", fixed) == "rocksdb, one CSV file: one micro-batch"
    assert g.spark_label("parquet", fixed) == "rocksdb, 1,000,000 rows/batch"


def test_the_csv_is_made_once_per_size_and_read_by_every_side(tmp_path: Path) -> None:
    s = g.prepare(tmp_path, 250, ["csv", "parquet"])
    csv = s.paths["csv"]
    assert csv == tmp_path / "data-250-csv" and s.paths["parquet"] == tmp_path / "data-250"
    assert [f.name for f in csv.iterdir() if not f.name.startswith("_")] == ["items.csv"]
    first = (csv / "items.csv").read_text().splitlines()
    assert first[0] == "item_id,item_price,item_time" and len(first) == 252  # + sentinel
    spec = s.specs["csv"].read_text()
    assert 'kind = "csv"' in spec and f'path = "{csv}"' in spec
    assert 'kind = "parquet"' in s.specs["parquet"].read_text()
    made = (csv / "items.csv").stat().st_mtime_ns
    again = g.prepare(tmp_path, 250, ["csv", "parquet"])
    assert again.paths["csv"] == csv and (csv / "items.csv").stat().st_mtime_ns == made
    only = g.prepare(tmp_path / "p", 250, ["parquet"])
    assert "csv" not in only.paths and list(only.specs) == ["parquet"]
    assert not (tmp_path / "p" / "data-250-csv").exists()


def test_the_targets_text_is_issue_40s() -> None:
    doc = g.__doc__ or ""
    assert "Targets (issue 40" in doc and "supersede issue 30's" in doc
    assert "30 M rows ≥ 5× Spark and ≥ 5× Flink, 3 M rows ≥ 4×" in doc
    assert "--input csv|parquet|both" in doc and "the same file for every side" in doc
    assert g.TARGET_RATIOS == ((30 * M, 5.0, 5.0), (3 * M, 4.0, 4.0))
    assert g.TARGET_MARGINAL == 4 * M


def test_disk_needed_counts_only_what_is_not_there() -> None:
    sides = ["cec", "spark", "flink"]
    per = g.DISK_PER_ROW
    fresh = g.disk_needed([3 * M, 30 * M], 3 * M, sides, ["csv", "parquet"], set(), set())
    assert fresh == ((per["parquet"] + per["csv"]) * 33 * M  # one CSV copy per size
                     + 30 * M * (per["cec"] + per["spark"] + per["flink"]))
    kept = g.disk_needed([3 * M, 30 * M], 3 * M, sides, ["csv"], {3 * M, 30 * M},
                         {3 * M, 30 * M})
    assert kept == 30 * M * (per["cec"] + per["spark"] + per["flink"])
    parquet = g.disk_needed([3 * M], 3 * M, sides, ["parquet"], set(), set())
    assert parquet == per["parquet"] * 3 * M + 3 * M * (per["cec"] + per["spark"])


def test_a_system_skipped_after_failing_says_why() -> None:
    runs = [run(30 * M, "cec", 0, 10.0), run(30 * M, "spark", 0, 1800.0, status="timeout"),
            run(100 * M, "cec", 0, 25.0),
            {"rows": 100 * M, "input": "csv", "system": "spark", "round": "skipped",
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
    quiet = _big(spark=60.0, flink=55.0, load=4.5)  # the runs' own load: judged anyway
    for r in quiet:
        r["others_cores"] = 0.1
    states = [j["state"] for j in g.judge(quiet, sizes)]
    assert states == ["met"] * 5
    assert "other processes used at most 0.10 cores" in g.judge(quiet, sizes)[0]["text"]
    quiet[4]["others_cores"] = 0.6  # another process took 0.6 of a core in one run
    judged = g.judge(quiet, sizes)
    assert judged[0]["state"] == "not judged" and "0.60 cores" in judged[0]["text"]
    assert judged[2]["state"] == "met"  # the 3 M targets rest on other runs
    # a run without the measure: judged by the load, as before
    del quiet[4]["others_cores"]
    assert g.judge(quiet, sizes)[0]["state"] == "not judged"


def test_main_runs_a_table_per_input_with_the_sweep_per_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole program with every side's run faked (no Spark, no Flink): the CSV table
    first with all three sides, then the parquet table without Flink; Spark swept per
    input (on CSV its stores only), Flink on the CSV input only; every output compared
    with the size's reference across both inputs; growth.json and growth.md written."""
    import json

    import pyarrow as pa

    from bench import flink_job
    from bench.harness import Measured

    calls: list[tuple[str, ...]] = []
    answer = pa.table({"key": [1], "window_start": [0], "window_end": [10], "avg": [2.0]})

    def fake(wall: float, table: pa.Table = answer) -> tuple[Measured, Any, dict[str, Any]]:
        return Measured(wall, wall, "ok", 0, 0.5, 0.5, others_cpu_s=0.0), table, {}

    def cec(s: g.Sized, inp: str, timeout: float) -> Any:
        calls.append(("cec", inp, str(s.specs[inp].name)))
        return fake(2.0)

    def spark(s: g.Sized, inp: str, st: g.SparkSetting, mem: str, timeout: float,
              name: str) -> Any:
        calls.append(("spark", inp, st.label, name))
        wrong = answer.set_column(3, "avg", pa.array([2.5]))  # a differing output
        return fake(8.0 if st.store == "rocksdb" else 9.0,
                    wrong if (inp, st.rows_per_batch) == ("parquet", g.FILE_ROWS) else answer)

    def flink(s: g.Sized, p: int, timeout: float) -> Any:
        calls.append(("flink", "csv", str(p), str(s.paths["csv"].name)))
        return fake(7.0 + p)

    monkeypatch.setattr(g, "run_cec", cec)
    monkeypatch.setattr(g, "run_spark", spark)
    monkeypatch.setattr(g, "run_flink", flink)
    monkeypatch.setattr(flink_job, "flink_python", lambda install=True: Path("python"))
    out = tmp_path / "out"
    code = g.main(["--sizes", "0.0003", "--pairs", "2", "--work", str(tmp_path / "w"),
                   "--out", str(out)])
    assert code == 1  # the parquet sweep's 100 k rows/batch run differed
    assert calls[0] == ("cec", "csv", "cec-csv.toml")  # the reference, on the first input
    sweep = [c for c in calls if c[0] == "spark" and c[3] == "spark-sweep"]
    assert [(c[1], c[2]) for c in sweep[:2]] == [("csv", "hdfs, all rows/batch"),
                                                 ("csv", "rocksdb, all rows/batch")]
    assert [c[1] for c in sweep[2:]] == ["parquet"] * 6
    assert [c for c in calls if c[0] == "flink"][:2] == [("flink", "csv", "1", "data-300-csv"),
                                                          ("flink", "csv", "2", "data-300-csv")]
    measured = [c for c in calls if not (c[0] == "spark" and c[3] == "spark-sweep")][3:]
    assert [(c[0], c[1]) for c in measured] == [
        ("cec", "csv"), ("spark", "csv"), ("flink", "csv"),
        ("spark", "csv"), ("flink", "csv"), ("cec", "csv"),
        ("cec", "parquet"), ("spark", "parquet"), ("spark", "parquet"), ("cec", "parquet")]
    assert ("flink", "csv", "1", "data-300-csv") in measured  # the faster parallelism kept
    res = json.loads((out / "growth.json").read_text())
    assert res["inputs"] == ["csv", "parquet"] and res["targets_issue"] == 40
    # the fastest setting with an equal output (the differing one not kept)
    assert res["spark_settings"] == {"csv": "rocksdb, one CSV file: one micro-batch",
                                     "parquet": "rocksdb, 1,000,000 rows/batch"}
    assert {(r["input"], r["system"]) for r in res["runs"]} == {
        ("csv", "cec"), ("csv", "spark"), ("csv", "flink"), ("parquet", "cec"),
        ("parquet", "spark")}
    assert all(r["equal"] for r in res["runs"])
    assert len(res["differences"]) == 2  # both stores at 100 k rows/batch
    assert all("parquet input, spark" in d and "100,000 rows/batch" in d
               for d in res["differences"])
    md = (out / "growth.md").read_text()
    assert "Spark ÷ cec, round by round: **4.00×** (rounds: 4.00, 4.00)" in md
    assert "Flink ÷ cec, round by round: **4.00×** (rounds: 4.00, 4.00)" in md
    assert md.index("## CSV input") < md.index("## Parquet input") < md.index("## Targets")
    assert (tmp_path / "w" / "data-300-csv" / "items.csv").exists()
