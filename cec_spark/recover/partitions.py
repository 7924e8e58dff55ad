"""``cec recover``, step 3: each partition's logs reconciled (with ``--repair``, an
upstream log cut at its first bad frame; a damaged output log cut in any case), or,
dry run, its recovery predicted.

With ``--repair`` every output log is scanned in full too, and cut at a damaged record
that only a read would find (the writable open checks the tail only).

The eventual checkpoints are not rebuilt here: each resumed operator task rebuilds its
own as it starts (:func:`cec_spark.run.task._recover`), side by side, and reports it;
what ``cec recover`` explains per partition is the task's report
(:func:`cec_spark.report.recover.explained_by_tasks`). The driver's work per partition
is a writable open of each log (:func:`wait_for_lock` waits for a killed run's
workers to let go of it; the open reconciles a torn tail), never a scan of the
eventual checkpoint's extent, and never a window's state: it does not grow with the
run's state. On a shared file system (NFS, FUSE, ...: :func:`reconcile_workers`) the
partitions go in parallel (threads: each open waits on round trips); on a local one
they go one after the other, as the opens are then bound by the CPU, and threads only
contend for the interpreter (measured at P = 32 on ext4: twice the CPU, and no sooner).
A dry run only reads (:func:`recovery.partition.predict`), partitions in parallel.
:class:`Recovery` is one ``cec recover`` as it goes, which the steps of
:mod:`cec_spark.recover.resume` share.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from cec.spec import PipelineSpec
from cec_spark.report import (
    OutputRepair,
    RecoverPartition,
    UpstreamRepair,
    reconcile_of,
)
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import needs_sync
from cec_spark.rundir.repair import unneeded_damage
from cec_spark.rundir.run_file import RunSettings, read_run_file
from cec_spark.watchdog import say
from recovery.partition import predict
from storage_log.errors import CorruptLogError, LogLockedError
from storage_log.log import StreamLog
from storage_log.reconcile import ReconcileReport

__all__ = ["LOCK_WAIT_S", "PARALLEL", "Recovery", "cut_output", "in_parallel",
           "reconcile_workers", "recover_partitions", "wait_for_lock"]

LOCK_WAIT_S = 30.0
PARALLEL = 8
"""Partitions reconciled (on a shared file system) or predicted at once."""

T = TypeVar("T")


@dataclass
class Recovery:
    """One ``cec recover`` as it goes: the run, how it was asked, what it did so far."""

    layout: RunLayout
    spec: PipelineSpec
    settings: RunSettings
    dry_run: bool
    repair: bool
    repairs: list[str] = field(default_factory=list)
    """What ``--repair`` repaired, one sentence each."""
    catch_up: dict[str, int | None] = field(default_factory=dict)
    """Each upstream log's last seq now (:mod:`cec_spark.run.rto`'s "caught up")."""
    rescan_upstream: bool = False
    """Every upstream log is read in full and cut where damaged, as ``--repair`` does
    (a cache of the source committed without fsync in another boot of the machine)."""

    def next_generation(self) -> None:
        """Read the run again after a rescale: its new generation, ``P'`` partitions."""
        self.layout = RunLayout(self.layout.root)
        self.spec, self.settings = read_run_file(self.layout)


def in_parallel(fn: Callable[[int], T], n: int, workers: int | None = None) -> list[T]:
    """``[fn(0), ..., fn(n - 1)]``, up to ``workers`` (default :data:`PARALLEL`) at once
    (threads); the first error is raised once every call has ended."""
    workers = PARALLEL if workers is None else workers
    if n < 2 or workers < 2:
        return [fn(p) for p in range(n)]
    with ThreadPoolExecutor(max_workers=min(workers, n),
                            thread_name_prefix="cec-recover") as pool:
        return list(pool.map(fn, range(n)))


