"""Waiting for the Spark cluster's task slots, before and while a run goes (DESIGN §8).

:func:`wait_for_slots` waits for executors to register as Spark's scheduler does: it
looks at the slots the application has (Spark's ``maxNumConcurrentTasks``) and, on a
standalone master, at what the master granted (:mod:`cec_spark.run.standalone`); each
look is judged by :func:`cec_spark.run.slots.decide_slots`. It says on what it waits,
and fails with the numbers (exit 2) when the master or the settings say the slots can
never come, or when the wait ends. :class:`SlotWatch` notices mid-run that slots were
lost, says so, and gives up after ``slot_timeout_s`` (:class:`ClusterError`, exit 5).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pyspark import SparkContext

from cec.errors import ClusterError, UsageError
from cec_spark.run.slots import (
    SlotView,
    conf_ceiling,
    decide_slots,
    is_standalone,
    local_slots,
    needed_slots,
    slot_advice,
    slot_wait,
)
from cec_spark.run.standalone import StandaloneMaster
from cec_spark.watchdog import say

WAIT_NOTICE_S = 3.0
POLL_S = 0.5


def available_slots(sc: SparkContext) -> int:
    """Task slots the application has now (Spark's ``maxNumConcurrentTasks``)."""
    jsc = sc._jsc.sc()
    profile = jsc.resourceProfileManager().defaultResourceProfile()
    return int(jsc.maxNumConcurrentTasks(profile))


def _stopped(sc: SparkContext) -> bool:
    try:
        return bool(sc._jsc.sc().isStopped())
    except Exception:
        return True


def wait_for_slots(sc: SparkContext, partitions: int, master: str, wait_s: float,
                   clock: Callable[[], float] = time.monotonic,
                   look: Callable[[int], SlotView] | None = None) -> int:
    """The slots once there are enough; UsageError (exit 2) with the numbers if not.

    A local master has all its slots at once. On a cluster, executors register over
    seconds (YARN and Kubernetes containers tens of seconds apart): wait as
    :class:`SlotWait` says, asking a standalone master what it granted the application
    (executors on their way are waited for) and what it can ever get (too little: fail
    at once); say after a few seconds on what it waits, and fail at the end of the wait.
    """
    need = needed_slots(partitions)
    if local_slots(master) is not None:
        have = available_slots(sc)
        if have < need:
            raise UsageError(slot_advice(partitions, need, have, master))
        return have
    conf = dict(sc.getConf().getAll())
    how = slot_wait(conf, partitions, master, wait_s)
    if look is None:
        std = StandaloneMaster(sc, master) if is_standalone(master) else None
        ceiling, ceiling_why = conf_ceiling(conf, master)

        def look(registered: int) -> SlotView:
            if std is not None:
                return std.look(registered)
            return SlotView(registered, ceiling=ceiling, ceiling_why=ceiling_why)

    start = clock()
    told = ""
    told_at = start
    while True:
        if _stopped(sc):
            raise ClusterError(f"the Spark application on {master} stopped before it got "
                               "any executor (is the master reachable? see Spark's log)")
        have = available_slots(sc)
        now = clock()
        verdict = decide_slots(how, look(have), now - start)
        if verdict.action == "start":
            if told:
                say(f"{have} task slots on {master}; starting")
            return have
        if verdict.action == "fail":
            raise UsageError(slot_advice(partitions, need, have, master) + f" ({verdict.why})")
        new_topic = verdict.why.split(":", 1)[0] != told.split(":", 1)[0]
        if now - start >= WAIT_NOTICE_S and (new_topic or now - told_at >= 10.0):
            told, told_at = verdict.why, now
            say(f"waiting {verdict.why} ({master})")
        time.sleep(POLL_S)


class SlotWatch:
    """Notices lost slots mid-run: says so once, and gives up after ``timeout_s``."""

    def __init__(self, sc: SparkContext, partitions: int, master: str, timeout_s: float,
                 *, every_s: float = 2.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.sc, self.master, self.timeout_s = sc, master, timeout_s
        self.need = needed_slots(partitions)
        self.every_s, self.clock = every_s, clock
        self._next = 0.0
        self._short_since: float | None = None

    def check(self) -> None:
        """Raise ClusterError when slots have been short for longer than the timeout."""
        now = self.clock()
        if now < self._next:
            return
        self._next = now + self.every_s
        have = available_slots(self.sc)
        if have >= self.need:
            if self._short_since is not None:
                say(f"task slots are back ({have} of {self.need} needed); going on")
            self._short_since = None
            return
        if self._short_since is None:
            self._short_since = now
            say(f"only {have} of {self.need} task slots left on {self.master} (an executor "
                f"was lost?); waiting up to {self.timeout_s:.0f} s for them to come back")
            return
        if now - self._short_since >= self.timeout_s:
            raise ClusterError(
                f"only {have} of the {self.need} task slots the run needs on {self.master} "
                f"for {now - self._short_since:.0f} s; everything committed is kept: "
                "resume with 'cec recover --from-log RUN' once the cluster has "
                f"{self.need} free slots")
