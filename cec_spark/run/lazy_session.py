"""A run's SparkSession that makes its SQL part only when something uses it.

A local run whose ingest is direct (cec's own reader, RDD jobs: the default for files)
runs no SQL at all: the operator job and the ingest job are RDD jobs on the
SparkContext. Yet the SparkSession's start (its SQL state: the catalog, the function
registry, the UI's SQL tab, Scala reflection) was 1.5-1.7 s of the driver JVM's one
busy thread, between the SparkContext and the first job, on the path to the first row
of every 3 M-row run (docs/PROFILE.md, "The start path, fifth pass").

:class:`LazySession` stands in for that session: ``sparkContext`` is the context at
once, :meth:`LazySession.setting` reads a setting from the context's settings (the run's
``spark.sql.*`` among them: the context is made with all of them), and any other use
(``range``, ``read``, ``conf``, a ``[filter]``'s query, the hot standby's jobs) makes
the real session then, once, under a lock, and is answered by it. ``stop`` stops
whichever exists.

The early start hands one out only when the user set no ``spark.sql.*`` (a bad one must
still fail at the start, when the session's SQL state checks it, not at a first SQL use
mid-run: :func:`cec_spark.run.session.build_session`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pyspark import SparkContext
from pyspark.sql import SparkSession


class LazySession:
    """The SparkContext now, the SQL session at its first use (see the module)."""

    def __init__(self, sc: SparkContext, make: Callable[[], SparkSession]) -> None:
        self.sparkContext = sc
        self._make = make
        self._real: SparkSession | None = None
        self._lock = threading.Lock()

    @property
    def made(self) -> bool:
        """The SQL session has been made (something used it)."""
        return self._real is not None

    def real(self) -> SparkSession:
        """The session itself, made now if it was not."""
        with self._lock:
            if self._real is None:
                self._real = self._make()
            return self._real

    def __getattr__(self, name: str) -> object:  # what is not the context's: the session's
        if name.startswith("__") or name in ("_make", "_real", "_lock"):
            raise AttributeError(name)
        return getattr(self.real(), name)

    def setting(self, key: str) -> str | None:
        """A setting of the run, without making the session: from the context's
        settings while it is not made (one call to the JVM; ``getConf()`` would copy
        every setting), from the session's SQL conf once it is."""
        if self._real is None:
            return self.sparkContext._conf.get(key)
        return self._real.conf.get(key)

    def stop(self) -> None:
        """Stop the session if it was made, else the context."""
        if self._real is None:
            self.sparkContext.stop()
        else:
            self._real.stop()


def sql_setting(spark: SparkSession, key: str) -> str | None:
    """``spark.conf.get(key)``, without making a session not made yet."""
    if isinstance(spark, LazySession):
        return spark.setting(key)
    return spark.conf.get(key)
