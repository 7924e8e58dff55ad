"""What a standby watches: the run directory until the run exists, then the run's newest
driver until it dies or ends (:class:`DriverWatch`).

A driver is seen dead by the first of three signals (:mod:`cec_spark.rundir.lease`):

1. its lease's ``flock`` is let go (this host: the instant it dies). Trusted only when
   the standby found it held, i.e. the standby shares the driver's ``flock`` domain;
2. its pid is gone (the same machine and pid namespace only);
3. its beat stood still for the lease time (any host; the only signal for a frozen
   driver, which holds its lock and keeps its pid).

A driver that ends by itself writes how in its lease (``completed``, ``stopped``,
``failed``, ``superseded``): that is an end, not a death, and the standby does not take
over (:class:`Verdict`). While watching, a newer driver (a ``cec recover``, another
standby that took over) becomes the one watched.

:func:`judge` is the decision, pure; :class:`DriverWatch` feeds it what it sees. The
standby's main thread sleeps on an event between looks (every :data:`LOOK_S`, one
open and 1 KiB read of the lease; a listing of ``RUN/drivers`` every
:data:`NEWER_LOOK_S`): no busy polling, and the lock's release wakes it at once.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cec.errors import UsageError
from cec_spark.rundir.drivers import latest_driver
from cec_spark.rundir.layout import BEFORE_RUN_FILE, RUN_FILE, RunLayout
from cec_spark.rundir.lease import (
    FENCE_LOOK_S,
    BeatJudge,
    lock_state,
    pid_alive,
    read_lease,
    released,
    same_machine,
)
from cec_spark.watchdog import say
from storage_log.log import StreamLog

LOOK_S = 0.25  # between looks at the lease (a beat is 0.25 s)
# between looks for a newer driver: nothing waits on it (a newer driver's number also
# stops the watched driver, whose lease then says ``superseded``, seen at the next look)
NEWER_LOOK_S = FENCE_LOOK_S
RUN_LOOK_S = 0.5  # between looks for a run that does not exist yet


@dataclass(frozen=True)
class Verdict:
    """How the watched driver stopped being the run's driver."""

    driver: int
    kind: str
    """``died`` (take over), ``ended`` (it ended by itself: do not), ``newer`` (a newer
    driver took the run: watch that one)."""
    how: str
    """In words: 'its process ended', 'its lease stood still for 2.0 s', 'completed'."""
    outcome: str = ""
    """For ``ended``: the lease's ``ended`` (completed, stopped, failed, superseded)."""
    code: int = 0
    """For ``ended``: the driver's exit status."""


def judge(*, released_: bool, trusted_lock: bool, record: dict[str, Any] | None,
          pid_gone: bool, stood_s: float, lease_s: float, missing_s: float) -> str | None:
    """The decision for one look at a driver (pure): ``ended``, ``died: HOW`` or None
    (alive). ``released_``: its lock was let go (only counted when ``trusted_lock``);
    ``pid_gone``: on this machine, its pid no longer runs; ``stood_s``: how long its beat
    stood still; ``missing_s``: how long its lease file has been missing (a driver
    takes its number a moment before it writes its lease)."""
    if record is not None and record.get("ended"):
        return "ended"
    if record is None and missing_s >= lease_s:
        return f"died: it has no lease ({missing_s:.1f} s)"
    if released_ and trusted_lock:
        return "died: its process ended (its lease's lock was let go)"
    if pid_gone:
        return "died: its process is gone"
    if stood_s >= lease_s:
        return f"died: its lease stood still for {stood_s:.1f} s (dead or frozen)"
    return None


