"""The driver: starts a run (or resumes one), runs ingest and operators concurrently.

Two threads of Spark jobs share one SparkSession:

* the **operator job**: one job of P long-lived tasks (:func:`cec_spark.task.run_partition`).
  When it aborts (a task exhausted its ``local[N,F]`` attempts, or an executor was
  lost) the driver resubmits it, up to :data:`MAX_RESUBMITS` times; every task then
  finds its output log and recovers;
* the **ingest**: one job per source chunk (:mod:`cec_spark.ingest`), resumable.

The main thread draws the progress display and handles Ctrl-C: the first one creates
``RUN/STOP`` (tasks and ingest end at their next batch boundary, every log committed);
a second one cancels the jobs (the logs are still consistent: the log reconciles on
the next open). ``cec recover --from-log RUN`` resumes either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from cec.errors import USAGE_ERRORS, USER_ERRORS, CecError, UsageError, UserError
from cec.spec import PipelineSpec, load_spec
from cec_spark.cluster import SlotWatch, check_local_slots, probe, wait_for_slots
from cec_spark.fingerprint import fingerprint
from cec_spark.ingest import (
    IngestProgress,
    check_filter,
    create_logs,
    ingest,
    upstream_sealed,
)
from cec_spark.layout import DriverSupersededError, RunLayout, RunSettings, settings_for
from cec_spark.outcome import RunResult, partition_run
from cec_spark.progress import ProgressView
from cec_spark.session import (
    early_start_pending,
    is_local,
    session_for,
    stop_session,
)
from cec_spark.sources import SourcePlan, plan_source
from cec_spark.task import run_partition
from cec_spark.watchdog import DEFAULT_STALL_S, Watchdog, announce_wait, say
from storage_log.errors import LogWriteError

MAX_RESUBMITS = 5
STOP_GRACE_S = 30.0


class PipelineError(CecError):
    """The pipeline failed for a reason that is not the user's input."""


def default_log_dir(spec_path: Path) -> Path:
    return Path("runs") / spec_path.stem


