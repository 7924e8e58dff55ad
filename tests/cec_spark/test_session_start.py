"""Start-up and shut-down of a run's SparkSession (issue 16: the fixed cost of a run).

In a child process (a fresh JVM each, as a ``cec`` command has): the session started
early in a background thread is the one the driver then takes, it is the taking
thread's active session, it runs a Python job, and ``stop_session`` leaves the process
able to start another session and run a job in it (the accumulator server's shutdown
is left to a thread). A session started early for other settings is stopped, not
handed out in their place. The early start starts the Python worker daemon, which
RDD and SQL jobs share; a failed job of either kind is said as its task's error.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.cec_spark.helpers import REPO

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHILD = textwrap.dedent('''
    import threading
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from cec_spark.run import session as s

    def double(batches):
        for b in batches:
            yield pa.RecordBatch.from_pydict({"x": pa.compute.multiply(b.column(0), 2)})

    def job(spark):
        rows = spark.range(0, 4, 1, 2).mapInArrow(double, "x long").collect()
        return sorted(r["x"] for r in rows)

    s.start_early("local[2]", 2, {"spark.sql.shuffle.partitions": "2"})
    assert s.early_start_pending()
    assert threading.active_count() >= 2          # the start runs beside this thread
    spark = s.session_for("local[2]", 2, {"spark.sql.shuffle.partitions": "2"})
    assert not s.early_start_pending()
    assert SparkSession.getActiveSession() is spark or \\
        SparkSession.getActiveSession()._jsparkSession.equals(spark._jsparkSession)
    assert job(spark) == [0, 2, 4, 6]
    s.stop_session(spark)
    again = s.session_for("local[2]", 2, {})      # nothing early: built anew
    assert again.sparkContext is not spark.sparkContext
    assert job(again) == [0, 2, 4, 6]
    s.stop_session(again)

    # A JVM exists now, so nothing starts early; session_for builds the session.
    s.start_early("local[2]", 3, {})
    assert not s.early_start_pending()
    print("OK")
''')

MISMATCH = textwrap.dedent('''
    from cec_spark.run import session as s
    s.start_early("local[2]", 2, {"spark.app.name": "early"})
    spark = s.session_for("local[2]", 3, {})
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3", \\
        spark.conf.get("spark.sql.shuffle.partitions")
    s.stop_session(spark)
    print("OK")
''')

# The early start warms the Python worker daemon, and RDD and SQL jobs fork their
# workers from that one daemon (the JVM's only child running cec's daemon module);
# a failed job of either kind is said as its task's Python error.
ONE_DAEMON = textwrap.dedent('''
    import os
    import pyarrow as pa
    from cec_spark.driver.jobs import spark_error
    from cec_spark.run import session as s

    def daemons(jvm):
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if ppid == jvm and b"cec_spark.driver.daemon" in cmd:
                found.append(pid)
        return found

    def same(batches):
        yield from batches

    def worker_look(rows):
        import gc, sys, zipimport
        yield gc.get_freeze_count()
        yield [p for p in sys.path if p.endswith((".zip", ".jar")) and "spark" in p]
        yield [k for k, v in sys.path_importer_cache.items()
               if isinstance(v, zipimport.zipimporter)]

    def boom_rdd(rows):
        raise ValueError("boom 42")

    def boom_sql(batches):
        raise ValueError("boom 43")
        yield

    s.start_early("local[3]", 2, {})
    spark = s.session_for("local[3]", 2, {})
    sc = spark.sparkContext
    assert sc.parallelize(range(4), 2).mapPartitions(lambda r: [sum(r)]).collect() == [1, 5]
    assert len(spark.range(0, 4, 1, 2).mapInArrow(same, "id long").collect()) == 4
    jvm = sc._gateway.proc.pid
    assert len(daemons(jvm)) == 1, daemons(jvm)
    # a worker as the daemon forks it: the imports' objects frozen out of the
    # collector's sight, no Spark archive on the path or cached as an importer
    frozen, archives, importers = sc.parallelize([0], 1).mapPartitions(worker_look).collect()
    assert frozen > 10_000, frozen
    assert archives == [] and importers == [], (archives, importers)
    for run, want in ((lambda: sc.parallelize([0], 1).mapPartitions(boom_rdd).collect(),
                       "ValueError: boom 42"),
                      (lambda: spark.range(0, 1, 1, 1).mapInArrow(boom_sql, "id long")
                       .collect(), "ValueError: boom 43")):
        try:
            run()
        except Exception as exc:
            assert spark_error(exc) == want, (spark_error(exc), str(exc)[-3000:])
        else:
            raise AssertionError("the job did not fail")
    s.stop_session(spark)
    print("OK")
''')

# A local start as `cec run` makes it: the zygote made the daemon's imports, and its
# workers fork from it; the SQL session is made at its first use only, and a setting
# is read without making it.
LAZY = textwrap.dedent('''
    import os, time
    from cec_spark.driver import zygote
    from cec_spark.run import session as s
    from cec_spark.run.lazy_session import LazySession, sql_setting

    zygote.spawn("local[2]")
    z = zygote._SPAWNED[0]
    assert os.environ[zygote.ENV]
    s.start_early("local[2]", 2, {})
    spark = s.session_for("local[2]", 2, {})
    assert isinstance(spark, LazySession) and not spark.made
    sc = spark.sparkContext

    def parent(rows):
        yield open(f"/proc/{os.getppid()}/cmdline", "rb").read().decode()

    assert "cec_spark.driver.zygote" in sc.parallelize([0], 1).mapPartitions(parent).collect()[0]
    def no_session():
        return sc._jvm.org.apache.spark.sql.SparkSession.getDefaultSession().isEmpty()

    assert no_session()
    assert sql_setting(spark, "spark.sql.session.timeZone") == "UTC"
    assert sql_setting(spark, "spark.sql.shuffle.partitions") == "2"
    assert not spark.made and no_session()
    assert spark.range(0, 4, 1, 2).count() == 4          # the first SQL use makes it
    assert spark.made and not no_session()
    assert sql_setting(spark, "spark.sql.session.timeZone") == "UTC"
    s.stop_session(spark)
    z.wait(30)                                           # the daemon ended with Spark
    print("OK")
''')

# A user's spark.sql.* setting is checked at the start: the session is made there.
EAGER = textwrap.dedent('''
    from cec_spark.run import session as s
    from cec_spark.run.lazy_session import LazySession
    s.start_early("local[2]", 2, {"spark.sql.shuffle.partitions": "3"})
    spark = s.session_for("local[2]", 2, {"spark.sql.shuffle.partitions": "3"})
    assert not isinstance(spark, LazySession)
    s.stop_session(spark)
    print("OK")
''')


@pytest.mark.parametrize("code", [CHILD, MISMATCH, ONE_DAEMON, LAZY, EAGER],
                         ids=["taken", "other-settings", "one-daemon", "lazy-and-zygote",
                              "eager-with-sql-settings"])
def test_session_started_early(code: str) -> None:
    got = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=300, check=False)
    assert got.returncode == 0 and got.stdout.strip().endswith("OK"), \
        f"exit {got.returncode}\n{got.stdout[-2000:]}\n{got.stderr[-4000:]}"
