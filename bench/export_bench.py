"""``cec export`` of a big run, two source trees side by side: wall seconds, CPU seconds
and peak RSS of each export process, and the two files compared byte for byte.

``python bench/export_bench.py --base TREE [--results 1,10,30] [--format csv,parquet]
[--partitions 8] [--work DIR]``

For each ``--results`` (millions) a run directory is made whose output logs hold that
many results (:func:`make_run`: written directly with :class:`StreamLog`, as the
operator tasks write them, not by a ``cec run pipeline``, which at 10 M results takes
minutes), then exported by this tree and by ``--base`` (a git worktree of another commit:
the tree goes first on ``PYTHONPATH``), each in its own process, one after the other.
A process's peak RSS is its ``ru_maxrss`` (``os.wait4``). Different bytes: exit 1.

``python bench/export_bench.py make --results N --out RUN [--partitions P] [--kind
time|count] [--key int64|string] [--generations 1|2]``: only the run directory (N
results, not millions), for timing the export with other tools.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
EXPORT_TIMEOUT_S = 3600.0  # one export process
sys.path.insert(0, str(REPO))

from bench import harness  # noqa: E402
from cec.records import G_CHECK, R, output_schema  # noqa: E402
from cec_spark.ingest.logs import create_logs  # noqa: E402
from cec_spark.run.plan import pipeline_spec, plan_new_run  # noqa: E402
from cec_spark.rundir.generations import Generation, store_generations  # noqa: E402
from cec_spark.rundir.layout import RunLayout  # noqa: E402
from cec_spark.rundir.run_file import write_run_text  # noqa: E402
from storage_log.log import StreamLog  # noqa: E402

BASE_TS = 1_700_000_000_000_000
WINDOW_US = 10_000_000
SPEC = """
[source]
kind = "csv"
path = "{source}"
time_field = "item_time"

[aggregate]
group_by = "item_id"
field = "item_price"
function = "sum"
window = {window}