def _task_entry(root: str, run_id: str | None, driver: int | None
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The operator job's function: Spark partition ``p`` holds the one number ``p``.

    The job is ``spark.range(P, P partitions).mapInArrow(...)``, a SQL job like the
    ingest's, so that both jobs' Python workers fork from one worker daemon (an RDD
    job and a SQL job each started their own: two interpreters importing cec at the
    start of every run, on two cores).
    """
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for p in batch.column(0).to_pylist():
                result = json.dumps(run_partition(root, int(p), run_id, driver))
                yield pa.RecordBatch.from_pydict({"result": pa.array([result], pa.string())})

    return run


# Errors of a task that another attempt cannot fix: the job is not resubmitted.
_FATAL = re.compile(r"\b(RunNotVisibleError|DriverSupersededError|LogNotFoundError|"
                    r"InputRangeError|InputOrderError|LogWriteError): (.+)")


def _fatal(exc: BaseException) -> UserError | None:
    """The user error a failed Spark job carries from a task, if retrying cannot help."""
    m = _FATAL.search(str(exc))
    if m is None:
        return None
    if m.group(1) == "DriverSupersededError":
        return DriverSupersededError(m.group(2).strip())
    if m.group(1) == "LogWriteError":  # disk full, read-only: exit 3, once
        return LogWriteError(m.group(2).strip())
    return UsageError(m.group(2).strip())


@dataclass
class _Shared:
    stop: threading.Event = field(default_factory=threading.Event)
    ingest: IngestProgress = field(default_factory=IngestProgress)
    ingest_error: BaseException | None = None
    operator_error: BaseException | None = None
    cluster_error: CecError | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    resubmits: int = 0
    operators_done: threading.Event = field(default_factory=threading.Event)
    ingest_done: threading.Event = field(default_factory=threading.Event)


def _operator_thread(spark: SparkSession, layout: RunLayout, partitions: int,
                     ids: tuple[str | None, int | None], shared: _Shared) -> None:
    sc = spark.sparkContext
    root = str(layout.root)
    try:
        while True:
            sc.setJobGroup("cec-operators", "cec operator tasks", interruptOnCancel=True)
            try:
                rows = (spark.range(0, partitions, 1, partitions)
                        .mapInArrow(_task_entry(root, *ids), "result string").collect())
                shared.results = [json.loads(r["result"]) for r in rows]
                return
            except Exception as exc:
                if shared.stop.is_set():
                    return
                fatal = _fatal(exc)
                if fatal is not None:
                    shared.operator_error = fatal
                    return
                shared.resubmits += 1
                if shared.resubmits > MAX_RESUBMITS:
                    shared.operator_error = exc
                    return
                # e.g. a dying worker of a killed run still holds a log's writer lock
                delay = min(2.0 ** shared.resubmits, 10.0)
                say(f"operator job failed ({_spark_error(exc)}); resubmitting in "
                    f"{delay:.0f} s ({shared.resubmits}/{MAX_RESUBMITS})")
                time.sleep(delay)
    finally:
        shared.operators_done.set()


def _ingest_thread(spark: SparkSession, spec: PipelineSpec, settings: RunSettings,
                   layout: RunLayout, plan: SourcePlan | None, driver: int | None,
                   shared: _Shared) -> None:
    def should_stop() -> bool:  # a stop, or a newer driver took the run
        return shared.stop.is_set() or (driver is not None
                                        and layout.latest_driver() > driver)

    tries = 0
    try:
        while True:
            try:
                ingest(spark, spec, settings, layout, shared.ingest, should_stop, plan,
                       driver=driver)
                return
            except USER_ERRORS as exc:  # cec's, or the log's (a refused write, a lock)
                shared.ingest_error = exc
                return
            except Exception as exc:
                if shared.stop.is_set():
                    return
                fatal = _fatal(exc)
                if fatal is not None:
                    shared.ingest_error = fatal
                    return
                tries += 1
                if tries > MAX_RESUBMITS:
                    shared.ingest_error = exc
                    return
                delay = min(2.0 ** tries, 10.0)
                say(f"ingest job failed ({_spark_error(exc)}); retrying in {delay:.0f} s "
                    f"({tries}/{MAX_RESUBMITS})")
                time.sleep(delay)
    finally:
        shared.ingest_done.set()
        if shared.ingest_error is not None:
            _request_stop(layout, shared,
                          file=not isinstance(shared.ingest_error, DriverSupersededError))


def _request_stop(layout: RunLayout, shared: _Shared, *, file: bool = True) -> None:
    """Stop this driver's tasks: the STOP file, unless the run is no longer ours (a newer
    driver runs it: its tasks must not see a STOP)."""
    shared.stop.set()
    if file:
        with contextlib.suppress(OSError):
            layout.stop_file.touch()


def _spark_error(exc: BaseException) -> str:
    text = str(exc)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "Exception" in ln:
            return ln.strip()[:500]
    return (lines[-1] if lines else repr(exc))[:500]


def _fingerprint(layout: RunLayout, partitions: int, ingest: IngestProgress
                 ) -> tuple[object, ...]:
    """What moves while a run makes progress: ingest counters and task counters."""
    tasks = []
    for p in range(partitions):
        st = layout.read_state(p)
        tasks.append((st.get("pid"), st.get("in_tuples"), st.get("out_rows"),
                      st.get("done"), st.get("recovered") is not None))
    return (ingest.chunks_done, ingest.source_rows, ingest.sealed, tuple(tasks))


def _waiting_on(spec: PipelineSpec, layout: RunLayout, partitions: int,
                shared: _Shared) -> str:
    """A phrase for what a run that makes no progress is waiting on."""
    missing = [p for p in range(partitions) if not layout.read_state(p)]
    if missing:
        return (f"the operator tasks of partitions {missing} to start (a run needs "
                f"{partitions} + 1 free Spark task slots; is the cluster full?)")
    if not shared.ingest.sealed and not shared.ingest_done.is_set():
        if spec.source.kind == "stream-dir":
            return f"new files in the stream folder {spec.source.path}"
        total = shared.ingest.chunks_total
        of = "" if total is None else f"/{total}"
        return f"the ingest (the Spark job of chunk {shared.ingest.chunks_done + 1}{of})"
    return "the operator tasks to consume their upstream logs"


def execute(spark: SparkSession, spec: PipelineSpec, settings: RunSettings,
            layout: RunLayout, *, plan: SourcePlan | None = None,
            progress: bool = True, stall_s: float = DEFAULT_STALL_S,
            driver: int | None = None, watch: SlotWatch | None = None) -> RunResult:
    """Run ingest and operators of the run in ``layout`` to the end (or a stop).

    When nothing moves for ``stall_s`` seconds it says on stderr what it waits on and
    leaves every thread's stack in ``RUN/watchdog/`` (:class:`Watchdog`). ``driver`` is
    this driver's number (:meth:`RunLayout.take_driver`): the run stops when a newer
    driver takes over. ``watch`` gives up when lost task slots do not come back.
    """
    partitions = spec.run.partitions
    if layout.stop_file.exists():
        layout.stop_file.unlink()
    create_logs(layout, partitions, spec.run.fsync)
    shared = _Shared()
    started = time.monotonic()
    started_at = time.time()
    threads = [
        threading.Thread(target=_operator_thread,
                         args=(spark, layout, partitions, (settings.run_id, driver), shared),
                         name="cec-operators", daemon=True),
        threading.Thread(target=_ingest_thread,
                         args=(spark, spec, settings, layout, plan, driver, shared),
                         name="cec-ingest", daemon=True),
    ]
    for t in threads:
        t.start()
    view = ProgressView(layout, partitions, shared.ingest, enabled=progress)
    interrupted = False
    previous = signal.getsignal(signal.SIGINT)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with view, Watchdog(layout.root, stall_s) as dog:
            seen = _fingerprint(layout, partitions, shared.ingest)
            told = False
            while not shared.operators_done.wait(0.5):
                view.refresh()
                if shared.ingest_done.is_set() and shared.ingest_error is not None:
                    break
                try:
                    layout.check_driver(driver)
                    if watch is not None:
                        watch.check()
                except CecError as exc:  # superseded, or the slots did not come back
                    shared.cluster_error = exc
                    _request_stop(layout, shared,
                                  file=not isinstance(exc, DriverSupersededError))
                    spark.sparkContext.cancelAllJobs()
                    break
                now = _fingerprint(layout, partitions, shared.ingest)
                if now != seen:
                    seen, told = now, False
                    dog.progress()
                elif not told and dog.stalled() >= stall_s:
                    told = True
                    say(f"no progress for {dog.stalled():.0f} s: waiting for "
                        f"{_waiting_on(spec, layout, partitions, shared)}; every thread's "
                        f"stack is in {dog.evidence}")
            view.refresh()
    except KeyboardInterrupt:
        interrupted = True
        _request_stop(layout, shared)
        view.note("stopping: waiting for every partition to commit (Ctrl-C again to cancel)")
        try:
            shared.operators_done.wait(STOP_GRACE_S)
            shared.ingest_done.wait(STOP_GRACE_S)
        except KeyboardInterrupt:
            pass
        if not (shared.operators_done.is_set() and shared.ingest_done.is_set()):
            spark.sparkContext.cancelAllJobs()
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
    if shared.operator_error is not None:  # the operators gave up: stop the ingest too
        _request_stop(layout, shared,
                      file=not isinstance(shared.operator_error, DriverSupersededError))
    shared.ingest_done.wait(STOP_GRACE_S)
    shared.operators_done.wait(STOP_GRACE_S)
    elapsed = time.monotonic() - started
    if shared.cluster_error is not None:
        raise shared.cluster_error
    if shared.ingest_error is not None:
        err = shared.ingest_error
        if isinstance(err, USER_ERRORS):
            raise err
        raise PipelineError(f"ingest failed: {_spark_error(err)}") from err
    if isinstance(shared.operator_error, USER_ERRORS):
        raise shared.operator_error
    if shared.operator_error is not None:
        raise PipelineError(f"operator job failed {shared.resubmits} times: "
                            f"{_spark_error(shared.operator_error)}") from shared.operator_error
    results = sorted(shared.results, key=lambda r: int(r["p"]))
    completed = (not interrupted and len(results) == partitions
                 and all(r.get("done") for r in results))
    if completed and layout.stop_file.exists():
        layout.stop_file.unlink()
    tuples = sum(int(r.get("in_tuples", 0)) for r in results)
    rows = shared.ingest.source_rows
    # steady: from the first input batch any operator saw to the end (no start-up)
    firsts = [float(r["first_input_at"]) for r in results if r.get("first_input_at")]
    steady_s = time.time() - min(firsts) if firsts else None
    return RunResult(
        run_dir=str(layout.root),
        partitions=partitions,
        completed=completed,
        interrupted=interrupted,
        source_rows=rows,
        ingested_tuples=shared.ingest.tuples,
        operator_tuples=tuples,
        elapsed_s=round(elapsed, 3),
        source_rows_per_s=round(rows / elapsed, 1) if elapsed > 0 else None,
        steady_s=None if steady_s is None else round(steady_s, 3),
        started_at_us=int(started_at * 1e6),
        steady_rows_per_s=round(rows / steady_s, 1) if steady_s else None,
        resubmits=shared.resubmits,
        ingest_s=None if shared.ingest.finished is None
        else round(shared.ingest.finished - shared.ingest.started, 3),
        ingest_jobs_s=[round(x, 3) for x in shared.ingest.job_seconds],
        ingest_writer_s={k: round(v, 3) for k, v in shared.ingest.writer_s.items()},
        upstream_segments_trimmed=shared.ingest.trimmed_segments,
        results=sum(int(r.get("r", 0)) for r in results),
        per_partition=[partition_run(r) for r in results],
    )


def _session(spec: PipelineSpec) -> tuple[SparkSession, bool]:
    existed = not early_start_pending() and SparkSession.getActiveSession() is not None
    master = spec.run.effective_master
    spark = announce_wait(f"Spark to start (master {master})",
                          lambda: session_for(master, spec.run.partitions,
                                              spec.run.spark_conf,
                                              write_archive=not existed))
    return spark, not existed


def _prepare(spark: SparkSession, spec: PipelineSpec, settings: RunSettings,
             layout: RunLayout) -> SlotWatch:
    """Before any task: enough slots (exit 2 with the numbers), and, on a cluster, every
    executor sees the run directory and the source (exit 2 naming host and path)."""
    sc = spark.sparkContext
    master = spec.run.effective_master
    slots = wait_for_slots(sc, spec.run.partitions, master, spec.run.executor_wait_s)
    if not is_local(master):
        done = upstream_sealed(layout, spec.run.partitions)  # the source is not read again
        paths = [str(spec.source.path)] if spec.source.path is not None and not done else []
        announce_wait("every executor to check that it sees the run directory",
                      lambda: probe(spark, layout, settings.run_id, paths, slots))
    return SlotWatch(sc, spec.run.partitions, master, spec.run.slot_timeout_s)


def run_pipeline(spec_path: Path | str, log_dir: Path | str | None = None, *,
                 partitions: int | None = None, master: str | None = None,
                 conf: dict[str, str] | None = None,
                 max_tuples: int | None = None, progress: bool = True) -> RunResult:
    """``cec run pipeline``: validate, store ``run.toml``, run to the end or Ctrl-C.

    Everything that can be wrong with the spec or a bounded source is found before
    anything is written (exit status 2, nothing on disk). ``conf`` (``--conf``) is
    stored with the spec's ``[run.spark]``; the log directory is stored absolute, so
    that every host of a cluster opens the same one.
    """
    spec_path = Path(spec_path)
    spec = load_spec(spec_path).with_run(partitions=partitions, master=master, conf=conf)
    if max_tuples is not None and max_tuples < 0:
        raise UsageError(f"--max-tuples: must be >= 0, got {max_tuples}")
    check_local_slots(spec.run.partitions, spec.run.effective_master)
    given = Path(log_dir) if log_dir is not None else default_log_dir(spec_path)
    root = Path(os.path.abspath(given))
    layout = RunLayout(root)
    if layout.exists():
        raise UsageError(f"{given}: already holds a run; resume it with "
                         f"'cec recover --from-log {given}' or choose another --log-dir")
    if root.exists() and not root.is_dir():
        raise UsageError(f"{given}: --log-dir exists and is not a directory")
    if root.exists() and any(root.iterdir()):
        raise UsageError(f"{given}: --log-dir exists and is not empty")
    plan = plan_source(spec, max_rows=max_tuples)
    if spec.source.kind == "stream-dir" and not plan.columns.names:
        raise UsageError(f"{spec.source.path}: the stream folder holds no file yet; the "
                         "first file fixes the column types")
    settings = settings_for(spec, plan.columns, max_tuples, tuple(fingerprint(spec)))
    # run.toml before Spark starts (5-20 s): a run killed at any moment after this
    # line is resumed by `cec recover`, not left as a directory no command accepts
    created = not root.exists()
    layout.write_run_file(spec, settings)
    try:
        spark, owned = _session(spec)
    except UsageError:  # a setting Spark refused: the run never started
        _unmake(layout, created)
        raise
    try:
        try:
            check_filter(spark, spec, plan)
            watch = _prepare(spark, spec, settings, layout)
        except USAGE_ERRORS:  # cec's, or the log's (_prepare may open the upstream logs)
            _unmake(layout, created)  # nothing but run.toml was written: take it back
            raise
        return execute(spark, spec, settings, layout,
                       plan=None if spec.source.kind == "stream-dir" else plan,
                       progress=progress, driver=layout.take_driver(), watch=watch)
    finally:
        if owned:
            stop_session(spark)


def _unmake(layout: RunLayout, created: bool) -> None:
    """Remove the run files of a run that never started (a bad ``[filter]``)."""
    with contextlib.suppress(OSError):
        layout.run_file.unlink()
        layout.backup_file.unlink(missing_ok=True)
        (layout.root / "state").rmdir()
        if created:
            layout.root.rmdir()


def resume_run(root: Path | str, *, master: str | None = None,
               conf: dict[str, str] | None = None, progress: bool = True,
               driver: int | None = None) -> RunResult:
    """Resume the run stored in ``root`` (ingest from its tokens, tasks recover).

    ``master`` and ``conf`` override the stored ones for this resume only (a recovery
    may run on another cluster than the run it resumes).
    """
    layout = RunLayout(Path(os.path.abspath(root)))
    spec, settings = layout.read_run_file()
    spec = spec.with_run(master=master, conf=conf)
    check_local_slots(spec.run.partitions, spec.run.effective_master)
    if driver is None:
        driver = layout.take_driver()  # from here on, an older driver of this run stops
    spark, owned = _session(spec)
    try:
        watch = _prepare(spark, spec, settings, layout)
        return execute(spark, spec, settings, layout, progress=progress, driver=driver,
                       watch=watch)
    finally:
        if owned:
            stop_session(spark)
