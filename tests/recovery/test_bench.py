"""The recovery benchmark runs end to end on a tiny setup (importable, main(argv))."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.recovery_bench import main


@pytest.mark.slow
def test_recovery_bench_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    args = ["--keys", "300", "--tuples", "12000", "--batch", "500", "--only", "Q"]
    assert main([*args, "--dir", str(tmp_path), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| Q | 2x |" in table
    data = json.loads(out.read_text())
    assert [r["target"] for r in data["results"]] == ["1x", "2x", "4x", "8x"]
    assert all(r["verified"] for r in data["results"])
    assert list(tmp_path.iterdir()) == [out]  # the work directory was removed
