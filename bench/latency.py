"""Latency: a row entering the source to its window's result durable in the output log.

``python bench/latency.py [--rate ROWS_PER_S] [--seconds S] [--window-ms W] ...``

What runs: a real ``cec run pipeline`` process (local Spark) on a ``stream-dir``
source. This program is the producer and the observer:

* **producer**: every ``--file-ms`` it writes the rows of that interval as one CSV file
  (written under a hidden name, then renamed: the rename is the moment the rows *enter
  the source*); ``item_time`` is the wall clock in microseconds when the row was made,
  so event time and wall time agree; keys uniform over ``--keys``; after ``--seconds``
  it writes ``_END``;
* **observer**: a reader of every partition's output log polls it every 5 ms and
  records when each result (key, window) is first there. A reader sees only committed
  records, and a commit is fsync'ed (``fsync = "always"``), so "seen" is "durable".

Reported, over the rows whose window closed during the steady part (the first and
last 2 s dropped):

* **row latency** = durable time of the row's window result − the time the row
  entered the source (a row early in a W-ms tumbling window waits for the window to
  end: at least ~W/2 on average is the window, not cec);
* **close latency** = durable time − window end (wall clock = event time): how long
  after a window could first close its result was durable. A window closes when a row
  past its end arrives, so this includes up to one file interval of waiting for data.

p50/p99/max of both, the input rate, and the machine's load. The saturating rate is
what ``cec run pipeline`` sustains on a bounded source (BENCHMARKS); run this at about
half of it, e.g. ``--rate 50000`` here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cec.records import G_OPEN_R, R
from storage_log.errors import StorageLogError
from storage_log.log import StreamLog

REPO = Path(__file__).resolve().parents[1]

SPEC = """[source]
kind = "stream-dir"
path = "in"
format = "csv"
time_field = "item_time"
poll_ms = {poll_ms}

[aggregate]
group_by = "item_id"
field = "item_price"
function = "avg"
window = {{ kind = "time", size = "{window_ms}ms" }}

