"""``cec standby --from-log RUN``: a warm process that takes a run over when its driver
dies, without a restart (the library function behind the command).

Its life, in the order :func:`standby` takes it:

1. **the run**: wait until ``RUN/run.toml`` exists (:func:`~cec_spark.standby.watch.wait_for_run`);
   refuse (exit 2, nothing written) a directory that is not a run, a finished run, a
   ``run.toml`` another user owns. Given ``--master`` or ``--partitions`` and no run
   yet, the standby first **warms on what it was given** (:func:`_warm_given`: the
   session, the worker daemon, cec imported, by the same job as in 2 but without the
   run's checks), so that a standby started before its run is warm before the run
   starts, and its start-up does not compete with the run's;
2. **warm** (:func:`_warm`): everything slow of a restart, before anything fails: the
   Spark session and its JVM, the Python worker daemon with cec imported (a first
   ``mapInArrow`` job on every slot, as the hot standby's own job is; the run's RDD
   jobs fork from the same daemon, :mod:`cec_spark.run.session`), the run's plan read. A session
   warmed in 1 is kept when it can run the run (:func:`_reusable`), else stopped and
   started anew on the run's settings, which the standby says (``the run's Spark
   settings ... differ from what the standby warmed on``); then the run's own checks
   (its executors see the run directory; its filter analysed);
   then one line with ``ready`` on stderr, and ``state = "ready"`` in its lease
   ``RUN/standbys/HOST-PID.live`` (the run's progress view, ``cec inspect extent``, the
   metrics and the recovery-time objective read it);
3. **watch** the newest driver (:class:`~cec_spark.standby.watch.DriverWatch`) until it
   dies, or ends by itself (then the standby ends too: 0 when the run completed or
   was stopped, else the driver's exit status);
4. **take over** (:func:`_take_over`): claim the next driver number (of several
   standbys exactly one wins; the others go back to 3 and watch the winner); from
   that moment the dead or frozen driver's tasks stop at their next check and its
   writers are fenced by the logs' epochs; then :func:`cec_spark.recover.resume.recover_run`
   on the warm session, exactly as ``cec recover`` (same result, same exit statuses).

The takeover's parts (detect, claim, recovery, resume to the first task recovered,
the run's end) are written to ``RUN/state/takeover.json`` and said on stderr.

Why a standby costs nothing while it waits: its main thread sleeps on an event woken
every 0.25 s to read a 1 KiB lease (and at once by the lease lock's release on this
host); its JVM is idle (no job runs). What it holds: on a local master its own driver
JVM (``spark.driver.memory``, 2 GiB by default, mostly untouched) and one Python
worker daemon. On a cluster it holds an application with executors for its ``P + 1``
slots, as the run does: a warm standby that takes over without starting executors
needs them running (see docs/STANDBY.md).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from cec.errors import CecError, UsageError
from cec.spec.model import RunSpec, default_master
from cec_spark.driver.jobs import offer_prepared, spark_error
from cec_spark.ingest.query import check_filter
from cec_spark.recover.resume import recover_run
from cec_spark.report import RecoverResult
from cec_spark.run import rto
from cec_spark.run.plan import RunPlan, plan_resume
from cec_spark.run.probe import probe, warm_workers
from cec_spark.run.session import session_for, stop_session
from cec_spark.run.slots import local_slots, needed_slots
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.drivers import claim_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import DEFAULT_LEASE_S, Lease
from cec_spark.standby.hot import REPORT_S, HotTasks, say_following
from cec_spark.standby.watch import (
    DriverWatch,
    Verdict,
    check_is_run,
    newest_driver,
    run_finished,
    wait_for_run,
)
from cec_spark.watchdog import say
from storage_log.faults import crash_point

__all__ = ["StandbyEnd", "standby"]


@dataclass
class StandbyEnd:
    """How a standby ended: it took the run over (``recovered``), or the driver ended
    by itself (``driver_ended``: how) and the standby did not."""

    run_dir: str
    recovered: RecoverResult | None = None
    driver_ended: str = ""
    code: int = 0
    takeover: dict[str, Any] = field(default_factory=dict)


def standby(run_dir: Path | str, *, master: str | None = None,
            conf: dict[str, str] | None = None, partitions: int | None = None,
            lease_s: float = DEFAULT_LEASE_S, progress: bool = True, trust: bool = False,
            for_driver: int | None = None) -> StandbyEnd:
    """``cec standby --from-log RUN`` (module docstring). ``master`` and ``conf``: the
    Spark the standby warms and the takeover runs on (default: the run's own).
    ``master`` or ``partitions`` given and no ``run.toml`` yet: warm on them (with
    ``conf``) while the run does not exist (module docstring, 1).
    ``for_driver``: started by that driver (``cec run --standby``): a run that finished
    before the standby was ready is its normal end, not a mistake."""
    root = Path(os.path.abspath(run_dir))
    if lease_s < 1.0:
        raise UsageError(f"--lease {lease_s:g}: at least 1 s (a lease is renewed every "
                         "0.25 s; shorter would fence live drivers under load)")
    if partitions is not None and partitions < 1:
        raise UsageError(f"--partitions {partitions}: must be 1 or more")
    check_is_run(root)
    warm: Warm | None = None
    try:
        if (master is not None or partitions is not None) and \
                not RunLayout(root).run_file.exists():
            warm = _warm_given(root, master, conf, partitions)
        wait_for_run(root)
        plan = plan_resume(root, master=master, conf=conf, trust=trust)
        if run_finished(plan.layout, plan.partitions):
            if for_driver is not None:
                say(f"standby: driver {for_driver} ended (completed) before the standby "
                    "was ready; the standby ends too")
                return StandbyEnd(str(root), driver_ended="completed")
            raise UsageError(f"{root}: the run is finished (every partition sealed its "
                             "output): there is nothing to stand by for")
        lease = Lease(plan.layout.standby_lease(socket.gethostname(), os.getpid()),
                      {"standby": True, "state": "warming"})
        try:
            warm = _warm(plan, warm)
            lease.update(state="ready", ready_at=time.time())
            end = _guard(plan, warm, lease, master=master, conf=conf,
                         lease_s=lease_s, progress=progress, trust=trust)
            lease.end("took over" if end.recovered is not None else "driver ended", end.code)
            return end
        except BaseException as exc:
            lease.end("failed", exc.exit_code if isinstance(exc, CecError) else 1, str(exc))
            raise
    finally:
        if warm is not None:
            stop_session(warm.spark)


def _key(plan: RunPlan) -> tuple[object, ...]:
    run = plan.spec.run
    return (run.effective_master, run.partitions, tuple(sorted(run.spark_conf.items())))


def _reusable(key: tuple[object, ...], plan: RunPlan) -> bool:
    """The warm session can run ``plan``: it was started for ``plan``'s settings, or
    for the same Spark settings on a local master with enough slots (a rescale changes
    the default ``local[P+2,3]``)."""
    if key == _key(plan):
        return True
    warm_master, _, warm_conf = key
    have = local_slots(str(warm_master))
    return (warm_conf == _key(plan)[2] and have is not None
            and local_slots(plan.spec.run.effective_master) is not None
            and have >= needed_slots(plan.partitions))


def _conf(plan: RunPlan) -> dict[str, str]:
    """The run's Spark settings for the standby's session: the UI off unless the user
    set it (a standby that waits needs none; the run's own is on)."""
    return {"spark.ui.enabled": "false", **plan.spec.run.spark_conf}


@dataclass
class Warm:
    """A warmed session and the settings it was started with (:func:`_key`'s form)."""

    spark: SparkSession
    key: tuple[object, ...]


def _warm_given(root: Path, master: str | None, conf: dict[str, str] | None,
                partitions: int | None) -> Warm:
    """Before the run exists: the session of the settings given on the command line
    (the spec's defaults for the rest), its worker daemon started and cec imported by
    one task per slot. The run's own checks wait for its ``run.toml`` (:func:`_warm`)."""
    parts = partitions if partitions is not None else RunSpec().partitions
    eff = master if master is not None else default_master(parts)
    t0 = time.monotonic()
    say(f"standby: warming Spark (master {eff}, {_partitions(parts)}) before the run "
        f"{root} exists")
    settings = {"spark.ui.enabled": "false", **(conf or {})}
    spark = session_for(eff, parts, settings)
    warm_workers(spark, needed_slots(parts))
    say(f"standby: warm in {time.monotonic() - t0:.1f} s; waiting for the run")
    return Warm(spark, (eff, parts, tuple(sorted((conf or {}).items()))))


def _warm(plan: RunPlan, given: Warm | None) -> Warm:
    """The Spark session of the run's settings, its Python worker daemon started and
    cec imported in it, by a job of one task per slot (the operator job's shape); a
    session ``given`` (:func:`_warm_given`) is used when it can run the run, else
    stopped first (and the standby says why). Then the run's own checks."""
    run = plan.spec.run
    t0 = time.monotonic()
    warm = given
    if warm is not None and not _reusable(warm.key, plan):
        say(f"standby: the run's Spark settings ({_describe(_key(plan))}) differ from "
            f"what the standby warmed on ({_describe(warm.key)}): starting Spark anew")
        stop_session(warm.spark)
        warm = None
    if warm is None:
        say(f"standby: warming Spark (master {run.effective_master}) for the run "
            f"{plan.layout.root}")
        warm = Warm(session_for(run.effective_master, run.partitions, _conf(plan)),
                    _key(plan))
    probe(warm.spark, plan.layout, plan.settings.run_id, [], run.partitions + 1)
    check_filter(warm.spark, plan)  # the ingest's filter analysed once, as a run's start
    warm.spark.sparkContext.setJobGroup("cec", "cec")
    say(f"standby: warm in {time.monotonic() - t0:.1f} s")
    return warm


def _describe(key: tuple[object, ...]) -> str:
    master, parts, conf = key
    pairs = ", ".join(f"{k}={v}" for k, v in conf) if isinstance(conf, tuple) else ""
    return f"master {master}, {_partitions(parts)}" + (f", {pairs}" if pairs else "")


def _partitions(n: object) -> str:
    return f"{n} partition{'' if n == 1 else 's'}"


def _guard(plan: RunPlan, warm: Warm, lease: Lease, *,
           master: str | None, conf: dict[str, str] | None, lease_s: float,
           progress: bool, trust: bool) -> StandbyEnd:
    """Steps 3 and 4: watch the newest driver; take over when it dies (a lost race for
    its successor's number: watch the winner). Meanwhile the hot tasks follow the output
    logs (:mod:`cec_spark.standby.hot`; started again when the run's plan changed)."""
    try:
        return _watch(plan, warm, lease, master=master, conf=conf, lease_s=lease_s,
                      progress=progress, trust=trust)
    finally:
        _HOT.close()


class _HotHolder:
    """The hot tasks of this process's standby (one job at a time)."""

    def __init__(self) -> None:
        self.hot: HotTasks | None = None

    def close(self) -> None:
        if self.hot is not None:
            self.hot.close()
            self.hot = None


_HOT = _HotHolder()


def _start_hot(plan: RunPlan, warm: Warm, lease: Lease) -> None:
    """The hot tasks for ``plan`` on the warm session, unless they follow it already
    (a job that ended, e.g. the run's plan changed under it, is replaced)."""
    old = _HOT.hot
    if old is not None and old.matches(plan):
        return
    if old is not None:
        if old.error is not None:  # (the failure was said as it came: _report_hot)
            say("standby: starting the hot operator tasks again")
        _HOT.close()
    if not _reusable(warm.key, plan):
        return  # a takeover would start Spark anew: nothing to follow on this session
    hot = HotTasks(warm.spark, plan, (socket.gethostname(), os.getpid()))
    _HOT.hot = hot
    threading.Thread(target=_report_hot, args=(hot, lease), name="cec-hot-report",
                     daemon=True).start()


def _report_hot(hot: HotTasks, lease: Lease) -> None:
    """While the hot tasks follow: their state in the standby's lease (``hot_tasks``,
    ``hot_behind``: records committed and not read yet, the most of any task), and one
    line once every task follows."""
    told = False
    last: tuple[int, int] | None = None
    while hot.following:
        reports = hot.follow_reports()
        now = (len(reports), max((int(r.get("behind", 0)) for r in reports), default=0))
        if now != last:
            lease.update(hot_tasks=now[0], hot_behind=now[1])
            last = now
        if not told and now[0] == hot.plan.partitions:
            say_following(hot)
            told = True
        hot.done.wait(REPORT_S)
    if last is not None:
        lease.update(hot_tasks=0, hot_behind=0)
    if hot.error is not None and not hot.released:
        say(f"standby: the hot operator tasks failed ({spark_error(hot.error)}); until they "
            "are started again (at the next change of driver), a takeover launches its "
            "tasks cold")


def _watch(plan: RunPlan, warm: Warm, lease: Lease, *, master: str | None,
           conf: dict[str, str] | None, lease_s: float, progress: bool,
           trust: bool) -> StandbyEnd:
    """:func:`_guard`'s loop."""
    layout = plan.layout
    root = str(layout.root)
    spark, key = warm.spark, warm.key
    while True:
        if not run_finished(layout, plan.partitions):
            with contextlib.suppress(CecError):
                plan = plan_resume(layout.root, master=master, conf=conf)
            _start_hot(plan, warm, lease)
        n = newest_driver(layout, lease_s)
        say(f"standby: ready to take over the run {root} from driver {n} "
            f"(a death on this host is seen at once, a freeze after {lease_s:g} s)")
        verdict = DriverWatch(layout, n, lease_s).wait() if n else Verdict(
            0, "died", "the run has no driver")
        if verdict.kind == "newer":
            continue
        if verdict.kind == "ended":
            return _driver_ended(layout, verdict)
        detected = time.time()
        mine = claim_driver(layout, verdict.driver)
        if mine is None:
            say(f"standby: driver {verdict.driver}: {verdict.how}; another process took "
                "the run over first: watching it")
            continue
        crash_point("driver.during_claim")
        lease.update(state="taking over", driver=mine)
        say(f"standby: driver {verdict.driver}: {verdict.how}; taking the run over as "
            f"driver {mine}")
        return _take_over(layout, spark, key, mine, detected, master=master, conf=conf,
                          progress=progress, trust=trust)


def _driver_ended(layout: RunLayout, verdict: Verdict) -> StandbyEnd:
    """The driver ended by itself: not a crash, so not taken over."""
    if verdict.outcome in ("completed", "stopped"):
        say(f"standby: driver {verdict.driver} ended ({verdict.outcome}); the standby "
            "ends too" + ("; 'cec recover --from-log' resumes a stopped run"
                          if verdict.outcome == "stopped" else ""))
        return StandbyEnd(str(layout.root), driver_ended=verdict.outcome, code=0)
    say(f"standby: driver {verdict.driver} ended by itself ({verdict.outcome}, exit status "
        f"{verdict.code}): not a crash, so not taken over; 'cec recover --from-log "
        f"{layout.root}' resumes the run once the cause is fixed")
    return StandbyEnd(str(layout.root), driver_ended=verdict.outcome, code=verdict.code or 1)


def _take_over(layout: RunLayout, spark: SparkSession, key: tuple[object, ...], driver: int,
               detected: float, *, master: str | None, conf: dict[str, str] | None,
               progress: bool, trust: bool) -> StandbyEnd:
    """Step 4: ``cec recover`` on the warm session as driver ``driver``. A session of
    other settings (the run was rescaled meanwhile) is started anew."""
    claimed = time.time()
    plan = plan_resume(layout.root, master=master, conf=conf)
    fresh = None
    hot = _HOT.hot
    if _key(plan) != key:
        if _reusable(key, plan):  # e.g. rescaled to fewer partitions: the slots suffice
            master = str(key[0])
        else:
            say("standby: the run's Spark settings changed (a rescale?): starting Spark anew")
            _HOT.close()
            hot = None
            stop_session(spark)
            fresh = session_for(plan.spec.run.effective_master, plan.partitions, _conf(plan))
    # the hot tasks are released instead of a job launched (if they can run this plan)
    offer_prepared(hot if hot is not None and hot.matches(plan) else None)
    parts: dict[str, Any] = {"driver": driver, "detected_at": detected,
                             "claimed_at": claimed}
    write_advisory(layout.takeover_file, parts)
    try:
        result = recover_run(layout.root, progress=progress, master=master, conf=conf,
                             driver=driver, trust=trust, in_tasks=True)
    finally:
        offer_prepared(None)
        if fresh is not None:
            stop_session(fresh)
        parts["ended_at"] = time.time()
        parts.update(_task_times(layout, plan.partitions))
        write_advisory(layout.takeover_file, parts)
        _say_parts(parts)
        began = parts.get("tasks_began_at")
        if isinstance(began, float) and began >= detected:  # the objective's fixed cost
            rto.record_startup("takeover", began - detected)
    return StandbyEnd(str(layout.root), recovered=result, takeover=parts)


def _task_times(layout: RunLayout, partitions: int) -> dict[str, Any]:
    """When the resumed tasks began and ended their recovery (their state files)."""
    began, done = [], []
    for p in range(partitions):
        st = read_advisory(layout.state_file(p))
        if isinstance(st.get("recover_started_at"), int | float):
            began.append(float(st["recover_started_at"]))
        if isinstance(st.get("recovered_at"), int | float):
            done.append(float(st["recovered_at"]))
    out: dict[str, Any] = {}
    if began:
        out["tasks_began_at"] = max(began)
    if done:
        out["tasks_recovered_at"] = max(done)
    return out


def _say_parts(parts: dict[str, Any]) -> None:
    d = parts.get("detected_at")
    if not isinstance(d, float):
        return
    words = []
    for key, name in (("claimed_at", "claimed"), ("tasks_began_at", "tasks started"),
                      ("tasks_recovered_at", "tasks recovered"), ("ended_at", "run ended")):
        if isinstance(parts.get(key), float):
            words.append(f"{name} +{parts[key] - d:.2f} s")
    say("standby: takeover: detected, " + ", ".join(words))
