"""The anchor: Spark Structured Streaming's own stateful aggregation of the paper's workload.

What is measured (issue 7), on the parquet dataset written by ``bench/workload.py``:

- the query: a streaming file source over the dataset (``maxFilesPerTrigger`` files per
  micro-batch, trigger ``availableNow``) → ``groupBy(item_id).agg(avg(item_price))``
  in *update* output mode → a sink that does minimal work (Spark's ``noop`` sink by
  default; ``count`` runs a foreachBatch count, ``parquet`` keeps every batch's updates
  for checking). The ``windowed`` variant groups by ``window(timestamp_micros(item_time),
  W)`` and ``item_id`` under a watermark, since Spark has no count-based windows.
- state store: ``rocksdb`` = ``RocksDBStateStoreProvider`` with changelog checkpointing,
  ``hdfs`` = the default ``HDFSBackedStateStoreProvider``.
- throughput: *steady* rows/s = Σ numInputRows / Σ triggerExecution over the data
  batches after the first (from the query progress), and *wall* rows/s = rows / (time
  from ``start()`` until the query terminated).
- checkpoint bytes per input tuple: apparent size of every file under the checkpoint
  directory at the end / rows (nothing is deleted during a run shorter than
  ``minBatchesToRetain`` = 100 batches, so this is also what was written). RocksDB
  snapshots are uploaded by the maintenance task (every 60 s), so a short run's
  RocksDB checkpoint is mostly changelog files — that is Spark's default behaviour.
- recovery (``measure_restart``): the query runs in a child process that is SIGKILLed
  (its whole process group: Python driver and JVM) in the middle of a micro-batch once
  ``kill_after`` batches (half, by default) have committed; a fresh child restarts on
  the same checkpoint. Reported: SparkSession
  start (not counted), time from ``start()`` until the first batch after the restart
  has committed (Spark re-runs the batch that was in flight, so state must be loaded
  first), and time until the rest of the input has been processed.

Everything runs with ``spark.sql.shuffle.partitions`` = 2 by default (the 200 default
made a stateful query ~6× slower here, DESIGN §7) on ``local[2]``.

CLI::

    python bench/spark_baseline.py --rows 1600000 --keys 100000 --provider rocksdb
    python bench/spark_baseline.py --provider both --windowed --repeats 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if __package__ in (None, ""):  # run as `python bench/spark_baseline.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import DEFAULT_KEYS, DEFAULT_SEED, ensure_dataset, load_dataset

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

Provider = Literal["rocksdb", "hdfs"]
QueryKind = Literal["keyed", "windowed"]
Sink = Literal["noop", "count", "parquet"]

PROVIDER_CLASSES: dict[str, str] = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
INPUT_DDL = "item_id BIGINT, item_price BIGINT, item_time BIGINT"
DEFAULT_MASTER = "local[2]"
DEFAULT_SHUFFLE_PARTITIONS = 2
DEFAULT_DRIVER_MEMORY = "4g"
DEFAULT_WINDOW = "10 seconds"
DEFAULT_WATERMARK = "1 second"
_POLL_S = 0.005


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class BatchStat:
    """One micro-batch from the query progress."""

    batch_id: int
    input_rows: int
    trigger_ms: int  # durationMs.triggerExecution: the whole batch
    add_batch_ms: int  # durationMs.addBatch: running the plan incl. state store commit
    state_rows: int  # numRowsTotal summed over stateful operators after the batch
    state_memory_bytes: int
    state_commit_ms: int

    @classmethod
    def from_progress(cls, p: dict[str, Any]) -> BatchStat:
        ops = p.get("stateOperators") or []
        dur = p.get("durationMs") or {}
        return cls(
            batch_id=int(p["batchId"]),
            input_rows=int(p.get("numInputRows", 0)),
            trigger_ms=int(dur.get("triggerExecution", 0)),
            add_batch_ms=int(dur.get("addBatch", 0)),
            state_rows=sum(int(o.get("numRowsTotal", 0)) for o in ops),
            state_memory_bytes=sum(int(o.get("memoryUsedBytes", 0)) for o in ops),
            state_commit_ms=sum(int(o.get("commitTimeMs", 0)) for o in ops),
        )


@dataclass
class BaselineResult:
    """One failure-free run of the Spark stateful aggregation."""

    provider: str
    query: str
    rows: int
    keys: int
    files: int
    max_files_per_trigger: int
    shuffle_partitions: int
    sink: str
    batches: int  # batches that read input
    steady_rows_per_s: float  # Σ rows / Σ triggerExecution, batches after the first
    median_batch_rows_per_s: float
    first_batch_s: float  # the cold first batch, excluded from the steady figure
    wall_s: float  # start() until the query terminated
    wall_rows_per_s: float
    checkpoint_bytes: int
    state_bytes: int  # the part under <checkpoint>/state
    checkpoint_bytes_per_tuple: float
    final_state_rows: int
    jvm_cpu_s: float  # CPU time (user + system) of the JVM from start() to the end
    rows_per_cpu_s: float  # rows / jvm_cpu_s: less sensitive to other load than wall
    session_start_s: float | None  # SparkSession creation, if this run created it
    spark_version: str
    load_avg_1m: float
    batch_stats: list[BatchStat] = field(default_factory=list)
    session_run: int = 0  # 0: the session's first query (cold JVM); 1, 2, ...: warm

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaselineResult:
        d = dict(d)
        d["batch_stats"] = [BatchStat(**b) for b in d.get("batch_stats", [])]
        return cls(**d)


@dataclass
class RestartResult:
    """Kill a running query, restart it on its checkpoint, time the first batch."""

    provider: str
    query: str
    rows: int
    keys: int
    files: int
    shuffle_partitions: int
    committed_before_kill: int  # batches committed when the first run was killed
    inflight_at_kill: bool  # an offsets entry without commit: that batch is re-run
    checkpoint_bytes_at_kill: int
    state_rows_at_kill: int  # state rows after the last committed batch
    session_start_s: float  # JVM + SparkSession start of the restarted run: not counted
    restart_first_batch_s: float  # start() → first batch after restart committed
    first_batch_id: int
    first_batch_rows: int
    first_batch_trigger_ms: int
    catch_up_s: float  # start() → all remaining input processed
    rows_after_restart: int
    cold_first_batch_s: float  # first batch of the killed run (no state to load)
    load_avg_1m: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- helpers


def _load_avg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - not on Linux
        return float("nan")


def jvm_cpu_seconds(spark: SparkSession) -> float:
    """User + system CPU seconds used so far by the JVM behind ``spark`` (Linux /proc)."""
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # pragma: no cover - not on Linux
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def dir_bytes(path: str | os.PathLike[str]) -> int:
    """Apparent size of every regular file under ``path`` (0 if it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # removed by Spark maintenance meanwhile
                continue
    return total


def committed_batches(checkpoint_dir: str | os.PathLike[str]) -> list[int]:
    """Batch ids with a commit-log entry, ascending."""
    d = Path(checkpoint_dir) / "commits"
    if not d.is_dir():
        return []
    return sorted(int(n) for n in os.listdir(d) if n.isdigit())


def offset_batches(checkpoint_dir: str | os.PathLike[str]) -> list[int]:
    """Batch ids with an offset-log entry (planned batches), ascending."""
    d = Path(checkpoint_dir) / "offsets"
    if not d.is_dir():
        return []
    return sorted(int(n) for n in os.listdir(d) if n.isdigit())


def _progress_dicts(query: StreamingQuery) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in query.recentProgress:
        raw = getattr(p, "json", None)
        out.append(json.loads(raw) if isinstance(raw, str) else dict(p))
    return out


# --------------------------------------------------------------------------- Spark


def run_stateful_session(
    input_dir: str | os.PathLike[str],
    work: str | os.PathLike[str],
    provider: str = "rocksdb",
    *,
    runs: int = 2,
    query: str = "keyed",
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
    master: str = DEFAULT_MASTER,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
) -> list[BaselineResult]:
    """``runs`` runs of the query over the same input in ONE fresh child process.

    Each run starts a new query on a new checkpoint under ``work``; run 0 is the
    session's first query (cold JVM, as in :func:`run_stateful` with ``isolated``),
    the next ones run in the warm JVM it left. Result ``i`` has ``session_run = i``.
    """
    load_dataset(input_dir)
    cfg = {
        "mode": "runs", "runs": runs, "input_dir": str(input_dir),
        "checkpoint_dirs": [str(Path(work) / f"checkpoint-{i}") for i in range(runs)],
        "provider": provider, "query": query, "shuffle_partitions": shuffle_partitions,
        "window": window, "watermark": watermark, "master": master,
        "driver_memory": driver_memory,
    }
    for ck in cfg["checkpoint_dirs"]:
        _require_fresh(ck)
    out = _run_child(cfg, Path(work))
    return [BaselineResult.from_dict(d) for d in out["runs"]]


def get_session(
    master: str = DEFAULT_MASTER,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
) -> SparkSession:
    """A local SparkSession for the baseline (``getOrCreate``: reuses a running one).

    Static settings (master, memory) only apply if this call starts the JVM.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("cec-spark-baseline")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def configure_state_store(spark: SparkSession, provider: str, shuffle_partitions: int) -> None:
    """Set the runtime SQL confs that select the state store (read at query start)."""
    if provider not in PROVIDER_CLASSES:
        raise ValueError(f"provider must be one of {sorted(PROVIDER_CLASSES)}, got {provider!r}")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDER_CLASSES[provider])
    spark.conf.set(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
        "true" if provider == "rocksdb" else "false",
    )
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")


def build_aggregate(
    spark: SparkSession,
    input_dir: str | os.PathLike[str],
    query: str = "keyed",
    *,
    max_files_per_trigger: int = 1,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
) -> DataFrame:
    """The streaming aggregate over the workload files (not started)."""
    from pyspark.sql import functions as F

    src = (
        spark.readStream.schema(INPUT_DDL)
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .parquet(str(input_dir))
    )
    if query == "keyed":
        return src.groupBy("item_id").agg(F.avg("item_price").alias("avg_price"))
    if query == "windowed":
        ts = src.withColumn("ts", F.timestamp_micros("item_time")).withWatermark("ts", watermark)
        return (
            ts.groupBy(F.window("ts", window).alias("window"), "item_id")
            .agg(F.avg("item_price").alias("avg_price"))
            .select(
                F.unix_micros(F.col("window.start")).alias("window_start_us"),
                "item_id",
                "avg_price",
            )
        )
    raise ValueError(f"query must be 'keyed' or 'windowed', got {query!r}")


def _batch_writer(sink: str, output_dir: str | None) -> Callable[[DataFrame, int], None]:
    if sink == "count":

        def count_batch(df: DataFrame, batch_id: int) -> None:
            df.count()

        return count_batch
    if sink == "parquet":
        if output_dir is None:
            raise ValueError("sink='parquet' needs output_dir")
        out = output_dir

        def write_batch(df: DataFrame, batch_id: int) -> None:
            df.write.mode("overwrite").parquet(os.path.join(out, f"batch={batch_id}"))

        return write_batch
    raise ValueError(f"sink must be 'noop', 'count' or 'parquet', got {sink!r}")


def start_query(
    agg: DataFrame,
    checkpoint_dir: str | os.PathLike[str],
    *,
    sink: str = "noop",
    output_dir: str | None = None,
    query_name: str = "cec_spark_baseline",
) -> StreamingQuery:
    writer = (
        agg.writeStream.outputMode("update")
        .option("checkpointLocation", str(checkpoint_dir))
        .queryName(query_name)
        .trigger(availableNow=True)
    )
    if sink == "noop":
        return writer.format("noop").start()
    return writer.foreachBatch(_batch_writer(sink, output_dir)).start()


def read_final_state(output_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The last update per group from a ``sink='parquet'`` output, as a pandas DataFrame.

    Update mode emits a group's new aggregate in every batch that touched it, so the
    final state of a group is its row in the highest batch that contains it.
    """
    import pandas as pd
    import pyarrow.parquet as pq

    frames = []
    for part in sorted(Path(output_dir).glob("batch=*")):
        batch_id = int(part.name.split("=", 1)[1])
        df = pq.read_table(part).to_pandas()
        df["batch_id"] = batch_id
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["item_id", "avg_price", "batch_id"])
    allrows = pd.concat(frames, ignore_index=True)
    keys = [c for c in ("window_start_us", "item_id") if c in allrows.columns]
    last = allrows.sort_values("batch_id").groupby(keys, as_index=False).last()
    return last.sort_values(keys).reset_index(drop=True)


