"""The paper's workload (CEC, DSN 2011, §IV) as a deterministic, seeded generator.

Every benchmark of the paper's figures and :mod:`bench.pipeline_bench` read the same
input, so this module is the single definition of it.

Schema (one tuple per purchase):

=============  =====  ==========================================================
column         type   meaning
=============  =====  ==========================================================
``item_id``    int64  the key, uniform over ``[0, n_keys)``
``item_price`` int64  price in cents, uniform over ``[price_min, price_max]``
``item_time``  int64  event time in microseconds since the Unix epoch,
                      non-decreasing along the stream (Poisson arrivals at
                      ``rate`` tuples per second of event time, truncated to µs,
                      so equal consecutive timestamps occur)
=============  =====  ==========================================================

Determinism: the table is a pure function of ``(n_rows, n_keys, seed, rate, start_us,
price_min, price_max)``; the same arguments give the same bytes on every machine
(numpy's PCG64 through ``numpy.random.default_rng``). A dataset on disk is that table cut
in order into ``files`` parquet files ``part-00000.parquet`` … whose modification times
increase with the part number, so a Spark streaming file source with
``maxFilesPerTrigger=1`` consumes them as micro-batches in stream order. A JSON
manifest ``_workload.json`` (ignored by Spark's file source, which skips names starting
with ``_``) records the parameters and the row range of every file.

The paper's tuples were 100 bytes; ours are 24 bytes of payload. The paper's Fig. 5
uses 2 keys, Figs. 6–9 use 100 000 keys (the default here).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        pa.field("item_id", pa.int64(), nullable=False),
        pa.field("item_price", pa.int64(), nullable=False),
        pa.field("item_time", pa.int64(), nullable=False),
    ]
)
"""The Arrow schema of every workload table and file."""

DEFAULT_KEYS = 100_000
DEFAULT_SEED = 20110627  # DSN 2011 opened on 27 June 2011
DEFAULT_RATE = 100_000.0  # tuples per second of event time
DEFAULT_START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
MANIFEST = "_workload.json"


@dataclass(frozen=True)
class WorkloadSpec:
    """The parameters that determine a workload table exactly."""

    n_rows: int
    n_keys: int = DEFAULT_KEYS
    seed: int = DEFAULT_SEED
    rate: float = DEFAULT_RATE
    start_us: int = DEFAULT_START_US
    price_min: int = 1
    price_max: int = 10_000

    def __post_init__(self) -> None:
        if self.n_rows < 0:
            raise ValueError(f"n_rows must be >= 0, got {self.n_rows}")
        if self.n_keys < 1:
            raise ValueError(f"n_keys must be >= 1, got {self.n_keys}")
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 tuples/s, got {self.rate}")
        if self.price_min > self.price_max:
            raise ValueError(f"price_min {self.price_min} > price_max {self.price_max}")


@dataclass(frozen=True)
class Dataset:
    """A workload written to disk: its spec and the parquet files in stream order."""

    directory: Path
    spec: WorkloadSpec
    files: list[Path] = field(default_factory=list)
    row_ranges: list[tuple[int, int]] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return self.spec.n_rows

    def to_dict(self) -> dict[str, object]:
        return {
            "directory": str(self.directory),
            "spec": asdict(self.spec),
            "files": [p.name for p in self.files],
            "row_ranges": [list(r) for r in self.row_ranges],
        }


def generate_columns(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    """The three columns of ``spec`` as int64 numpy arrays (the fast path)."""
    rng = np.random.default_rng(spec.seed)
    n = spec.n_rows
    item_id = rng.integers(0, spec.n_keys, size=n, dtype=np.int64)
    item_price = rng.integers(spec.price_min, spec.price_max + 1, size=n, dtype=np.int64)
    gaps_us = rng.exponential(1e6 / spec.rate, size=n)
    # Cumulate in float64 and truncate once: non-decreasing by construction, no drift.
    item_time = spec.start_us + np.floor(np.cumsum(gaps_us)).astype(np.int64)
    return {"item_id": item_id, "item_price": item_price, "item_time": item_time}


def generate_table(
    n_rows: int,
    n_keys: int = DEFAULT_KEYS,
    seed: int = DEFAULT_SEED,
    *,
    rate: float = DEFAULT_RATE,
    start_us: int = DEFAULT_START_US,
) -> pa.Table:
    """The workload as one Arrow table (``SCHEMA``), deterministic in its arguments."""
    spec = WorkloadSpec(n_rows=n_rows, n_keys=n_keys, seed=seed, rate=rate, start_us=start_us)
    return table_for(spec)


def table_for(spec: WorkloadSpec) -> pa.Table:
    cols = generate_columns(spec)
    return pa.Table.from_arrays([pa.array(cols[f.name]) for f in SCHEMA], schema=SCHEMA)


def iter_batches(
    n_rows: int,
    n_keys: int = DEFAULT_KEYS,
    seed: int = DEFAULT_SEED,
    *,
    batch_rows: int = 65_536,
    rate: float = DEFAULT_RATE,
    start_us: int = DEFAULT_START_US,
) -> list[pa.RecordBatch]:
    """``generate_table(...)`` cut in order into record batches of ``batch_rows`` rows."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    table = generate_table(n_rows, n_keys, seed, rate=rate, start_us=start_us)
    batches: list[pa.RecordBatch] = table.to_batches(max_chunksize=batch_rows)
    return batches


