"""``cec recover``, step 3: each partition's logs reconciled (with ``--repair``, cut at
their first bad frame) and its eventual checkpoint rebuilt, or, dry run, predicted.

Per partition (:func:`recover_partitions`, in order; in parallel when the resumed
tasks rebuild): its upstream log is reconciled (its writer may have died) and with
``--repair`` cut, its last seq noted for the catch-up; its output log is reconciled
by the first writable open (:func:`wait_for_lock` waits for a killed run's workers to
let go of it); then its EC is rebuilt and its upstream replayed
(:func:`recovery.partition.recover_partition`), a damaged output log first cut (it is
derived data: EC and replay produce the lost records again). A dry run only reads
(:func:`recovery.partition.predict`). :class:`Recovery` is one ``cec recover`` as it
goes, which the steps of :mod:`cec_spark.recover.resume` share.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cec.spec import PipelineSpec
from cec_spark.report import (
    OutputRepair,
    RecoverPartition,
    UpstreamRepair,
    reconcile_of,
)
from cec_spark.run.task import operator_for
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.repair import unneeded_damage
from cec_spark.rundir.run_file import RunSettings, read_run_file
from cec_spark.watchdog import say
from recovery.partition import predict, recover_partition
from storage_log.errors import CorruptLogError, LogLockedError
from storage_log.log import StreamLog
from storage_log.reconcile import ReconcileReport

__all__ = ["LOCK_WAIT_S", "Recovery", "recover_partitions", "wait_for_lock"]

LOCK_WAIT_S = 30.0


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
    in_tasks: bool = False
    """Leave the rebuild of each eventual checkpoint to the resumed operator tasks (they
    rebuild it from the output log in any case): a standby's takeover, where the
    driver's own rebuild would be the same work done twice before the tasks start."""

    def next_generation(self) -> None:
        """Read the run again after a rescale: its new generation, ``P'`` partitions."""
        self.layout = RunLayout(self.layout.root)
        self.spec, self.settings = read_run_file(self.layout)


def recover_partitions(run: Recovery) -> list[RecoverPartition]:
    """Every partition recovered (dry run: predicted), in order. When the tasks rebuild
    (``in_tasks``), what is left here is waiting for locks and reconciling, I/O: the
    partitions then go in parallel."""
    partitions = range(run.spec.run.partitions)
    if not run.in_tasks or len(partitions) < 2:
        return [_recover_partition(run, p) for p in partitions]
    with ThreadPoolExecutor(max_workers=min(8, len(partitions)),
                            thread_name_prefix="cec-reconcile") as pool:
        return list(pool.map(lambda p: _recover_partition(run, p), partitions))


def _recover_partition(run: Recovery, p: int) -> RecoverPartition:
    """Partition ``p`` recovered (dry run: predicted)."""
    out_path, up_path = run.layout.output(p), run.layout.upstream(p)
    if not out_path.exists():
        return RecoverPartition(partition=p, fresh_start=True, reason="no output log yet")
    if run.dry_run:
        return _predict(run, p)
    upstream_repaired = _reconcile_upstream(run, p) if up_path.exists() else None
    first = wait_for_lock(out_path)  # this open reconciles: keep its report
    if upstream_repaired is not None:  # rebuilt by the resumed run, once the ingest
        return RecoverPartition(  # has read the rows cut again
            partition=p, fresh_start=None, reason="", refill=True,
            upstream_repaired=upstream_repaired)
    if run.in_tasks and first is not None:  # reconciled; not damaged
        return RecoverPartition(partition=p, fresh_start=None,
                                reason="rebuilt by its operator task as the run resumed",
                                reconcile=reconcile_of(first))
    return _rebuild(run, p, first)


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
    first = wait_for_lock(up_path)
    try:
        if not run.repair:  # reconciled by the open above: a reader sees its end
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


def _rebuild(run: Recovery, p: int, first: ReconcileReport | None) -> RecoverPartition:
    """Partition ``p``'s eventual checkpoint rebuilt and its upstream replayed; a
    damaged output log is cut at its first bad record first (it is derived data: EC
    and replay produce the lost records again, exactly). ``first``: what the first
    writable open of the output log cut or rebuilt."""
    layout, spec = run.layout, run.spec
    out_path, up_path = layout.output(p), layout.upstream(p)
    t0 = time.perf_counter()
    repaired: OutputRepair | None = None
    try:
        rec = recover_partition(out_path, up_path, operator_for(spec, run.settings),
                                fsync=spec.run.fsync, upstream_after=layout.cut)
    except CorruptLogError as exc:
        with StreamLog.open(out_path, writable=True, repair=True,
                            fsync=spec.run.fsync) as log:
            repaired = OutputRepair(error=str(exc),
                                    reconcile=reconcile_of(log.reconcile_report))
        rec = recover_partition(out_path, up_path, operator_for(spec, run.settings),
                                fsync=spec.run.fsync, upstream_after=layout.cut)
    with rec.output_log as out:
        report = out.reconcile_report
        if first is not None and (first.bytes_cut or first.rebuilt):
            report = first  # what was cut was cut by the first open
        sealed = out.sealed
    return RecoverPartition.explained(p, rec.explain, sealed=sealed,
                                      reconcile=reconcile_of(report), repaired=repaired,
                                      recover_s=time.perf_counter() - t0)


def _repair_upstream(path: Path, fsync: str) -> UpstreamRepair:
    """Cut a damaged upstream log at its first bad frame; what was cut."""
    with StreamLog.open(path, writable=True, repair=True, fsync=fsync) as log:
        return UpstreamRepair(last_seq=log.last_seq, sealed=bool(log.sealed),
                              reconcile=reconcile_of(log.reconcile_report))


def wait_for_lock(path: Path, timeout: float = LOCK_WAIT_S) -> ReconcileReport | None:
    """Wait until no process holds the writer lock of ``path`` (a killed run's workers
    leave with their JVM, a moment after it); LogLockedError after ``timeout``.

    Returns what the writable open cut or rebuilt (None if the log is corrupt: the
    caller repairs it). Says on stderr what it waits for after a few seconds.
    """
    started = time.monotonic()
    deadline = started + timeout
    told = False
    while True:
        try:
            with StreamLog.open(path, writable=True) as log:
                return log.reconcile_report
        except LogLockedError as exc:
            if time.monotonic() >= deadline:
                raise
            if not told and time.monotonic() - started >= 3:
                told = True
                say(f"waiting up to {timeout:.0f} s for the writer lock: {exc}")
            time.sleep(0.2)
        except CorruptLogError:
            return None  # the caller repairs it
