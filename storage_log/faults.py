"""Named crash points: a test kills the real process -9 at a named point of busy work.

Off unless the environment names a point, so a production run pays one dict lookup
per call (the variable is read once, at import). A test sets::

    CEC_CRASH_AT=log.before_commit          # the first time the point is reached
    CEC_CRASH_AT=log.before_commit@3        # the third time (1-based)
    CEC_CRASH_AT=log.before_commit@3%p1     # ... in a process whose tag is p1

and every process started with that environment (Spark's Python workers inherit the
driver's environment in local mode; on a cluster pass it with
``spark.executorEnv.CEC_CRASH_AT``) dies by SIGKILL when it reaches the point the
``n``-th time, as a crash of the host would stop it: no ``finally``, no ``atexit``, no
flush. ``CEC_CRASH_MARK=DIR``: before dying, the process creates ``DIR/<point>.<pid>``
(an ``O_EXCL`` file, fsynced), so the test can assert where the kill landed.

The points are named ``<component>.<moment>``; :data:`POINTS` lists every one that the
code calls, and :func:`crash_point` refuses a name not in it, so the matrix of tests
and the code cannot drift apart. The tag (``%p1``) narrows a point to the processes
that called :func:`set_tag` with it (e.g. the operator task of partition 1).
"""

from __future__ import annotations

import os
import signal

__all__ = ["POINTS", "armed", "crash_point", "set_tag"]

#: every crash point in the code, with where it is (the test matrix iterates over these)
POINTS: dict[str, str] = {
    # storage_log/log.py, StreamLog
    "log.after_append": "a batch appended to the segment, not yet fsynced or indexed",
    "log.before_commit": "appended and fsynced, before the index commit",
    "log.between_fsyncs": "the segment fsynced, the index not yet",
    "log.during_reconcile": "a writable open reconciling a torn tail, before its cut",
    # cec_spark/ingest/writer.py
    "ingest.between_logs": "one upstream log committed, the next not yet",
    "ingest.after_token": "every log committed with its token, before the next chunk",
    # cec_spark/run/task.py (operator task)
    "operator.before_group_commit": "a group of batches' output appended, not committed",
    "operator.after_group_commit": "a group committed, its state file not yet written",
    # cec_spark/rundir/drivers.py and the standby's takeover
    "driver.after_number": "a driver number taken, nothing started yet",
    "driver.during_claim": "a standby's claim written, the old driver not yet fenced",
    # cec_spark/read/tail.py
    "tail.after_intent": "the tail's intent to print a batch recorded, nothing printed",
    "tail.after_print": "the batch printed (flushed), not yet acknowledged",
    "tail.before_ack": "the acknowledgement built, not yet written",
}


def _parse(value: str) -> tuple[str, int, str | None] | None:
    if not value:
        return None
    tag: str | None = None
    if "%" in value:
        value, tag = value.split("%", 1)
    nth = 1
    if "@" in value:
        value, n = value.split("@", 1)
        nth = int(n)
    if value not in POINTS:
        raise ValueError(f"CEC_CRASH_AT: no crash point {value!r} "
                         f"(known: {', '.join(sorted(POINTS))})")
    return value, max(1, nth), tag


_ARMED = _parse(os.environ.get("CEC_CRASH_AT", ""))
_HITS: dict[str, int] = {}
_STATE: dict[str, str] = {}  # "tag": this process's tag


def armed() -> bool:
    """A crash point is named in this process's environment."""
    return _ARMED is not None


def set_tag(tag: str) -> None:
    """This process's tag (``%tag`` in ``CEC_CRASH_AT`` narrows a point to it)."""
    _STATE["tag"] = tag


def crash_point(name: str) -> None:
    """Die by SIGKILL here if the environment names this point (module docstring)."""
    if _ARMED is None:
        if name not in POINTS:
            raise ValueError(f"crash_point: {name!r} is not in storage_log.faults.POINTS")
        return
    point, nth, tag = _ARMED
    if name != point or (tag is not None and tag != _STATE.get("tag")):
        return
    _HITS[name] = _HITS.get(name, 0) + 1
    if _HITS[name] != nth:
        return
    mark = os.environ.get("CEC_CRASH_MARK")
    if mark:
        try:
            fd = os.open(os.path.join(mark, f"{name}.{os.getpid()}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.fsync(fd)
            os.close(fd)
        except OSError:
            pass  # the kill matters more than the mark
    os.kill(os.getpid(), signal.SIGKILL)
