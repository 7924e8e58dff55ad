"""Smoke test of ``python -m bench`` on tiny sizes (no Spark, no timing assertions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench-results")
    assert main(["--preset", "tiny", "--no-spark", "--no-summary", "--out", str(out)]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_writes_table_json_and_readable_pngs(run: tuple[Path, dict[str, Any]]) -> None:
    out, res = run
    md = (out / "results.md").read_text()
    for section in ("## Fig. 5", "## Figs. 6 and 7", "## Figs. 8 and 9", "## Headline"):
        assert section in md
    assert "## Anchor" not in md  # no Spark unless asked
    assert sorted(res["pngs"]) == sorted(
        ["fig5_baseline.png", "fig6_q.png", "fig7_u.png", "fig8_response.png",
         "fig9_extent.png"])
    for name in res["pngs"]:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5_000
        assert f"]({name})" in md


def test_fig5_rows_and_control_records(run: tuple[Path, dict[str, Any]]) -> None:
    out, res = run
    rows = res["fig5"]["rows"]
    assert [(r["workload"], r["config"]) for r in rows] == [
        (w, c) for w in ("fast", "slow") for c in ("none", "Gopen/Net", "Gopen/Disk",
                                                   "none/Disk")]
    runs = res["fig5"]["runs"]
    timed = [r for r in runs if r["rep"] >= 0]
    assert len(timed) == 2 * 4 * res["preset"]["fig5_reps"]
    for r in timed:
        has_g = r["config"].startswith("Gopen")
        # size-1 windows: one R per tuple; G_open exactly when the mode emits it
        if r["workload"] == "fast":
            assert r["r_rows"] == r["tuples"]
            assert r["g_rows"] == (r["tuples"] if has_g else 0)
        else:
            # 2 keys, tumbling windows of 1000: every window but the <= 2 open ones closed
            assert r["tuples"] // 1000 - 2 <= r["r_rows"] <= r["tuples"] // 1000
            if has_g:
                assert r["r_rows"] < r["g_rows"] <= r["r_rows"] + 2
            else:
                assert r["g_rows"] == 0
        assert (r["log_bytes"] > 0) == r["config"].endswith("/Disk")
    md = (out / "results.md").read_text()
    lines = md.splitlines()
    for w in ("fast", "slow"):
        assert sum(line.startswith(f"| {w} | ") for line in lines) == 4
    for w in ("fast", "slow"):
        assert res["fig5"]["ratios"][w]["real_vs_data"] >= 1.9  # one G_open per R


def test_fig6_q_checkpoints_fall_and_extent_grows(run: tuple[Path, dict[str, Any]]) -> None:
    out, res = run
    q = [r for r in res["fig67"]["rows"] if r["experiment"] == "Q"]
    u = [r for r in res["fig67"]["rows"] if r["experiment"] == "U"]
    assert [r["target"] for r in q] == ["1x", "2x", "4x", "8x"]
    assert len(u) == 4
    for rows in (q, u):
        g = [r["g_check"] for r in rows]
        ext = [r["extent"] for r in rows]
        assert g == sorted(g, reverse=True) and g[0] > g[-1]
        assert ext == sorted(ext) and ext[0] < ext[-1]
        assert all(r["verified"] and r["deterministic"] for r in rows)
    # the extent can never be shorter than one footprint per open window
    assert all(r["extent"] >= r["n_c"] for r in q)
    md = (out / "results.md").read_text()
    lines = md.splitlines()
    assert sum(line.startswith("| Q | ") for line in lines) == 4
    assert sum(line.startswith("| U | ") for line in lines) == 4


def test_fig89_rows_per_cp(run: tuple[Path, dict[str, Any]]) -> None:
    out, res = run
    rows = res["fig89"]["rows"]
    assert [r["config"] for r in rows] == [
        "no CEC", "G_open only", "CP 25 ms", "CP 50 ms", "CP 100 ms", "CP 250 ms"]
    assert [r["cp_ms"] for r in rows] == [None, None, 25.0, 50.0, 100.0, 250.0]
    none, open_only = rows[0], rows[1]
    assert none["g_check"] == 0 and none["extent_mean"] == 0 and none["vs_none"] == 1.0
    assert open_only["g_check"] == 0 and open_only["vs_open"] == 1.0
    assert open_only["extent_end"] > 0  # G_open footprints, never moved by a G_check
    for r in rows:
        assert r["response_mean_s"] > 0
    # the budget starts with a full CI of credit: every CP run checkpoints at least once
    assert all(r["g_check"] > 0 for r in rows[2:])
    md = (out / "results.md").read_text()
    assert "| no CEC |" in md and "| G_open only |" in md and "| CP 250 ms |" in md


def test_anchor_summary_pairs_cold_with_cold_and_warm_with_warm() -> None:
    """The anchor's ratios (its runs need Spark; the summary is plain data)."""
    import dataclasses

    from bench.__main__ import anchor_summary
    from bench.paper import CecAnchor
    from bench.spark_baseline import AnchorReport, BaselineResult

    def spark_run(provider: str, session_run: int, rows_per_s: float) -> BaselineResult:
        values: dict[str, Any] = {f.name: 0 for f in dataclasses.fields(BaselineResult)}
        values.update(provider=provider, query="keyed", spark_version="4.x",
                      session_run=session_run, wall_rows_per_s=rows_per_s,
                      steady_rows_per_s=2 * rows_per_s, session_start_s=None,
                      batch_stats=[], sink="noop")
        return BaselineResult(**values)

    report = AnchorReport(rows=1000, keys=10, files=2, shuffle_partitions=2, repeats=1,
                          runs=[spark_run("hdfs", 0, 100.0), spark_run("hdfs", 1, 200.0)])
    cec = CecAnchor(rows=1000, keys=10, partitions=2, reps=1, wall_s=2.0, rows_per_s=500.0,
                    steady_rows_per_s=900.0, warm_wall_s=1.0, warm_rows_per_s=1000.0,
                    output_bytes=100, upstream_bytes=100, g_rows=5, out_rows=10,
                    recover_caught_up_s=0.5)
    text, ratios = anchor_summary(report, cec)
    assert ratios["hdfs"]["throughput_vs_wall"] == 5.0  # cold 500 ÷ cold 100
    assert ratios["hdfs"]["throughput_warm"] == 5.0  # warm 1000 ÷ warm 200
    assert "| hdfs | 5.00× | 5.00× |" in text