class DriverWatch:
    """Watches driver ``n`` of ``layout``'s run (see the module docstring)."""

    def __init__(self, layout: RunLayout, n: int, lease_s: float,
                 clock: Any = time.monotonic) -> None:
        self.layout, self.n, self.lease_s, self.clock = layout, n, lease_s, clock
        self.path = layout.driver_lease(n)
        self.wake = threading.Event()
        self.judge = BeatJudge(lease_s)
        self.started = clock()
        self.trusted_lock = False
        self.released = False
        self._armed = False
        self._newer_at: float | None = None  # when RUN/drivers was last listed

    def _arm(self) -> None:
        """Once the lease exists: trust its lock if it is held in this domain, and wait
        on it in a thread that wakes :attr:`wake` when it is let go."""
        if self._armed:
            return
        state = lock_state(self.path)
        if state == "missing":
            return
        self._armed = True
        if state == "held":
            self.trusted_lock = True

            def on_release() -> None:
                self.released = True
                self.wake.set()

            released(self.path, on_release)

    def look(self) -> Verdict | None:
        """One look: a verdict, or None while the driver lives."""
        now = self.clock()
        if self._newer_at is None or now - self._newer_at >= NEWER_LOOK_S:
            self._newer_at = now
            newest = latest_driver(self.layout)
            if newest > self.n:
                return Verdict(self.n, "newer", f"driver {newest} took the run")
        self._arm()
        record = read_lease(self.path)
        self.judge.see(now, record)
        stood = self.judge.stood_s(now)
        pid_gone = record is not None and same_machine(record) and not pid_alive(
            int(record.get("pid", -1)), record.get("start"))
        missing = now - self.started if record is None and not self.path.exists() else 0.0
        said = judge(released_=self.released, trusted_lock=self.trusted_lock,
                     record=record, pid_gone=pid_gone, stood_s=stood,
                     lease_s=self.lease_s, missing_s=missing)
        if said is None:
            return None
        if said == "ended":
            assert record is not None
            outcome = str(record.get("ended"))
            if outcome == "superseded" and latest_driver(self.layout) > self.n:
                return Verdict(self.n, "newer", "it was superseded")
            return Verdict(self.n, "ended", outcome, outcome=outcome,
                           code=int(record.get("code", 0) or 0))
        return Verdict(self.n, "died", said.removeprefix("died: "))

    def wait(self) -> Verdict:
        """Look every :data:`LOOK_S` (or at once when the lock is let go) until a
        verdict."""
        while True:
            verdict = self.look()
            if verdict is not None:
                return verdict
            self.wake.wait(LOOK_S)
            self.wake.clear()


# ------------------------------------------------------------------ the run itself


def wait_for_run(root: Path) -> None:
    """Until ``root/run.toml`` exists (a standby may start before its run); says once
    what it waits on. A directory that holds other things but no ``run.toml`` is not a
    run: UsageError (exit 2), nothing written."""
    told = False
    while True:
        check_is_run(root)
        run_file = RunLayout(root).run_file
        if run_file.exists():
            return
        if not told:
            say(f"standby: waiting for the run {root} to be created "
                f"({run_file} does not exist yet)")
            told = True
        time.sleep(RUN_LOOK_S)


def check_is_run(root: Path) -> None:
    """UsageError unless ``root`` is a run directory, or does not exist yet, or is empty
    or holds only what a run being created holds before its ``run.toml``."""
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root}: not a directory, so not a run directory")
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    if RUN_FILE in names:
        return
    # a run being created holds these for a moment before its run.toml: the state
    # folder, the Python API's staged DataFrame, run.toml's own temporary file
    if all(n in BEFORE_RUN_FILE or n.startswith(f".{RUN_FILE}.") for n in names):
        return
    raise UsageError(f"{root}: not a run directory (it has no {RUN_FILE}; it holds "
                     f"{', '.join(sorted(names)[:3])}{', ...' if len(names) > 3 else ''})")


def run_finished(layout: RunLayout, partitions: int) -> bool:
    """Every output log of the run's generation is sealed: the run is complete."""
    for p in range(partitions):
        path = layout.output(p)
        if not path.exists():
            return False
        try:
            with StreamLog.open(path) as log:
                if not log.sealed:
                    return False
        except Exception:  # unreadable without reconciling: a recovery will tell
            return False
    return True


def newest_driver(layout: RunLayout, lease_s: float) -> int:
    """The run's newest driver number; waits (up to ``lease_s``, then 0) for the first
    driver of a run just created (``cec run`` takes it right after ``run.toml``)."""
    deadline = time.monotonic() + lease_s
    while True:
        n = latest_driver(layout)
        if n or time.monotonic() >= deadline:
            return n
        time.sleep(0.05)
