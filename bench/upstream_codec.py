"""What an upstream log costs per row, by how it is written (issue 40 item 2).

``python bench/upstream_codec.py [--rows N] [--partitions P] [--rounds K] [--dir DIR]
[--out FILE.md]``

The rows are the growth benchmark's (``bench/fair_spark.py``'s ``make_data``: ``item_id``
uniform over 100 k keys, prices in cents, a time every 10 µs; ``ts``, ``seq``, key and
value as the ingest appends them), cut into records of 256 Ki rows and split by key
partition as the ingest splits them. Side by side in one process, each round in turn:

* the encoding and decoding of every record (:class:`storage_log.payload.PayloadCodec`,
  CPU seconds of this process, the xxh64 checksum included) and the bytes per row, for
  zstd level 1 (a durable upstream log) and level 0 (a cache: the packed layout, no
  column compressed), and the uncompressed Arrow IPC message for reference;
* a whole write of the P logs, ``append`` + ``commit`` per record, then a read of them
  (``StreamLog`` in ``--dir``, on this machine's disk), for (level 1, fsync ``always``),
  (level 0, ``always``) and (level 0, ``never``): wall and CPU seconds.

The minimum over the rounds is printed (this machine is shared); ratios are against
level 1 with fsync, the durable upstream log.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fair_spark import START_US  # noqa: E402
from storage_log.framing import FLAG_COMMIT, parse_forward  # noqa: E402
from storage_log.log import StreamLog  # noqa: E402
from storage_log.payload import PayloadCodec  # noqa: E402

RECORD = 1 << 18
KEYS = 100_000


def records(rows: int, partitions: int) -> list[pa.RecordBatch]:
    """The upstream records of ``rows`` rows: each batch split by partition (seq order)."""
    rng = np.random.default_rng(40)
    out = []
    for lo in range(0, rows, RECORD):
        n = min(RECORD, rows - lo)
        seq = np.arange(lo, lo + n, dtype=np.int64)
        key = rng.integers(0, KEYS, n)
        batch = pa.record_batch({  # fair_spark.make_data's rows, as the ingest appends them
            "ts": START_US + seq * 10, "seq": seq, "item_id": key,
            "item_price": rng.integers(1, 10_000, n).astype(np.float64)})
        part = key % partitions
        for p in range(partitions):
            out.append(batch.filter(pa.array(part == p)))
    return out


def codecs(batches: list[pa.RecordBatch]) -> dict[str, tuple[float, float, float]]:
    """(encode CPU s, decode CPU s, bytes per row) of each encoding."""
    rows = sum(b.num_rows for b in batches)
    schema = batches[0].schema
    out = {}
    for name, level in (("zstd level 1 (durable)", 1), ("level 0 (cache)", 0)):
        codec = PayloadCodec(level)
        t = time.process_time()
        frames = [codec.encode_data(b, 0, 0, 0, 0) for b in batches]
        enc = time.process_time() - t
        size = sum(len(f.payload) for f in frames)
        data = [memoryview(b"".join(bytes(p) for p in f.finish(FLAG_COMMIT)))
                for f in frames]
        t = time.process_time()
        for buf in data:  # as a reader does: the frame parsed (checksum), then decoded
            info = parse_forward(buf, 0)
            assert info is not None
            codec.decode_data(buf, info, schema)
        out[name] = (enc, time.process_time() - t, size / rows)
    t = time.process_time()
    blobs = []
    for b in batches:
        raw = b.serialize()
        xxhash.xxh64(raw)
        blobs.append(raw)
    enc = time.process_time() - t
    t = time.process_time()
    for raw in blobs:
        xxhash.xxh64(raw)
        pa.ipc.read_record_batch(raw, schema)
    out["Arrow IPC, uncompressed"] = (enc, time.process_time() - t,
                                      sum(len(r) for r in blobs) / rows)
    return out


def write_read(batches: list[pa.RecordBatch], partitions: int, root: Path, level: int,
               fsync: str) -> tuple[float, float, float, float]:
    """(write wall s, write CPU s, read wall s, read CPU s) of the P logs."""
    shutil.rmtree(root, ignore_errors=True)
    logs = [StreamLog.open(root / f"p{p}", writable=True, create=True, fsync=fsync,
                           compression_level=level, threads=0) for p in range(partitions)]
    w0, c0 = time.perf_counter(), time.process_time()
    for i, b in enumerate(batches):
        log = logs[i % partitions]
        log.append(b)
        log.commit()
    w1, c1 = time.perf_counter(), time.process_time()
    for log in logs:
        log.close()
    r0, d0 = time.perf_counter(), time.process_time()
    for p in range(partitions):
        with StreamLog.open(root / f"p{p}", threads=0) as log:
            for b in log.read_forward():
                b.column(0)
    r1, d1 = time.perf_counter(), time.process_time()
    shutil.rmtree(root, ignore_errors=True)
    return w1 - w0, c1 - c0, r1 - r0, d1 - d0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where the logs are written "
                    "(default: a temporary folder under the repository, on its disk)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    batches = records(args.rows, args.partitions)
    best: dict[str, list[float]] = {}
    ways = [(1, "always"), (0, "always"), (0, "never")]
    work = Path(tempfile.mkdtemp(prefix=".upstream-codec-", dir=args.dir or ROOT))
    try:
        for _ in range(args.rounds):
            for name, got in codecs(batches).items():
                best[name] = [min(a, b) for a, b in zip(best.get(name, list(got)), got,
                                                        strict=True)]
            for level, fsync in ways:
                key = f"level {level}, fsync {fsync}"
                vals = list(write_read(batches, args.partitions, work / "logs", level, fsync))
                best[key] = [min(a, b) for a, b in zip(best.get(key, vals), vals,
                                                       strict=True)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m = args.rows / 1e6
    lines = [f"# The upstream log's cost per row: {args.rows:,} rows, P = {args.partitions}, "
             f"records of {RECORD:,} rows split by partition; best of {args.rounds} rounds",
             "", "| encoding | encode CPU s per M rows | decode CPU s per M rows | bytes a row |",
             "|---|--:|--:|--:|"]
    for name in ("zstd level 1 (durable)", "level 0 (cache)", "Arrow IPC, uncompressed"):
        enc, dec, size = best[name]
        lines.append(f"| {name} | {enc / m:.4f} | {dec / m:.4f} | {size:.2f} |")
    base = best["level 1, fsync always"]
    lines += ["", "| log written | write wall s | write CPU s | read wall s | read CPU s | "
              "write wall vs durable | write CPU vs durable |", "|---|--:|--:|--:|--:|--:|--:|"]
    for level, fsync in ways:
        ww, wc, rw, rc = best[f"level {level}, fsync {fsync}"]
        lines.append(f"| level {level}, fsync {fsync} | {ww:.2f} | {wc:.2f} | {rw:.2f} | "
                     f"{rc:.2f} | {ww / base[0]:.2f} | {wc / base[1]:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
