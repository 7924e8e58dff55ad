"""Cost growth of one query with its input: cec, Spark and Flink at 0.3 to 100 M rows.

``python bench/growth_bench.py [--sizes 0.3,3,30,100] [--pairs K] [--sides cec,spark,flink]
[--input csv|parquet|both] [--work DIR] [--out DIR] [--timeout S]
[--spark-memory 3:2g,30:14g,100:20g] [--spark-setting STORE:ROWS] [--flink-parallelism K]
[--sweep-size M]`` (also ``python -m bench --only growth``). Issue 40's benchmark (issue
30's before it).

The workload is bench/fair_spark.py's: ``--sizes`` million rows (:func:`bench.fair_spark.
make_data`: parquet files of 100 k rows, ``item_id`` uniform over 100 k keys,
``item_price`` an integer, ``item_time`` an integer, epoch µs, in order; the sentinel row
an hour after the last, in its own last file), 10 s tumbling ``avg(item_price)`` per
``item_id``, P = 4. The inputs (``--input``, default ``both``), each made once per size
under ``--work``, untimed, and reused while they hold the right rows:

* **csv** (the headline, judged against the targets): **the same file for every side**,
  ``data-ROWS-csv/items.csv`` (:func:`bench.flink_job.shared_csv`, converted from the
  parquet): a header line ``item_id,item_price,item_time``, then every row in stream
  order with the three columns integers as in the parquet (``item_time`` epoch µs; every
  side parses it to the same int64, so the same windows), the sentinel last. cec reads it
  with ``kind = "csv"`` (integer epochs, ``time_unit`` µs by default), Spark with
  ``readStream.csv`` (``header``, the explicit ``BIGINT`` schema, ``FAILFAST``), Flink
  with its filesystem CSV source (Flink 2.3 cannot skip a header line: it reads that line
  as NULLs, dropped before the window, :func:`bench.flink_job.source_ddl`). One file, not
  many: Flink's file source hands files to its readers in no fixed order and cec reads a
  folder in name order with time never going back, so only one time-ordered file is read
  right by all three. So Spark reads it in one micro-batch (the parquet table's rows per
  batch do not apply: only its state store is swept) and Flink with one reader at any
  parallelism (its CSV format does not split a file; the window operators run at the
  parallelism); cec and Spark split the file among their tasks.
* **parquet** (a second table): cec and Spark read the parquet files (``data-ROWS``), as
  before; **Flink is not run**: its PyPI wheel has no parquet format.

Three systems, each a whole process (or two) started cold and timed from outside:

* **cec**: ``cec run pipeline SPEC --out FILE --format parquet``
  (:func:`bench.fair_spark.cec_spec`, ``kind`` csv or parquet): the run, then its results
  written as ``cec export`` writes them, in the run's own process (before 2026-11-28: a
  second process, ``cec export``, whose wall, CPU and memory were added); the output
  complete and usable, as fair_spark's headline.
* **Spark** Structured Streaming: fair_spark's child (:data:`bench.fair_spark.SPARK_CHILD`,
  :func:`bench.fair_spark.spark_cfg`, ``format`` csv or parquet) at its best setting,
  swept per input at the sweep size (the smallest size of at least 3 M rows, else the
  largest): on parquet fair_spark's sweep (rows per micro-batch 100 k, 1 M, all; HDFS and
  RocksDB state store), on CSV the two stores (one micro-batch); the fastest kept at
  every size (``--spark-setting`` skips the sweep: on CSV its store is used). Driver
  memory per size (``--spark-memory``: up to 3 M rows 2g, up to 30 M 14g, beyond 20g),
  given to the child through ``PYSPARK_SUBMIT_ARGS=--driver-memory ...`` (the child's own
  builder says 2g; the later option wins; the JVM's ``-Xmx`` is read back from its
  command line and reported).
* **Flink** 2.3 SQL in a PyFlink MiniCluster (bench/flink_job.py's job, started as
  :func:`bench.flink_job.flink_command` gives it, reading the shared CSV), at its best
  parallelism: 1 and 2 swept at the sweep size (``--flink-parallelism`` skips it), the
  fastest kept.

Every run: wall seconds (the root process from its start to its exit), CPU seconds of
the process tree and peak resident memory, both from ``/proc`` every 0.2 s
(:func:`bench.harness.measure`: per kind — driver, jvm, py-daemon, py-worker, other —
the peak of the sum of ``VmRSS`` over that kind's processes, and the peak of the whole
tree's sum), the 1-minute load at its start and end (printed), and its status: ok,
``timeout`` (over ``--timeout`` seconds, the process group killed), ``out of memory``
(Java's OutOfMemoryError or Python's MemoryError in its log, or SIGKILLed not by us, as
the kernel's OOM killer does) or ``failed (exit N)``; a failed run is reported, not
raised. A system whose every run at a size failed is skipped at the larger sizes of that
input. Every output is compared with the size's reference (the first output of the
size, whichever input: cec's on the first input when it finished) by
:func:`bench.harness.compare`, every window, avg to 1e-9 relative, so the outputs are
equal across sides and across inputs; a difference is reported with the run and makes
the exit code 1.

Runs alternate: at each size, the CSV table first (``--pairs`` rounds), then the parquet
table; round i runs that input's sides in the order rotated by i (cec, spark, flink;
spark, flink, cec; flink, cec, spark; ...); the ratios Spark ÷ cec and Flink ÷ cec are
taken round by round, per input. Writes under ``--out`` (default bench/results/growth):
``growth.json`` (every run, each with its ``input``), ``growth.md`` (per input a table
per size and the marginal rate (rows_b − rows_a) / (wall_b − wall_a) between
consecutive sizes from the median walls; the targets) and ``growth.png`` (wall against
rows, log-log, the CSV table's when it ran).

Targets (issue 40, this 2-core machine; they supersede issue 30's), judged on the CSV
table (every side on the same file): 30 M rows ≥ 5× Spark and ≥ 5× Flink, 3 M rows ≥ 4×
Spark and ≥ 4× Flink (the median of the round-by-round ratios), cec's marginal rate ≥ 4 M
rows/s from 30 M to 100 M rows (median walls); issue 40's memory target is
bench/memory_bench.py's. Each is printed as met or missed with its numbers, ``not
measured`` (a size not run, no round with both finished and equal, ``--input parquet``)
or ``not judged`` when other processes were busy during the runs it rests on: each run
measures the CPU the whole machine spent (``/proc/stat``) less its own process tree's,
over its wall time (``others_cores``); more than :data:`OTHERS_LIMIT` cores on average in
any of those runs is not a quiet machine. (The 1-minute load is printed too, but a Spark
run alone lifts it to 3-4.5 on 2 cores, and the next run starts with it: it says nothing
of other processes. Runs recorded without ``others_cores`` are judged by the load, above
4 not judged.) Results written before ``--input`` (no ``inputs`` in growth.json: cec
and Spark on parquet, Flink on a CSV conversion) are still rendered, with their own
judgement.

Exit codes: 0 every output equal, 1 an output differed, 2 bad arguments or not enough
disk, 3 Flink asked for (with the CSV input) but not available.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import harness  # noqa: E402
from bench.fair_spark import (  # noqa: E402
    CEC,
    SPARK_CHILD,
    cec_output,
    cec_spec,
    make_data,
    spark_cfg,
    spark_output,
)
from bench.harness import (  # noqa: E402
    OTHERS_LIMIT,
    Measured,
    compare,
    load,
    measure,
    quiet,
    rotation,
)

OUT = REPO / "bench" / "results" / "growth"
WORK = Path("/tmp/cec-growth")
SIDES = ("cec", "spark", "flink")
INPUTS = ("csv", "parquet")  # in the order run and reported: the headline first
INPUT_SIDES = {"csv": ("cec", "spark", "flink"), "parquet": ("cec", "spark")}
INPUT_TITLES = {"csv": "CSV input: every side reads the same file",
                "parquet": "Parquet input: cec and Spark (a second table)"}
JUDGED_INPUT = "csv"  # the targets are judged on this table
FILE_ROWS = 100_000
KEYS = 100_000
PARTITIONS = 4
TIMEOUT_S = 1800.0
LOAD_LIMIT = 4.0
SPARK_MEMORY = "3:2g,30:14g,100:20g"
SWEEP_AT_LEAST = 3_000_000
FLINK_PARALLELISMS = (1, 2)
# rows per micro-batch swept on parquet (fair_spark's 1, 10 and all files per trigger);
# None = all. On the CSV input (one file) a micro-batch is always the whole file.
SPARK_BATCHES: tuple[int | None, ...] = (FILE_ROWS, 10 * FILE_ROWS, None)
SPARK_STORES = ("hdfs", "rocksdb")
INPUT_NOTES = {
    "csv": ("Every side reads the same file, data-ROWS-csv/items.csv (made once per size "
            "from the parquet, untimed): a header line, then item_id,item_price,item_time "
            "as integers (item_time epoch µs), in stream order, the sentinel last. cec "
            "`kind = \"csv\"`; Spark `readStream.csv` (header, the BIGINT schema given); "
            "Flink's filesystem CSV source (Flink 2.3 cannot skip a header line: it reads "
            "it as NULLs, dropped before the window). One file: Spark reads it in one "
            "micro-batch, Flink with one reader at any parallelism (its CSV format does "
            "not split a file); cec and Spark split it among their tasks."),
    "parquet": ("cec and Spark read the parquet files (100,000 rows each, the sentinel "
                "in the last). Flink is not run: its PyPI wheel has no parquet format."),
}
# results written before --input: Flink on a CSV conversion beside parquet for the others
FLINK_NOTE = ("Flink reads the same rows as CSV: its PyPI wheel has no parquet format "
              "(a handicap to Flink; the conversion is not timed)")
# bytes on disk per input row, measured at 0.3 M rows (with room): the parquet input,
# the CSV copy every side reads, cec's run directory, Spark's sink and checkpoint,
# Flink's out
DISK_PER_ROW = {"parquet": 14, "csv": 34, "cec": 60, "spark": 40, "flink": 12}

SMALL_ROWS = 3_000_000
TARGET_ROWS = 30_000_000
BIG_ROWS = 100_000_000
# (rows, Spark ÷ cec at least, Flink ÷ cec at least): issue 40
TARGET_RATIOS = ((TARGET_ROWS, 5.0, 5.0), (SMALL_ROWS, 4.0, 4.0))
TARGET_MARGINAL = 4_000_000  # cec's rows/s from TARGET_ROWS to BIG_ROWS
TARGETS_ISSUE = 40


# ----------------------------------------------------------------------------- pure parts

def parse_sizes(text: str) -> list[int]:
    """``0.3,3,30`` (million rows) as row counts, ascending, without repeats."""
    try:
        sizes = sorted({round(float(x) * 1_000_000) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--sizes {text!r}: expected million rows, e.g. 0.3,3,30") from None
    if not sizes or sizes[0] < 1:
        raise ValueError(f"--sizes {text!r}: every size must be at least 1 row")
    return sizes


def parse_pairs(text: str, sizes: list[int]) -> dict[int, int]:
    """``3`` (rounds at every size) or ``3:3,30:3,100:1`` (million rows: rounds; every
    size named) as rounds per size (rows)."""
    try:
        if ":" not in text:
            k = int(text)
            pairs = dict.fromkeys(sizes, k)
        else:
            pairs = {round(float(m) * 1_000_000): int(k)
                     for m, k in (x.split(":") for x in text.split(",") if x.strip())}
    except ValueError:
        raise ValueError(f"--pairs {text!r}: expected K or SIZE_M:K,... e.g. 3:3,100:1"
                         ) from None
    missing = [r for r in sizes if r not in pairs]
    if missing or any(k < 1 for k in pairs.values()):
        raise ValueError(f"--pairs {text!r}: every size needs at least 1 round (missing: "
                         f"{', '.join(f'{r / 1e6:g} M' for r in missing) or 'none'})")
    return {r: pairs[r] for r in sizes}


def pairs_text(pairs: int | dict[str, int]) -> str:
    """The rounds per size as the report says them (``3`` or ``3 at 3 M, 1 at 100 M``)."""
    if isinstance(pairs, int):
        return str(pairs)
    if len(set(pairs.values())) == 1:
        return str(next(iter(pairs.values())))
    return ", ".join(f"{k} at {int(r) / 1e6:g} M" for r, k in pairs.items())


def parse_memory(text: str) -> list[tuple[int, str]]:
    """``3:2g,30:14g,100:20g`` as (up to this many rows, driver memory), ascending; a
    bare ``4g`` is that memory at every size."""
    out: list[tuple[int, str]] = []
    for part in text.split(","):
        rows_m, sep, mem = part.strip().rpartition(":")
        if not re.fullmatch(r"\d+[kmgt]", mem.lower()):
            raise ValueError(f"--spark-memory {text!r}: {mem!r} is not a JVM size like 2g")
        try:
            rows = round(float(rows_m) * 1_000_000) if sep else 2**62
        except ValueError:
            raise ValueError(f"--spark-memory {text!r}: {rows_m!r} is not a number of "
                             "million rows") from None
        out.append((rows, mem.lower()))
    return sorted(out)


def memory_for(rows: int, table: Sequence[tuple[int, str]]) -> str:
    """The driver memory of the first entry covering ``rows`` (the last one beyond)."""
    for upto, mem in table:
        if rows <= upto:
            return mem
    return table[-1][1]


@dataclass(frozen=True)
class SparkSetting:
    store: str
    rows_per_batch: int | None  # None: the whole input in one micro-batch

    def files_per_trigger(self, rows: int, file_rows: int = FILE_ROWS) -> int:
        files = -(-rows // file_rows)
        if self.rows_per_batch is None:
            return files + 1  # and the sentinel file
        return max(1, self.rows_per_batch // file_rows)

    @property
    def label(self) -> str:
        batch = "all" if self.rows_per_batch is None else f"{self.rows_per_batch:,}"
        return f"{self.store}, {batch} rows/batch"


def parse_spark_setting(text: str) -> SparkSetting:
    store, _, rows = text.partition(":")
    if store not in SPARK_STORES or not (rows == "all" or rows.isdigit()):
        raise ValueError(f"--spark-setting {text!r}: expected hdfs|rocksdb:ROWS|all, "
                         "e.g. hdfs:1000000")
    return SparkSetting(store, None if rows == "all" else int(rows))


def parse_input(text: str) -> list[str]:
    """``csv``, ``parquet`` or ``both`` as the inputs to run, in :data:`INPUTS` order."""
    if text == "both":
        return list(INPUTS)
    if text not in INPUTS:
        raise ValueError(f"--input {text!r}: expected csv, parquet or both")
    return [text]


def sides_of(inp: str, sides: Sequence[str]) -> list[str]:
    """The sides of ``sides`` that read ``inp`` (Flink reads no parquet)."""
    return [x for x in sides if x in INPUT_SIDES[inp]]


def spark_candidates(inp: str) -> list[SparkSetting]:
    """Spark's settings swept on ``inp``: on parquet every store and rows per batch; on
    the CSV input (one file: one micro-batch whatever maxFilesPerTrigger says) the
    stores."""
    if inp == "csv":
        return [SparkSetting(store, None) for store in SPARK_STORES]
    return [SparkSetting(store, batch) for store in SPARK_STORES for batch in SPARK_BATCHES]


def spark_on(inp: str, setting: SparkSetting) -> SparkSetting:
    """``setting`` as it runs on ``inp``: on the CSV input the same store, all rows in
    one micro-batch."""
    return SparkSetting(setting.store, None) if inp == "csv" else setting


def spark_label(inp: str, setting: SparkSetting) -> str:
    return f"{setting.store}, one CSV file: one micro-batch" if inp == "csv" else setting.label


def of_input(runs: Sequence[dict[str, Any]], inp: str) -> list[dict[str, Any]]:
    """The runs of one input table (a run recorded without ``input``, from before
    ``--input``, is the parquet table's)."""
    return [r for r in runs if r.get("input", "parquet") == inp]


def sweep_size(sizes: Sequence[int], at_least: int = SWEEP_AT_LEAST) -> int:
    """The smallest size of at least ``at_least`` rows, else the largest."""
    big = [s for s in sizes if s >= at_least]
    return min(big) if big else max(sizes)


def disk_needed(sizes: Sequence[int], sweep_rows: int, sides: Sequence[str],
                inputs: Sequence[str], have_parquet: set[int], have_csv: set[int]) -> int:
    """Bytes to find free: the inputs not made yet (kept: the parquet, made for either
    input, and the CSV copy every side reads) and the largest size's runs (one at a
    time)."""
    need = 0
    for rows in {*sizes, sweep_rows}:
        if rows not in have_parquet:
            need += DISK_PER_ROW["parquet"] * rows
        if "csv" in inputs and rows not in have_csv:
            need += DISK_PER_ROW["csv"] * rows
    used = {x for inp in inputs for x in sides_of(inp, sides)}
    per_row = sum(DISK_PER_ROW[x] for x in used)
    runs = max(rows * per_row for rows in {*sizes, sweep_rows})
    return need + runs


def gib(n: float | None) -> str:
    return "–" if n is None else f"{n / 2**30:.2f}"


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def ok_runs(runs: Sequence[dict[str, Any]], rows: int, system: str,
            measured_only: bool = True) -> list[dict[str, Any]]:
    """The finished runs of ``system`` at ``rows`` whose output was equal (the pairs'
    runs only unless ``measured_only`` is False)."""
    return [r for r in runs if r["rows"] == rows and r["system"] == system
            and r["status"] == "ok" and r.get("equal") is not False
            and (not measured_only or isinstance(r["round"], int))]


def median_wall(runs: Sequence[dict[str, Any]], rows: int, system: str) -> float | None:
    return _median([r["wall_s"] for r in ok_runs(runs, rows, system)])


def pair_ratios(runs: Sequence[dict[str, Any]], rows: int, num: str,
                den: str = "cec") -> list[float]:
    """``num``'s wall ÷ ``den``'s wall, round by round (rounds where both finished)."""
    a = {r["round"]: r["wall_s"] for r in ok_runs(runs, rows, num)}
    b = {r["round"]: r["wall_s"] for r in ok_runs(runs, rows, den)}
    return [a[i] / b[i] for i in sorted(set(a) & set(b)) if b[i] > 0]


def marginal(rows_a: int, wall_a: float, rows_b: int, wall_b: float) -> float | None:
    """(rows_b − rows_a) / (wall_b − wall_a); None when the wall did not grow."""
    if wall_b <= wall_a or rows_b <= rows_a:
        return None
    return (rows_b - rows_a) / (wall_b - wall_a)


def marginals(runs: Sequence[dict[str, Any]], sizes: Sequence[int], system: str
              ) -> list[tuple[int, int, float | None]]:
    """The marginal rate between consecutive sizes with finished runs (median walls)."""
    have = [(s, w) for s in sizes if (w := median_wall(runs, s, system)) is not None]
    return [(a, b, marginal(a, wa, b, wb)) for (a, wa), (b, wb) in itertools.pairwise(have)]


def max_load(runs: Sequence[dict[str, Any]], sizes: Sequence[int]) -> float | None:
    loads = [x for r in runs if r["rows"] in sizes and isinstance(r["round"], int)
             for x in (r.get("load_start"), r.get("load_end")) if x is not None]
    return max(loads) if loads else None


def max_others(runs: Sequence[dict[str, Any]], sizes: Sequence[int]) -> float | None:
    """The most cores other processes used on average during one of the runs (None: a
    run recorded none)."""
    xs = [r.get("others_cores") for r in runs if r["rows"] in sizes
          and isinstance(r["round"], int)]
    return None if not xs or any(x is None for x in xs) else max(
        x for x in xs if x is not None)


def _rate(x: float | None) -> str:
    return "n/a (the wall did not grow)" if x is None else f"{x / 1e6:.2f} M rows/s"


def _rows_m(rows: int) -> str:
    return f"{rows / 1e6:g} M"


def judge(runs: Sequence[dict[str, Any]], sizes: Sequence[int],
          load_limit: float = LOAD_LIMIT, inputs: Sequence[str] = INPUTS
          ) -> list[dict[str, Any]]:
    """Where each target of issue 40 stands, judged on the runs of the CSV table
    (:data:`JUDGED_INPUT`, every side on the same file): ``state`` is met, missed, not
    judged (other processes busy, or the load above ``load_limit`` for runs without that
    measure) or not measured; ``text`` gives the numbers. ``inputs``: the tables run."""
    out: list[dict[str, Any]] = []
    names = {"spark": "Spark", "flink": "Flink"}
    targets = [f"{_rows_m(rows)} rows ≥ {goal:g}× {names[system]}"
               for rows, *goals in TARGET_RATIOS
               for system, goal in zip(("spark", "flink"), goals, strict=True)]
    marginal_target = (f"cec's marginal rate ≥ {TARGET_MARGINAL / 1e6:g} M rows/s from "
                       f"{_rows_m(TARGET_ROWS)} to {_rows_m(BIG_ROWS)} rows")
    if JUDGED_INPUT not in inputs:
        why = (f"the {JUDGED_INPUT.upper()} table (every side on the same file) was not "
               "run (--input parquet)")
        return [{"target": t, "state": "not measured", "text": why}
                for t in [*targets, marginal_target]]
    runs = of_input(runs, JUDGED_INPUT)

    def verdict(target: str, ok: bool, text: str, on: Sequence[int]) -> None:
        load = max_load(runs, on)
        others = max_others(runs, on)
        state = "met" if ok else "missed"
        if others is not None:
            if not quiet(others):
                state = "not judged"
                text += (f"; other processes used up to {others:.2f} cores during a run "
                         f"(> {OTHERS_LIMIT:g})")
            else:
                text += f"; other processes used at most {others:.2f} cores during a run"
        elif load is not None and load > load_limit:
            state = "not judged"
            text += f"; the 1-min load reached {load:.2f} (> {load_limit:g})"
        elif load is not None:
            text += f"; 1-min load at most {load:.2f}"
        out.append({"target": target, "state": state, "text": text})

    def missing(target: str, why: str) -> None:
        out.append({"target": target, "state": "not measured", "text": why})

    it = iter(targets)
    for rows, *goals in TARGET_RATIOS:
        for system, goal in zip(("spark", "flink"), goals, strict=True):
            target = next(it)
            if rows not in sizes:
                missing(target, f"{_rows_m(rows)} rows not run")
                continue
            ratios = pair_ratios(runs, rows, system)
            if not ratios:
                why = _why_none(runs, rows, system) or _why_none(runs, rows, "cec")
                missing(target, f"no round with both finished and equal: {why}")
                continue
            med = statistics.median(ratios)
            c, o = median_wall(runs, rows, "cec"), median_wall(runs, rows, system)
            verdict(target, med >= goal,
                    f"{med:.2f}× round by round (min {min(ratios):.2f}×, max "
                    f"{max(ratios):.2f}×; medians {o:.1f} s ÷ {c:.1f} s)", [rows])

    if TARGET_ROWS not in sizes or BIG_ROWS not in sizes:
        missing(marginal_target, f"{_rows_m(TARGET_ROWS)} and {_rows_m(BIG_ROWS)} rows not "
                "both run")
        return out
    walls = {rows: median_wall(runs, rows, "cec") for rows in (TARGET_ROWS, BIG_ROWS)}
    lacking = [rows for rows, w in walls.items() if w is None]
    if lacking:
        missing(marginal_target, "no finished cec run with an equal output at "
                + ", ".join(f"{_rows_m(r)} rows ({_why_none(runs, r, 'cec') or 'none'})"
                            for r in lacking))
        return out
    wa, wb = walls[TARGET_ROWS], walls[BIG_ROWS]
    assert wa is not None and wb is not None
    rate = marginal(TARGET_ROWS, wa, BIG_ROWS, wb)
    verdict(marginal_target, rate is not None and rate >= TARGET_MARGINAL,
            f"{_rate(rate)} (median walls {wa:.1f} s at {_rows_m(TARGET_ROWS)}, {wb:.1f} s "
            f"at {_rows_m(BIG_ROWS)} rows)", [TARGET_ROWS, BIG_ROWS])
    return out


def _why_none(runs: Sequence[dict[str, Any]], rows: int, system: str) -> str:
    mine = [r for r in runs if r["rows"] == rows and r["system"] == system
            and isinstance(r["round"], int)]
    skipped = [r["status"] for r in runs if r["rows"] == rows and r["system"] == system
               and r["round"] == "skipped"]
    if not mine:
        return f"{system} {skipped[0]}" if skipped else f"{system} not run"
    bad = [r for r in mine if r["status"] != "ok" or r.get("equal") is False]
    if not bad:
        return ""
    states = sorted({r["status"] if r["status"] != "ok" else "output differs" for r in bad})
    return f"{system}: {', '.join(states)}"


def _kinds_max(runs: Sequence[dict[str, Any]]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for r in runs:
        for k, v in (r.get("peak_rss_kind") or {}).items():
            kinds[k] = max(kinds.get(k, 0), int(v))
    return kinds


def _kinds_text(kinds: dict[str, int]) -> str:
    order = ["driver", "jvm", "py-daemon", "py-worker", "other"]
    names = sorted(kinds, key=lambda k: (order.index(k) if k in order else 99, k))
    return ", ".join(f"{k} {gib(kinds[k])}" for k in names) + " GiB" if names else "–"


def _range(xs: Sequence[float], fmt: str = "{:.2f}") -> str:
    if not xs:
        return "–"
    med = fmt.format(statistics.median(xs))
    return med if len(xs) == 1 else f"{med} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


SYSTEM_NAMES = {"cec": "cec", "spark": "Spark", "flink": "Flink"}
LEGACY_NAMES = {**SYSTEM_NAMES, "flink": "Flink (CSV input)"}  # results before --input


def size_table(runs: Sequence[dict[str, Any]], rows: int, sides: Sequence[str],
               legacy: bool = False) -> str:
    """The markdown of one size of one input table (``runs`` that table's): a row per
    system, then the ratios round by round. ``legacy``: results from before ``--input``
    (Flink on a CSV conversion, said beside its ratio)."""
    names = LEGACY_NAMES if legacy else SYSTEM_NAMES
    lines = ["| system | setting | runs ok | wall s, median (min–max) | CPU s, median | "
             "peak memory, tree, GiB | peak memory per kind (max over runs) | "
             "1-min load |", "|---|---|--:|--:|--:|--:|---|---|"]
    for system in sides:
        mine = [r for r in runs if r["rows"] == rows and r["system"] == system
                and isinstance(r["round"], int)]
        if not mine:
            continue
        good = ok_runs(runs, rows, system)
        settings = sorted({r["setting"] for r in mine})
        states = sorted({r["status"] for r in mine if r["status"] != "ok"}
                        | ({"output differs"} if any(r.get("equal") is False for r in mine)
                           else set()))
        loads = [x for r in mine for x in (r.get("load_start"), r.get("load_end"))
                 if x is not None]
        peak = max((r["peak_rss_total"] for r in mine), default=None)
        lines.append(
            f"| {names.get(system, system)} | {'; '.join(settings)} | "
            f"{len(good)}/{len(mine)}{' (' + ', '.join(states) + ')' if states else ''} | "
            f"{_range([r['wall_s'] for r in good])} | "
            f"{_range([r['cpu_s'] for r in good], '{:.1f}')} | {gib(peak)} | "
            f"{_kinds_text(_kinds_max(mine))} | "
            f"{f'{min(loads):.2f}–{max(loads):.2f}' if loads else '–'} |")
    notes = [f"- {names[r['system']]}: {r['status']}" for r in runs
             if r["rows"] == rows and r["round"] == "skipped"]
    for system in sides:
        if system == "cec":
            continue
        ratios = pair_ratios(runs, rows, system)
        if ratios:
            each = ", ".join(f"{x:.2f}" for x in ratios)
            note = f" — {FLINK_NOTE}" if legacy and system == "flink" else ""
            notes.append(f"- {SYSTEM_NAMES[system]} ÷ cec, round by round: "
                         f"**{statistics.median(ratios):.2f}×** (rounds: {each}){note}")
        elif "cec" in sides:
            notes.append(f"- {SYSTEM_NAMES[system]} ÷ cec: no round with both finished")
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"


def marginal_table(runs: Sequence[dict[str, Any]], sizes: Sequence[int],
                   sides: Sequence[str], names: dict[str, str] = SYSTEM_NAMES) -> list[str]:
    lines = ["(rows_b − rows_a) / (wall_b − wall_a), median walls of the finished runs.", "",
             "| from → to | " + " | ".join(names[s] for s in sides) + " |",
             "|---|" + "--:|" * len(sides)]
    table: dict[tuple[int, int], dict[str, float | None]] = {}
    for system in sides:
        for a, b, rate in marginals(runs, sizes, system):
            table.setdefault((a, b), {})[system] = rate
    for (a, b), by in sorted(table.items()):
        cells = [(_rate(by[s]) if s in by else "–") for s in sides]
        lines.append(f"| {_rows_m(a)} → {_rows_m(b)} | " + " | ".join(cells) + " |")
    if not table:
        lines.append("| (fewer than two sizes finished) |" + " – |" * len(sides))
    return lines


def report(res: dict[str, Any]) -> str:
    runs, sizes, sides = res["runs"], res["sizes"], res["sides"]
    legacy = "inputs" not in res  # written before --input: one table, Flink on CSV
    inputs: list[str] = ["parquet"] if legacy else list(res["inputs"])
    what = (f"parquet files of {FILE_ROWS:,} rows (Flink: the same rows as CSV)" if legacy
            else " and ".join({"csv": "the same CSV file for every side",
                               "parquet": "parquet (cec and Spark)"}[i] for i in inputs))
    lines = [
        "# Cost growth: cec, Spark Structured Streaming and Flink SQL, the same query",
        "",
        f"{KEYS:,} keys, 10 s tumbling avg(item_price) per item_id, P = {PARTITIONS}; "
        f"input: {what}; whole processes started cold, timed "
        "from outside (cec: `run pipeline --out`, or `run pipeline` + `export` where its "
        "setting says so, the output complete and usable); "
        "CPU and peak resident memory (VmRSS) of the process tree from /proc every 0.2 s; "
        "every output compared equal with the size's reference"
        f"{'' if legacy else ' (the first output at the size, whichever input)'}. "
        f"{res['cpus']} CPUs, {res['memory_gib']} GiB; commit {harness.commit_text(res)}; "
        f"{res['started']}; {pairs_text(res['pairs'])} round(s) per size"
        f"{'' if legacy else ' and input'}, "
        "the sides' order "
        "rotated each round. Peak memory: per kind, the peak of the sum of VmRSS over that "
        "kind's processes (pages shared between processes count in each); Spark's driver "
        "memory as set per size; Flink's JVM at its default heap (no -Xmx: a quarter of "
        "the RAM).",
        "",
        f"Command: `{res['command']}`",
        ""]
    if res.get("sweep"):
        lines += [f"## The sweep at {res['sweep_rows']:,} rows (one run each)", "",
                  "| input | system | setting | status | wall s | load |",
                  "|---|---|---|---|--:|--:|"]
        for r in res["sweep"]:
            lines.append(f"| {r.get('input', 'parquet')} | "
                         f"{SYSTEM_NAMES.get(r['system'], r['system'])} | {r['setting']} | "
                         f"{r['status']}{'' if r.get('equal') is not False else ', DIFFERS'} | "
                         f"{r['wall_s']:.2f} | {r['load_start']} |")
        lines.append("")
    if legacy:
        lines += [f"Kept: Spark {res.get('spark_setting') or '–'}; Flink parallelism "
                  f"{res.get('flink_parallelism') or '–'}. {FLINK_NOTE}.", ""]
    else:
        kept = res.get("spark_settings") or {}
        lines += ["Kept: " + "; ".join(
            [f"Spark on {i}: {kept.get(i) or '–'}" for i in inputs if "spark" in sides]
            + ([f"Flink parallelism {res.get('flink_parallelism') or '–'}"]
               if "csv" in inputs and "flink" in sides else [])) + ".", ""]
    for inp in inputs:
        mine = runs if legacy else of_input(runs, inp)
        here = sides if legacy else sides_of(inp, sides)
        names = LEGACY_NAMES if legacy else SYSTEM_NAMES
        if not legacy:
            lines += [f"## {INPUT_TITLES[inp]}", "", INPUT_NOTES[inp], ""]
        for rows in sizes:
            lines += [f"### {rows:,} rows", "", size_table(mine, rows, here, legacy)]
        lines += ["### Marginal rate between consecutive sizes", "",
                  *marginal_table(mine, sizes, here, names), ""]
    issue = res.get("targets_issue", 30)
    on = (f"; judged on the {JUDGED_INPUT.upper()} table, every side on the same file"
          if issue == TARGETS_ISSUE else "")
    lines += [f"## Targets (issue {issue}{on}; this machine)", ""]
    lines += [f"- {j['target']}: **{j['state']}** — {j['text']}" for j in res["judgement"]]
    if res.get("differences"):
        lines += ["", "## OUTPUTS DIFFER", "", *[f"- {d}" for d in res["differences"]]]
    if res.get("png"):
        lines += ["", f"![wall against rows]({res['png']})"]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the sides

@dataclass
class Sized:
    """One size's inputs and folders: ``paths`` and ``specs`` by input (the folder each
    side reads, cec's spec of it)."""

    rows: int
    data: Path  # the parquet files (every input is made from them)
    work: Path
    paths: dict[str, Path]
    specs: dict[str, Path]


def prepare(work: Path, rows: int, inputs: Sequence[str] = INPUTS) -> Sized:
    """The size's parquet files (made unless ``WORK/data-ROWS`` holds the right rows) and,
    for the CSV input, the one CSV copy every side reads (made from them unless made
    already from these very files), both untimed."""
    from bench.flink_job import input_rows, shared_csv

    data = work / f"data-{rows}"
    try:
        have = input_rows(data) if (data / "part-99999-sentinel.parquet").exists() else -1
    except (OSError, FileNotFoundError):
        have = -1
    if have != rows:
        shutil.rmtree(data, ignore_errors=True)
        t0 = time.perf_counter()
        print(f"# making {rows:,} rows in {data} ...", flush=True)
        make_data(data, rows, KEYS, FILE_ROWS)
        print(f"#   made in {time.perf_counter() - t0:.0f} s", flush=True)
    size_work = work / f"runs-{rows}"
    size_work.mkdir(parents=True, exist_ok=True)
    paths = {"parquet": data}
    if "csv" in inputs:
        t0 = time.perf_counter()
        paths["csv"] = shared_csv(data)  # reused when already made from these files
        if time.perf_counter() - t0 > 1:
            print(f"# the CSV copy of {rows:,} rows in {paths['csv']}: "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    specs = {inp: cec_spec(size_work, path, False, PARTITIONS, kind=inp)
             for inp, path in paths.items() if inp in inputs}
    return Sized(rows, data, size_work, paths, specs)


def run_cec(s: Sized, inp: str, timeout: float) -> tuple[Measured, Any, dict[str, Any]]:
    run = s.work / "cec-run"
    shutil.rmtree(run, ignore_errors=True)
    log = s.work / "logs" / f"cec-{inp}.log"
    summary = run.with_suffix(".json")
    out = run.with_suffix(".parquet")
    out.unlink(missing_ok=True)
    m = measure([*CEC, "run", "pipeline", str(s.specs[inp]), "--log-dir", str(run),
                 "--json", "--out", str(out), "--format", "parquet"], log, timeout=timeout,
                stdout=summary)
    extra: dict[str, Any] = {"run_s": m.wall_s}
    if m.status != "ok":
        return m, None, extra
    try:
        own = json.loads(summary.read_text())
        extra |= {k: round(float(own[k]), 2) for k in ("elapsed_s", "steady_s", "ingest_s")
                  if isinstance(own.get(k), int | float)}
    except (OSError, ValueError):
        pass
    return m, cec_output(out), extra


def run_spark(s: Sized, inp: str, setting: SparkSetting, memory: str, timeout: float,
              name: str) -> tuple[Measured, Any, dict[str, Any]]:
    # the CSV input is one file: one micro-batch, whatever the setting's rows per batch
    fpt = 1 if inp == "csv" else setting.files_per_trigger(s.rows)
    cfg = spark_cfg(s.work, s.paths[inp], f"{name}-{inp}", setting.store, fpt, False,
                    PARTITIONS, fmt=inp)
    for key in ("out", "ckpt"):
        shutil.rmtree(cfg[key], ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "PYSPARK_SUBMIT_ARGS": f"--driver-memory {memory} pyspark-shell"}
    m = measure([sys.executable, "-c", SPARK_CHILD, json.dumps(cfg)],
                s.work / "logs" / f"{name}-{inp}.log", timeout=timeout, env=env)
    out = spark_output(Path(cfg["out"])) if m.status == "ok" else None
    for key in ("out", "ckpt"):
        shutil.rmtree(cfg[key], ignore_errors=True)
    return m, out, {"driver_memory": memory}


def run_flink(s: Sized, parallelism: int, timeout: float
              ) -> tuple[Measured, Any, dict[str, Any]]:
    """Flink on the CSV input (the file cec and Spark read too)."""
    from bench.flink_job import flink_command, flink_output

    cmd = flink_command(s.data, s.work, parallelism, csv=s.paths["csv"])
    name = f"flink-cmd-p{parallelism}"  # flink_command's folders: WORK/NAME-out, -ckpt
    out, ckpt = s.work / f"{name}-out", s.work / f"{name}-ckpt"
    for d in (out, ckpt):
        shutil.rmtree(d, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    m = measure(cmd, s.work / "logs" / f"{name}.log", timeout=timeout,
                stdout=s.work / f"{name}.events", env=env, cwd=s.work)
    table = flink_output(out) if m.status == "ok" else None
    for d in (out, ckpt):
        shutil.rmtree(d, ignore_errors=True)
    return m, table, {}


# ----------------------------------------------------------------------------- main

@dataclass
class Bench:
    args: argparse.Namespace
    memory: list[tuple[int, str]]
    runs: list[dict[str, Any]] = field(default_factory=list)
    sweep: list[dict[str, Any]] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    refs: dict[int, Any] = field(default_factory=dict)  # by size, across the inputs
    spark_setting: dict[str, SparkSetting] = field(default_factory=dict)  # by input
    flink_parallelism: int | None = None

    def one(self, s: Sized, inp: str, system: str, round_i: int | str, setting: str,
            go: Any) -> dict[str, Any]:
        m, table, extra = go()
        rec: dict[str, Any] = {"rows": s.rows, "input": inp, "system": system,
                               "round": round_i, "setting": setting, **asdict(m), **extra,
                               "equal": None, "others_cores": m.others_cores}
        if table is not None:
            ref = self.refs.get(s.rows)
            if ref is None:
                self.refs[s.rows] = table
                rec["equal"], rec["reference"] = True, True
                rec["windows"] = table.num_rows
            else:
                diff = compare(ref, table, ("reference", f"{system} on {inp}"))
                rec["equal"] = diff is None
                if diff is not None:
                    rec["difference"] = diff
                    self.differences.append(f"{s.rows:,} rows, {inp} input, {system} "
                                            f"({setting}, round {round_i}): {diff}")
        mem = ", ".join(f"{k} {gib(v)}" for k, v in sorted(m.peak_rss_kind.items()))
        eq = {True: "equal", False: "OUTPUT DIFFERS", None: "no output"}[rec["equal"]]
        xmx = f", -Xmx {'/'.join(m.jvm_xmx)}" if m.jvm_xmx else ""
        print(f"{s.rows:>12,} {inp:<7} {system:<6} {round_i!s:<6} {m.status:<14} wall "
              f"{m.wall_s:8.2f} s  CPU {m.cpu_s:8.1f} s  peak {gib(m.peak_rss_total)} GiB "
              f"({mem}{xmx})  {eq}  load {m.load_start}→{m.load_end}, others "
              f"{rec['others_cores']} cores  [{setting}]",
              flush=True)
        return rec

    def side(self, s: Sized, inp: str, system: str, round_i: int | str) -> dict[str, Any]:
        t = self.args.timeout
        if system == "cec":
            return self.one(s, inp, system, round_i,
                            f"P = {PARTITIONS}, run pipeline --out",
                            lambda: run_cec(s, inp, t))
        if system == "spark":
            st, mem = self.spark_setting[inp], memory_for(s.rows, self.memory)
            return self.one(s, inp, system, round_i, f"{spark_label(inp, st)}, driver {mem}",
                            lambda: run_spark(s, inp, st, mem, t, "spark"))
        assert self.flink_parallelism is not None and inp == "csv"
        p = self.flink_parallelism
        return self.one(s, inp, system, round_i, f"parallelism {p}",
                        lambda: run_flink(s, p, t))

    def do_sweep(self, s: Sized, sides: Sequence[str], inputs: Sequence[str]) -> None:
        t = self.args.timeout
        if "cec" in sides:  # the size's reference output, before Spark and Flink
            first = inputs[0]
            self.sweep.append(self.one(s, first, "cec", "sweep", "reference run",
                                       lambda: run_cec(s, first, t)))
        for inp in inputs:
            if "spark" not in sides or inp in self.spark_setting:
                continue
            mem = memory_for(s.rows, self.memory)
            tried = []
            for st in spark_candidates(inp):
                rec = self.one(s, inp, "spark", "sweep",
                               f"{spark_label(inp, st)}, driver {mem}",
                               lambda st=st, inp=inp, mem=mem: run_spark(
                                   s, inp, st, mem, t, "spark-sweep"))
                self.sweep.append(rec)
                if rec["status"] == "ok" and rec["equal"] is not False:
                    tried.append((rec["wall_s"], st))
            if tried:
                self.spark_setting[inp] = min(tried, key=lambda x: x[0])[1]
        if "flink" in sides and "csv" in inputs and self.flink_parallelism is None:
            tried_p = []
            for p in FLINK_PARALLELISMS:
                rec = self.one(s, "csv", "flink", "sweep", f"parallelism {p}",
                               lambda p=p: run_flink(s, p, t))
                self.sweep.append(rec)
                if rec["status"] == "ok" and rec["equal"] is not False:
                    tried_p.append((rec["wall_s"], p))
            if tried_p:
                self.flink_parallelism = min(tried_p)[1]
        kept = "; ".join(f"Spark on {i} {spark_label(i, self.spark_setting[i])}"
                         if i in self.spark_setting else f"Spark on {i} –" for i in inputs)
        print(f"# kept: {kept}; Flink parallelism {self.flink_parallelism or '–'}",
              flush=True)


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "memory_gib": harness.memory_gib(), **harness.commit(),
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python bench/growth_bench.py",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="0.3,3,30,100", help="million rows, comma-separated")
    ap.add_argument("--pairs", default="3",
                    help="rounds per size and input, each running every side once: K, or "
                    "SIZE_M:K,... per size (e.g. 3:3,30:3,100:1)")
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--input", default="both", choices=["csv", "parquet", "both"],
                    help="csv: every side reads the same CSV file (the headline, judged); "
                    "parquet: cec and Spark on parquet (Flink has no parquet reader); "
                    "both: the CSV table, then the parquet table (default)")
    ap.add_argument("--work", type=Path, default=WORK,
                    help="the inputs (data-ROWS and data-ROWS-csv, reused) and the runs' "
                    "folders")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per process")
    ap.add_argument("--spark-memory", default=SPARK_MEMORY,
                    help="driver memory by size: UPTO_M:MEM,... (the last beyond)")
    ap.add_argument("--spark-setting", default=None, metavar="STORE:ROWS",
                    help="skip Spark's sweep: hdfs|rocksdb:ROWS_PER_BATCH|all (on the CSV "
                    "input: the store, one micro-batch)")
    ap.add_argument("--flink-parallelism", type=int, default=None,
                    help="skip Flink's sweep")
    ap.add_argument("--sweep-size", type=float, default=None, metavar="M",
                    help="million rows of the sweep (default: the smallest size >= 3, "
                    "else the largest)")
    args = ap.parse_args(argv)
    harness.byte_compiled(None)
    try:
        sizes = parse_sizes(args.sizes)
        memory = parse_memory(args.spark_memory)
        inputs = parse_input(args.input)
        sides = [x.strip() for x in args.sides.split(",") if x.strip()]
        if not sides or set(sides) - set(SIDES) or len(set(sides)) != len(sides):
            raise ValueError(f"--sides {args.sides!r}: a list of {', '.join(SIDES)}")
        sides = [x for x in SIDES if x in sides]
        fixed = parse_spark_setting(args.spark_setting) if args.spark_setting else None
        pairs = parse_pairs(str(args.pairs), sizes)
        if args.timeout <= 0 or (args.flink_parallelism or 1) < 1:
            raise ValueError("--timeout and --flink-parallelism must be positive")
    except ValueError as exc:
        print(f"growth_bench: {exc}", file=sys.stderr)
        return 2
    at = round(args.sweep_size * 1_000_000) if args.sweep_size else sweep_size(sizes)
    if "flink" in sides and "csv" in inputs:
        from bench.flink_job import FlinkUnavailable, flink_python
        try:
            flink_python()
        except FlinkUnavailable as exc:
            print(f"growth_bench: {exc}", file=sys.stderr)
            return 3
    args.work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.work).free
    have_parquet = {r for r in [*sizes, at] if (args.work / f"data-{r}").exists()}
    have_csv = {r for r in [*sizes, at] if (args.work / f"data-{r}-csv").exists()}
    need = disk_needed(sizes, at, sides, inputs, have_parquet, have_csv)
    print(f"# disk: {free / 2**30:.0f} GiB free under {args.work}, about "
          f"{need / 2**30:.1f} GiB needed (inputs kept, one size's runs at a time)",
          flush=True)
    if need > free:
        print(f"growth_bench: not enough disk under {args.work}: about {need / 2**30:.1f} "
              f"GiB needed, {free / 2**30:.1f} GiB free", file=sys.stderr)
        return 2

    b = Bench(args, memory, flink_parallelism=args.flink_parallelism)
    if fixed is not None:
        b.spark_setting = {inp: spark_on(inp, fixed) for inp in inputs}
    res: dict[str, Any] = {**_machine(), "sizes": sizes, "sides": sides, "inputs": inputs,
                           "pairs": ({str(r): k for r, k in pairs.items()}
                                     if len(set(pairs.values())) > 1
                                     else next(iter(pairs.values()))),
                           "command": "python bench/growth_bench.py " + " ".join(argv),
                           "timeout_s": args.timeout, "spark_memory": args.spark_memory,
                           "sweep_rows": at, "load_start": load(),
                           "targets_issue": TARGETS_ISSUE}
    print(f"# growth: sizes {', '.join(f'{r:,}' for r in sizes)} rows, "
          f"{pairs_text(res['pairs'])} round(s), inputs {', '.join(inputs)}, sides "
          f"{', '.join(sides)}, sweep at "
          f"{at:,} rows, work {args.work}, load {load()}", flush=True)
    needs_sweep = (("spark" in sides and any(i not in b.spark_setting for i in inputs))
                   or ("flink" in sides and "csv" in inputs
                       and args.flink_parallelism is None))
    if needs_sweep:
        b.do_sweep(prepare(args.work, at, inputs), sides, inputs)
    failed_at: dict[tuple[str, str], int] = {}  # (system, input): the size it failed at
    for rows in sizes:
        s = prepare(args.work, rows, inputs)
        for inp in inputs:
            mine = sides_of(inp, sides)
            here = [x for x in mine if (x, inp) not in failed_at
                    and not (x == "spark" and inp not in b.spark_setting)
                    and not (x == "flink" and b.flink_parallelism is None)]
            for x in mine:
                if x not in here:
                    why = (f"every run failed at {failed_at[x, inp]:,} rows"
                           if (x, inp) in failed_at else "no setting finished in the sweep")
                    print(f"# {x} skipped at {rows:,} rows on {inp}: {why}", flush=True)
                    b.runs.append({"rows": rows, "input": inp, "system": x,
                                   "round": "skipped", "status": f"skipped ({why})"})
            for i in range(pairs[rows]):
                for system in rotation(here, i):
                    b.runs.append(b.side(s, inp, system, i))
            table_runs = of_input(b.runs, inp)
            for x in here:
                if not ok_runs(table_runs, rows, x) and any(
                        r["status"] in ("timeout", "out of memory")
                        for r in table_runs if r["rows"] == rows and r["system"] == x):
                    failed_at[x, inp] = rows
            print(f"# {INPUT_TITLES[inp]}\n" + size_table(table_runs, rows, mine),
                  flush=True)
        b.refs.pop(rows, None)
        shutil.rmtree(s.work / "cec-run", ignore_errors=True)

    settings = {inp: spark_label(inp, st) for inp, st in b.spark_setting.items()}
    arg = b.spark_setting.get("parquet") or b.spark_setting.get("csv")
    res |= {"runs": b.runs, "sweep": b.sweep, "differences": b.differences,
            "spark_settings": settings,
            "spark_setting_arg": (f"{arg.store}:{arg.rows_per_batch or 'all'}"
                                  if arg else None),
            "flink_parallelism": b.flink_parallelism,
            "input_notes": {inp: INPUT_NOTES[inp] for inp in inputs},
            "load_end": load()}
    res["judgement"] = judge(b.runs, sizes, inputs=inputs)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        from bench import plots

        shown = JUDGED_INPUT if JUDGED_INPUT in inputs else inputs[0]
        series = {SYSTEM_NAMES[x]: [(r, w) for r in sizes
                                    if (w := median_wall(of_input(b.runs, shown), r, x))
                                    is not None]
                  for x in sides_of(shown, sides)}
        title = ("every side reads the same CSV file" if shown == "csv"
                 else "cec and Spark read parquet")
        png = plots.growth(series, args.out / "growth.png",
                           f"Wall against rows (whole processes, medians); {title}")
        res["png"] = png.name
    except (ImportError, OSError, ValueError) as exc:
        print(f"# no plot: {exc}", flush=True)
    (args.out / "growth.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    md = report(res)
    (args.out / "growth.md").write_text(md)
    print(md)
    print(f"# wrote {args.out / 'growth.md'}, growth.json"
          f"{', growth.png' if res.get('png') else ''}", flush=True)
    return 1 if b.differences else 0


if __name__ == "__main__":
    raise SystemExit(main())

