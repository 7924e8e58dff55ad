"""An operator task's heap threshold (cec_spark.run.operators.HeapBound): freed blocks
larger than its records' columns go back to the system at once, so a task's peak is what
it holds, not what its heap kept; blocks of a record's size stay in the heap. Each case
runs in a fresh interpreter (the threshold is per process)."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

# First one 4 MiB array freed: under glibc's own rule that raises its mmap threshold to
# 4 MiB. Then 48 arrays of 1 MiB, every page written, each followed by a 200 kB block
# (from the heap's top, under any threshold here) that pins the top, so that glibc
# cannot give freed arrays back by shrinking the heap; then the arrays are freed.
# ``kept``: the MiB of RssAnon still held beyond the pins.
PROBE = textwrap.dedent('''
    import json, sys
    import numpy as np
    from cec_spark.run.operators import HeapBound

    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024

    size = None
    if sys.argv[1] != "plain":
        heap = HeapBound()
        if sys.argv[1] != "bound":
            heap.fit(int(sys.argv[1]))
        size = heap.size
    warm = np.ones(1 << 19)
    del warm
    before = anon()
    arrays, pins = [], []
    for _ in range(48):
        arrays.append(np.ones(1 << 17))  # 1 MiB
        pins.append(np.ones(25_000))
    held = anon()
    del arrays
    after = anon()
    print(json.dumps({"size": size, "held": held - before,
                      "kept": after - before - sum(p.nbytes for p in pins) / 2**20}))
''')


def _probe(mode: str, **env: str) -> dict[str, Any]:
    run_env = {k: v for k, v in os.environ.items() if k != "CEC_MMAP_THRESHOLD"}
    run_env.update(env)
    got = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=REPO, env=run_env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert got.returncode == 0, got.stderr[-3000:]
    out: dict[str, Any] = json.loads(got.stdout.strip().splitlines()[-1])
    out["stderr"] = got.stderr
    return out


pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not (ctypes.util.find_library("c") or "").startswith("libc.so"),
    reason="glibc's mallopt and /proc")


def _kept(got: dict[str, Any]) -> float:
    kept = got["kept"]
    assert kept is not None and (got["held"] or 0) >= 40, got  # the arrays were there
    return float(kept)


def test_freed_blocks_above_the_records_go_back() -> None:
    plain = _probe("plain")
    assert _kept(plain) >= 40, plain  # the premise: glibc's own rule keeps them
    bound = _probe("bound")  # a task's start: 1 MiB
    assert bound["size"] == 1 << 20, bound
    assert _kept(bound) <= 4, bound


def test_records_of_that_size_stay_in_the_heap() -> None:
    # records of 200 k rows: their 8-byte columns are 1.6 MB, so 1 MiB arrays are
    # record-sized temporaries, served from the heap and reused
    fitted = _probe("200000")
    assert fitted["size"] == 200_000 * 10, fitted
    assert _kept(fitted) >= 40, fitted
    small = _probe("50000")  # smaller records never lower it
    assert small["size"] == 1 << 20 and _kept(small) <= 4, small


def test_the_variable() -> None:
    off = _probe("200000", CEC_MMAP_THRESHOLD="0")  # glibc's own rule, never changed
    assert off["size"] == 0 and _kept(off) >= 40, off
    low = _probe("bound", CEC_MMAP_THRESHOLD=str(256 << 10))
    assert low["size"] == 256 << 10 and _kept(low) <= 4, low
    bad = _probe("bound", CEC_MMAP_THRESHOLD="1M")  # said, and the default taken
    assert bad["size"] == 1 << 20 and _kept(bad) <= 4, bad
    assert "CEC_MMAP_THRESHOLD='1M' is not a number of bytes" in bad["stderr"], bad
