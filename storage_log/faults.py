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
(an ``O_EXCL`` file, fsynced, holding the process's tag and ``sys.argv``), so the test
can assert where the kill landed and in which process; and with a
mark directory a point kills once: the first process to reach it claims
``DIR/.<point>.once`` (``O_EXCL``) and dies, every later one goes past it. A crash of a
host happens once; the retry of a killed Spark task (whose new worker counts its hits
from zero) or a recovery started with the same environment goes on, as after a real
crash. Without a mark directory every process that reaches the n-th hit dies.

The points are named ``<component>.<moment>``; :data:`POINTS` lists every one that the
code calls, and :func:`crash_point` refuses a name not in it, so the matrix of tests
and the code cannot drift apart. The tag (``%p1``) narrows a point to the processes
that called :func:`set_tag` with it: ``p<partition>`` an operator task, ``i<writer>`` an
ingest writer task (while it writes); the driver, a standby and a tail have none.
tests/faults/test_crash_points.py kills the real programs at every point.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["POINTS", "armed", "crash_point", "set_tag"]

#: every crash point in the code, with where it is (the test matrix iterates over these)
POINTS: dict[str, str] = {
    # storage_log/log.py, StreamLog (every writer of a log: the ingest, the operator tasks)
    "log.after_append": "a record appended (held in memory, or written ahead without the "
                        "COMMIT flag), not committed",
    "log.before_commit": "a commit's frames written to the segment (the last flagged "
                         "COMMIT), not yet fsynced, not in the index",
    "log.between_fsyncs": "the segment fsynced, the index's transaction (its own fsync) "
                          "not yet",
    # storage_log/reconcile.py: a writable open (an operator task's recovery, an ingest)
    "log.during_reconcile": "a writable open found the segments past its index (commits "
                            "to index, a torn tail to cut, or an index to rebuild), "
                            "before it cuts or indexes",
    # cec_spark/ingest/writer.py, UpstreamWriter (a chunk's or a watermark's commit
    # while rows flow), and cec_spark/ingest/logs.py, commit_watermark (an idle
    # watermark's, [source] idle_close: the stream ingest task, or the per-poll path's
    # driver)
    "ingest.between_logs": "the first upstream log of a commit committed with its token, "
                           "the others not yet (armed, they commit after it; an idle "
                           "watermark's commit: the logs one after the other)",
    "ingest.after_token": "every upstream log committed with its token (a chunk's, a "
                          "watermark's or an idle watermark's), before the trim and the "
                          "next append",
    # cec_spark/run/task.py (operator task, tagged p<partition>)
    "operator.before_group_commit": "a group of batches' output appended, not committed",
    "operator.after_group_commit": "a group committed, its state file not yet written",
    # cec_spark/rundir/drivers.py and cec_spark/standby/standby.py
    "driver.after_number": "a driver number and its lease taken (cec run, cec recover, a "
                           "standby's claim), nothing started under it yet",
    "driver.during_claim": "a standby won the next driver number from a dead driver, "
                           "before it takes the run over",
    # cec_spark/read/tail.py, a tail with --consumer
    "tail.after_intent": "the intent of a batch durable, nothing of it printed",
    "tail.mid_print": "the first half of a batch printed and flushed, the rest not "
                      "(armed, a batch is written in two halves)",
    "tail.after_print": "a batch printed and flushed, not yet acknowledged",
    "tail.before_ack": "a restarted tail found its predecessor's batch printed, before "
                       "it completes that batch's acknowledgement",
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


def armed(name: str | None = None) -> bool:
    """A crash point (``name``: that one) is named in this process's environment. For
    code that reaches a point's state only in a slower way (two halves of a write, one
    commit after another), taken only while the point is armed."""
    return _ARMED is not None and (name is None or _ARMED[0] == name)


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
        if not _claim(os.path.join(mark, f".{name}.once")):
            return  # another process died here already: a crash happens once
        who = f"tag={_STATE.get('tag', '')}\nargv={' '.join(sys.argv)}\n"
        _claim(os.path.join(mark, f"{name}.{os.getpid()}"), who.encode())
    os.kill(os.getpid(), signal.SIGKILL)


def _claim(path: str, data: bytes = b"") -> bool:
    """Create ``path`` exclusively and durably with ``data``; False if it exists.
    Another error (the directory is gone) is True: the kill matters more than the mark."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    except OSError:
        return True
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True
