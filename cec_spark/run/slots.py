"""Task slots: what a run needs of the cluster and when it has them (pure: numbers in,
a decision out; no Spark, DESIGN §8).

A run holds P long-lived operator tasks plus the ingest's tasks at once: it needs
``P + 1`` task slots (executors x cores / ``spark.task.cpus``, which is Spark's own
``maxNumConcurrentTasks``). A local master's are known before Spark starts
(:func:`check_local_slots`); on a cluster the driver waits for executors to register as
Spark's scheduler does (:class:`SlotWait`: the longer of ``[run].executor_wait_s`` and
``spark.scheduler.maxRegisteredResourcesWaitingTime``, ``minRegisteredResourcesRatio``,
and executors a standalone master granted are waited for a minute longer), and each
look (:class:`SlotView`) is judged by :func:`decide_slots`: start, wait, or fail with
the numbers. The loop that looks is :func:`cec_spark.run.cluster.wait_for_slots`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cec.errors import UsageError

LATE_S = 60.0  # past the wait: how much longer for executors the master granted to register


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
        raise UsageError(slot_advice(partitions, needed_slots(partitions), have, master))


def slot_advice(partitions: int, need: int, have: int, master: str) -> str:
    """Why ``have`` slots of ``master`` are too few for ``partitions``, and what to do."""
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


def conf_int(conf: Mapping[str, str], key: str) -> int | None:
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
    cpus = max(conf_int(conf, "spark.task.cpus") or 1, 1)
    if local_slots(master) is not None:
        return None, ""
    if is_standalone(master):
        cores = conf_int(conf, "spark.cores.max")
        if cores is None:
            return None, ""
        return cores // cpus, f"spark.cores.max={cores}"
    per = max(conf_int(conf, "spark.executor.cores") or 1, 1) // cpus
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        most = conf_int(conf, "spark.dynamicAllocation.maxExecutors")
        if most is None:
            return None, ""
        return most * per, (f"spark.dynamicAllocation.maxExecutors={most} x "
                            f"{per} slots each")
    n = conf_int(conf, "spark.executor.instances")
    n = 2 if n is None else n  # YARN's and Kubernetes' default
    return n * per, f"spark.executor.instances={n} x {per} slots each"
