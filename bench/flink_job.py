"""Flink SQL on the fair benchmark's query, in a PyFlink MiniCluster: throughput and restart.

``python -m bench.flink_job --rows N --parallelism K [K ...] [--kill-at 0.5]
[--cec-export FILE] [--data DIR] [--repeats R] [--checkpoint-interval S]``

The Flink side of the comparisons of issues 27 and 30, to be imported by
bench/fair_spark.py-style programs (``from bench.flink_job import run_flink,
restart_flink, flink_available``). It runs in the project's interpreter and needs no
PyFlink itself: each Flink job is a child process (bench/flink_child.py) run by the
interpreter of a venv of its own, ``.venv-flink`` (git-ignored), made on first use with
PyPI's ``apache-flink`` :data:`FLINK_VERSION` (the test suite never makes it).

The same input and query as bench/fair_spark.py:

* Input: the rows make_data writes (parquet files in name order = stream order, item_time
  = start + row × 10 µs, the sentinel row an hour after the last, last). PyFlink from
  PyPI ships no parquet format (flink-sql-parquet is a Maven artifact and this machine
  reaches only PyPI, Debian and npm), so the rows are converted once, untimed as the data
  making is, to CSV (``flink-csv`` ships in the wheel): K files for parallelism K, row i
  in file ``i mod K``, each file in time order and spanning the whole input. Flink's file
  source hands files to its readers in no fixed order (its split assigner keeps them in a
  hash set), so a layout of many small files would feed event time out of order; K
  time-ordered files read by K readers keep every reader in order and all K advancing
  together, so no row is late and the open windows stay few. Reading CSV costs Flink more
  than a vectorized parquet reader would: this handicap is Flink's, and is reported.
  bench/growth_bench.py's CSV table instead gives Flink the file cec and Spark read too
  (:func:`shared_csv`: one time-ordered file with a header line; ``flink_command(...,
  csv=...)``), read by one reader (Flink's CSV format does not split a file).
* Query: Flink SQL in **streaming mode** on the bounded input (event-time windows fired by
  the watermark, as a stream processor runs them; batch mode would sort and aggregate
  instead): ``ts = TO_TIMESTAMP_LTZ(item_time / 1000, 3)`` (Flink's rowtime has
  millisecond precision; every window bound is a whole millisecond, so each row's window
  is the same as with microseconds), ``WATERMARK FOR ts AS ts - INTERVAL '0.001'
  SECOND`` (Spark's ``withWatermark(ts, "0 seconds")``: 100 rows share each millisecond
  here, and Flink's periodic watermark could land between them, so it trails the
  largest timestamp by 1 ms as Flink's own ``forMonotonousTimestamps`` does; with the
  input in order no row is late either way), ``TUMBLE(TABLE src, DESCRIPTOR(ts),
  INTERVAL '10' SECOND)`` (``HOP`` 5 s / 10 s with ``sliding``), ``AVG(CAST(item_price
  AS DOUBLE))`` per ``item_id`` (Flink's AVG of a BIGINT is a BIGINT), into the
  filesystem sink (CSV): exactly-once, its files become visible when a checkpoint
  commits them or the bounded job ends. At the end of the input Flink's watermark goes
  to +inf, so every window is emitted as cec and Spark (with its sentinel) emit them.
  Session time zone UTC; the output is normalized (window bounds to epoch µs, the
  sentinel dropped, sorted) as bench/fair_spark.py normalizes cec's and Spark's, and
  compared with its ``compare``.
* Throughput (issue 30): the whole child process, interpreter + JVM + MiniCluster + plan
  + job + exit, as fair_spark times Spark; checkpoints every
  ``checkpoint_interval_s`` (default 1 s, filesystem storage, the HashMap state backend;
  ``None`` turns them off, which a fault-tolerant run would not do).
* Restart (issue 27): the same job with checkpoints every second (retained), killed with
  SIGKILL of its whole process group (Python, the JVM and its MiniCluster) when the
  input is ``kill_at`` done, then a new process restoring from the last completed
  checkpoint (``execution.state-recovery.path``) runs to the end. ``kill_signal``
  ``"checkpoint"`` (default, Spark's definition in fair_spark: its committed
  micro-batches): killed once a checkpoint triggered after the sources had read
  ``kill_at`` of the rows has completed, so the restored state holds at least that
  fraction; ``"read"`` (cec's definition: rows processed): killed once the sources have
  read that fraction and any checkpoint has completed. Rows read are the sources'
  ``numRecordsOut`` from the MiniCluster's REST API on 127.0.0.1. Timed: the restart
  process from its start to its exit (the sink's files all committed), and from the
  kill to that exit.

Exit codes of the CLI: 0 every output equal (to the reference computed from the input,
to ``--cec-export`` if given, and after a restart to the failure-free run), 1 an output
differs (the first difference is printed), 2 bad input (no parquet in ``--data``, an
unreadable ``--cec-export``, a parallelism below 1), 3 Flink cannot be installed or
started here (the reason is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from bench import harness
from bench.fair_spark import cec_output, make_data, normalize
from bench.harness import Run, alternate, compare, summary

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-flink"
CHILD = Path(__file__).with_name("flink_child.py")
FLINK_VERSION = "2.3.0"  # the newest apache-flink on PyPI with wheels for Python 3.11
WATERMARK_DELAY_MS = 1
SIZE_S, SLIDE_S = 10, 5
INPUT_COLUMNS = ("item_id", "item_price", "item_time")
OUTPUT_COLUMNS = ("key", "window_start", "window_end", "avg")
SOURCE_METRIC = re.compile(r"^\d+\.Source__.*\.numRecordsOut$")
EXIT_BAD_INPUT = 2


class FlinkUnavailable(RuntimeError):
    """PyFlink cannot be installed or started here; the message says why."""


# ----------------------------------------------------------------------------- pure parts

def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def source_ddl(path: str, delay_ms: int = WATERMARK_DELAY_MS, *, header: bool = False
               ) -> str:
    """The input table: the CSV files, event time in ms, the watermark ``delay_ms`` behind.

    ``header``: the files begin with a line of column names (:func:`shared_csv`'s). Flink
    2.3's CSV format cannot skip a line (``csv.ignore-first-line`` is newer), so it reads
    that line with ``csv.ignore-parse-errors``: a row of NULLs, its time taken as 0 (a
    NULL rowtime fails the job) and the row dropped by :data:`ROWS_VIEW` before the
    window. Any other row read so would change the averages the comparison checks."""
    time = "COALESCE(item_time, 0)" if header else "item_time"
    lenient = ", 'csv.ignore-parse-errors' = 'true'" if header else ""
    return ("CREATE TABLE src (item_id BIGINT, item_price BIGINT, item_time BIGINT, "
            f"ts AS TO_TIMESTAMP_LTZ({time} / 1000, 3), "
            f"WATERMARK FOR ts AS ts - INTERVAL '{delay_ms / 1000:.3f}' SECOND) "
            f"WITH ('connector' = 'filesystem', 'path' = {_sql_str(path)}, "
            f"'format' = 'csv'{lenient})")


# the input rows without a header line read as NULLs (source_ddl(header=True))
ROWS_VIEW = ("CREATE TEMPORARY VIEW src_rows AS SELECT * FROM src "
             "WHERE item_time IS NOT NULL")


def sink_ddl(path: str) -> str:
    """The output table: CSV files in ``path``, committed by checkpoints or at the end."""
    return ("CREATE TABLE snk (key BIGINT, window_start TIMESTAMP(3), "
            "window_end TIMESTAMP(3), avg_price DOUBLE) "
            f"WITH ('connector' = 'filesystem', 'path' = {_sql_str(path)}, "
            "'format' = 'csv')")


def query_sql(sliding: bool = False, table: str = "src") -> str:
    """The windowed average per key, as cec's and Spark's in bench/fair_spark.py, over
    ``table`` (``src``, or ``src_rows`` of :data:`ROWS_VIEW`)."""
    window = (f"HOP(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{SLIDE_S}' SECOND, "
              f"INTERVAL '{SIZE_S}' SECOND)" if sliding
              else f"TUMBLE(TABLE {table}, DESCRIPTOR(ts), INTERVAL '{SIZE_S}' SECOND)")
    return ("INSERT INTO snk SELECT item_id, window_start, window_end, "
            f"AVG(CAST(item_price AS DOUBLE)) FROM TABLE({window}) "
            "GROUP BY item_id, window_start, window_end")


def flink_conf(parallelism: int, *, rest_port: int, checkpoint_dir: str | None = None,
               checkpoint_interval_ms: int | None = None, restore: str | None = None,
               state_backend: str = "hashmap") -> dict[str, str]:
    """The job's Flink configuration (keys of Flink 2.x)."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be at least 1, not {parallelism}")
    if state_backend not in ("hashmap", "rocksdb"):
        raise ValueError(f"state backend {state_backend!r}: expected hashmap or rocksdb")
    conf = {
        "execution.runtime-mode": "streaming",
        "parallelism.default": str(parallelism),
        "table.local-time-zone": "UTC",
        "state.backend.type": state_backend,
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
        "rest.port": str(rest_port),
        "metrics.fetcher.update-interval": "200 ms",
        "pipeline.name": "cec-fair-flink",
    }
    if checkpoint_interval_ms is not None:
        if checkpoint_dir is None:
            raise ValueError("checkpoints need a checkpoint directory")
        conf |= {
            "execution.checkpointing.interval": f"{checkpoint_interval_ms} ms",
            "execution.checkpointing.storage": "filesystem",
            "execution.checkpointing.dir": checkpoint_dir,
            "execution.checkpointing.externalized-checkpoint-retention":
                "RETAIN_ON_CANCELLATION",
            "execution.checkpointing.num-retained": "2",
        }
    if restore is not None:
        conf["execution.state-recovery.path"] = restore
    return conf


def split_round_robin(table: pa.Table, offset: int, parts: int) -> list[pa.Table]:
    """Row ``offset + j`` of the input goes to part ``(offset + j) mod parts``."""
    which = (np.arange(offset, offset + table.num_rows, dtype=np.int64) % parts)
    return [table.filter(pa.array(which == i)) for i in range(parts)]


def flink_timestamps_us(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Flink's TIMESTAMP(3) text (``2026-01-01 00:00:10[.123]``, UTC) as epoch µs."""
    if column.null_count:
        raise ValueError("a window bound is empty in Flink's output")
    return pc.cast(pc.cast(column, pa.timestamp("us")), pa.int64())


def normalize_flink(table: pa.Table) -> pa.Table:
    """Flink's sink rows (key, start text, end text, avg) as fair_spark normalizes outputs."""
    if table.num_columns != len(OUTPUT_COLUMNS):
        raise ValueError(f"Flink's output has {table.num_columns} columns, expected "
                         f"{len(OUTPUT_COLUMNS)} ({', '.join(OUTPUT_COLUMNS)})")
    table = table.rename_columns(list(OUTPUT_COLUMNS))
    return normalize(pa.table({
        "key": table.column("key"),
        "window_start": flink_timestamps_us(table.column("window_start")),
        "window_end": flink_timestamps_us(table.column("window_end")),
        "avg": table.column("avg")}))


def source_rows(metrics: Sequence[dict[str, Any]]) -> int:
    """Rows read by all source subtasks, from the REST API's vertex metrics."""
    total = 0
    for m in metrics:
        if SOURCE_METRIC.match(str(m.get("id", ""))):
            try:
                total += int(float(m.get("value", 0)))
            except (TypeError, ValueError):
                continue
    return total


def reference_windows(table: pa.Table, sliding: bool = False) -> pa.Table:
    """The query's answer computed directly from the input rows (a check independent of
    cec): the average per key per window, every window emitted, normalized."""
    size, slide = SIZE_S * 1_000_000, SLIDE_S * 1_000_000
    step = slide if sliding else size
    t = table.column("item_time").to_numpy()
    last = (t // step) * step
    parts = []
    for k in range(size // step):
        start = last - k * step
        parts.append(pa.table({"key": table.column("item_id"),
                               "window_start": pa.array(start),
                               "price": table.column("item_price")}))
    rows = pa.concat_tables(parts)
    agg = rows.group_by(["key", "window_start"]).aggregate([("price", "mean")])
    starts = agg.column("window_start")
    return normalize(pa.table({"key": agg.column("key"), "window_start": starts,
                               "window_end": pc.add(starts, size),
                               "avg": agg.column("price_mean")}))


def checkpoint_rows(samples: Sequence[tuple[float, int]], trigger_ms: float) -> int:
    """Rows read when a checkpoint was triggered, from (epoch ms, rows) samples: the last
    sample at or before the trigger (a lower bound of the rows its state holds)."""
    before = [rows for at, rows in samples if at <= trigger_ms]
    return max(before) if before else 0


# ----------------------------------------------------------------------------- the venv

def _pyflink_version(python: Path) -> str | None:
    if not python.exists():
        return None
    proc = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('apache-flink'))"],
        capture_output=True, text=True, check=False, timeout=120)
    return proc.stdout.strip() if proc.returncode == 0 else None


def flink_available() -> bool:
    """True if the Flink venv holds PyFlink :data:`FLINK_VERSION` and Java is on PATH
    (installs nothing)."""
    return (shutil.which("java") is not None
            and _pyflink_version(VENV / "bin" / "python") == FLINK_VERSION)


def flink_python(install: bool = True) -> Path:
    """The Flink venv's interpreter, making the venv first if it is missing."""
    python = VENV / "bin" / "python"
    if shutil.which("java") is None:
        raise FlinkUnavailable("no `java` on PATH: PyFlink needs a Java 11/17 runtime")
    if _pyflink_version(python) == FLINK_VERSION:
        return python
    if not install:
        raise FlinkUnavailable(f"{VENV} has no apache-flink {FLINK_VERSION}; "
                               "run `python -m bench.flink_job --install`")
    print(f"# making {VENV} with apache-flink {FLINK_VERSION} (once; about 850 MB)",
          file=sys.stderr, flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q",
                           f"apache-flink=={FLINK_VERSION}"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or _pyflink_version(python) != FLINK_VERSION:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise FlinkUnavailable(f"pip could not install apache-flink=={FLINK_VERSION} "
                               f"into {VENV}:\n{tail}")
    return python


# ----------------------------------------------------------------------------- input, output

def input_files(data: Path) -> list[Path]:
    files = sorted(data.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{data}: no parquet input files")
    return files


def input_rows(data: Path) -> int:
    """Rows of the input without the sentinel (the parquet footers, no data read)."""
    n = sum(int(pq.ParquetFile(f).metadata.num_rows) for f in input_files(data))
    return n - 1 if any("sentinel" in f.name for f in input_files(data)) else n


def _stamp(files: Sequence[Path]) -> list[list[Any]]:
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def _made_from(dest: Path, stamp: list[list[Any]]) -> bool:
    """Whether ``dest`` was made from parquet files with this stamp (its marker says so)."""
    try:
        return bool(json.loads((dest / "_source.json").read_text()) == stamp)
    except (OSError, ValueError):
        return False


def _to_csv(files: Sequence[Path], paths: Sequence[Path], header: bool) -> None:
    """The rows of ``files`` (in order) as CSV, row i in ``paths[i mod K]``; integers as
    written by Arrow, a line of column names first if ``header``."""
    schema = pa.schema([(c, pa.int64()) for c in INPUT_COLUMNS])
    opts = pacsv.WriteOptions(include_header=False)
    with contextlib.ExitStack() as stack:
        sinks = [stack.enter_context(open(p, "wb")) for p in paths]
        if header:
            for sink in sinks:
                sink.write((",".join(INPUT_COLUMNS) + "\n").encode())
        writers = [stack.enter_context(pacsv.CSVWriter(sink, schema, write_options=opts))
                   for sink in sinks]
        offset = 0
        for f in files:
            table = pq.read_table(f, columns=list(INPUT_COLUMNS)).cast(schema)
            for writer, part in zip(writers, split_round_robin(table, offset, len(paths)),
                                    strict=True):
                if part.num_rows:
                    writer.write_table(part)
            offset += table.num_rows


def flink_input(data: Path, parallelism: int) -> Path:
    """The CSV copy of ``data`` for parallelism K (K time-ordered files), made once and
    reused while the parquet files are unchanged. Beside ``data``, not in it (Spark and
    cec read every file in ``data``)."""
    return _csv_copy(data, f"-flink-p{parallelism}",
                     [f"part-{i:03d}.csv" for i in range(parallelism)], header=False)


def _csv_copy(data: Path, suffix: str, names: list[str], *, header: bool) -> Path:
    """The folder ``DATA{suffix}`` beside ``data`` holding its rows as the CSV files
    ``names`` (:func:`_to_csv`), remade only when the parquet files changed (their
    stamp in ``_source.json``: every reader skips names starting with ``_``)."""
    files = input_files(data)
    dest = data.with_name(f"{data.name}{suffix}")
    stamp = _stamp(files)
    if _made_from(dest, stamp):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    _to_csv(files, [dest / n for n in names], header=header)
    (dest / "_source.json").write_text(json.dumps(stamp))
    return dest


SHARED_CSV = "items.csv"


def shared_csv(data: Path) -> Path:
    """The CSV copy of ``data`` every side reads (bench/growth_bench.py's CSV table):
    the folder ``DATA-csv`` beside ``data`` holding one file, :data:`SHARED_CSV`: the
    line ``item_id,item_price,item_time``, then every row in stream order (the sentinel
    last), the three columns integers as in the parquet (``item_time`` epoch µs). One
    file because Flink's file source hands files to its readers in no fixed order (see
    the module's docstring) and cec reads a folder in name order with time never going
    back: only one time-ordered file is read right by both. Made once, untimed, and
    reused while the parquet files are unchanged; its marker ``_source.json`` is skipped
    by all three readers (names starting with ``_``)."""
    return _csv_copy(data, "-csv", [SHARED_CSV], header=True)


def committed_files(out: Path) -> list[Path]:
    """The sink's finished files (in-progress and pending ones are hidden: ``.part-*``)."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir()
                  if p.is_file() and not p.name.startswith((".", "_")))


def flink_output(out: Path) -> pa.Table:
    """Flink's committed output, normalized as fair_spark's outputs are."""
    opts = pacsv.ReadOptions(column_names=list(OUTPUT_COLUMNS))
    conv = pacsv.ConvertOptions(column_types={"key": pa.int64(), "window_start": pa.string(),
                                              "window_end": pa.string(),
                                              "avg": pa.float64()})
    tables = [pacsv.read_csv(p, read_options=opts, convert_options=conv)
              for p in committed_files(out) if p.stat().st_size > 0]
    if not tables:
        raise FileNotFoundError(f"{out}: Flink committed no output file")
    return normalize_flink(pa.concat_tables(tables))


def reference_output(data: Path, sliding: bool = False) -> pa.Table:
    table = pa.concat_tables([pq.read_table(f, columns=list(INPUT_COLUMNS))
                              for f in input_files(data)])
    return reference_windows(table, sliding)


# ----------------------------------------------------------------------------- processes

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Child:
    """One Flink job in its own process group (bench/flink_child.py)."""

    def __init__(self, python: Path, work: Path, name: str, conf: dict[str, str],
                 statements: list[str], insert: str, log: Path) -> None:
        self.events_file = work / f"{name}.events"
        job_file = work / f"{name}.job.json"
        job_file.write_text(json.dumps({"conf": conf, "statements": statements,
                                        "insert": insert}, indent=1))
        self.port = int(conf["rest.port"])
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["FLINK_LOG_DIR"] = str(work / "flink-logs" / name)  # Flink's own log, per job
        self.run = Run([str(python), str(CHILD), str(job_file)], log,
                       stdout=self.events_file, env=env, cwd=work)
        self.t0 = self.run.t0
        self.log = log

    def wait(self, timeout: float) -> float:
        """Seconds from the start to the exit; :class:`bench.harness.Failed` (a
        RuntimeError) if it failed or timed out."""
        return self.run.check(timeout, "the Flink job's end").wall_s

    def kill(self) -> float:
        """SIGKILL to the whole process group (Python, the JVM); returns the kill time."""
        at = time.perf_counter()
        self.run.kill()
        return at

    def events(self) -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            for line in self.events_file.read_text().splitlines():
                with_t = json.loads(line)
                out[str(with_t["event"])] = float(with_t["t"])
        except (OSError, ValueError, KeyError):
            pass
        return out

    def rest(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                    timeout=2) as resp:
            return json.load(resp)


def _job(data: Path, out: Path, sliding: bool, header: bool = False
         ) -> tuple[list[str], str]:
    if header:
        return ([source_ddl(str(data), header=True), ROWS_VIEW, sink_ddl(str(out))],
                query_sql(sliding, "src_rows"))
    return [source_ddl(str(data)), sink_ddl(str(out))], query_sql(sliding)


def run_flink(data: Path, work: Path, parallelism: int, *,
              checkpoint_interval_s: float | None = 1.0, state_backend: str = "hashmap",
              sliding: bool = False, name: str | None = None, log: Path | None = None,
              timeout: float = 3600) -> dict[str, Any]:
    """One failure-free run, whole process, the output normalized.

    Returns ``wall_s`` (the child process from start to exit), ``load`` (1-min load
    average at the start), ``phases`` (seconds since the child's start when its table
    environment was up, the job submitted, the job finished) and ``output``."""
    python = flink_python()
    csv = flink_input(data, parallelism)
    name = name or f"flink-p{parallelism}"
    work.mkdir(parents=True, exist_ok=True)
    out, ckpt = work / f"{name}-out", work / f"{name}-ckpt"
    for d in (out, ckpt):
        shutil.rmtree(d, ignore_errors=True)
    interval = None if checkpoint_interval_s is None else int(checkpoint_interval_s * 1000)
    conf = flink_conf(parallelism, rest_port=_free_port(), checkpoint_dir=ckpt.as_uri(),
                      checkpoint_interval_ms=interval, state_backend=state_backend)
    statements, insert = _job(csv, out, sliding)
    load = harness.load()
    child = _Child(python, work, name, conf, statements, insert, log or work / "flink.log")
    wall = child.wait(timeout)
    return {"wall_s": round(wall, 2), "load": load, "parallelism": parallelism,
            "checkpoint_interval_s": checkpoint_interval_s, "state_backend": state_backend,
            "phases": child.events(), "output": flink_output(out)}


def flink_command(data: Path, work: Path, parallelism: int, *,
                  checkpoint_interval_s: float | None = 1.0, state_backend: str = "hashmap",
                  sliding: bool = False, csv: Path | None = None) -> list[str]:
    """One failure-free run as a single command for an outside timer (one that runs
    two commands in turn): ``sh -c`` that empties the output and checkpoint folders and
    execs the child, the same job :func:`run_flink` runs (input converted, job file written now).
    ``csv``: read this :func:`shared_csv` folder (one file with a header line) instead
    of the K files :func:`flink_input` makes of ``data``."""
    python = flink_python()
    header = csv is not None
    csv = csv if csv is not None else flink_input(data, parallelism)
    name = f"flink-cmd-p{parallelism}"
    work.mkdir(parents=True, exist_ok=True)
    out, ckpt = work / f"{name}-out", work / f"{name}-ckpt"
    interval = None if checkpoint_interval_s is None else int(checkpoint_interval_s * 1000)
    conf = flink_conf(parallelism, rest_port=_free_port(), checkpoint_dir=ckpt.as_uri(),
                      checkpoint_interval_ms=interval, state_backend=state_backend)
    statements, insert = _job(csv, out, sliding, header)
    job_file = work / f"{name}.job.json"
    job_file.write_text(json.dumps({"conf": conf, "statements": statements,
                                    "insert": insert}, indent=1))
    script = (f"rm -rf {shlex.quote(str(out))} {shlex.quote(str(ckpt))} && "
              f"FLINK_LOG_DIR={shlex.quote(str(work / 'flink-logs' / name))} exec "
              f"{shlex.quote(str(python))} {shlex.quote(str(CHILD))} "
              f"{shlex.quote(str(job_file))}")
    return ["sh", "-c", script]


def latest_checkpoint(root: Path) -> list[Path]:
    """Completed checkpoints under ``root`` (``JOB/chk-N`` with ``_metadata``), newest
    first."""
    found = [p.parent for p in root.glob("*/chk-*/_metadata")]
    return sorted(found, key=lambda p: int(p.name.removeprefix("chk-")), reverse=True)


def _progress(child: _Child) -> tuple[int, dict[str, Any]] | None:
    """(rows read by the sources, the checkpoint statistics), or None before the job
    runs."""
    try:
        jobs = child.rest("/jobs/overview").get("jobs", [])
        if not jobs:
            return None
        jid = jobs[0]["jid"]
        job = child.rest(f"/jobs/{jid}")
        if job.get("state") != "RUNNING":
            return None
        rows = 0
        for v in job.get("vertices", []):
            if str(v.get("name", "")).startswith("Source"):
                ids = child.rest(f"/jobs/{jid}/vertices/{v['id']}/metrics")
                wanted = ",".join(m["id"] for m in ids if SOURCE_METRIC.match(m["id"]))
                if wanted:
                    rows += source_rows(child.rest(
                        f"/jobs/{jid}/vertices/{v['id']}/metrics?get={wanted}"))
        return rows, child.rest(f"/jobs/{jid}/checkpoints")
    except (OSError, ValueError, KeyError, urllib.error.URLError):
        return None


def restart_flink(data: Path, work: Path, parallelism: int, *, kill_at: float = 0.5,
                  kill_signal: str = "checkpoint", rows: int | None = None,
                  checkpoint_interval_s: float = 1.0, state_backend: str = "hashmap",
                  sliding: bool = False, name: str | None = None, log: Path | None = None,
                  timeout: float = 3600) -> dict[str, Any]:
    """Killed (SIGKILL, the whole process group) at ``kill_at`` of the input, then
    restarted from its last completed checkpoint and run to the end.

    Returns ``restart_s`` (the new process, start to exit: the output complete),
    ``kill_to_complete_s`` (from the SIGKILL to that exit), ``killed_at_rows`` (rows the
    sources had read at the kill), ``checkpoint_rows`` (rows read when the restored
    checkpoint was triggered, a lower bound of what it holds), ``checkpoint``, ``load``,
    ``first_run_s`` and ``output``."""
    if kill_signal not in ("checkpoint", "read"):
        raise ValueError(f"kill signal {kill_signal!r}: expected checkpoint or read")
    if not 0 < kill_at < 1:
        raise ValueError(f"kill_at must be between 0 and 1, not {kill_at}")
    python = flink_python()
    csv = flink_input(data, parallelism)
    rows = rows if rows is not None else input_rows(data)
    name = name or f"flink-rec-p{parallelism}"
    work.mkdir(parents=True, exist_ok=True)
    out, ckpt = work / f"{name}-out", work / f"{name}-ckpt"
    for d in (out, ckpt):
        shutil.rmtree(d, ignore_errors=True)
    log = log or work / "flink.log"
    interval = int(checkpoint_interval_s * 1000)
    statements, insert = _job(csv, out, sliding)

    def conf(restore: str | None) -> dict[str, str]:
        return flink_conf(parallelism, rest_port=_free_port(), checkpoint_dir=ckpt.as_uri(),
                          checkpoint_interval_ms=interval, restore=restore,
                          state_backend=state_backend)

    first = _Child(python, work, f"{name}-1", conf(None), statements, insert, log)
    threshold = kill_at * rows
    samples: list[tuple[float, int]] = []
    crossed_ms: float | None = None
    deadline = time.monotonic() + timeout
    killed_rows, restored_trigger = 0, None
    while True:
        if first.run.poll() is not None:
            raise RuntimeError(f"the Flink job ended (exit {first.run.poll()}) before "
                               f"{kill_at:.0%} of the input was read; see {log}")
        if time.monotonic() > deadline:
            first.kill()
            raise RuntimeError(f"timed out waiting for {kill_at:.0%} of the input")
        seen = _progress(first)
        if seen is not None:
            n, stats = seen
            now_ms = time.time() * 1000
            samples.append((now_ms, n))
            latest = (stats.get("latest") or {}).get("completed") or {}
            completed = int((stats.get("counts") or {}).get("completed", 0))
            if n >= threshold and crossed_ms is None:
                crossed_ms = now_ms
            trigger = latest.get("trigger_timestamp")
            if crossed_ms is not None and completed > 0 and (
                    kill_signal == "read"
                    or (trigger is not None and float(trigger) >= crossed_ms)):
                killed_rows, restored_trigger = n, trigger
                break
        time.sleep(0.1)
    first_run_s = time.perf_counter() - first.t0
    t_kill = first.kill()
    load = harness.load()
    candidates = latest_checkpoint(ckpt)
    if not candidates:
        raise RuntimeError(f"no completed checkpoint under {ckpt} after the kill")
    failed: list[str] = []
    for chk in candidates:  # the newest; an older one only if the newest cannot restore
        second = _Child(python, work, f"{name}-2", conf(str(chk)), statements, insert, log)
        try:
            restart_s = second.wait(timeout)
        except RuntimeError as exc:
            failed.append(f"{chk.name}: {exc}")
            continue
        done = time.perf_counter()
        return {"restart_s": round(restart_s, 2),
                "kill_to_complete_s": round(done - t_kill, 2),
                "killed_at_rows": killed_rows,
                "killed_at_fraction": round(killed_rows / rows, 3),
                "checkpoint": chk.name, "failed_restores": failed,
                "checkpoint_rows": (checkpoint_rows(samples, float(restored_trigger))
                                    if restored_trigger is not None else None),
                "kill_signal": kill_signal, "first_run_s": round(first_run_s, 2),
                "parallelism": parallelism, "checkpoint_interval_s": checkpoint_interval_s,
                "load": load, "phases": second.events(), "output": flink_output(out)}
    raise RuntimeError("no retained checkpoint could be restored: " + "; ".join(failed))


# ----------------------------------------------------------------------------- CLI

def _equal(name: str, a: pa.Table, b: pa.Table, names: tuple[str, str]) -> bool:
    diff = compare(a, b, names)
    print(f"{name}: {'equal' if diff is None else 'DIFFERENT: ' + diff}", flush=True)
    return diff is None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--file-rows", type=int, default=100_000)
    ap.add_argument("--parallelism", type=int, nargs="+", default=[2])
    ap.add_argument("--repeats", type=int, default=1,
                    help="failure-free runs per parallelism (alternated between them)")
    ap.add_argument("--kill-at", type=float, default=None, metavar="FRACTION",
                    help="also measure a kill -9 at this fraction and the restart")
    ap.add_argument("--kill-signal", choices=["checkpoint", "read"], default="checkpoint")
    ap.add_argument("--checkpoint-interval", type=float, default=1.0, metavar="S",
                    help="seconds between checkpoints in the failure-free runs; 0 = none")
    ap.add_argument("--state-backend", choices=["hashmap", "rocksdb"], default="hashmap")
    ap.add_argument("--sliding", action="store_true")
    ap.add_argument("--data", type=Path, default=None,
                    help="an input folder make_data wrote (default: made in --work)")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--cec-export", type=Path, default=None,
                    help="cec's `export --format parquet` file of the same input to compare")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the check against the answer computed from the input")
    ap.add_argument("--json", type=Path, default=None, help="write the results here too")
    ap.add_argument("--install", action="store_true", help="only make the Flink venv")
    ap.add_argument("--command", action="store_true",
                    help="only print one failure-free run (the first --parallelism) as a "
                    "shell command for an outside timer; its output lands in "
                    "WORK/flink-cmd-pK-out")
    args = ap.parse_args(argv)
    try:
        flink_python()
    except FlinkUnavailable as exc:
        print(f"flink_job: {exc}", file=sys.stderr)
        return 3
    if args.install:
        print(f"{VENV}: apache-flink {FLINK_VERSION}")
        return 0
    if any(p < 1 for p in args.parallelism) or args.repeats < 1:
        print("flink_job: --parallelism and --repeats must be at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    work = args.work or Path(tempfile.mkdtemp(prefix="cec-flink-"))
    work.mkdir(parents=True, exist_ok=True)
    data = args.data or work / "data"
    if args.data is None and not data.exists():
        make_data(data, args.rows, args.keys, args.file_rows)
    try:
        rows = input_rows(data)
    except (OSError, FileNotFoundError) as exc:
        print(f"flink_job: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command:
        cmd = flink_command(data, work, args.parallelism[0],
                            checkpoint_interval_s=args.checkpoint_interval or None,
                            state_backend=args.state_backend, sliding=args.sliding)
        print(shlex.join(cmd))
        return 0
    print(f"# flink {FLINK_VERSION}: {rows:,} rows, parallelism {args.parallelism}, "
          f"work dir {work}, load {harness.load()}", flush=True)
    interval = args.checkpoint_interval or None
    checks: list[tuple[str, pa.Table]] = []
    if args.cec_export is not None:
        try:
            checks.append(("cec", cec_output(args.cec_export)))
        except (OSError, pa.ArrowException, KeyError) as exc:
            print(f"flink_job: --cec-export {args.cec_export}: not a cec parquet export "
                  f"({exc})", file=sys.stderr)
            return EXIT_BAD_INPUT
    if not args.no_reference:
        checks.append(("reference", reference_output(data, args.sliding)))
    res: dict[str, Any] = {"rows": rows, "flink": FLINK_VERSION, "runs": [],
                           "load_start": harness.load(), "cpus": os.cpu_count()}
    ok = True

    free_of_failure: dict[int, pa.Table] = {}

    def one(p: int) -> Callable[[int], None]:
        def run(i: int) -> None:
            nonlocal ok
            r = run_flink(data, work, p, checkpoint_interval_s=interval,
                          state_backend=args.state_backend, sliding=args.sliding)
            print(f"flink P={p} run {i}: {r['wall_s']} s whole process (load {r['load']}; "
                  f"phases {r['phases']})", flush=True)
            for what, table in checks:
                ok &= _equal(f"  output vs {what}", table, r["output"], (what, "flink"))
            free_of_failure.setdefault(p, r["output"])
            res["runs"].append({k: v for k, v in r.items() if k != "output"})
        return run

    ps = list(args.parallelism)
    if len(ps) == 2:
        alternate(args.repeats, one(ps[0]), one(ps[1]))
    else:
        for p in ps:
            for i in range(args.repeats):
                one(p)(i)
    res["summary"] = {str(p): summary([r["wall_s"] for r in res["runs"]
                                        if r["parallelism"] == p]) for p in ps}
    if args.kill_at is not None:
        res["restarts"] = []
        for p in ps:
            r = restart_flink(data, work, p, kill_at=args.kill_at, kill_signal=args.kill_signal,
                              rows=rows, state_backend=args.state_backend,
                              sliding=args.sliding)
            print(f"flink P={p} kill -9 at {r['killed_at_rows']:,} rows read "
                  f"({r['killed_at_fraction']:.1%}; restored {r['checkpoint']}, >= "
                  f"{r['checkpoint_rows']:,} rows): restart {r['restart_s']} s, kill -> "
                  f"output complete {r['kill_to_complete_s']} s (load {r['load']}; phases "
                  f"{r['phases']})", flush=True)
            for what, table in [("flink failure-free", free_of_failure[p]), *checks]:
                ok &= _equal(f"  output after restart vs {what}", table, r["output"],
                             (what, "flink"))
            res["restarts"].append({k: v for k, v in r.items() if k != "output"})
    res["load_end"] = harness.load()
    res["outputs_equal"] = ok
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
