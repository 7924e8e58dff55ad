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
    pngs = [n for names in res["pngs"].values() for n in names]
    assert sorted(pngs) == sorted(
        ["fig5_baseline.png", "fig6_q.png", "fig7_u.png", "fig8_response.png",
         "fig9_extent.png"])
    for name in pngs:
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
    # the budget starts with a full CI of credit: every CP run checkpoints at least once,
    # in its warm-up or its timed part (the first step is unlimited; its debt, repaid at
    # CI/CP of the wall time, can outlast a short timed part on a loaded machine)
    runs = res["fig89"]["runs"]
    for r in runs:
        both = r["g_check"] + r["g_check_warm"]
        assert both > 0 if r["cp_ms"] is not None else both == 0, r
    md = (out / "results.md").read_text()
    assert "| no CEC |" in md and "| G_open only |" in md and "| CP 250 ms |" in md


def test_only_one_section_keeps_the_others(run: tuple[Path, dict[str, Any]],
                                           tmp_path: Path) -> None:
    """``--only fig5`` into a results directory replaces Fig. 5 and keeps Figs. 6-9."""
    import shutil

    out, before = run
    again = tmp_path / "again"
    shutil.copytree(out, again)
    assert main(["--preset", "tiny", "--no-spark", "--no-summary", "--only", "fig5",
                 "--out", str(again)]) == 0
    after = json.loads((again / "results.json").read_text())
    assert after["fig67"] == before["fig67"] and after["fig89"] == before["fig89"]
    assert after["fig5"]["runs"] != before["fig5"]["runs"]  # measured again
    assert after["earlier"]["started_utc"] == before["started_utc"]
    md = (again / "results.md").read_text()
    for section in ("## Fig. 5", "## Figs. 6 and 7", "## Figs. 8 and 9"):
        assert section in md
    assert "kept from the run of" in md


def test_unknown_section_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"unknown section.*fig5, fig67, fig89, fair, latency"):
        main(["--preset", "tiny", "--no-spark", "--no-summary", "--only", "anchor",
              "--out", str(tmp_path)])
