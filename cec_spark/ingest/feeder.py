"""Is the JVM that feeds this Python worker still alive? (Linux ``/proc``; pure reads.)

A Spark task's Python worker reads its input as an Arrow stream from its executor's
JVM. When that JVM is killed (``kill -9`` of a local run's driver, an executor lost on
a cluster) the socket is closed at a message boundary, and pyarrow's stream reader
takes that for the stream's end: the worker sees its input *end*, not break. PySpark's
worker daemon is in a process group of its own and kills its workers only once it
notices, a moment later. An ingest writer that commits "every chunk of the job is
complete" when its input ends would, in that moment, commit a chunk of which it got
only some rows, and a resumed ingest would then skip the rest (seen once in
bench/standby_bench.py: 900 k rows never ingested).

:class:`Feeder` names the JVM when the worker starts (the nearest ancestor process
whose command is ``java``: the executor, or a local run's driver) and tells later
whether it still runs. A process that exits sets ``PF_EXITING`` on its threads before
it closes its files, so once the worker has read the end of a closed socket the JVM is
gone, a zombie, or flagged as exiting: no race. Where ``/proc`` says nothing (another
OS), it is taken as alive: the check only ever refuses a commit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Feeder"]

PF_EXITING = 0x00000004  # <linux/sched.h>: the task is exiting
ANCESTORS = 4  # how far up the worker looks for its JVM (daemon, JVM, ...)


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(command, parent pid, flags, start time)`` of ``pid`` (start time -1 for a
    zombie); None when there is no such process (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            raw = fh.read()
    except OSError:
        return None
    comm = raw[raw.find("(") + 1:raw.rfind(")")]
    rest = raw[raw.rfind(")") + 2:].split()
    return comm, int(rest[1]), int(rest[6]), int(rest[19]) if rest[0] not in "ZX" else -1


@dataclass(frozen=True)
class Feeder:
    """The JVM process feeding this worker (None: not found; then always alive)."""

    pid: int | None
    start: int | None

    @classmethod
    def find(cls) -> Feeder:
        pid = os.getppid()
        for _ in range(ANCESTORS):
            st = _stat(pid)
            if st is None or pid <= 1:
                break
            comm, ppid, _, start = st
            if comm == "java":
                return cls(pid, start)
            pid = ppid
        return cls(None, None)

    def alive(self) -> bool:
        """The JVM still runs (not gone, not a zombie, not exiting, not another
        process with its pid)."""
        if self.pid is None:
            return True
        st = _stat(self.pid)
        if st is None:
            return False
        _, _, flags, start = st
        return start == self.start and not flags & PF_EXITING
