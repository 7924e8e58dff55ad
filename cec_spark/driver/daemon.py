"""Spark's Python worker daemon with cec's modules imported once, before it forks.

Spark starts one daemon per executor and forks a Python worker from it for every
task that needs one; a fresh worker then imports what the task's function needs
(numpy, pyarrow, pandas, lmdb, the operator, recovery). Under load that took several
seconds per worker, paid by every long-lived operator task and every ingest job at
the start of a run and again after a crash. Importing those modules in the daemon
(``spark.python.daemon.module = cec_spark.driver.daemon``) makes a forked worker start
warm. No thread may run at the fork (PySpark's own rule): the BLAS libraries are told
to use one thread and jemalloc not to start its background thread; Arrow's thread
pools start lazily. The daemon process has exactly one thread when it forks.
"""

from __future__ import annotations

import gc
import os
import sys

# Spark puts its own pyspark.zip and py4j zip (and the spark-core jar) first on the
# workers' PYTHONPATH. Python cannot cache bytecode for a zip: every forked worker
# compiled pyspark again, and re-read the archives' directories at its first task
# (importlib.invalidate_caches), 2.7 CPU s per run of 3 M rows measured
# (docs/PROFILE.md). When this interpreter has the same pyspark installed (cec depends
# on it; spark.pyspark.python is the driver's interpreter), with its compiled
# bytecode, the daemon imports that one instead and drops the archives (below). A
# different version (a cluster's own Spark) keeps them.


def _installed_same_pyspark() -> bool:
    import importlib.metadata  # noqa: PLC0415 - only here
    import re  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    zips = [p for p in sys.path if os.path.basename(p).startswith("pyspark")
            and p.endswith(".zip")]
    if not zips:
        return False
    try:
        installed = importlib.metadata.version("pyspark")
        with zipfile.ZipFile(zips[0]) as z:
            text = z.read("pyspark/version.py").decode()
    except (OSError, KeyError, ValueError, importlib.metadata.PackageNotFoundError):
        return False
    m = re.search(r"""__version__[^=]*=\s*["']([^"']+)["']""", text)
    return m is not None and m.group(1) == installed


from cec_spark.driver.zygote import ENV as _ZYGOTE  # noqa: E402 - the standard library only
from cec_spark.driver.zygote import hand_over, spark_archive  # noqa: E402

if _installed_same_pyspark():
    # A local run's early start made these imports already, in a zygote
    # (cec_spark.driver.zygote): it becomes this daemon, and this process waits for it
    if __name__ == "__main__" and os.environ.get(_ZYGOTE, "0") != "0":
        _status = hand_over(os.environ[_ZYGOTE])
        if _status is not None:
            os._exit(_status)
    _ARCHIVES = [p for p in sys.path if spark_archive(p)]
    sys.path[:] = [p for p in sys.path if p not in _ARCHIVES]
    # ... and their importers, cached by the imports above (the jar's too: the stdlib's
    # copy module tries `from org.python.core import ...`, and the jar's org/ directory
    # makes `org` a namespace package). A worker's first task calls
    # importlib.invalidate_caches() (PySpark's setup_spark_files adds the task's files
    # directory to sys.path), which re-reads the directory of every cached archive, on
    # sys.path or not: the 16 MB jar's twice, 0.24-0.36 CPU s and 0.66-1.07 s of wall
    # per worker at the start of a 3 M-row run (docs/PROFILE.md)
    for _p in [p for p in sys.path_importer_cache
               if any(p == a or p.startswith(a + os.sep) for a in _ARCHIVES)]:
        del sys.path_importer_cache[_p]

# Normally inherited from the driver (cec_spark.run.session sets them before the JVM
# starts); pyarrow's jemalloc would otherwise start a background thread as it loads.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")

from pyspark import daemon  # noqa: E402

import cec_spark.ingest.job  # noqa: E402
import cec_spark.run.task  # noqa: E402, F401

if __name__ == "__main__":
    # What the imports made lives as long as the daemon and every worker it forks: out
    # of the collector's sight (gc.freeze, Python's advice before a fork). A reused
    # worker calls gc.collect() after each task (pyspark.daemon), and each full
    # collection walked the imports' ~96 k objects: 45 ms a time on a quiet core.
    gc.collect()
    gc.freeze()
    daemon.manager()