[run]
partitions = {partitions}
"""


class Producer(threading.Thread):
    """Writes one CSV file per interval; remembers when each file entered the source."""

    def __init__(self, folder: Path, rate: float, file_ms: float, seconds: float,
                 keys: int, seed: int = 1) -> None:
        super().__init__(daemon=True)
        self.folder, self.rate, self.file_s, self.seconds = folder, rate, file_ms / 1e3, seconds
        self.keys = keys
        self.rng = np.random.default_rng(seed)
        self.files: list[tuple[float, np.ndarray, np.ndarray]] = []  # (entered, keys, ts)
        self.n = 0

    def write_file(self, now_us: int, n: int) -> None:
        keys = self.rng.integers(0, self.keys, n)
        prices = self.rng.integers(100, 10_000, n)
        ts = np.sort(now_us - self.rng.integers(0, int(self.file_s * 1e6), n))
        if self.files:
            ts = np.maximum(ts, int(self.files[-1][2][-1]))  # the stream stays in order
        body = "item_id,item_price,item_time\n" + "".join(
            f"{k},{p},{t}\n" for k, p, t in zip(keys.tolist(), prices.tolist(), ts.tolist(),
                                                strict=True))
        tmp = self.folder / f".f{self.n:08d}.csv"
        tmp.write_text(body)
        os.replace(tmp, self.folder / f"f{self.n:08d}.csv")
        self.files.append((time.time(), keys, ts))
        self.n += 1

    def run(self) -> None:
        start = time.time()
        nxt = start
        while time.time() - start < self.seconds:
            nxt += self.file_s
            time.sleep(max(0.0, nxt - time.time()))
            self.write_file(time.time_ns() // 1000, max(1, int(self.rate * self.file_s)))
        (self.folder / "_END").write_text("")


class Observer(threading.Thread):
    """Polls the output logs; the first time each (key, window start) result is seen."""

    def __init__(self, run: Path, partitions: int) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.partitions = run, partitions
        self.seen: dict[tuple[int, int], float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        logs: dict[int, StreamLog] = {}
        after: dict[int, int | None] = {}
        while not self.stop.is_set():
            for p in range(self.partitions):
                path = self.run_dir / "output" / f"p{p:04d}"
                try:
                    if p not in logs:
                        logs[p] = StreamLog.open(path)
                        after[p] = None
                    for batch in logs[p].read_forward(after_seq=after[p]):
                        now = time.time()
                        t = batch.column("type").to_numpy()
                        keep = (t == R) | (t == G_OPEN_R)
                        for k, w in zip(batch.column("key").to_numpy()[keep].tolist(),
                                        batch.column("win_start").to_numpy()[keep].tolist(),
                                        strict=True):
                            self.seen.setdefault((k, w), now)
                        after[p] = int(batch.column("seq")[-1].as_py())
                except (StorageLogError, OSError):
                    pass  # not created yet
            time.sleep(0.005)
        for log in logs.values():
            log.close()


def percentiles(x: np.ndarray) -> dict[str, float]:
    if len(x) == 0:
        return {"n": 0}
    return {"n": len(x), "p50_ms": round(float(np.percentile(x, 50)) * 1e3, 1),
            "p99_ms": round(float(np.percentile(x, 99)) * 1e3, 1),
            "max_ms": round(float(x.max()) * 1e3, 1)}


def measure(args: argparse.Namespace, work: Path) -> dict[str, object]:
    load_start = os.getloadavg()[0]
    folder = work / "in"
    folder.mkdir(parents=True)
    spec = work / "spec.toml"
    spec.write_text(SPEC.format(poll_ms=args.poll_ms, window_ms=args.window_ms,
                                partitions=args.partitions))
    prod = Producer(folder, args.rate, args.file_ms, args.seconds, args.keys)
    prod.write_file(time.time_ns() // 1000, 1)  # a stream folder starts with a file
    run = work / "run"
    log = (work / "cec.log").open("wb")
    out = (work / "cec.json").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "cli.app", "run", "pipeline", str(spec),
                             "--log-dir", str(run), "--json"], stdout=out, stderr=log,
                            cwd=REPO, start_new_session=True)
    obs = Observer(run, args.partitions)
    obs.start()
    try:
        deadline = time.time() + 300
        state = run / "state"
        while not (state.is_dir() and any(state.glob("p*.json"))):  # operators running
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("cec ended or did not start its operators: "
                                   + (work / "cec.log").read_text()[-2000:])
            time.sleep(0.05)
        prod.start()
        prod.join()
        code = proc.wait(timeout=args.seconds + 300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.1)
        obs.stop.set()
        obs.join(10)
    if code != 0:
        raise RuntimeError(f"cec exited {code}: {(work / 'cec.log').read_text()[-2000:]}")
    w_us = args.window_ms * 1000
    t0, t1 = prod.files[1][0] + 2.0, prod.files[-1][0] - 2.0
    row_lat: list[float] = []
    close_lat: dict[tuple[int, int], float] = {}
    missing = 0
    for entered, keys, ts in prod.files[1:]:
        starts = ts - ts % w_us
        for k, s in zip(keys.tolist(), starts.tolist(), strict=True):
            seen = obs.seen.get((k, s))
            if seen is None:
                missing += 1
                continue
            end_wall = (s + w_us) / 1e6
            if t0 <= end_wall <= t1:
                row_lat.append(seen - entered)
                close_lat[(k, s)] = seen - end_wall
    rows = np.array(row_lat)
    summary = json.loads((work / "cec.json").read_text())
    jobs = np.array(summary.get("ingest_jobs_s") or [0.0])
    return {
        "rate_rows_per_s": args.rate, "file_ms": args.file_ms, "window_ms": args.window_ms,
        "poll_ms": args.poll_ms, "partitions": args.partitions, "seconds": args.seconds,
        "rows": int(sum(len(f[1]) for f in prod.files)),
        "results_seen": len(obs.seen), "rows_without_result": missing,
        "row_latency": percentiles(rows),
        "close_latency": percentiles(np.array(list(close_lat.values()))),
        # where the time goes: the ingest runs one Spark job per poll that found files
        "ingest_jobs": len(summary.get("ingest_jobs_s") or []),
        "ingest_job_s_p50": round(float(np.percentile(jobs, 50)), 3),
        "ingest_job_s_p99": round(float(np.percentile(jobs, 99)), 3),
        "ingest_writer_s": summary.get("ingest_writer_s"),
        # the machine's 1-minute load average before and after (2 cores here: a load
        # above 2 means cec waited for the CPU)
        "load_avg_1m_start": round(load_start, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=50_000, help="input rows per second")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--file-ms", type=float, default=100.0)
    ap.add_argument("--window-ms", type=int, default=100)
    ap.add_argument("--poll-ms", type=int, default=20)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cec-latency-"))
    try:
        res = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
