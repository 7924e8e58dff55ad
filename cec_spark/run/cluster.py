"""What a run asks of the Spark cluster before and while it runs (DESIGN §8).

* **Slots.** A run holds P long-lived operator tasks plus the ingest's tasks at once:
  it needs ``P + 1`` task slots (executors x cores / ``spark.task.cpus``, which is
  Spark's own ``maxNumConcurrentTasks``). :func:`wait_for_slots` waits for executors
  to register as Spark's scheduler does (:class:`SlotWait`: the longer of
  ``[run].executor_wait_s`` and ``spark.scheduler.maxRegisteredResourcesWaitingTime``,
  ``minRegisteredResourcesRatio``, and executors a standalone master granted are waited
  for a minute longer), says on what it waits, and fails with the numbers (exit 2) when
  the master or the settings say the slots can never come, or when the wait ends
  (:func:`decide_slots`, pure). :class:`SlotWatch` notices mid-run that slots were
  lost, says so, and gives up after ``slot_timeout_s`` (:class:`ClusterError`, exit 5).
* **Visibility.** :func:`probe` runs one short task per slot; each checks that its host
  sees the run directory (the same run id) and the source, and reports rather than
  raises, so that a host that cannot see them is named within seconds instead of after
  Spark's task retries.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql import SparkSession

from cec.errors import ClusterError, UsageError
from cec_spark.errors import RunNotVisibleError
from cec_spark.rundir.layout import RunLayout
from cec_spark.watchdog import say

T = TypeVar("T")

WAIT_NOTICE_S = 3.0
POLL_S = 0.5
LATE_S = 60.0  # past the wait: how much longer for executors the master granted to register
MASTER_TIMEOUT_S = 10.0  # one question to a standalone master (RPC or its JSON page)


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


@dataclass(frozen=True)
class SlotView:
    """One look at what the application has and will get, in task slots.

    ``registered``: executors registered with the driver (Spark's maxNumConcurrentTasks).
    ``granted``: executors the cluster manager launched for the application, registered or
    not (a standalone master's "cores" of the application; None: not known). ``free``:
    slots free on the master's alive Workers that it could still grant (None: not known).
    ``ceiling``: the most the application can ever get (``spark.cores.max`` or the master's
    default cores, ``spark.executor.instances`` x cores, dynamic allocation's
    ``maxExecutors``; None: no limit) and ``ceiling_why``, what sets it.
    """

    registered: int
    granted: int | None = None
    free: int | None = None
    ceiling: int | None = None
    ceiling_why: str = ""


@dataclass(frozen=True)
class SlotWait:
    """How to wait, as Spark's scheduler does before its first job.

    ``wait_s``: ``[run].executor_wait_s`` or, when larger,
    ``spark.scheduler.maxRegisteredResourcesWaitingTime`` (both 30 s by default); within
    it the run starts once ``target`` slots registered, ``target`` being the slots needed
    or ``spark.scheduler.minRegisteredResourcesRatio`` of the slots expected, if more;
    after it, with the slots needed. ``late_s``: executors the master granted but that
    have not registered yet are on their way (a slow JVM start, a container that comes
    tens of seconds later): they are waited for that much longer, and no longer.
    """

    need: int
    wait_s: float
    target: int = 0
    late_s: float = LATE_S


@dataclass(frozen=True)
class SlotVerdict:
    """``start``, ``wait`` or ``fail``, and what for (a sentence for the user)."""

    action: str
    why: str


def decide_slots(w: SlotWait, v: SlotView, waited_s: float) -> SlotVerdict:
    """Start, wait or fail (pure: the numbers of one look and the time waited so far)."""
    if v.ceiling is not None and v.ceiling < w.need:
        return SlotVerdict("fail", f"it can never get more than {v.ceiling} ({v.ceiling_why})")
    target = max(w.need, w.target)
    if v.registered >= target or (v.registered >= w.need and waited_s >= w.wait_s):
        return SlotVerdict("start", f"{v.registered} task slots registered")
    on_way = (v.granted or 0) - v.registered
    master = ("" if v.granted is None else
              f"; the master granted {v.granted}"
              + ("" if v.free is None else f" and has {v.free} more free"))
    if v.registered >= w.need:  # enough, waiting a little for the ratio Spark asks for
        return SlotVerdict("wait", f"for {target} task slots (minRegisteredResourcesRatio "
                           f"of those expected) or the end of the {w.wait_s:.0f} s wait: "
                           f"{v.registered} so far")
    if on_way > 0 and waited_s < w.wait_s + w.late_s:
        return SlotVerdict("wait", f"for {on_way} task slots of executors the master "
                           f"granted to register: {v.registered} of {w.need} task slots so far "
                           f"(up to {w.wait_s + w.late_s:.0f} s)")
    if waited_s < w.wait_s:
        return SlotVerdict("wait", f"up to {w.wait_s:.0f} s for executors to register: "
                           f"{v.registered} of {w.need} task slots so far{master}")
    return SlotVerdict("fail", f"waited {waited_s:.0f} s for executors to register{master}"
                       + (f", of which {on_way} never registered" if on_way > 0 else ""))


def _conf_seconds(text: str | None) -> float | None:
    """A Spark duration (``30s``, ``2min``, ``500ms``, ``1h``; bare numbers are seconds)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h)?\s*", text.lower())
    if m is None:
        return None
    scale = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
    return float(m.group(1)) * scale[m.group(2) or "s"]


def _conf_int(conf: Mapping[str, str], key: str) -> int | None:
    try:
        return int(conf[key]) if key in conf else None
    except ValueError:
        return None


def is_standalone(master: str) -> bool:
    return master.strip().startswith("spark://")


def slot_wait(conf: Mapping[str, str], partitions: int, master: str,
              executor_wait_s: float) -> SlotWait:
    """The wait for a run of ``partitions`` on ``master`` with Spark settings ``conf``."""
    need = needed_slots(partitions)
    spark_wait = _conf_seconds(conf.get("spark.scheduler.maxRegisteredResourcesWaitingTime"))
    wait_s = max(executor_wait_s, spark_wait or 0.0)
    ceiling, _ = conf_ceiling(conf, master)
    default_ratio = 0.0 if is_standalone(master) or local_slots(master) is not None else 0.8
    try:
        ratio = float(conf.get("spark.scheduler.minRegisteredResourcesRatio", default_ratio))
    except ValueError:
        ratio = default_ratio
    target = need if ceiling is None else max(need, math.ceil(min(ratio, 1.0) * ceiling))
    return SlotWait(need=need, wait_s=wait_s, target=target)


def conf_ceiling(conf: Mapping[str, str], master: str) -> tuple[int | None, str]:
    """The most slots the settings allow the application (None: no limit), and why."""
    cpus = max(_conf_int(conf, "spark.task.cpus") or 1, 1)
    if local_slots(master) is not None:
        return None, ""
    if is_standalone(master):
        cores = _conf_int(conf, "spark.cores.max")
        if cores is None:
            return None, ""
        return cores // cpus, f"spark.cores.max={cores}"
    per = max(_conf_int(conf, "spark.executor.cores") or 1, 1) // cpus
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        most = _conf_int(conf, "spark.dynamicAllocation.maxExecutors")
        if most is None:
            return None, ""
        return most * per, (f"spark.dynamicAllocation.maxExecutors={most} x "
                            f"{per} slots each")
    n = _conf_int(conf, "spark.executor.instances")
    n = 2 if n is None else n  # YARN's and Kubernetes' default
    return n * per, f"spark.executor.instances={n} x {per} slots each"


def master_view(apps: list[dict[str, Any]], workers: list[dict[str, Any]], app_id: str,
                requested_cores: int | None, cpus: int) -> tuple[int | None, int | None,
                                                                 int | None, str]:
    """From a standalone master's JSON (``/json/``): the slots granted to ``app_id``, those
    free on its alive Workers, and the ceiling from the cores the application asked for
    (``requested_cores``: spark.cores.max or the master's spark.deploy.defaultCores)."""
    granted = None
    for app in apps:
        if app.get("id") == app_id and isinstance(app.get("cores"), int):
            granted = int(app["cores"]) // cpus
    free = sum(int(w.get("coresfree", 0) or 0) for w in workers
               if w.get("state") == "ALIVE") // cpus
    if requested_cores is None or requested_cores >= 2**31 - 1:
        return granted, free, None, ""
    return (granted, free, requested_cores // cpus,
            f"the master grants it at most {requested_cores} cores (spark.cores.max, or "
            "the master's spark.deploy.defaultCores)")


class StandaloneMaster:
    """Asks a standalone master what it gave the application: the port of its web UI and
    the cores the application asked for once (over Spark's RPC, ``BoundPortsRequest`` and
    ``RequestMasterState``), then its ``/json/`` page at each look. Every question has a
    deadline; any failure only means "not known" (the wait falls back on the settings)."""

    def __init__(self, sc: SparkContext, master: str) -> None:
        self.sc = sc
        self.cpus = max(_conf_int(dict(sc.getConf().getAll()), "spark.task.cpus") or 1, 1)
        self.host = ""
        self.ui_port: int | None = None
        self.requested: int | None = None
        hostport = master.strip()[len("spark://"):].split(",")[0]
        host, _, port = hostport.rpartition(":")
        if host and port.isdigit():
            self.host = host
            _with_deadline(lambda: self._ask(host, int(port)), MASTER_TIMEOUT_S)

    def _ask(self, host: str, port: int) -> None:
        jvm = self.sc._jvm
        assert jvm is not None
        cls = jvm.java.lang.Class.forName
        tag = jvm.scala.reflect.ClassTag.apply
        rpc = self.sc._jsc.sc().schedulerBackend().rpcEnv()
        ref = rpc.setupEndpointRef(jvm.org.apache.spark.rpc.RpcAddress(host, port), "Master")
        msgs = "org.apache.spark.deploy.master.MasterMessages$"
        ports = ref.askSync(cls(msgs + "BoundPortsRequest$").getField("MODULE$").get(None),
                            tag(cls(msgs + "BoundPortsResponse")))
        self.ui_port = int(ports.webUIPort())
        state = ref.askSync(
            cls("org.apache.spark.deploy.DeployMessages$RequestMasterState$")
            .getField("MODULE$").get(None),
            tag(cls("org.apache.spark.deploy.DeployMessages$MasterStateResponse")))
        app_id = self.sc.applicationId
        for app in state.activeApps():
            if app.id() == app_id:  # coresGranted is not sent (transient): coresLeft is all
                self.requested = int(app.coresGranted()) + int(app.coresLeft())

    def look(self, registered: int) -> SlotView:
        data = None
        if self.ui_port is not None:
            url = f"http://{self.host}:{self.ui_port}/json/"
            data = _with_deadline(lambda: _get_json(url), MASTER_TIMEOUT_S)
        if not isinstance(data, dict):
            ceiling = None if self.requested is None or self.requested >= 2**31 - 1 else (
                self.requested // self.cpus)
            return SlotView(registered, ceiling=ceiling,
                            ceiling_why=f"the master grants it at most {self.requested} cores")
        apps = [a for a in data.get("activeapps", []) if isinstance(a, dict)]
        workers = [w for w in data.get("workers", []) if isinstance(w, dict)]
        granted, free, ceiling, why = master_view(apps, workers, self.sc.applicationId or "",
                                                  self.requested, self.cpus)
        return SlotView(registered, granted, free, ceiling, why)


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=MASTER_TIMEOUT_S) as r:
        return json.loads(r.read().decode())


def _with_deadline(call: Callable[[], T], timeout: float) -> T | None:
    """``call()`` in a daemon thread; None if it failed or did not answer in time."""
    out: list[T] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            out.append(call())

    t = threading.Thread(target=run, name="cec-master-question", daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else None


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
            raise UsageError(_advice(partitions, need, have, master))
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
            raise UsageError(_advice(partitions, need, have, master) + f" ({verdict.why})")
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
