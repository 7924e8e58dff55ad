"""A hot standby's operator tasks: already running, following the output logs, released
at a takeover (issue 41 items 1 and 2).

A ready standby (:mod:`cec_spark.standby.standby`) submits the run's operator job on its
own warm session at once: one task per partition (:func:`follow_then_run`), which

1. opens its partition's output log **read-only** and keeps its eventual checkpoint
   up to date as the live run commits (:class:`recovery.followed.FollowedEC`, seeded
   by one backward scan when the task starts, then fed by a
   :class:`storage_log.follow.Follower` look every :data:`LOOK_S`): the newest
   footprint of every open window, ``N_c``, ``t_c`` and ``T``; writes nothing to the
   run but its follow report ``RUN/standbys/HOST-PID.hot/pNNNN.json`` (how far it
   has read, and the log's end then), every :data:`REPORT_S`;
2. waits for the release, ``RUN/standbys/HOST-PID.hot/go`` (written by the standby once
   it claimed the next driver number, :meth:`HotTasks.release`): ``{"driver": N}``,
   or ``{"end": ...}`` (the run ended, or the standby gives these tasks up). The task
   sleeps on inotify (:class:`storage_log.notify.CommitWatch`) over the release's folder
   and its output log: a commit or the release wakes it at once on the same host (a
   look at the log at most every :data:`LOOK_S`), and it looks anyway every
   :data:`FALLBACK_S` (a writer on another host is not seen by inotify);
3. released as driver ``N``: checks that what it followed is still the log's (a newer
   writer epoch whose fence lies before the last record read means that record was
   cut: it seeds again from a backward scan), then runs the partition exactly as a
   resumed operator task does (:func:`cec_spark.run.task.run_partition`), with the
   followed checkpoint instead of the backward scan: its writable open reconciles the
   log, what was committed since the last look is read forward into the checkpoint,
   and the replay after ``T`` starts at once (a log that now ends before the last
   record followed: the backward scan, as without a standby).

A task also ends, with no result, when ``run.toml`` changes under it (a rescale: the
standby starts new tasks for the new plan). The driver side is :class:`HotTasks`: the
job on a thread of its own, offered to the takeover's operator thread
(:func:`cec_spark.driver.jobs.offer_prepared`), which releases it instead of launching a
job. Whatever fails before the release (the job, a task) leaves the takeover as it was
without a hot standby: a job launched cold.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from cec_spark.run.plan import RunPlan
from cec_spark.run.task import run_partition
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.layout import RunLayout
from cec_spark.watchdog import say
from recovery.followed import FollowedEC
from recovery.partition import scan
from storage_log.durable import write_durable
from storage_log.entry import Snapshot
from storage_log.epoch import epoch_dir, list_epochs, read_epoch
from storage_log.errors import LogNotFoundError
from storage_log.follow import CommitToken
from storage_log.log import StreamLog
from storage_log.notify import CommitWatch

__all__ = ["HotTasks", "follow_then_run"]

LOOK_S = 0.05  # a hot task looks at its output log at most this often
FALLBACK_S = 0.5  # ... and at least this often (and for the release), where inotify
# cannot see the writes (another host's, on a shared file system)
REPORT_S = 2.0  # between its follow reports (written only when they changed)
GROUP = "cec-hot-standby"


def _release(path: Path) -> dict[str, Any] | None:
    """The release, once written (None before)."""
    if not path.exists():
        return None
    got = read_advisory(path)
    return got or None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class _Follow:
    """One output log followed: the checkpoint, and the writer epochs seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ec = FollowedEC()
        self.epochs = _stamp(epoch_dir(path))
        self.newest = max(list_epochs(path), default=0)
        self.log: StreamLog | None = None
        self.look: Callable[[], Iterator[pa.RecordBatch | CommitToken]] | None = None
        self._snapshot: Callable[[], Snapshot] | None = None

    def open(self) -> None:
        """Seed from a backward scan of the log as it is, then follow after it."""
        self.close()
        log = StreamLog.open(self.path)
        self.log = log
        self.ec = FollowedEC()
        self.ec.seed(scan(log))
        self.newest = max(list_epochs(self.path), default=0)
        self.epochs = _stamp(epoch_dir(self.path))
        after = self.ec.last_seq if self.ec.n_c is not None else None
        follower = log.follow(after_seq=after)
        self.look, self._snapshot = follower.look, follower.snapshot

    def step(self) -> None:
        """Read what was committed since the last look; a new writer epoch whose fence
        lies before what was read (a cut tail rewritten): seed again. A log that does
        not exist yet (the run's driver is creating its logs): nothing to read."""
        if self.log is None or self.look is None:
            try:
                self.open()
            except LogNotFoundError:
                return
        assert self.look is not None
        for item in self.look():
            if not isinstance(item, CommitToken):
                self.ec.see(item)
        stamp = _stamp(epoch_dir(self.path))
        if stamp != self.epochs:
            self.epochs = stamp
            if self._cut():
                self.open()

    def _cut(self) -> bool:
        """A writer epoch newer than the last seen fences the log before the last
        record followed."""
        cut = False
        for epoch in list_epochs(self.path):
            if epoch <= self.newest:
                continue
            fence = read_epoch(self.path, epoch).fence
            fenced_at = -1 if fence is None or fence.last_seq is None else fence.last_seq
            cut = cut or fenced_at < self.ec.last_seq
            self.newest = epoch
        return cut

    def behind(self) -> int:
        """Output rows committed to the log now and not read yet (a snapshot of the
        log's end: only for the reports)."""
        if self._snapshot is None:
            return 0
        try:
            last = self._snapshot().committed.last_seq
        except Exception:  # a log being trimmed or cut under it: said at the next one
            return 0
        return 0 if last is None else max(0, last - self.ec.last_seq)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
        self.log, self.look = None, None


