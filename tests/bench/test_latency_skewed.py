"""bench/latency.py's skewed case (issue 37), its pure parts (bench/latency_stats.py,
the producer) without Spark: the keys of partition 0 by the documented partition rule,
the producer's quiet span, the latency over the quiet partitions' windows (those only
a watermark closes apart), the spans, the target and its place in BENCHMARKS.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench.latency import Producer
from bench.latency_stats import (
    SKEWED_TARGET_MS,
    keys_of,
    partition_of,
    quiet_latencies,
    skewed_spans,
    skewed_targets,
)
from cec_spark.ingest.project import Partitioner
from cec_spark.rundir.run_file import KEY_GROUPS
from recovery.rescale import spark_xxhash64


@pytest.mark.parametrize("partitions", [1, 2, 4])
def test_partition_of_is_the_documented_rule(partitions: int) -> None:
    """pmod(xxhash64(key), G) (scalar XXH64, Spark's seed 42) owned by floor(kg * P / G),
    and what the ingest's partitioner does with the same keys."""
    keys = np.array([0, 1, 2, 7, 999, -1, -(2**63), 2**63 - 1, 123_456_789], np.int64)
    g = max(KEY_GROUPS, partitions)
    by_hand = [(spark_xxhash64(int(k)) % g) * partitions // g for k in keys]
    assert partition_of(keys, partitions).tolist() == by_hand
    ingest = Partitioner(partitions, g)(pa.array(keys))
    assert ingest.to_pylist() == by_hand


def test_keys_of_partition_0_and_the_rest() -> None:
    zero, one = keys_of(0, 1000, 2), keys_of(1, 1000, 2)
    assert len(zero) and len(one) and len(zero) + len(one) == 1000
    assert not set(zero.tolist()) & set(one.tolist())
    assert (partition_of(zero, 2) == 0).all() and (partition_of(one, 2) == 1).all()
    assert 300 < len(zero) < 700  # a fair share of the keys, not a degenerate rule


def test_the_producer_writes_only_busy_keys_in_the_quiet_span(tmp_path: Path) -> None:
    busy = keys_of(0, 1000, 2)
    prod = Producer(tmp_path, 50_000, 100.0, 1.0, 1000, quiet=(0.0, 1.0), busy_keys=busy)
    prod.quiet_us = (1_000_000, 2_000_000)
    for now in (1_000_000, 1_100_000, 2_000_000, 2_100_000):  # files up to now
        prod.write_file(now, 5_000)
    for _, keys, ts in prod.files:
        inside = (ts >= 1_000_000) & (ts < 2_000_000)
        assert np.isin(keys[inside], busy).all()
        assert (partition_of(keys[~inside], 2) == 1).any() or not (~inside).any()
    assert sum(int(((ts >= 1_000_000) & (ts < 2_000_000)).sum())
               for _, _, ts in prod.files) > 5_000
    text = (tmp_path / "f00000001.csv").read_text().splitlines()
    assert text[0] == "item_id,item_price,item_time" and len(text) == 5_001
    assert {int(line.split(",")[0]) for line in text[1:]} <= set(busy.tolist())


def test_without_quiet_the_producer_draws_as_before(tmp_path: Path) -> None:
    """The existing cases' rows do not change: the same draws in the same order."""
    prod = Producer(tmp_path, 50_000, 100.0, 1.0, 1000)
    prod.write_file(5_000_000, 100)
    rng = np.random.default_rng(1)
    keys, prices = rng.integers(0, 1000, 100), rng.integers(100, 10_000, 100)
    ts = np.sort(5_000_000 - rng.integers(0, 100_000, 100))
    np.testing.assert_array_equal(prod.files[0][1], keys)
    np.testing.assert_array_equal(prod.files[0][2], ts)
    first = (tmp_path / "f00000000.csv").read_text().splitlines()[1]
    assert first == f"{keys[0]},{prices[0]},{ts[0]}"


def _odd(keys: np.ndarray) -> np.ndarray:
    return np.asarray(keys, np.int64) % 2  # partition 1: odd keys; 0: even (busy)


W = 100  # µs windows
# (published, keys, ts): f0 is written before the run; f3 and f4 hold only even keys
FILES = [(0.0, np.array([1]), np.array([0])),
         (1.0, np.array([0, 1]), np.array([10, 50])),
         (2.0, np.array([0, 1]), np.array([120, 150])),
         (3.0, np.array([0, 2]), np.array([210, 290])),
         (4.0, np.array([0]), np.array([390])),
         (5.0, np.array([1, 0]), np.array([450, 480]))]
SEEN = {(1, 0): 2.05, (1, 100): 3.12, (1, 400): 6.0, (0, 0): 2.01, (0, 100): 3.01}


def test_quiet_latencies_separates_the_windows_a_watermark_closed() -> None:
    """(1, 0) ends at 100: the row at 150 (f2, odd) passes it, W too: a tuple's close,
    2.05 - 2.0. (1, 100) ends at 200: W passes it with f3 (an even row at 210), its own
    partition's next row comes with f5: closed by the watermark, 3.12 - 3.0, would have
    waited 2 s. (1, 400) ends at 500: no row reaches it (closed at the input's end),
    left out. Even keys are the busy partition's: not measured."""
    got = quiet_latencies(FILES, SEEN, W, 0, _odd, 0.0, 10.0, ended=7.0)
    assert got["windows"]["n"] == 2
    assert got["windows"]["max_ms"] == pytest.approx(120.0)
    assert got["watermark"] == {"n": 1, "p50_ms": pytest.approx(120.0),
                                "p99_ms": pytest.approx(120.0),
                                "max_ms": pytest.approx(120.0)}
    assert got["watermark_window_ends"] == 1
    assert got["waited_s_p50"] == 2.0 and got["waited_s_max"] == 2.0
    assert got["windows_without_result"] == 0


def test_quiet_latencies_when_the_partition_never_comes_back() -> None:
    """Without f5 the odd keys never return: the wait runs to the end of the input;
    a window without a line is counted; the trimmed span leaves windows out."""
    seen = {k: v for k, v in SEEN.items() if k != (1, 0)}
    got = quiet_latencies(FILES[:5], seen, W, 0, _odd, 0.0, 10.0, ended=7.0)
    assert got["watermark"]["n"] == 1 and got["waited_s_max"] == 4.0
    assert got["windows_without_result"] == 1  # (1, 0)
    trimmed = quiet_latencies(FILES, SEEN, W, 0, _odd, 0.0, 150e-6, ended=7.0)
    assert trimmed["windows"]["n"] == 1 and trimmed["watermark"] == {"n": 0}
    assert trimmed["waited_s_max"] is None


def test_spans_and_target() -> None:
    assert skewed_spans(20.0, 10.0, 2.0) == (5.0, 20.0)
    assert skewed_spans(8.0, 10.0, 1.0) == (2.0, 14.0)  # --quick: the quiet span whole
    assert skewed_spans(8.0, 10.0, 3.0) == (4.0, 18.0)  # clear of the trimmed start
    res = {"rate_rows_per_s": 50_000.0, "load_avg_1m_start": 1.0, "load_avg_1m": 1.5,
           "quiet_partitions": {"watermark": {"n": 400, "p99_ms": 180.0}}}
    tg = skewed_targets(res)["watermark_p99"]
    assert tg == {"rate_rows_per_s": 50_000.0, "p99_target_ms": SKEWED_TARGET_MS,
                  "p99_ms": 180.0, "met": True, "load_below_2": True,
                  "quiet": None}  # others' CPU not recorded: the load judges
    res["quiet_partitions"] = {"watermark": {"n": 0}}
    res["load_avg_1m"] = 3.0
    tg = skewed_targets(res)["watermark_p99"]
    assert tg["met"] is False and tg["p99_ms"] is None and tg["load_below_2"] is False
    res["others_cores"] = 0.1  # recorded: quiet by others' CPU, whatever the load
    assert skewed_targets(res)["watermark_p99"]["quiet"] is True
    res["others_cores"] = 0.9
    assert skewed_targets(res)["watermark_p99"]["quiet"] is False


def test_benchmarks_md_shows_the_skewed_case_from_its_file(tmp_path: Path) -> None:
    import json

    from bench import report

    res = {"rate_rows_per_s": 50_000.0, "file_ms": 100.0, "window_ms": 100, "poll_ms": 20,
           "partitions": 2, "seconds": 14.0, "case": "skewed", "busy_s": 2.0,
           "quiet_s": 10.0, "busy_partition": 0, "busy_keys": 497,
           "tail_latency": {"n": 900, "p50_ms": 30.0, "p99_ms": 80.0, "max_ms": 95.0},
           "tail_equals_export": True, "ingest_mode": "long-lived",
           "load_avg_1m_start": 1.0, "load_avg_1m": 1.5, "started": "2026-11-27 08:00 UTC",
           "commit": "abc1234",
           "quiet_partitions": {"windows": {"n": 450, "p50_ms": 40.0, "p99_ms": 150.0,
                                            "max_ms": 160.0},
                                "watermark": {"n": 480, "p50_ms": 120.0, "p99_ms": 300.0,
                                              "max_ms": 310.0},
                                "watermark_window_ends": 1, "waited_s_p50": 10.1,
                                "waited_s_max": 10.1, "windows_without_result": 0}}
    res["targets"] = skewed_targets(res)
    (tmp_path / "latency").mkdir()
    (tmp_path / "latency" / "skewed.json").write_text(json.dumps(res))
    rows = [r for r in report.targets(tmp_path) if "skewed" in r[0]]
    assert len(rows) == 1
    what, goal, got, met, cmd = rows[0]
    assert "50,000 rows/s" in what and goal == "< 250 ms" and met is False
    assert got == "300.0 ms over 480 windows" and cmd == "python bench/latency.py --skewed"
    md = report.benchmarks_md(tmp_path)
    assert "## Latency with skewed keys: a partition quiet for 10 s" in md
    assert "| those closed by a watermark (no row of their partition yet) | 480 | 120.0 | " \
        "300.0 | 310.0 |" in md
    assert "10.1 s (max)" in md and "commit abc1234" in md
