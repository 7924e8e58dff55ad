"""The end of a `cec` process without the interpreter's teardown.

A `cec` command that has done its work still spends 0.2-0.3 s in Python's finalization
(measured here: the modules of pyarrow, pandas, numpy and pyspark freed one object at a
time), after its output is complete and durable. :func:`leave` ends the process as a
normal exit would, less that: the ``atexit`` functions run (and with them logging's
shutdown), both standard streams are flushed, then ``os._exit``. It does so only when
no thread but the main one and daemon threads is alive: a normal exit waits for such
a thread, so then it exits normally.

What it skips is the freeing of objects: a file left open with unwritten buffers would
lose them. cec's commands close (and sync, where the log rules say so) what they write
before they return; the tests read their outputs and exit statuses through this exit,
and ``tests/cli/test_leave.py`` checks the buffered output, ``atexit`` and a
non-daemon thread.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading


def may_leave() -> bool:
    """True when no thread a normal exit would wait for is alive."""
    main = threading.main_thread()
    return all(t is main or t.daemon or not t.is_alive() for t in threading.enumerate())


def leave(code: int) -> int:
    """End this process now with ``code`` (see the module's notes); returns ``code``
    when it must exit normally instead."""
    if not may_leave():
        return code
    atexit._run_exitfuncs()  # what a normal exit runs first (logging's shutdown among them)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe, as a normal exit
            stream.flush()
    os._exit(code)
