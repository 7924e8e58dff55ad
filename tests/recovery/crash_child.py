"""A task process for the kill -9 test: ingest + operator + logs, recovering on start.

``python -m tests.recovery.crash_child RUN SEED N IMPL`` runs scenario ``SEED`` with
operator ``IMPL`` over the ``N``-tuple stream of that seed. The upstream log's commit
token is the number of source batches ingested, so a restarted child appends
idempotently. On start the child
recovers the operator from its output log (fresh start if empty), catches up on the
ingested input after ``t_c``, then ingests and processes the rest, one committed
output record per input batch, and seals both logs at the end. It prints ``started``
once recovered and ``batch I`` after each committed output record, so the parent can
kill it at a random moment of the run.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow as pa

from recovery.partition import recover_partition
from storage_log.log import StreamLog
from tests.recovery.harness import Scenario, make_stream, random_scenario


def scenario(seed: int, n: int, impl: str) -> tuple[Scenario, list[pa.RecordBatch]]:
    """The scenario and input stream of ``seed`` (the parent builds the same)."""
    rng = random.Random(seed)
    scn = random_scenario(rng, impl)
    keys = rng.randint(20, 200)
    return scn, make_stream(n, keys, seed, key_type=scn.key_type, max_batch=25)


def main(argv: list[str]) -> int:
    run_dir, seed, n, impl = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    scn, inputs = scenario(seed, n, impl)
    up_dir, out_dir = run_dir / "up", run_dir / "out"
    with StreamLog.open(up_dir, writable=True, create=True, fsync="never") as up:
        token = up.last_token()
        ingested = int(token) if token else 0
        op = scn.operator()
        rec = recover_partition(out_dir, up_dir, op, fsync="never")
        with rec.output_log as out:
            print("started", flush=True)
            if out.sealed:  # finished before a kill landed
                up.seal()
                print("done", flush=True)
                return 0
            for b in up.read_forward(after_seq=rec.t_c):
                out.append(op.process(b))
                out.commit()
            for i in range(ingested, len(inputs)):
                up.append(inputs[i])
                up.commit(str(i + 1).encode())
                out.append(op.process(inputs[i]))
                out.commit()
                print("batch", i, flush=True)
            out.append(op.finish())
            out.seal()
        up.seal()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