[run]
partitions = {partitions}
"""


@dataclass(frozen=True)
class Shape:
    """What :func:`make_run` writes: ``results`` result rows over ``partitions``
    partitions (``generations`` 2: half the windows in a first generation of
    ``partitions // 2 or 1`` partitions, then a rescale), ``kind`` time or count
    windows, int64 or string keys, ``per_key`` windows a key."""

    results: int
    partitions: int = 8
    kind: str = "time"
    key: str = "int64"
    generations: int = 1
    per_key: int = 20
    seed: int = 5


def _key_values(n: int, key: str, rng: np.random.Generator) -> pa.Array:
    """``n`` distinct keys in no order: int64 (negative ones too) or strings of several
    lengths."""
    ids = rng.permutation(n).astype(np.int64)
    if key == "int64":
        return pa.array(ids * 7919 - 3 * n)
    return pa.array([f"k{i:x}" for i in ids.tolist()], pa.string())


def _window_rows(keys: pa.Array, w: int, shape: Shape, seq0: int, tau0: int,
                 rng: np.random.Generator) -> pa.RecordBatch:
    """Window ``w``'s results of one partition's ``keys``, in the order given, then a few
    G_check rows (dropped by the export)."""
    n = len(keys)
    checks = max(1, n // 100)
    ty = np.full(n + checks, R, np.int8)
    ty[n:] = G_CHECK
    idx = np.concatenate([np.arange(n), rng.integers(0, n, checks)])
    start = BASE_TS + w * WINDOW_US
    first = start + rng.integers(0, WINDOW_US // 2, n + checks)
    cnt = rng.integers(1, 50, n + checks)
    total = rng.random(n + checks) * 100
    cols = {
        "ts": np.full(n + checks, start + WINDOW_US, np.int64),
        "seq": np.arange(seq0, seq0 + n + checks, dtype=np.int64),
        "type": ty, "t_now": np.full(n + checks, tau0 + n, np.int64),
        "n_open": np.full(n + checks, n, np.int64),
        "key": keys.take(pa.array(idx)),
        "win_start": np.full(n + checks, start if shape.kind == "time" else w, np.int64),
        "win_end": np.full(n + checks, start + WINDOW_US if shape.kind == "time" else -1,
                           np.int64),
        "tau1": tau0 + idx, "cnt": cnt, "sum": total, "min": total / cnt,
        "max": total, "first_ts": first, "last_ts": first + rng.integers(0, WINDOW_US // 2,
                                                                         n + checks),
        "value": total,
    }
    schema = output_schema(pa.int64() if shape.key == "int64" else pa.string())
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in schema],
                                      schema=schema)


def _write_generation(layout: RunLayout, gen: int, parts: int, keys: pa.Array,
                      windows: range, shape: Shape, rng: np.random.Generator,
                      extra: bool) -> list[int]:
    """Results of ``windows`` of every key in generation ``gen``'s output logs (key i in
    partition i % parts, each partition's keys in its own order); each log's last seq
    (``extra``: then a window more, after that seq, which is not the run's)."""
    ends = []
    for p in range(parts):
        mine = keys.take(pa.array(np.arange(p, len(keys), parts)))
        mine = mine.take(pa.array(rng.permutation(len(mine))))
        seq = 0
        path = layout.output_of(gen, p)
        with StreamLog.open(path, writable=True, create=True, fsync="never") as log:
            for w in list(windows) + ([windows.stop] if extra else []):
                if w == windows.stop:
                    ends.append(seq - 1)
                rows = _window_rows(mine, w, shape, seq, w * len(keys), rng)
                seq += rows.num_rows
                for s in range(0, rows.num_rows, 1 << 16):
                    log.append(rows.slice(s, 1 << 16))
                log.commit()
        if not extra:
            ends.append(seq - 1)
    return ends


def make_run(root: Path, shape: Shape) -> RunLayout:
    """A run directory at ``root`` (absent) whose output logs hold ``shape.results``
    results, as a run's operator tasks write them (each key in one partition a
    generation, a partition's results in the order its windows close)."""
    rng = np.random.default_rng(shape.seed)
    root.parent.mkdir(parents=True, exist_ok=True)
    source = root.parent / f"{root.name}.source.csv"
    item = "7" if shape.key == "int64" else '"a"'
    source.write_text(f"item_id,item_price,item_time\n{item},1.0,{BASE_TS}\n")
    window = ('{ kind = "time", size = "10s" }' if shape.kind == "time"
              else '{ kind = "count", size = 5 }')
    spec_path = root.parent / f"{root.name}.toml"
    spec_path.write_text(SPEC.format(source=source, window=window,
                                     partitions=shape.partitions))
    plan = plan_new_run(pipeline_spec(spec_path), spec_path, root)
    write_run_text(plan.layout, plan.run_text)
    per_key = max(1, shape.per_key)
    n_keys = max(1, shape.results // per_key)
    keys = _key_values(n_keys, shape.key, rng)
    windows = -(-shape.results // n_keys)
    if shape.generations == 1:
        create_logs(plan.layout, shape.partitions, "never")
        _write_generation(plan.layout, 0, shape.partitions, keys, range(windows), shape, rng,
                          False)
        return RunLayout(root)
    first = max(1, shape.partitions // 2)
    half = windows // 2
    ends = _write_generation(plan.layout, 0, first, keys, range(half), shape, rng, True)
    _write_generation(plan.layout, 1, shape.partitions, keys, range(half, windows), shape,
                      rng, False)
    store_generations(plan.layout.generations_file, plan.layout.generations_backup,
                      (Generation(0, first),
                       Generation(1, shape.partitions, cut=half * n_keys,
                                  previous_ends=tuple(ends))))
    return RunLayout(root)


CHILD = "import sys; from cec_spark.read.export import export; export(*sys.argv[1:4])"


@dataclass(frozen=True)
class Timed:
    """One export process: wall and CPU seconds (user + system), peak RSS in bytes."""

    wall: float
    cpu: float
    peak: int


def export_in(tree: Path, run: Path, out: Path, fmt: str) -> Timed:
    """``cec export`` of ``run`` by the source tree ``tree``, in its own process (its
    wall time to the exit, its CPU and peak RSS from wait4's rusage)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    log = out.with_name(out.name + ".log")
    m = harness.measure([sys.executable, "-c", CHILD, str(run), str(out), fmt], log,
                        timeout=EXPORT_TIMEOUT_S, env=env, cwd=out.parent, watch=False,
                        what="the export's end")
    if not m.ok:
        raise SystemExit(f"export by {tree} failed: {m.status}; see {log}")
    return Timed(m.wall_s, m.cpu_s, m.peak_rss_total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", choices=["compare", "make"], default="compare")
    parser.add_argument("--base", type=Path, help="the other source tree (compare)")
    parser.add_argument("--results", default="1,10,30",
                        help="compare: millions, comma-separated; make: results")
    parser.add_argument("--format", default="csv,parquet")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--kind", default="time", choices=["time", "count"])
    parser.add_argument("--key", default="int64", choices=["int64", "string"])
    parser.add_argument("--generations", type=int, default=1, choices=[1, 2])
    parser.add_argument("--work", type=Path, default=Path("/tmp/cec-export-bench"))
    parser.add_argument("--out", type=Path, help="make: the run directory")
    a = parser.parse_args(argv)
    harness.byte_compiled(None, a.base)
    shape = {"partitions": a.partitions, "kind": a.kind, "key": a.key,
             "generations": a.generations}
    if a.what == "make":
        if a.out is None:
            parser.error("make needs --out")
        make_run(a.out, Shape(int(float(a.results)), **shape))
        return 0
    if a.base is None:
        parser.error("compare needs --base")
    differ = 0
    print("results  format   side  wall_s  cpu_s  peak_MiB")
    for millions in (float(m) for m in a.results.split(",")):
        run = a.work / f"run-{millions:g}M"
        if not run.exists():
            make_run(run, Shape(int(millions * 1e6), **shape))
        for fmt in a.format.split(","):
            outs = {}
            for side, tree in (("base", a.base.resolve()), ("this", REPO)):
                outs[side] = a.work / f"{side}-{millions:g}M.{fmt}"
                t = export_in(tree, run, outs[side], fmt)
                print(f"{millions:6g} M  {fmt:7s}  {side:4s}  {t.wall:6.2f}  {t.cpu:5.2f}  "
                      f"{t.peak / 2**20:8.0f}", flush=True)
            same = filecmp.cmp(outs["base"], outs["this"], shallow=False)
            print(f"{'':17s}files {'equal' if same else 'DIFFER'}", flush=True)
            differ += not same
            for path in outs.values():
                path.unlink()
        shutil.rmtree(run)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
