"""bench/log_bench.py and bench/upstream_codec.py run end to end (tiny sizes; timings are
never asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_log_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import log_bench

    assert log_bench.main(["--tuples", "30000", "--per-record", "1000", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| append, commit per ~1 MiB of log bytes |" in out
    assert "| framing per data record (header + footer) | 64 | <= 64 |" in out


def test_upstream_codec_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every encoding and every way of writing is measured; the sizes, which do not
    depend on the machine, are the formats': a cache's records are larger than zstd's
    and smaller than Arrow's uncompressed IPC (32 bytes a row of four int64/float64, and
    the message headers)."""
    from bench import upstream_codec

    out_file = tmp_path / "codec.md"
    assert upstream_codec.main(["--rows", "300000", "--rounds", "1", "--dir", str(tmp_path),
                                "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip("\n") == out_file.read_text().rstrip("\n")  # print adds a newline
    sizes = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("encoding", "---"):
            sizes[cells[0]] = float(cells[3])
    assert set(sizes) == {"zstd level 1 (durable)", "level 0 (cache)",
                          "Arrow IPC, uncompressed"}
    assert sizes["zstd level 1 (durable)"] < sizes["level 0 (cache)"] \
        < 32 <= sizes["Arrow IPC, uncompressed"] < 32.1  # 32 + the IPC headers
    for way in ("level 1, fsync always", "level 0, fsync always", "level 0, fsync never"):
        assert f"| {way} |" in out
