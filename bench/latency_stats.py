"""What ``bench/latency.py`` computes from what it saw, pure (no process, no I/O):
percentiles, and its skewed case's keys, windows and target (issue 37).

The skewed case: rows only for the keys of partition :data:`BUSY_PARTITION` for a
while; its keys are chosen by the documented partition rule (:func:`partition_of`). A
window of another partition is measured from **W passing its end** (the publication of
the first row at or past its end, of any partition) to its line on the tail
(:func:`quiet_latencies`), the windows that only a watermark could close apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from bench import harness
from cec_spark.ingest.project import xxhash64_int64
from cec_spark.rundir.run_file import KEY_GROUPS


def percentiles(x: np.ndarray) -> dict[str, float]:
    """n, p50, p99 and max of latencies ``x`` (seconds), the times in milliseconds."""
    if len(x) == 0:
        return {"n": 0}
    return {"n": len(x), "p50_ms": round(float(np.percentile(x, 50)) * 1e3, 1),
            "p99_ms": round(float(np.percentile(x, 99)) * 1e3, 1),
            "max_ms": round(float(x.max()) * 1e3, 1)}


def partition_of(keys: np.ndarray, partitions: int, key_groups: int | None = None
                 ) -> np.ndarray:
    """Each int64 key's partition by the documented rule: key group ``kg =
    pmod(xxhash64(key), G)`` (Spark SQL's xxhash64, seed 42), owned by partition
    ``floor(kg * P / G)``; ``G`` as a new run's settings have it, ``max(KEY_GROUPS, P)``."""
    g = key_groups if key_groups is not None else max(KEY_GROUPS, partitions)
    kg = np.mod(xxhash64_int64(np.asarray(keys, dtype=np.int64)), g)  # >= 0: pmod
    return np.asarray(kg * partitions // g, dtype=np.int64)


def keys_of(partition: int, keys: int, partitions: int) -> np.ndarray:
    """The keys among ``0 .. keys-1`` that ``partition`` of ``partitions`` owns."""
    every = np.arange(keys, dtype=np.int64)
    return np.asarray(every[partition_of(every, partitions) == partition], dtype=np.int64)


Files = list[tuple[float, np.ndarray, np.ndarray]]  # (published, keys, ts) per file


def quiet_latencies(files: Files, seen: dict[tuple[int, int], float], w_us: int,
                    part: int, keys_part: Callable[[np.ndarray], np.ndarray], t0: float,
                    t1: float, ended: float | None = None) -> dict[str, Any]:
    """The skewed case's measure over the windows of every partition but ``part`` (the
    busy one): latency = the line's arrival − the publication of the first file whose
    latest row reaches the window's end (W passes it), for windows ending in
    ``[t0, t1]`` (wall clock = event time). ``keys_part`` maps a key array to its
    partitions. A window is **closed by the watermark** when W passed its end before any
    row of its own partition did (the first file holding such a row came later, or
    never): those are reported apart (``watermark``), with ``waited_s``, how long each
    would have waited for that row (to ``ended``, the end of input, if none came).
    Files after the first (written before the run started) count, as in the tail
    latency. Pure."""
    entered = np.array([f[0] for f in files])
    last_ts = np.array([int(f[2][-1]) for f in files])
    own_last = []  # per file, the latest time of a row of the quiet partitions in it
    for _, keys, ts in files:
        mine = keys_part(keys) != part
        own_last.append(int(ts[mine].max()) if mine.any() else np.iinfo(np.int64).min)
    own_reach = np.maximum.accumulate(np.array(own_last, dtype=np.int64))
    every: dict[tuple[int, int], float] = {}
    by_w: dict[tuple[int, int], float] = {}
    waited: list[float] = []
    ends: set[int] = set()
    missing: set[tuple[int, int]] = set()
    windows: set[tuple[int, int]] = set()
    for _, keys, ts in files[1:]:
        mine = keys_part(keys) != part
        starts = ts[mine] - ts[mine] % w_us
        windows.update(zip(keys[mine].tolist(), starts.tolist(), strict=True))
    for k, s in sorted(windows):
        got = seen.get((k, s))
        if got is None:
            missing.add((k, s))
            continue
        end = s + w_us
        if not t0 <= end / 1e6 <= t1:
            continue
        i_w = int(np.searchsorted(last_ts, end, "left"))
        if i_w >= len(entered):  # no row reached its end: closed at the input's end
            continue
        every[(k, s)] = got - float(entered[i_w])
        i_own = int(np.searchsorted(own_reach, end, "left"))
        if i_w < i_own:
            by_w[(k, s)] = every[(k, s)]
            ends.add(end)
            came = float(entered[i_own]) if i_own < len(entered) else ended
            if came is not None:
                waited.append(came - float(entered[i_w]))
    wait = np.array(waited)
    return {"windows": percentiles(np.array(list(every.values()))),
            "watermark": percentiles(np.array(list(by_w.values()))),
            "watermark_window_ends": len(ends),
            "waited_s_p50": round(float(np.percentile(wait, 50)), 3) if len(wait) else None,
            "waited_s_max": round(float(wait.max()), 3) if len(wait) else None,
            "windows_without_result": len(missing)}


#: issue 37, the skewed case at 50 k rows/s: W passing the end of a quiet partition's
#: window → its line, p99 (the windows only a watermark could close)
SKEWED_TARGET_MS = 250.0
SKEWED_MIN_ENDS = 100  # window ends closed by a watermark alone, for the p99 to count
BUSY_PARTITION = 0  # the skewed case: the partition whose keys keep coming


def skewed_spans(seconds: float, quiet_s: float, trim_s: float) -> tuple[float, float]:
    """(busy, total) seconds of the skewed case: busy, quiet, busy, each busy span half
    of what ``seconds`` leaves beside the quiet one, at least 2 s and 1 s more than the
    trimmed start (the quiet span's first windows are measured)."""
    busy = max(2.0, trim_s + 1.0, (seconds - quiet_s) / 2)
    return busy, 2 * busy + quiet_s


def skewed_targets(res: dict[str, Any]) -> dict[str, Any]:
    """The skewed case's target, judged from its run (at any rate: the rate is said)."""
    quiet = res.get("quiet_partitions") or {}
    p99 = (quiet.get("watermark") or {}).get("p99_ms")
    ends = int(quiet.get("watermark_window_ends") or 0)
    load = max(float(res["load_avg_1m_start"]), float(res["load_avg_1m"]))
    return {"watermark_p99": {"rate_rows_per_s": res["rate_rows_per_s"],
                              "p99_target_ms": SKEWED_TARGET_MS, "p99_ms": p99,
                              # a p99 of one event is no p99: at least SKEWED_MIN_ENDS
                              # window ends closed by a watermark alone
                              "window_ends": ends, "min_window_ends": SKEWED_MIN_ENDS,
                              "met": p99 is not None and p99 < SKEWED_TARGET_MS
                              and ends >= SKEWED_MIN_ENDS,
                              "load_below_2": load < 2,
                              "quiet": harness.quiet(res.get("others_cores"))}}