def reconcile_workers(root: Path) -> int:
    """How many logs of the run directory ``root`` to open writable at once:
    :data:`PARALLEL` on a file system not known to be local (its opens wait on the
    server), 1 on a local one (they are bound by the CPU there)."""
    return PARALLEL if needs_sync(root) else 1


def recover_partitions(run: Recovery) -> list[RecoverPartition]:
    """Every partition reconciled (:func:`reconcile_workers` at once) or, dry run,
    predicted (in parallel); the result in partition order, and the repairs said in
    partition order too."""
    head = len(run.repairs)
    workers = None if run.dry_run else reconcile_workers(run.layout.root)
    parts = in_parallel(lambda p: _recover_partition(run, p), run.spec.run.partitions,
                        workers)
    run.repairs[head:] = sorted(run.repairs[head:],
                                key=lambda line: int(line.split(":")[0].split()[-1]))
    return parts


def _recover_partition(run: Recovery, p: int) -> RecoverPartition:
    """Partition ``p`` reconciled (dry run: predicted)."""
    t0 = time.perf_counter()
    out_path, up_path = run.layout.output(p), run.layout.upstream(p)
    if not out_path.exists():
        return RecoverPartition(partition=p, fresh_start=True, reason="no output log yet")
    if run.dry_run:
        return _predict(run, p)
    upstream_repaired = _reconcile_upstream(run, p) if up_path.exists() else None
    first, sealed, empty = _open_output(out_path)  # this open reconciles: keep its report
    repaired = None
    if first is None or run.repair:  # damaged before its committed end (or, --repair,
        # damage only a read finds, e.g. inside the extent): cut (derived data)
        repaired = cut_output(run.layout, p, run.spec.run.fsync)
    if repaired is not None:
        sealed, empty = False, False  # the task tells
    fresh: bool | None = None  # the task tells
    if upstream_repaired is not None:
        reason = ("rebuilt by its operator task once the ingest has read the rows cut "
                  "from its upstream log again")
    elif sealed:
        fresh, reason = False, ("finished before (its output log is sealed): nothing to "
                                "rebuild or replay")
    elif empty:
        fresh, reason = True, "nothing to recover: its output log holds no record"
    else:
        reason = "rebuilt by its operator task as the run resumed"
    return RecoverPartition(partition=p, fresh_start=fresh,
                            reason=reason, sealed=sealed, reconcile=reconcile_of(first),
                            repaired=repaired, upstream_repaired=upstream_repaired,
                            refill=upstream_repaired is not None,
                            recover_s=time.perf_counter() - t0)


def _predict(run: Recovery, p: int) -> RecoverPartition:
    """A dry run of partition ``p``: its logs read, its recovery predicted."""
    out_path, up_path = run.layout.output(p), run.layout.upstream(p)
    try:
        out = StreamLog.open(out_path)
    except Exception as exc:  # e.g. no index yet: only a writable open can fix it
        return RecoverPartition(partition=p, fresh_start=None,
                                reason=f"cannot read without reconciling: {exc}")
    with out, (StreamLog.open(up_path) if up_path.exists()
               else contextlib.nullcontext()) as up:
        explain = predict(out, up, upstream_after=run.layout.cut)
        return RecoverPartition.explained(p, explain, sealed=out.sealed)