def split_rows(n_rows: int, files: int) -> list[tuple[int, int]]:
    """``files`` contiguous ``[start, stop)`` ranges covering ``n_rows`` as evenly as possible."""
    if files < 1:
        raise ValueError(f"files must be >= 1, got {files}")
    bounds = [n_rows * i // files for i in range(files + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(files)]


def write_dataset(
    directory: str | os.PathLike[str],
    n_rows: int,
    n_keys: int = DEFAULT_KEYS,
    seed: int = DEFAULT_SEED,
    files: int = 16,
    *,
    rate: float = DEFAULT_RATE,
    start_us: int = DEFAULT_START_US,
    mtime_base: float = 1_700_000_000.0,
) -> Dataset:
    """Write the workload as ``files`` parquet files in stream order under ``directory``.

    The directory is created if needed and must not already hold parquet files (a
    streaming source would consume them too). File ``i`` gets modification time
    ``mtime_base + i`` seconds so that Spark's file source, which orders new files by
    modification time, reads them in stream order.
    """
    spec = WorkloadSpec(n_rows=n_rows, n_keys=n_keys, seed=seed, rate=rate, start_us=start_us)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    stale = sorted(out.glob("*.parquet"))
    if stale:
        raise FileExistsError(f"{out} already holds {len(stale)} parquet file(s), e.g. {stale[0]}")
    table = table_for(spec)
    ranges = split_rows(n_rows, files)
    paths: list[Path] = []
    for i, (lo, hi) in enumerate(ranges):
        path = out / f"part-{i:05d}.parquet"
        tmp = out / f".part-{i:05d}.parquet.tmp"
        pq.write_table(table.slice(lo, hi - lo), tmp, compression="snappy")
        os.replace(tmp, path)
        os.utime(path, (mtime_base + i, mtime_base + i))
        paths.append(path)
    dataset = Dataset(directory=out, spec=spec, files=paths, row_ranges=ranges)
    (out / MANIFEST).write_text(json.dumps(dataset.to_dict(), indent=2) + "\n")
    return dataset


def ensure_dataset(
    directory: str | os.PathLike[str],
    n_rows: int,
    n_keys: int = DEFAULT_KEYS,
    seed: int = DEFAULT_SEED,
    files: int = 16,
    *,
    rate: float = DEFAULT_RATE,
    start_us: int = DEFAULT_START_US,
) -> Dataset:
    """Reuse ``directory`` if its manifest matches these parameters, else write it afresh.

    A directory with parquet files but a different (or no) manifest is an error, never
    silently overwritten.
    """
    out = Path(directory)
    spec = WorkloadSpec(n_rows=n_rows, n_keys=n_keys, seed=seed, rate=rate, start_us=start_us)
    manifest = out / MANIFEST
    if manifest.exists():
        existing = load_dataset(out)
        if existing.spec == spec and len(existing.files) == files:
            return existing
        raise FileExistsError(f"{out} holds a different workload: {existing.spec}")
    return write_dataset(out, n_rows, n_keys, seed, files, rate=rate, start_us=start_us)


def load_dataset(directory: str | os.PathLike[str]) -> Dataset:
    """The ``Dataset`` described by ``directory/_workload.json``."""
    out = Path(directory)
    raw = json.loads((out / MANIFEST).read_text())
    spec = WorkloadSpec(**raw["spec"])
    files = [out / name for name in raw["files"]]
    missing = [p for p in files if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{out}: manifest lists missing file {missing[0].name}")
    ranges = [(int(lo), int(hi)) for lo, hi in raw["row_ranges"]]
    return Dataset(directory=out, spec=spec, files=files, row_ranges=ranges)


def read_dataset(directory: str | os.PathLike[str]) -> pa.Table:
    """All files of a dataset concatenated in stream order."""
    dataset = load_dataset(directory)
    return pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in dataset.files])


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Write the CEC paper's workload as parquet.")
    parser.add_argument("directory")
    parser.add_argument("--rows", type=int, default=1_600_000)
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE)
    args = parser.parse_args(argv)
    ds = write_dataset(args.directory, args.rows, args.keys, args.seed, args.files, rate=args.rate)
    print(json.dumps(ds.to_dict()["spec"]), f"-> {len(ds.files)} files in {ds.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
