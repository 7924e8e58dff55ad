"""bench/latency.py's skewed case (issue 37), its pure parts (bench/latency_stats.py,
the producer) without Spark: the keys of partition 0 by the documented partition rule,
the producer's quiet span and the quiet partitions' rows in it (one every few windows:
many window ends that only a watermark closes, measured as the benchmark does), the
latency over the quiet partitions' windows (those only a watermark closes apart), the
spans and options, the target and its place in BENCHMARKS.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench.latency import Producer
from bench.latency_stats import (
    SKEWED_TARGET_MS,
    Files,
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
           "quiet_partitions": {"watermark": {"n": 400, "p99_ms": 180.0},
                                "watermark_window_ends": 120}}
    tg = skewed_targets(res)["watermark_p99"]
    assert tg == {"rate_rows_per_s": 50_000.0, "p99_target_ms": SKEWED_TARGET_MS,
                  "p99_ms": 180.0, "window_ends": 120, "min_window_ends": 100,
                  "met": True, "load_below_2": True,
                  "quiet": None}  # others' CPU not recorded: the load judges
    res["quiet_partitions"]["watermark_window_ends"] = 1  # type: ignore[index]
    assert skewed_targets(res)["watermark_p99"]["met"] is False  # one event: no p99
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


# ------------------------------------------------------------- the quiet partitions' rows

WIN = 100_000  # the benchmark's 100 ms windows, in µs


def _stream(tmp_path: Path, quiet_row_us: int | None, quiet_us: tuple[int, int],
            until_us: int, per_file: int = 200) -> tuple[Producer, Files]:
    """A producer's files, one every 100 ms of event time to ``until_us``, and the
    files as :func:`quiet_latencies` takes them, each published 5 ms after its time
    (what the real run's clock would say)."""
    busy = keys_of(0, 1000, 2)
    prod = Producer(tmp_path, 50_000, 100.0, 1.0, 1000, quiet=(0.0, 1.0), busy_keys=busy,
                    quiet_row_us=quiet_row_us)
    prod.quiet_us = quiet_us
    nows = list(range(WIN, until_us + 1, WIN))
    for now in nows:
        prod.write_file(now, per_file)
    files = [(now / 1e6 + 0.005, keys, ts)
             for now, (_, keys, ts) in zip(nows, prod.files, strict=True)]
    return prod, files


def _seen(files: Files, after_s: float) -> dict[tuple[int, int], float]:
    """Every window's line ``after_s`` after W passed its end (the publication of the
    first file whose latest row reaches it); the last windows at the end of input."""
    last_ts = np.array([int(f[2][-1]) for f in files])
    out: dict[tuple[int, int], float] = {}
    for _, keys, ts in files:
        for k, s in zip(keys.tolist(), (ts - ts % WIN).tolist(), strict=True):
            i = int(np.searchsorted(last_ts, s + WIN, "left"))
            out[(k, s)] = (files[i][0] if i < len(files) else files[-1][0] + 1) + after_s
    return out


def test_the_producer_writes_one_quiet_row_every_few_windows(tmp_path: Path) -> None:
    """In the quiet span the quiet partitions get exactly one row at each multiple of
    ``quiet_row_us`` (each once, whatever the files' times, each for another key), the
    busy keys all the others; the stream stays in time order, the CSV holds them."""
    every = 5 * WIN
    busy = keys_of(0, 1000, 2)
    prod = Producer(tmp_path, 50_000, 100.0, 1.0, 1000, quiet=(0.0, 1.0), busy_keys=busy,
                    quiet_row_us=every)
    prod.quiet_us = (1_000_000, 4_000_000)
    for now in (900_000, 1_000_000, 1_170_000, 1_490_000, 1_500_000, 2_730_000, 4_000_000,
                4_200_000):  # uneven: a file exactly at a multiple, some spanning several
        prod.write_file(now, 300)
    keys = np.concatenate([f[1] for f in prod.files])
    ts = np.concatenate([f[2] for f in prod.files])
    assert (np.diff(ts) >= 0).all()
    inside = (ts >= 1_000_000) & (ts < 4_000_000)
    quiet = inside & (partition_of(keys, 2) == 1)
    assert ts[quiet].tolist() == list(range(1_000_000, 4_000_000, every))
    assert len(set(keys[quiet].tolist())) == 6 and prod.quiet_rows == 6
    assert (partition_of(keys[inside & ~quiet], 2) == 0).all()
    text = (tmp_path / "f00000004.csv").read_text().splitlines()  # the 1.5 s file
    assert text[0] == "item_id,item_price,item_time" and len(text) == 302
    assert text[-1].endswith(",1500000") and partition_of(
        np.array([int(text[-1].split(",")[0])]), 2)[0] == 1


def test_the_quiet_rows_give_many_window_ends_that_only_a_watermark_closes(
        tmp_path: Path) -> None:
    """The benchmark's default shape (60 s quiet, a quiet row every 5 windows), measured
    by :func:`quiet_latencies` as the benchmark does: each quiet row's window is closed by
    W alone, each at its own end (>= 100 of them, one window each: no single end weighs
    on the percentiles); the busy span's last windows are closed with W by the first
    quiet row (a tuple), so they are not among them; each would have waited ~0.4 s."""
    from bench.latency import QUIET_EVERY, QUIET_S

    every = QUIET_EVERY * WIN
    q0 = 3_000_000  # a multiple of every (the producer rounds the span's start up to one)
    q1 = q0 + int(QUIET_S * 1e6)
    assert q0 % every == 0
    _, files = _stream(tmp_path, every, (q0, q1), q1 + 3_000_000, per_file=100)
    got = quiet_latencies(files, _seen(files, 0.02), WIN, 0,
                          lambda k: partition_of(k, 2), 0.0, 1e9, ended=files[-1][0])
    ends = got["watermark_window_ends"]
    assert ends >= 100 and ends == int(QUIET_S * 1e6) // every
    assert got["watermark"]["n"] == ends  # one window per end
    assert got["watermark"]["p99_ms"] == pytest.approx(20.0)
    assert 0.3 <= got["waited_s_p50"] <= 0.5 and got["windows_without_result"] == 0


def test_without_quiet_rows_one_window_end_has_every_watermark_window(
        tmp_path: Path) -> None:
    """``--quiet-every 0`` (the shape measured before): the busy span's last windows, one
    end of many windows, are the only ones a watermark closes."""
    _, files = _stream(tmp_path, None, (3_000_000, 6_000_000), 8_000_000, per_file=1_000)
    got = quiet_latencies(files, _seen(files, 0.02), WIN, 0,
                          lambda k: partition_of(k, 2), 0.0, 1e9, ended=files[-1][0])
    assert got["watermark_window_ends"] == 1 and got["watermark"]["n"] > 50


def test_the_skewed_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The spans main() gives the skewed run: 60 s quiet (10 s with --quick), one quiet
    row every 5 windows, busy spans beside it; the result written to --out."""
    import json

    from bench import latency

    got: list[object] = []

    def sweep(args: object) -> dict[str, object]:
        got.append(args)
        return {"ok": True}

    monkeypatch.setattr(latency, "sweep", sweep)
    assert latency.main(["--skewed", "--out", str(tmp_path / "s.json")]) == 0
    assert latency.main(["--skewed", "--quick", "--quiet-every", "0"]) == 0
    full, quick = got
    assert (full.quiet_s, full.quiet_every, full.busy_s, full.seconds,  # type: ignore[attr-defined]
            full.rates, full.window_ms, full.rate) == (60.0, 5, 3.0, 66.0, "", 100, 50_000)  # type: ignore[attr-defined]
    assert (quick.quiet_s, quick.quiet_every, quick.busy_s, quick.seconds) == (  # type: ignore[attr-defined]
        10.0, 0, 2.0, 14.0)
    assert json.loads((tmp_path / "s.json").read_text()) == {"ok": True}
