"""The pipeline benchmark's session runner, on real Spark (counts only, no timing checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import paper
from bench.pipeline_bench import run_cec_specs


@pytest.mark.spark
def test_session_runs_each_spec_in_order_into_its_own_run(tmp_path: Path) -> None:
    tuples = 20_000
    plan = [(mode, paper._fig5_pipeline_spec(tuples, 1, mode))
            for mode in ("open-only", "none", "open-only")]
    runs = run_cec_specs(plan, tmp_path)
    assert [r["session_run"] for r in runs] == [0, 1, 2]
    assert [r["system"] for r in runs] == ["cec (open-only)", "cec (none)", "cec (open-only)"]
    assert len({r["log_dir"] for r in runs}) == 3
    for r in runs:
        assert Path(r["log_dir"], "output").is_dir()
        assert r["rows"] == tuples
        # count windows of 1: one R per tuple, a G_open per window only in open-only
        assert r["results"] == tuples
        assert r["g_open"] == (0 if r["system"] == "cec (none)" else tuples)
        assert r["g_check"] == 0
        assert r["wall_s"] > 0 and r["rows_per_s"] == pytest.approx(tuples / r["wall_s"])