# --------------------------------------------------------------------------- measurements


def _summarize(
    progress: list[dict[str, Any]],
    *,
    provider: str,
    query: str,
    rows: int,
    keys: int,
    files: int,
    max_files_per_trigger: int,
    shuffle_partitions: int,
    sink: str,
    wall_s: float,
    checkpoint_dir: str | os.PathLike[str],
    session_start_s: float | None,
    spark_version: str,
    jvm_cpu_s: float = float("nan"),
) -> BaselineResult:
    stats = sorted(
        (BatchStat.from_progress(p) for p in progress if "batchId" in p),
        key=lambda b: b.batch_id,
    )
    data = [b for b in stats if b.input_rows > 0]
    steady = data[1:]
    steady_ms = sum(b.trigger_ms for b in steady)
    steady_rows = sum(b.input_rows for b in steady)
    per_batch = [b.input_rows / (b.trigger_ms / 1e3) for b in steady if b.trigger_ms > 0]
    total_rows = sum(b.input_rows for b in data)
    if total_rows != rows:
        raise RuntimeError(f"the query read {total_rows} rows, the dataset has {rows}")
    ck = dir_bytes(checkpoint_dir)
    return BaselineResult(
        provider=provider,
        query=query,
        rows=rows,
        keys=keys,
        files=files,
        max_files_per_trigger=max_files_per_trigger,
        shuffle_partitions=shuffle_partitions,
        sink=sink,
        batches=len(data),
        steady_rows_per_s=steady_rows / (steady_ms / 1e3) if steady_ms else float("nan"),
        median_batch_rows_per_s=statistics.median(per_batch) if per_batch else float("nan"),
        first_batch_s=data[0].trigger_ms / 1e3 if data else float("nan"),
        wall_s=wall_s,
        wall_rows_per_s=rows / wall_s if wall_s > 0 else float("nan"),
        checkpoint_bytes=ck,
        state_bytes=dir_bytes(Path(checkpoint_dir) / "state"),
        checkpoint_bytes_per_tuple=ck / rows if rows else float("nan"),
        final_state_rows=stats[-1].state_rows if stats else 0,
        jvm_cpu_s=jvm_cpu_s,
        rows_per_cpu_s=rows / jvm_cpu_s if jvm_cpu_s > 0 else float("nan"),
        session_start_s=session_start_s,
        spark_version=spark_version,
        load_avg_1m=_load_avg(),
        batch_stats=stats,
    )