def _reconcile_upstream(run: Recovery, p: int) -> UpstreamRepair | None:
    """Partition ``p``'s upstream log reconciled (its writer may have died), and with
    ``--repair`` cut at its first bad frame; what was cut (None: nothing). Notes the
    log's last seq for the catch-up."""
    up_path = run.layout.upstream(p)
    ends: list[int | None] = []  # its end, as the writable open reconciled it
    first = wait_for_lock(up_path, seen=lambda log: ends.append(log.last_seq))
    # a cache of the source (upstream_cache) damaged or maybe torn is cut like --repair
    # cuts it: the rows cut are in the source, which the ingest reads again
    cut_it = run.repair or run.rescan_upstream or (first is None and run.spec.upstream_cache)
    try:
        if not cut_it:
            if ends:
                run.catch_up[str(p)] = ends[-1]
            else:  # the writable open found it damaged: a reader says where
                with StreamLog.open(up_path) as log:
                    run.catch_up[str(p)] = log.last_seq
            note = unneeded_damage(run.layout, p, first)  # issue 29 item 4
            if note is not None:
                say(note)
            return None
        what = _repair_upstream(up_path, run.spec.run.fsync)  # a full scan: damage
        run.catch_up[str(p)] = what.last_seq  # anywhere is found and cut
    except CorruptLogError as exc:
        raise CorruptLogError(
            f"partition {p}: {exc}. 'cec recover --from-log {run.layout.root} "
            "--repair' cuts it there and reads the rows cut again from the "
            "source") from exc
    cut = what.reconcile
    if cut is None or not (cut.bytes_cut or cut.segments_removed):
        return None
    run.repairs.append(f"partition {p}: upstream log cut after seq {what.last_seq} at "
                       f"{cut.cut_at} ({cut.cut_reason})")
    return what


def cut_output(layout: RunLayout, p: int, fsync: str) -> OutputRepair | None:
    """Partition ``p``'s output log scanned in full and, if damaged, cut at its first bad
    record; what was cut (None: nothing). Its operator task rebuilds the eventual
    checkpoint from what is left and replays the upstream log, which writes the records
    cut again, exactly (or, if the upstream log no longer reaches back there, fails
    naming what is lost: exit 4)."""
    with StreamLog.open(layout.output(p), writable=True, repair=True, fsync=fsync) as log:
        cut = reconcile_of(log.reconcile_report)
    if cut is None or not (cut.bytes_cut or cut.segments_removed):
        return None
    return OutputRepair(error=f"{cut.cut_reason} at {cut.cut_at}", reconcile=cut)


def _repair_upstream(path: Path, fsync: str) -> UpstreamRepair:
    """Cut a damaged upstream log at its first bad frame; what was cut."""
    with StreamLog.open(path, writable=True, repair=True, fsync=fsync) as log:
        return UpstreamRepair(last_seq=log.last_seq, sealed=bool(log.sealed),
                              reconcile=reconcile_of(log.reconcile_report))


def _open_output(path: Path) -> tuple[ReconcileReport | None, bool, bool]:
    """The output log at ``path`` reconciled by a writable open (:func:`wait_for_lock`):
    what the open cut or rebuilt (None: the log is damaged before its committed end),
    whether the log is sealed, whether it holds no record."""
    sealed, empty = False, False

    def note(log: StreamLog) -> None:
        nonlocal sealed, empty
        sealed, empty = bool(log.sealed), log.last_seq is None

    return wait_for_lock(path, seen=note), sealed, empty


def wait_for_lock(path: Path, timeout: float = LOCK_WAIT_S,
                  seen: Callable[[StreamLog], None] | None = None) -> ReconcileReport | None:
    """Wait until no process holds the writer lock of ``path`` (a killed run's workers
    leave with their JVM, a moment after it); LogLockedError after ``timeout``.

    Returns what the writable open cut or rebuilt (None if the log is corrupt: the
    caller repairs it); ``seen`` is called with the open log. Says on stderr what it
    waits for after a few seconds.
    """
    started = time.monotonic()
    deadline = started + timeout
    told = False
    delay = 0.005  # a killed worker lets go within tens of ms: look soon, then less often
    while True:
        try:
            with StreamLog.open(path, writable=True) as log:
                if seen is not None:
                    seen(log)
                return log.reconcile_report
        except LogLockedError as exc:
            if time.monotonic() >= deadline:
                raise
            if not told and time.monotonic() - started >= 3:
                told = True
                say(f"waiting up to {timeout:.0f} s for the writer lock: {exc}")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        except CorruptLogError:
            return None  # the caller repairs it