def follow_then_run(run_dir: str, p: int, run_id: str | None, run_text: str,
                    standby: tuple[str, int]) -> str:
    """A hot task (module docstring) of the standby ``(host, pid)``: follow partition
    ``p``'s output log until the release; then run it as the released driver's.
    Returns the task's result (:meth:`TaskCounters.to_json`), or ``""`` when it ended
    unreleased."""
    layout = RunLayout(Path(run_dir))
    go = layout.standby_release(*standby)
    report = layout.hot_report(*standby, p)
    report.parent.mkdir(parents=True, exist_ok=True)
    plan_at = _stamp(layout.run_file)
    follow = _Follow(layout.output(p))
    watch = CommitWatch([go.parent, layout.output(p)], fallback_s=FALLBACK_S)
    reported, looked, said_last = 0.0, 0.0, None
    woke = True  # a write was seen (or may have been) since the last look
    try:
        while True:
            said = _release(go)
            if said is not None:
                break
            now = time.monotonic()
            if (woke and now - looked >= LOOK_S) or now - looked >= FALLBACK_S:
                looked, woke = now, False
                watch.add(layout.output(p))  # (a log created since: watched from now)
                follow.step()
                if _stamp(layout.run_file) != plan_at:  # a rescale: this plan is gone
                    return ""
            if now - reported >= REPORT_S:
                reported = now
                state = (follow.ec.last_seq, follow.behind(), follow.ec.n_c)
                if state != said_last:
                    write_advisory(report, {"partition": p, "followed_seq": state[0],
                                            "behind": state[1], "n_c": state[2],
                                            "at": round(time.time(), 3),
                                            "pid": os.getpid()})
                    said_last = state
            # asleep until a write in the standbys folder (the release) or in the log (a
            # commit), FALLBACK_S at most; after a write, the next look LOOK_S after the
            # last one (commits of a busy run: at most 1 / LOOK_S looks a second)
            if woke:
                watch.wait(max(0.0, LOOK_S - (time.monotonic() - looked)))
            else:
                woke = watch.wait(FALLBACK_S)
        if "driver" not in said:
            return ""
        follow.step()  # what was committed up to the release; a cut seen now: seed again
    finally:
        watch.close()
        follow.close()
    counters = run_partition(run_dir, p, run_id, int(said["driver"]), run_text=run_text,
                             followed=follow.ec)
    return counters.to_json()


