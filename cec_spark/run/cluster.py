"""What a run asks of the Spark cluster before and while it runs (DESIGN §8).

* **Slots.** A run holds P long-lived operator tasks plus the ingest's tasks at once:
  it needs ``P + 1`` task slots (executors x cores / ``spark.task.cpus``, which is
  Spark's own ``maxNumConcurrentTasks``). :func:`wait_for_slots` waits a short,
  configurable time for executors to register, saying so, and fails with the numbers
  when they do not come (exit 2). :class:`SlotWatch` notices mid-run that slots were
  lost, says so, and gives up after ``slot_timeout_s`` (:class:`ClusterError`, exit 5).
* **Visibility.** :func:`probe` runs one short task per slot; each checks that its host
  sees the run directory (the same run id) and the source, and reports rather than
  raises, so that a host that cannot see them is named within seconds instead of after
  Spark's task retries.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql import SparkSession

from cec.errors import ClusterError, UsageError
from cec_spark.errors import RunNotVisibleError
from cec_spark.rundir.layout import RunLayout
from cec_spark.watchdog import say

WAIT_NOTICE_S = 3.0
POLL_S = 0.5
SETTLE_S = 5.0  # executors that registered, unchanged this long: all there are


def needed_slots(partitions: int) -> int:
    """P operator tasks that never end, plus at least one slot for the ingest."""
    return partitions + 1


_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?$")


def local_slots(master: str) -> int | None:
    """Slots of a ``local``/``local[N]``/``local[N,F]``/``local[*]`` master, else None."""
    m = _LOCAL.match(master.strip())
    if m is None:
        return None
    n = m.group(1)
    if n is None:
        return 1
    return (os.cpu_count() or 1) if n == "*" else int(n)


def check_local_slots(partitions: int, master: str) -> None:
    """Before Spark starts: a ``local[N]`` master with too few slots is a UsageError."""
    have = local_slots(master)
    if have is not None and have < needed_slots(partitions):
        raise UsageError(_advice(partitions, needed_slots(partitions), have, master))


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


def _advice(partitions: int, need: int, have: int, master: str) -> str:
    fewer = max(have - 1, 0)
    hint = f"run with --partitions {fewer} or fewer" if fewer >= 1 else "add executors"
    if local_slots(master) is not None:
        hint += f", or give Spark more slots (--master local[{need + 1},3])"
    else:
        hint += (", or give the application more cores (more Workers or executors, "
                 "spark.cores.max, spark.executor.cores)")
    return (f"a run with {partitions} partitions needs {need} Spark task slots at once "
            f"({partitions} long-lived operator tasks + 1 for the ingest); {master} has "
            f"{have}: {hint}")


def wait_for_slots(sc: SparkContext, partitions: int, master: str, wait_s: float,
                   settle_s: float = SETTLE_S, clock: Callable[[], float] = time.monotonic
                   ) -> int:
    """The slots once there are enough; UsageError (exit 2) with the numbers if not.

    A local master has all its slots at once. A cluster's executors register over a
    few seconds: wait up to ``wait_s`` for the first, and once some registered, until
    their number has not changed for ``settle_s`` (executors of one application start
    together), saying on what it waits after a few seconds.
    """
    need = needed_slots(partitions)
    start = clock()
    told = False
    last, changed = -1, start
    while True:
        if _stopped(sc):
            raise ClusterError(f"the Spark application on {master} stopped before it got "
                               "any executor (is the master reachable? see Spark's log)")
        have = available_slots(sc)
        now = clock()
        if have != last:
            last, changed = have, now
        if have >= need:
            if told:
                say(f"{have} task slots on {master}; starting")
            return have
        waited = now - start
        settled = have > 0 and now - changed >= settle_s
        if local_slots(master) is not None or waited >= wait_s or settled:
            why = "" if local_slots(master) is not None else (
                f" (waited {waited:.0f} s for executors to register)")
            raise UsageError(_advice(partitions, need, have, master) + why)
        if not told and waited >= WAIT_NOTICE_S:
            told = True
            say(f"waiting up to {wait_s:.0f} s for executors to register with {master}: "
                f"{have} of {need} task slots so far")
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


# --------------------------------------------------------------------------- probe


def where_am_i() -> str:
    """This executor, for messages: host, process and working (Spark work) directory."""
    return f"host {socket.gethostname()} (pid {os.getpid()}, cwd {os.getcwd()})"


def _probe_entry(root: str, run_id: str | None, paths: list[str]
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        problems: list[str] = []
        try:
            RunLayout(Path(root)).check_visible(run_id)
        except RunNotVisibleError as exc:
            problems.append(str(exc))
        for path in paths:
            if not os.path.exists(path):
                problems.append(f"{where_am_i()}: cannot see the source {path}")
        found = json.dumps({"where": where_am_i(), "host": socket.gethostname(),
                            "problems": problems})
        yield pa.RecordBatch.from_pydict({"found": pa.array([found], pa.string())})

    return run


def probe(spark: SparkSession, layout: RunLayout, run_id: str | None,
          source_paths: list[str], tasks: int) -> list[str]:
    """One short task per slot: every host must see the run directory and the source.

    A SQL job (``mapInArrow``), as the operator and ingest jobs are, so that it starts
    the Python worker daemon they will fork from on each executor. Returns the hosts
    seen; raises UsageError (exit 2) naming each host and path that failed.
    """
    spark.sparkContext.setJobGroup("cec-probe",
                                   "cec: can every executor see the run directory?")
    rows = [json.loads(r["found"]) for r in spark.range(0, tasks, 1, tasks).mapInArrow(
        _probe_entry(str(layout.root), run_id, source_paths), "found string").collect()]
    problems = sorted({p for r in rows for p in r["problems"]})
    if problems:
        shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more"
                                           if len(problems) > 4 else "")
        raise UsageError(f"the executors must see the run directory {layout.root} and the "
                         f"source at the same absolute paths as the driver (a shared file "
                         f"system; see docs/CLUSTER.md): {shown}")
    return sorted({str(r["host"]) for r in rows})
