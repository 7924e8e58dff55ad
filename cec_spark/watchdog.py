"""No silent waits: say what a command waits on, and keep evidence of a hang.

Two tools, used by the driver (``cec run pipeline``, ``cec recover``):

* :class:`Watchdog` arms :func:`faulthandler.dump_traceback_later` while the run makes
  no progress. ``faulthandler`` writes from a C thread of its own, so even a process
  whose threads are deadlocked with the GIL held (issue 14) leaves every thread's
  stack in a file the caller names (the driver's: ``RUN/watchdog/<host>-<pid>.txt``,
  :meth:`cec_spark.rundir.layout.RunLayout.watchdog_file`). :meth:`Watchdog.progress` re-arms it;
  :meth:`Watchdog.stalled` tells the caller how long nothing moved, so that it can
  print what it is waiting on and name the file.
* :func:`announce_wait` runs a blocking call (starting the JVM, a Spark job) and, if it
  has not returned after a few seconds, prints what it is waiting on, then again at
  growing intervals.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, TypeVar

T = TypeVar("T")

DEFAULT_STALL_S = 120.0


def say(text: str) -> None:
    """One line on stderr, prefixed ``cec:`` (what the user sees while waiting)."""
    sys.stderr.write(f"cec: {text}\n")
    sys.stderr.flush()


_said: set[str] = set()  # what say_once said (once each per process)


def say_once(text: str) -> None:
    """:func:`say`, the first time this process says ``text`` only."""
    if text not in _said:
        _said.add(text)
        say(text)


class Watchdog:
    """Dumps every thread's stack to ``path`` when nothing moved for ``stall_s`` seconds
    (its folder is made on entry, and removed on exit when nothing was dumped)."""

    def __init__(self, path: Path, stall_s: float = DEFAULT_STALL_S) -> None:
        self.path = path
        self.stall_s = stall_s
        self._fh: IO[str] | None = None
        self._last = time.monotonic()
        self._armed = False

    def __enter__(self) -> Watchdog:
        if self.stall_s > 0:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = self.path.open("a", encoding="utf-8")
            except OSError:
                self._fh = None  # no evidence file, the waiting messages remain
        self.progress()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._armed:
            faulthandler.cancel_dump_traceback_later()
            self._armed = False
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            try:
                if self.path.stat().st_size == 0:
                    self.path.unlink()
                    self.path.parent.rmdir()
            except OSError:
                pass

    def progress(self) -> None:
        """Something moved: restart the stall clock (and re-arm the dump)."""
        self._last = time.monotonic()
        if self._fh is not None:
            faulthandler.dump_traceback_later(self.stall_s, repeat=False, file=self._fh)
            self._armed = True

    def stalled(self) -> float:
        """Seconds since the last progress."""
        return time.monotonic() - self._last

    @property
    def evidence(self) -> str:
        return str(self.path) if self._fh is not None else "(no watchdog file)"


def announce_wait(what: str, call: Callable[[], T], *, first_s: float = 3.0,
                  out: Callable[[str], None] = say) -> T:
    """``call()``; if it takes longer than ``first_s``, print that we wait on ``what``
    (again after 10, 30, 60 s, then every minute), and how long it took at the end."""
    done = threading.Event()
    started = time.monotonic()
    spoke = [False]

    def speak() -> None:
        marks = sorted({first_s, 10.0, 30.0, 60.0})
        n = 0
        while True:
            at = marks[n] if n < len(marks) else 60.0 * (n - len(marks) + 2)
            n += 1
            if done.wait(max(0.0, started + at - time.monotonic())):
                return
            out(f"waiting for {what} ({time.monotonic() - started:.0f} s)")
            spoke[0] = True

    t = threading.Thread(target=speak, name="cec-announce", daemon=True)
    t.start()
    try:
        return call()
    finally:
        done.set()
        t.join(1.0)
        if spoke[0]:
            out(f"{what}: done after {time.monotonic() - started:.0f} s")
