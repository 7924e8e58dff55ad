"""``cec recover --from-log``: check and repair a run directory, rescale, reconcile
each partition, and resume the run (the library function behind the command).

Needs nothing but the run directory (``RUN/run.toml`` and the logs). The steps, in
the order :func:`recover_run` takes them:

1. :func:`_check_and_repair`: the run directory's owner, ``--repair`` of
   ``run.toml``, the recovery-time objective, a driver number (an older driver
   still running this run stops before a log is touched);
2. :func:`_rescale` (``--partitions P'``): the run moves to ``P'`` partitions in Spark
   tasks (:mod:`cec_spark.recover.rescale`), on the session the resume then uses; a
   dry run answers with the plan here;
3. :func:`cec_spark.recover.partitions.recover_partitions`, every partition at once:
   reconcile (and with ``--repair`` cut) its upstream log, reconcile its output log
   (a damaged one is cut); or, dry run, predict its recovery
   (:func:`recovery.partition.predict`) without writing;
4. a dry run answers (:func:`would_do`); else :func:`_before_resume` checks that
   rows cut from an upstream log can be read again and notes what "caught up" means,
   and the run resumes (:func:`cec_spark.driver.runner.resume_run`): each operator
   task rebuilds its partition's eventual checkpoint and replays, side by side, and
   what each recovered is the recovery's explain
   (:func:`cec_spark.report.recover.explained_by_tasks`).

The driver never rebuilds an eventual checkpoint nor loads a window's state (a
rescale drains and hands over in Spark tasks too, :mod:`cec_spark.recover.rescale`;
only its dry run counts the windows here): its work on a recovery is a few opens per
log, whatever the run's state.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from cec.errors import CecError, RecoveryError, UsageError
from cec.ingest_token import decode_token
from cec_spark.driver.runner import DriverTurn, prepare_executors, resume_run
from cec_spark.ingest.logs import upstream_sealed
from cec_spark.recover.partitions import (
    Recovery,
    in_parallel,
    recover_partitions,
    wait_for_lock,
)
from cec_spark.recover.rescale import check_rescale, rescale, spark_map
from cec_spark.report import (
    RecoverPartition,
    RecoverResult,
    RescaleResult,
    UpstreamRepair,
)
from cec_spark.report.recover import explained_by_tasks
from cec_spark.run import rto
from cec_spark.run.plan import RunPlan
from cec_spark.run.session import session_for, stop_session
from cec_spark.run.slots import check_local_slots
from cec_spark.rundir.access import check_owner
from cec_spark.rundir.drivers import earlier_boot, take_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.repair import repair_files
from cec_spark.rundir.run_file import read_run_file, rescaled_spec
from cec_spark.source.fingerprint import check_fingerprint, stored_fingerprint
from cec_spark.source.planner import plan_source
from cec_spark.watchdog import announce_wait, say
from storage_log.log import StreamLog

#: the session a rescale started in this call of :func:`recover_run` (stopped at its end)
_SESSIONS: list[Any] = []

def recover_run(run_dir: Path | str, *, dry_run: bool = False, progress: bool = True,
                master: str | None = None, conf: dict[str, str] | None = None,
                repair: bool = False, trust: bool = False,
                partitions: int | None = None, driver: int | None = None,
                in_tasks: bool = True) -> RecoverResult:
    """``cec recover --from-log RUN``: reconcile every log, resume, explain.

    Per partition the explain has ``n_c``, ``replay_after_seq``, ``t_c``, the extent
    (records and bytes), the replay tuples and the time of each phase (reconcile,
    scan, load, replay), as the resumed operator task that rebuilt it reports them.
    With ``dry_run`` the logs are only read (nothing is reconciled; the replay is
    counted exactly from the upstream log but not run, its time estimated), every
    partition at once, and nothing is resumed. Without it every log is reconciled (torn tails
    cut, a damaged output log cut), then the pipeline resumes from where it stopped
    and runs to the end of a bounded source, on ``master`` with ``conf`` over the
    stored Spark settings if given; each task rebuilds its eventual checkpoint and
    replays as it starts.

    ``repair`` restores a damaged ``run.toml`` from its backup and cuts a damaged
    upstream log at its first bad frame; the rows cut are read again from the source
    (which must still be there and unchanged: else RecoveryError, exit 4, naming the
    partition and the rows lost).

    ``partitions`` (``--partitions P'``): first rescale the run to ``P'`` partitions
    (:mod:`cec_spark.recover.rescale`), then recover and resume those; with ``dry_run`` only
    say what the rescale would do (the cut, the windows each new partition gets). A run
    killed before its logs existed has nothing to move: it starts with ``P'``.

    ``driver``: the driver number the caller took already (a standby that claimed the
    run, :func:`~cec_spark.rundir.drivers.claim_driver`); else one is taken here. Either
    way its lease ends with how this recovery ended (:class:`DriverTurn`). ``in_tasks``
    is accepted for the callers that asked for it (the standby's takeover): the rebuild
    is always the tasks'.
    """
    del in_tasks  # always: issue 38 item 1
    run, driver = _check_and_repair(Path(os.path.abspath(run_dir)), dry_run=dry_run,
                                    repair=repair, trust=trust, driver=driver)
    try:
        with DriverTurn(run.layout, driver) as turn:
            result = _recover_and_resume(run, driver, dry_run=dry_run, progress=progress,
                                         master=master, conf=conf, partitions=partitions,
                                         run_dir=run_dir)
            if result.resumed is not None:
                turn.done(result.resumed)
            return result
    finally:
        while _SESSIONS:  # a rescale's session (the resume did not own it)
            stop_session(_SESSIONS.pop())


def _recover_and_resume(run: Recovery, driver: int | None, *, dry_run: bool,
                        progress: bool, master: str | None, conf: dict[str, str] | None,
                        partitions: int | None, run_dir: Path | str) -> RecoverResult:
    """Steps 2 to 4 of :func:`recover_run`."""
    rescaled = None
    if partitions is not None and partitions != run.spec.run.partitions:
        rescaled = _rescale(run, partitions, master, conf, driver)
        if dry_run:
            return RecoverResult(run_dir=str(run.layout.root), dry_run=True, partitions=[],
                                 repairs=run.repairs, resumed=None, rescale=rescaled,
                                 would=[] if rescaled is None else rescaled.lines())
        run.next_generation()
    parts = recover_partitions(run)
    if dry_run:
        done = _source_done(run.layout, run.spec.run.partitions)
        return RecoverResult(run_dir=str(run.layout.root), dry_run=True, partitions=parts,
                             repairs=run.repairs, resumed=None, rescale=rescaled,
                             would=would_do(parts, done))
    _before_resume(run, parts)
    # the run.toml read above is the resume's plan too (no second read)
    resumed = resume_run(run.layout.root, progress=progress, driver=driver,
                         plan=RunPlan(run.spec.with_run(master=master, conf=conf),
                                      run.settings, run.layout, run_dir=str(run_dir)))
    return RecoverResult(run_dir=str(run.layout.root), dry_run=False,
                         partitions=explained_by_tasks(parts, resumed),
                         repairs=run.repairs, resumed=resumed, rescale=rescaled)


# --------------------------------------------------------------------------- 1. check


def _check_and_repair(root: Path, *, dry_run: bool, repair: bool, trust: bool,
                      driver: int | None = None) -> tuple[Recovery, int | None]:
    """The run directory checked (its owner), ``run.toml`` repaired (``repair``) and
    read, the objective said, and a driver number taken (older drivers stop); a dry
    run only reads ``run.toml``. Returns the recovery and its driver number."""
    layout = RunLayout(root)
    repairs: list[str] = []
    if not dry_run:
        check_owner(layout, trust)
        if repair:
            repairs += repair_files(layout)  # run.toml, generations.toml, backups
    spec, settings = read_run_file(layout)
    run = Recovery(layout, spec, settings, dry_run=dry_run, repair=repair, repairs=repairs)
    if dry_run:
        return run, None
    warning = rto.check_objective(spec, resume=True)
    if warning is not None:  # a recovery is never refused for its objective
        say(warning)
    # before touching a log: a driver still running this run (another host) stops
    n = take_driver(layout) if driver is None else driver
    if spec.upstream_cache and spec.upstream_fsync != "always":
        other = earlier_boot(layout, n)
        if other is not None:  # its page cache is gone: what it held may be lost or torn
            run.rescan_upstream = True
            say(f"driver {other} of this run ran in another boot of its machine and its "
                "ingest committed the upstream logs without fsync (a cache of the source): "
                "each is read in full and cut where damaged, and the ingest reads the rows "
                "cut again from the source")
    return run, n


# --------------------------------------------------------------------------- 2. rescale


def _rescale(run: Recovery, partitions: int, master: str | None,
             conf: dict[str, str] | None, driver: int | None) -> RescaleResult | None:
    """``--partitions P'``: the run rescaled in Spark tasks, on the session the resume
    then runs on (dry run: the rescale planned, in this process)."""
    layout, spec = run.layout, run.spec
    if run.repair:
        raise UsageError("--repair and --partitions: repair the run first ('cec "
                         "recover --repair'), then rescale it")
    check_rescale(run.settings, spec, partitions, layout.root)
    if not run.dry_run:  # P' + 1 slots, before anything is written
        check_local_slots(partitions, rescaled_spec(spec, partitions).with_run(
            master=master).run.effective_master)
        def let_go(q: int) -> None:  # a killed run's workers let go (and the open
            for path in (layout.output(q), layout.upstream(q)):  # reconciles)
                if path.exists():
                    wait_for_lock(path)

        in_parallel(let_go, spec.run.partitions)
    if run.dry_run:
        return rescale(layout, partitions, dry_run=True)
    plan = RunPlan(rescaled_spec(spec, partitions).with_run(master=master, conf=conf),
                   run.settings, layout, run_dir=str(layout.root))
    new = plan.spec.run
    spark = announce_wait(f"Spark to start (master {new.effective_master})",
                          lambda: session_for(new.effective_master, new.partitions,
                                              new.spark_conf))
    # the resume takes this session (the same settings) and leaves it to the caller
    _SESSIONS.append(spark)
    # before a task writes: enough slots, and every executor sees the run directory and
    # the source (exit 2 naming host and path, as a run's start says it)
    prepare_executors(spark, plan)
    return rescale(layout, partitions, tasks=spark_map(spark), driver=driver)


# --------------------------------------------------------------------------- 4. resume


def _before_resume(run: Recovery, parts: list[RecoverPartition]) -> None:
    """Rows cut from upstream logs (``--repair``, or a damaged cache of the source) can
    be read again from the source; what "caught up" means for this recovery's tasks
    (:mod:`cec_spark.run.rto`)."""
    refill = {e.partition: e.upstream_repaired for e in parts
              if e.upstream_repaired is not None}
    if refill:
        _source_can_refill(run.layout, run.spec, run.settings, refill)
    rto.write_run(run.layout, {**rto.read_run(run.layout), "catch_up": run.catch_up,
                               "catch_up_noted_at": time.time()})


def _source_done(layout: RunLayout, partitions: int) -> bool | None:
    """Every upstream log is sealed (None: a log cannot be read without reconciling)."""
    try:
        return upstream_sealed(layout, partitions)
    except Exception:  # a dry run reads only: a log without its index says nothing
        return None


def would_do(parts: list[RecoverPartition], source_done: bool | None) -> list[str]:
    """What ``cec recover`` would do, and why, for a dry run's explains (pure)."""
    lines = []
    for e in parts:
        head = f"partition {e.partition}: "
        if e.fresh_start is None:
            lines.append(head + f"cannot tell without reconciling the logs ({e.reason})")
        elif e.fresh_start:
            lines.append(head + f"would start fresh ({e.reason or 'nothing to recover'})")
        elif e.sealed:
            lines.append(head + "finished before (its output log is sealed): nothing to "
                         "rebuild or replay")
        else:
            ext = e.extent
            scan = (f"from its last {ext.records} output records ({ext.bytes} bytes)"
                    if ext is not None else "")
            tuples = e.replay.tuples if e.replay is not None else 0
            est = f", about {e.estimated_s:.2g} s" if e.estimated_s is not None else ""
            lines.append(
                head + f"would rebuild the eventual checkpoint of {e.n_c} open windows "
                f"{scan}, replay {tuples} upstream tuples after input position "
                f"{e.replay_after_seq} "
                f"(reconstruction mode up to {e.t_c}, where its output ends{est}), then "
                f"continue after input position {e.t_c} at output seq "
                f"{e.next_out_seq}")
    if source_done is None:
        lines.append("run: cannot tell without reconciling whether the source was read "
                     "to its end")
    elif source_done:
        lines.append("run: the source was read to its end (every upstream log is sealed): "
                     "the resume does not read it again")
    else:
        lines.append("run: the ingest would go on from the oldest commit token of the "
                     "upstream logs; rows already in a log are not written twice")
    return lines


def _source_can_refill(layout: RunLayout, spec: Any, settings: Any,
                       cut: dict[int, UpstreamRepair]) -> None:
    """The rows cut from upstream logs can be read again: the source is there (the
    resumed ingest then checks it is unchanged at its resume point); else exit 4."""
    newest = 0
    for p in range(spec.run.partitions):
        with StreamLog.open(layout.upstream(p)) as log:
            raw = log.last_token()
        tok = decode_token(raw)
        if tok is not None:
            newest = max(newest, tok.next_seq)
    try:
        if spec.source.kind == "stream-dir":
            if not Path(spec.source.path).is_dir():
                raise UsageError(f"{spec.source.path}: the stream folder is gone")
        else:
            # the files' metadata (the ingest tasks check the rows they read again), and
            # the fingerprint a resumed run last recorded, against the digests just made
            plan = plan_source(spec, max_rows=settings.max_tuples, validate=False,
                               chunk_bytes=settings.chunk_bytes,
                               reports=settings.source_reports)
            check_fingerprint(spec, stored_fingerprint(layout.source_files_file,
                                                         list(settings.source_files)),
                              now=list(plan.files), chunks=plan.chunks,
                              reports=layout.source_chunk_report)
    except CecError as exc:
        def first(c: UpstreamRepair) -> int:
            return 0 if c.last_seq is None else int(c.last_seq) + 1

        lost = "; ".join(f"partition {p}: rows with seq {first(c)} to {newest - 1}"
                         for p, c in sorted(cut.items()))
        raise RecoveryError(f"upstream rows were cut from damaged segments and the source "
                            f"cannot be read again ({exc}): lost {lost}") from exc