def _entry(plan: RunPlan, standby: tuple[str, int]
           ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    run_dir, run_id, run_text = str(plan.layout.root), plan.settings.run_id, plan.run_text

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for p in batch.column(0).to_pylist():
                got = follow_then_run(run_dir, int(p), run_id, run_text, standby)
                yield pa.RecordBatch.from_pydict({"result": pa.array([got], pa.string())})

    return run


class HotTasks:
    """The operator job (module docstring) of the standby ``(host, pid)``, on a thread
    of its own; offered to a takeover (:class:`cec_spark.driver.jobs.PreparedOperators`)."""

    def __init__(self, spark: SparkSession, plan: RunPlan, standby: tuple[str, int]) -> None:
        self.spark, self.plan, self.standby = spark, plan, standby
        self.release_file = release = plan.layout.standby_release(*standby)
        self.rows: list[str] | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.released = False
        release.parent.mkdir(parents=True, exist_ok=True)  # the tasks watch this folder
        with contextlib.suppress(FileNotFoundError):
            release.unlink()
        self._thread = threading.Thread(target=self._run, name="cec-hot-standby",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sc = self.spark.sparkContext
        try:
            sc.setJobGroup(GROUP, "cec: a hot standby's operator tasks, following the "
                           "output logs", interruptOnCancel=True)
            p = self.plan.partitions
            rows = (self.spark.range(0, p, 1, p)
                    .mapInArrow(_entry(self.plan, self.standby), "result string")
                    .collect())
            self.rows = [str(r["result"]) for r in rows]
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    @property
    def following(self) -> bool:
        """The job runs, its tasks not released."""
        return not self.done.is_set() and not self.released

    def follow_reports(self) -> list[dict[str, Any]]:
        """Each task's last follow report."""
        return [r for p in range(self.plan.partitions)
                if (r := read_advisory(self.plan.layout.hot_report(*self.standby, p)))]

    def matches(self, plan: RunPlan) -> bool:
        return (self.following and plan.run_text == self.plan.run_text
                and plan.partitions == self.plan.partitions
                and plan.layout.root == self.plan.layout.root)

    def release(self, driver: int | None) -> list[str]:
        """The tasks released as driver ``driver``'s; every task's result once the job
        ends (raises what it raised; a task that was not released: no result)."""
        self.released = True
        write_durable(self.release_file, json.dumps({"driver": driver}).encode())
        self.done.wait()
        if self.error is not None:
            raise self.error
        return [r for r in self.rows or [] if r]

    def cancel(self, why: str = "given up") -> None:
        """End the tasks unreleased: they see the release say so and return; a job
        still running after a few seconds is cancelled."""
        if self.done.is_set():
            return
        self.released = True
        with contextlib.suppress(OSError):
            write_durable(self.release_file, json.dumps({"end": why}).encode())
        if not self.done.wait(5.0):
            self.spark.sparkContext.cancelJobGroup(GROUP)
            self.done.wait(10.0)

    def close(self) -> None:
        """Cancel if still following, and remove the release and the reports."""
        self.cancel()
        with contextlib.suppress(OSError):
            self.release_file.unlink()
        folder = self.plan.layout.hot_dir(*self.standby)
        for f in folder.glob("*.json"):
            with contextlib.suppress(OSError):
                f.unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()


def say_following(hot: HotTasks) -> None:
    """Once every task follows: one line saying so."""
    reports = hot.follow_reports()
    behind = max((int(r.get("behind", 0)) for r in reports), default=0)
    say(f"standby: hot: {len(reports)} of {hot.plan.partitions} operator tasks follow the "
        f"output logs ({behind} records behind at most)")