def run_stateful(
    input_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    provider: str = "rocksdb",
    *,
    query: str = "keyed",
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    max_files_per_trigger: int = 1,
    sink: str = "noop",
    output_dir: str | os.PathLike[str] | None = None,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
    spark: SparkSession | None = None,
    isolated: bool = False,
    master: str = DEFAULT_MASTER,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
) -> BaselineResult:
    """Run Spark's stateful aggregation over the dataset in ``input_dir`` to the end.

    ``input_dir`` must hold a dataset written by ``bench.workload.write_dataset``;
    ``checkpoint_dir`` must be new or empty (a checkpoint pins its provider). With
    ``isolated=True`` the run happens in a fresh child process (its own JVM), which is
    what the CLI does so that providers do not share a warm JVM; otherwise it uses
    ``spark`` or ``get_session()`` in this process and leaves the session running.
    """
    ds = load_dataset(input_dir)
    _require_fresh(checkpoint_dir)
    if isolated:
        cfg = {
            "mode": "run",
            "input_dir": str(input_dir),
            "checkpoint_dir": str(checkpoint_dir),
            "provider": provider,
            "query": query,
            "shuffle_partitions": shuffle_partitions,
            "max_files_per_trigger": max_files_per_trigger,
            "sink": sink,
            "output_dir": None if output_dir is None else str(output_dir),
            "window": window,
            "watermark": watermark,
            "master": master,
            "driver_memory": driver_memory,
        }
        return BaselineResult.from_dict(_run_child(cfg, Path(checkpoint_dir).parent))

    session_start_s: float | None = None
    if spark is None:
        t0 = time.perf_counter()
        spark = get_session(master, driver_memory, shuffle_partitions)
        session_start_s = time.perf_counter() - t0
    configure_state_store(spark, provider, shuffle_partitions)
    agg = build_aggregate(
        spark, input_dir, query,
        max_files_per_trigger=max_files_per_trigger, window=window, watermark=watermark,
    )
    cpu0 = jvm_cpu_seconds(spark)
    t0 = time.perf_counter()
    q = start_query(
        agg, checkpoint_dir, sink=sink,
        output_dir=None if output_dir is None else str(output_dir),
    )
    q.awaitTermination()
    wall_s = time.perf_counter() - t0
    jvm_cpu_s = jvm_cpu_seconds(spark) - cpu0
    exc = q.exception()
    if exc is not None:
        raise RuntimeError(f"the streaming query failed: {exc}")
    return _summarize(
        _progress_dicts(q),
        provider=provider, query=query, rows=ds.n_rows, keys=ds.spec.n_keys,
        files=len(ds.files), max_files_per_trigger=max_files_per_trigger,
        shuffle_partitions=shuffle_partitions, sink=sink, wall_s=wall_s,
        checkpoint_dir=checkpoint_dir, session_start_s=session_start_s,
        spark_version=spark.version, jvm_cpu_s=jvm_cpu_s,
    )


