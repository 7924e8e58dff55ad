"""The worker daemon drops Spark's archives from the import path, importers included.

Spark puts pyspark.zip, the py4j zip and the spark-core jar first on a Python worker's
PYTHONPATH. A worker's first task calls ``importlib.invalidate_caches()``, which
re-reads the directory of every archive whose importer is cached, on ``sys.path`` or
not (the 16 MB jar's twice: 0.24-0.36 CPU s per worker measured). The daemon
(:mod:`cec_spark.driver.daemon`) is started here as Spark starts it, with that
PYTHONPATH, and looked at after its imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark

PYSPARK = Path(pyspark.__file__).parent

LOOK = """
import importlib, json, sys, zipimport
import cec_spark.driver.daemon
importlib.invalidate_caches()
print(json.dumps({
    "path": sys.path,
    "zip_importers": [k for k, v in sys.path_importer_cache.items()
                      if isinstance(v, zipimport.zipimporter)],
}))
"""


def _spark_pythonpath() -> list[str]:
    lib = PYSPARK / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("*.zip"))
    jars = sorted(str(p) for p in (PYSPARK / "jars").glob("spark-core_*.jar"))
    assert any("pyspark" in z for z in zips) and any("py4j" in z for z in zips), zips
    assert jars, "no spark-core jar in the installed pyspark"
    return [*zips, jars[0]]


def test_spark_archives_leave_the_path_and_the_importer_cache() -> None:
    entries = _spark_pythonpath()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(entries)}
    out = subprocess.run([sys.executable, "-c", LOOK], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert not set(entries) & set(seen["path"]), seen["path"]
    # the archives were looked in by the imports before the daemon dropped them (the
    # stdlib's copy module tries `org.python.core`, a directory of the jar): no
    # importer of theirs is left for invalidate_caches to re-read
    assert seen["zip_importers"] == [], seen["zip_importers"]
    # and the worker still imports pyspark, from the installed package
    check = subprocess.run(
        [sys.executable, "-c", "import cec_spark.driver.daemon, pyspark.worker, sys; "
         "print(sys.modules['pyspark.worker'].__file__)"],
        env=env, capture_output=True, text=True, timeout=120, check=True)
    worker_file = check.stdout.strip()
    assert worker_file.startswith(str(PYSPARK)) and ".zip" not in worker_file, worker_file


def test_without_the_fix_the_archives_would_be_cached() -> None:
    """The premise: the same imports without the daemon's pruning leave the archives'
    importers cached (so the test above tests the pruning, not an empty cache)."""
    entries = _spark_pythonpath()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(entries)}
    code = ("import importlib.metadata, zipfile, copy, sys, zipimport, json; "
            "print(json.dumps([k for k, v in sys.path_importer_cache.items() "
            "if isinstance(v, zipimport.zipimporter)]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    cached = json.loads(out.stdout.strip().splitlines()[-1])
    assert any(k.startswith(entries[-1]) for k in cached), cached
