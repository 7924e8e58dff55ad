"""The driver registry of a run: which driver runs it, and which standbys watch it.

Each driver takes the next number in ``RUN/drivers/`` (an exclusive hard link, as for
``run.toml``: of several processes racing for one number exactly one wins) before it
starts any task, and hands it to its tasks: a task or driver that sees a newer driver
stops with :class:`DriverSupersededError`. So of two drivers on one run (two ``cec
recover`` on two hosts) the newer one runs and the older one stops with a clear error,
instead of their tasks fencing each other's logs in turn (the logs' own epochs keep the
data exact either way).

Files: ``drivers/NNNNNNNN`` (JSON: ``host``, ``pid``, ``started``, ``boot``: the
machine's boot it ran in, :func:`~cec_spark.rundir.lease.boot_id`), written once;
``drivers/NNNNNNNN.live``, the driver's lease (:mod:`cec_spark.rundir.lease`), held
from the moment the number is taken until :func:`end_driver` or the process's death;
``standbys/HOST-PID.live``, each ``cec standby``'s lease.

A process holds at most one driver lease per run directory; which one is kept in this
module (:data:`_HELD`, per process: a lease is a lock this process holds, so it cannot
live anywhere else), so that a newer driver of the same process supersedes the older.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cec_spark.errors import DriverSupersededError
from cec_spark.rundir.lease import (
    DEFAULT_LEASE_S,
    Lease,
    boot_id,
    lock_state,
    pid_alive,
    read_lease,
    same_machine,
)
from storage_log.durable import write_durable
from storage_log.faults import crash_point

if TYPE_CHECKING:
    from cec_spark.rundir.layout import RunLayout

__all__ = [
    "StandbyView",
    "check_driver",
    "claim_driver",
    "driver_info",
    "earlier_boot",
    "end_driver",
    "latest_driver",
    "standby_view",
    "standbys",
    "take_driver",
]

# this process's driver of each run directory (str(root)) and its lease
_HELD: dict[str, tuple[int, Lease]] = {}


def take_driver(layout: RunLayout) -> int:
    """A new driver number for this run: one more than any before, never reused; from
    the moment it is taken this process holds its lease (``layout.driver_lease(n)``)
    until :func:`end_driver` or its death."""
    while True:
        n = claim_driver(layout, latest_driver(layout))
        if n is not None:
            return n  # else another driver took it first: take the next


def claim_driver(layout: RunLayout, after: int) -> int | None:
    """Driver number ``after + 1`` (and its lease), or None when another process took
    it first: of several standbys racing to take over from a dead driver ``after``,
    exactly one wins (an exclusive hard link, as for ``run.toml``)."""
    layout.drivers_dir.mkdir(exist_ok=True)
    info = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
            "boot": boot_id()}
    n = after + 1
    try:
        write_durable(layout.driver_file(n), json.dumps(info), exclusive=True)
    except FileExistsError:
        return None
    key = str(layout.root)
    old = _HELD.pop(key, None)
    if old is not None:  # this process's older driver of the run: superseded
        old[1].end("superseded", 2)
    _HELD[key] = (n, Lease(layout.driver_lease(n), {"driver": n}))
    crash_point("driver.after_number")
    return n


def end_driver(layout: RunLayout, n: int | None, outcome: str, code: int = 0,
               reason: str = "") -> None:
    """Driver ``n`` of this process ends by itself (``completed``, ``stopped``,
    ``failed``, ``superseded``): say so in its lease and let go of it."""
    held = _HELD.get(str(layout.root))
    if n is not None and held is not None and held[0] == n:
        del _HELD[str(layout.root)]
        held[1].end(outcome, code, reason)


def latest_driver(layout: RunLayout) -> int:
    """The newest driver number (0: none yet, a run from before driver numbers)."""
    try:
        names = os.listdir(layout.drivers_dir)
    except FileNotFoundError:
        return 0
    return max((int(n) for n in names if n.isdigit()), default=0)


def earlier_boot(layout: RunLayout, before: int) -> int | None:
    """The newest driver below ``before`` that ran in another boot of a machine than this
    process's (its record's ``boot`` differs; None: none did, or no record says). What
    such a driver's ingest committed without fsync may be lost or torn: a page cache
    does not outlive its boot (:attr:`cec.spec.PipelineSpec.upstream_fsync`)."""
    mine = boot_id()
    for n in range(before - 1, 0, -1):
        boot = driver_info(layout, n).get("boot")
        if mine and isinstance(boot, str) and boot and boot != mine:
            return n
    return None


def driver_info(layout: RunLayout, n: int) -> dict[str, Any]:
    """Driver ``n``'s record (``{}``: missing or unreadable)."""
    try:
        raw = json.loads(layout.driver_file(n).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def check_driver(layout: RunLayout, mine: int | None) -> None:
    """DriverSupersededError if a newer driver than ``mine`` took the run."""
    if mine is None:
        return
    newest = latest_driver(layout)
    if newest > mine:
        info = driver_info(layout, newest)
        raise DriverSupersededError(
            f"{layout.root}: another driver (number {newest}, host {info.get('host')}, "
            f"pid {info.get('pid')}) took over this run; this one (number {mine}) "
            "stops. Its committed output is kept; the newer driver continues it")


@dataclass(frozen=True)
class StandbyView:
    """The live standbys of a run as its views say them (:func:`standby_view`)."""

    ready: int  # warm and watching the driver
    hot: int  # of them, with an operator task following every output log
    behind: int | None  # the fewest records a hot one had still to read (None: none hot)


def standby_view(layout: RunLayout, partitions: int) -> StandbyView:
    """How many standbys are ready, how many of them are hot (their ``hot_tasks``, in
    their lease, cover every partition: :mod:`cec_spark.standby.hot`), and how far
    behind the closest hot one was at its last report."""
    ready = [s for s in standbys(layout) if s.get("state") == "ready"]
    hot = [s for s in ready if int(s.get("hot_tasks", 0) or 0) >= partitions > 0]
    behind = min((int(s.get("hot_behind", 0) or 0) for s in hot), default=None)
    return StandbyView(len(ready), len(hot), behind)


def standbys(layout: RunLayout) -> list[dict[str, Any]]:
    """The standbys of this run that are alive now (their lease beat within
    :data:`DEFAULT_LEASE_S` of this host's clock, or their pid lives here), with their
    ``state`` (``warming``, ``ready``, ``taking over``)."""
    folder = layout.standbys_dir
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found = []
    for name in names:
        if not name.endswith(".live"):
            continue
        rec = read_lease(folder / name)
        if rec is None or rec.get("ended"):
            continue
        fresh = time.time() - float(rec.get("at", 0)) <= DEFAULT_LEASE_S
        if same_machine(rec):
            fresh = pid_alive(int(rec.get("pid", -1)), rec.get("start")) and (
                fresh or lock_state(folder / name) == "held")
        if fresh:
            found.append(rec)
    return found