def measure_restart(
    input_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    provider: str = "rocksdb",
    *,
    query: str = "keyed",
    kill_after: int | None = None,
    kill_delay_s: float = 0.2,
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    max_files_per_trigger: int = 1,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
    master: str = DEFAULT_MASTER,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    timeout_s: float = 600.0,
) -> RestartResult:
    """SIGKILL a running query mid-batch, restart it on its checkpoint, time the restart.

    The kill comes ``kill_delay_s`` after batch ``kill_after`` (0-based) has been
    planned, i.e. while it runs with ``kill_after`` batches committed before it; the
    restarted query re-runs that batch first.

    Both runs are child processes (each its own JVM). ``kill_after`` defaults to half
    the micro-batches, so the restart has about half the keys' state to load and half
    the input still to process.
    """
    ds = load_dataset(input_dir)
    _require_fresh(checkpoint_dir)
    n_batches = -(-len(ds.files) // max_files_per_trigger)
    if kill_after is None:
        kill_after = max(1, n_batches // 2)
    if not 1 <= kill_after < n_batches:
        raise ValueError(f"kill_after must be in [1, {n_batches}), got {kill_after}")
    work = Path(checkpoint_dir).parent
    base = {
        "input_dir": str(input_dir),
        "checkpoint_dir": str(checkpoint_dir),
        "provider": provider,
        "query": query,
        "shuffle_partitions": shuffle_partitions,
        "max_files_per_trigger": max_files_per_trigger,
        "sink": "noop",
        "output_dir": None,
        "window": window,
        "watermark": watermark,
        "master": master,
        "driver_memory": driver_memory,
    }
    # Phase 1: run until kill_after batches committed and the next one is under way
    # (its offsets are logged), then kill the whole process group mid-batch.
    cfg_path, result_path, log_path = _child_files(work, "victim")
    cfg_path.write_text(json.dumps({**base, "mode": "victim", "result_path": str(result_path)}))
    with open(log_path, "w") as log:
        victim = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_child", str(cfg_path)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s

        def ready() -> bool:
            done = committed_batches(checkpoint_dir)
            if len(done) < kill_after:
                return False
            return any(b > done[-1] for b in offset_batches(checkpoint_dir))

        try:
            while not ready():
                if victim.poll() is not None:
                    raise RuntimeError(
                        f"the query ended before {kill_after} batches committed "
                        f"(exit {victim.returncode}); see {log_path}"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no {kill_after} committed batches in {timeout_s} s")
                time.sleep(_POLL_S)
            time.sleep(kill_delay_s)
        finally:
            if victim.poll() is None:
                os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
    committed = committed_batches(checkpoint_dir)
    if len(committed) >= n_batches:
        raise RuntimeError("the victim finished all batches before the kill; use more files")
    planned = offset_batches(checkpoint_dir)
    ck_at_kill = dir_bytes(checkpoint_dir)
    victim_progress = _read_progress_log(work / "victim.progress.jsonl")
    cold_first = next(
        (b.trigger_ms / 1e3 for b in victim_progress if b.input_rows > 0), float("nan")
    )
    last_committed = committed[-1]
    state_rows_at_kill = max(
        (b.state_rows for b in victim_progress if b.batch_id <= last_committed), default=-1
    )

    # Phase 2: restart on the same checkpoint.
    cfg_path, result_path, log_path = _child_files(work, "restart")
    cfg_path.write_text(
        json.dumps(
            {
                **base,
                "mode": "restart",
                "result_path": str(result_path),
                "last_committed": last_committed,
            }
        )
    )
    with open(log_path, "w") as log:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "_child", str(cfg_path)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            timeout=timeout_s, check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"the restarted query failed (exit {proc.returncode}); see {log_path}")
    r = json.loads(result_path.read_text())
    return RestartResult(
        provider=provider,
        query=query,
        rows=ds.n_rows,
        keys=ds.spec.n_keys,
        files=len(ds.files),
        shuffle_partitions=shuffle_partitions,
        committed_before_kill=len(committed),
        inflight_at_kill=bool(planned) and planned[-1] > last_committed,
        checkpoint_bytes_at_kill=ck_at_kill,
        state_rows_at_kill=state_rows_at_kill,
        session_start_s=r["session_start_s"],
        restart_first_batch_s=r["restart_first_batch_s"],
        first_batch_id=r["first_batch_id"],
        first_batch_rows=r["first_batch_rows"],
        first_batch_trigger_ms=r["first_batch_trigger_ms"],
        catch_up_s=r["catch_up_s"],
        rows_after_restart=r["rows_after_restart"],
        cold_first_batch_s=cold_first,
        load_avg_1m=_load_avg(),
    )


def _require_fresh(checkpoint_dir: str | os.PathLike[str]) -> None:
    p = Path(checkpoint_dir)
    if p.exists() and any(p.iterdir()):
        raise FileExistsError(f"checkpoint directory {p} is not empty; use a new one per run")
    p.parent.mkdir(parents=True, exist_ok=True)


def _child_files(work: Path, name: str) -> tuple[Path, Path, Path]:
    work.mkdir(parents=True, exist_ok=True)
    return work / f"{name}.config.json", work / f"{name}.result.json", work / f"{name}.log"


def _run_child(cfg: dict[str, Any], work: Path, timeout_s: float = 900.0) -> dict[str, Any]:
    cfg_path, result_path, log_path = _child_files(work, f"run-{os.getpid()}-{time.time_ns()}")
    cfg_path.write_text(json.dumps({**cfg, "result_path": str(result_path)}))
    with open(log_path, "w") as log:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "_child", str(cfg_path)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            timeout=timeout_s, check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"the baseline run failed (exit {proc.returncode}); see {log_path}")
    result: dict[str, Any] = json.loads(result_path.read_text())
    return result


def _read_progress_log(path: Path) -> list[BatchStat]:
    if not path.exists():
        return []
    stats = []
    for line in path.read_text().splitlines():
        try:
            stats.append(BatchStat(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue  # a line cut by the kill
    return stats


# --------------------------------------------------------------------------- child process


def _child_main(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    mode = cfg["mode"]
    t0 = time.perf_counter()
    spark = get_session(cfg["master"], cfg["driver_memory"], cfg["shuffle_partitions"])
    session_start_s = time.perf_counter() - t0
    result_path = Path(cfg["result_path"])
    if mode == "runs":
        results = []
        for i, ck in enumerate(cfg["checkpoint_dirs"]):
            res = run_stateful(
                cfg["input_dir"], ck, cfg["provider"], query=cfg["query"],
                shuffle_partitions=cfg["shuffle_partitions"], window=cfg["window"],
                watermark=cfg["watermark"], spark=spark,
            )
            res.session_run = i
            res.session_start_s = session_start_s if i == 0 else None
            results.append(res.to_dict())
        result_path.write_text(json.dumps({"runs": results}))
        return 0
    if mode == "run":
        res = run_stateful(
            cfg["input_dir"], cfg["checkpoint_dir"], cfg["provider"],
            query=cfg["query"], shuffle_partitions=cfg["shuffle_partitions"],
            max_files_per_trigger=cfg["max_files_per_trigger"], sink=cfg["sink"],
            output_dir=cfg["output_dir"], window=cfg["window"], watermark=cfg["watermark"],
            spark=spark,
        )
        res.session_start_s = session_start_s
        result_path.write_text(json.dumps(res.to_dict()))
        return 0

    configure_state_store(spark, cfg["provider"], cfg["shuffle_partitions"])
    agg = build_aggregate(
        spark, cfg["input_dir"], cfg["query"],
        max_files_per_trigger=cfg["max_files_per_trigger"],
        window=cfg["window"], watermark=cfg["watermark"],
    )
    ck = cfg["checkpoint_dir"]
    if mode == "victim":
        # Log every batch's progress as it happens: this process will be SIGKILLed.
        progress_log = result_path.with_name("victim.progress.jsonl")
        q = start_query(agg, ck)
        seen = -1
        with open(progress_log, "a") as out:
            while q.isActive:
                for d in _progress_dicts(q):
                    s = BatchStat.from_progress(d)
                    if s.batch_id > seen:
                        out.write(json.dumps(asdict(s)) + "\n")
                        seen = s.batch_id
                out.flush()
                time.sleep(0.05)
        return 0
    if mode == "restart":
        last = int(cfg["last_committed"])
        t0 = time.perf_counter()
        q = start_query(agg, ck)
        first_done: float | None = None
        while first_done is None:
            if any(b > last for b in committed_batches(ck)):
                first_done = time.perf_counter() - t0
            elif not q.isActive:
                break
            else:
                time.sleep(_POLL_S)
        q.awaitTermination()
        catch_up_s = time.perf_counter() - t0
        exc = q.exception()
        if exc is not None:
            raise RuntimeError(f"the restarted query failed: {exc}")
        stats = sorted(
            (BatchStat.from_progress(d) for d in _progress_dicts(q)), key=lambda b: b.batch_id
        )
        first = next(b for b in stats if b.batch_id > last)
        result = {
            "session_start_s": session_start_s,
            "restart_first_batch_s": first_done if first_done is not None else float("nan"),
            "first_batch_id": first.batch_id,
            "first_batch_rows": first.input_rows,
            "first_batch_trigger_ms": first.trigger_ms,
            "catch_up_s": catch_up_s,
            "rows_after_restart": sum(b.input_rows for b in stats),
            "batch_stats": [asdict(b) for b in stats],
        }
        result_path.write_text(json.dumps(result))
        return 0
    raise ValueError(f"unknown child mode {mode!r}")


# --------------------------------------------------------------------------- report


def _median(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


def markdown_table(runs: Sequence[BaselineResult], restarts: Sequence[RestartResult]) -> str:
    """Medians per (query, provider) over repetitions, one Markdown table."""
    groups: dict[tuple[str, str], tuple[list[BaselineResult], list[RestartResult]]] = {}
    for r in runs:
        key = (r.query, r.provider if r.session_run == 0 else f"{r.provider} (warm)")
        groups.setdefault(key, ([], []))[0].append(r)
    for s in restarts:
        groups.setdefault((s.query, s.provider), ([], []))[1].append(s)
    lines = [
        "| query | provider | reps | batches | steady rows/s | wall rows/s | rows/JVM-CPU-s "
        "| first batch s | ckpt bytes/tuple | restart → 1st batch s | restart catch-up s "
        "| session start s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (query, provider), (rs, ss) in sorted(groups.items()):
        reps = max(len(rs), len(ss))
        batches = _median([r.batches for r in rs])
        lines.append(
            f"| {query} | {provider} | {reps} | {batches:.0f} "
            f"| {_median([r.steady_rows_per_s for r in rs]):,.0f} "
            f"| {_median([r.wall_rows_per_s for r in rs]):,.0f} "
            f"| {_median([r.rows_per_cpu_s for r in rs]):,.0f} "
            f"| {_median([r.first_batch_s for r in rs]):.2f} "
            f"| {_median([r.checkpoint_bytes_per_tuple for r in rs]):.1f} "
            f"| {_median([s.restart_first_batch_s for s in ss]):.2f} "
            f"| {_median([s.catch_up_s for s in ss]):.2f} "
            f"| {_median([s.session_start_s for s in ss] + [r.session_start_s or float('nan') for r in rs]):.2f} |"  # noqa: E501
        )
    return "\n".join(lines)


@dataclass
class AnchorReport:
    """Every run and restart of one ``run_anchor`` call, with the Markdown summary."""

    rows: int
    keys: int
    files: int
    shuffle_partitions: int
    repeats: int
    runs: list[BaselineResult] = field(default_factory=list)
    restarts: list[RestartResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "keys": self.keys,
            "files": self.files,
            "shuffle_partitions": self.shuffle_partitions,
            "repeats": self.repeats,
            "runs": [r.to_dict() for r in self.runs],
            "restarts": [s.to_dict() for s in self.restarts],
        }

    def to_markdown(self) -> str:
        version = self.runs[0].spark_version if self.runs else "?"
        head = (
            f"Spark {version}, {DEFAULT_MASTER}, {self.rows:,} rows, {self.keys:,} keys, "
            f"{self.files} files (1 per micro-batch), shuffle partitions "
            f"{self.shuffle_partitions}, {self.repeats} repetition(s), medians"
        )
        loads = [r.load_avg_1m for r in self.runs] + [s.load_avg_1m for s in self.restarts]
        loads = [x for x in loads if not math.isnan(x)]
        if loads:
            cpus = os.cpu_count()
            head += f"; 1-min load average {min(loads):.1f}–{max(loads):.1f} on {cpus} CPUs"
        return head + "\n\n" + markdown_table(self.runs, self.restarts)


def run_anchor(
    input_dir: str | os.PathLike[str],
    workdir: str | os.PathLike[str],
    providers: Sequence[str] = ("rocksdb", "hdfs"),
    queries: Sequence[str] = ("keyed",),
    *,
    repeats: int = 1,
    session_runs: int = 2,
    restart: bool = True,
    shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
    window: str = DEFAULT_WINDOW,
    watermark: str = DEFAULT_WATERMARK,
    log: Callable[[str], None] | None = None,
) -> AnchorReport:
    """The whole anchor on one dataset: each (query, provider) run and restarted, repeated.

    Every repetition is a fresh child process running the query ``session_runs`` times
    (:func:`run_stateful_session`: the first cold, the others in the warm JVM);
    checkpoints go under ``workdir``. Repetitions
    are interleaved (all configurations once, then again) so that background load
    spreads over them.
    """
    ds = load_dataset(input_dir)
    report = AnchorReport(
        rows=ds.n_rows, keys=ds.spec.n_keys, files=len(ds.files),
        shuffle_partitions=shuffle_partitions, repeats=repeats,
    )
    for rep in range(repeats):
        for query in queries:
            for provider in providers:
                tag = f"{query}-{provider}-{rep}-{time.time_ns()}"
                runs = run_stateful_session(
                    input_dir, Path(workdir) / tag / "run", provider, runs=session_runs,
                    query=query, shuffle_partitions=shuffle_partitions, window=window,
                    watermark=watermark,
                )
                report.runs.extend(runs)
                for run in runs:
                    if log is not None:
                        log(
                            f"[{tag}] session run {run.session_run}: steady "
                            f"{run.steady_rows_per_s:,.0f} rows/s, wall {run.wall_s:.1f} s, "
                            f"{run.checkpoint_bytes_per_tuple:.1f} B/tuple"
                        )
                if not restart:
                    continue
                rst = measure_restart(
                    input_dir, Path(workdir) / tag / "restart" / "checkpoint", provider,
                    query=query, shuffle_partitions=shuffle_partitions, window=window,
                    watermark=watermark,
                )
                report.restarts.append(rst)
                if log is not None:
                    log(
                        f"[{tag}] restart → first batch {rst.restart_first_batch_s:.2f} s, "
                        f"catch-up {rst.catch_up_s:.2f} s"
                    )
    return report


@contextmanager
def _workdir(path: str | None) -> Iterator[Path]:
    if path is not None:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        yield p
        return
    with tempfile.TemporaryDirectory(prefix="cec-spark-baseline-") as d:
        yield Path(d)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_child"]:
        return _child_main(argv[1])
    parser = argparse.ArgumentParser(
        description="Spark Structured Streaming stateful aggregation of the CEC workload."
    )
    parser.add_argument("--rows", type=int, default=1_600_000)
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--files", type=int, default=16, help="parquet files = micro-batches")
    parser.add_argument("--provider", choices=["rocksdb", "hdfs", "both"], default="both")
    parser.add_argument("--shuffle-partitions", type=int, default=DEFAULT_SHUFFLE_PARTITIONS)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--windowed", action="store_true", help="also the event-time variant")
    parser.add_argument("--window", default=DEFAULT_WINDOW)
    parser.add_argument("--watermark", default=DEFAULT_WATERMARK)
    parser.add_argument("--no-restart", action="store_true", help="skip the recovery runs")
    parser.add_argument("--workdir", default=None, help="keep data/checkpoints here")
    parser.add_argument("--json", default=None, help="write all results to this JSON file")
    args = parser.parse_args(argv)

    providers = ["rocksdb", "hdfs"] if args.provider == "both" else [args.provider]
    queries = ["keyed", "windowed"] if args.windowed else ["keyed"]
    with _workdir(args.workdir) as work:
        data = work / f"data-{args.rows}-{args.keys}-{args.seed}-{args.files}"
        ensure_dataset(data, args.rows, args.keys, args.seed, args.files)
        report = run_anchor(
            data, work, providers, queries, repeats=args.repeats,
            restart=not args.no_restart, shuffle_partitions=args.shuffle_partitions,
            window=args.window, watermark=args.watermark,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    print(report.to_markdown())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
