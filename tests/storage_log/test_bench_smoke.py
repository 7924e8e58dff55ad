"""bench/log_bench.py runs end to end (tiny sizes; timings are never asserted)."""

from __future__ import annotations

import pytest


def test_log_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import log_bench

    assert log_bench.main(["--tuples", "30000", "--per-record", "1000", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| append, commit per ~1 MiB of log bytes |" in out
    assert "| framing per data record (header + footer) | 64 | <= 64 |" in out
