"""A process of the concurrency stress test (tests/storage_log/test_threads.py).

``python -m tests.storage_log.stress_child LOG ROLE SECONDS THREADS``:

* ``writer``: one thread appends and commits (with a token) to LOG for SECONDS, while
  THREADS reader threads of the same process open, read and close LOG over and over;
* ``reader``: THREADS reader threads only (LOG is written by another process).

Each reader thread checks what it reads: committed positions never go back, a forward
read from the start returns every seq up to the committed end, in order, and the
token matches the committed end. It prints one line ``ok OPENS`` (reader opens done)
and exits 0, or prints the failure and exits 1. The parent runs it with a hard
timeout: a deadlock (issue 14: two threads of one process opening the LMDB index at
once) shows up as a child that never ends, so ``faulthandler`` dumps every thread's
stack to stderr first.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from storage_log.errors import LogNotFoundError
from storage_log.log import StreamLog

PER = 7  # rows per record
# Each thread runs for SECONDS *and* until it has done this much work, so a loaded
# machine makes the test slower, never weaker (the hard timeout still bounds it).
MIN_COMMITS = 200  # the writer's commits
MIN_OPENS = 200  # each reader thread's opens


def batch(first: int) -> pa.RecordBatch:
    seq = np.arange(first, first + PER, dtype=np.int64)
    return pa.record_batch([seq * 3, seq], names=["ts", "seq"])


def writer(path: Path, until: float, errors: list[str]) -> None:
    try:
        with StreamLog.open(path, writable=True, create=True, fsync="never",
                            segment_bytes=8192) as log:
            nxt = 0 if log.last_seq is None else log.last_seq + 1
            commits = 0
            while time.monotonic() < until or commits < MIN_COMMITS:
                log.append(batch(nxt))
                nxt += PER
                log.commit(str(nxt - 1).encode())
                commits += 1
    except BaseException as exc:  # reported to the parent
        errors.append(f"writer: {exc!r}")


def reader(path: Path, until: float, opens: list[int], errors: list[str]) -> None:
    seen = -1
    n = 0
    try:
        while time.monotonic() < until or n < MIN_OPENS:
            if not path.is_dir():
                continue
            try:
                log = StreamLog.open(path)
            except LogNotFoundError:
                continue  # the writer has not created it yet
            with log:
                n += 1
                last = log.last_seq
                token = log.last_token()
                if last is None:
                    continue
                if last < seen:
                    raise AssertionError(f"committed end went back: {last} after {seen}")
                seen = last
                if token is not None and int(token) < last:
                    raise AssertionError(f"token {token!r} behind the committed end {last}")
                if n % 16 == 0:  # a full read now and then
                    got = np.concatenate([b.column("seq").to_numpy()
                                          for b in log.read_forward()])
                    if got[0] != 0 or not np.array_equal(got, np.arange(len(got))):
                        raise AssertionError("forward read is not 0..n in order")
                    if got[-1] < last:
                        raise AssertionError(f"forward read ends at {got[-1]} < {last}")
                else:
                    for b in log.read_forward(after_seq=max(last - 3 * PER, -1)):
                        b.column("seq")
        opens.append(n)
    except BaseException as exc:  # reported to the parent
        import traceback
        errors.append(f"reader: {exc!r}\n{traceback.format_exc()[-1500:]}")


def main(argv: list[str]) -> int:
    path, role, seconds, threads = Path(argv[0]), argv[1], float(argv[2]), int(argv[3])
    faulthandler.dump_traceback_later(seconds + 120, exit=True)  # evidence of a hang
    until = time.monotonic() + seconds
    errors: list[str] = []
    opens: list[int] = []
    workers = [threading.Thread(target=reader, args=(path, until, opens, errors))
               for _ in range(threads)]
    if role == "writer":
        workers.append(threading.Thread(target=writer, args=(path, until, errors)))
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    faulthandler.cancel_dump_traceback_later()
    if errors:
        print("\n".join(errors), flush=True)
        return 1
    print(f"ok {sum(opens)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
