"""Session-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The driver JVMs of the tests (every ``cec`` the tests start, every test SparkSession)
#: compile with the client compiler only. A test's JVM lives seconds to a minute on 2
#: shared cores, where the server compiler's threads competed with the run for the CPU:
#: measured (commit f15d5cb, load 16-26) a tiny ``cec run pipeline`` + ``cec recover``
#: took 184 s in three runs with it vs 434 s without. Spark's launcher adds
#: ``SPARK_SUBMIT_OPTS`` to the driver's command line (no "Picked up" line on stderr, as
#: ``JAVA_TOOL_OPTIONS`` would print); the library's own Java options are unchanged.
#: A value already set wins (``SPARK_SUBMIT_OPTS= make test`` runs with the full JIT).
TEST_DRIVER_JVM_OPTS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_DRIVER_JVM_OPTS)


@pytest.fixture(scope="session", autouse=True)
def index_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every log index of the session in one temporary cache (``CEC_INDEX_DIR``), not
    in the user's ``~/.cache``; subprocesses (cec, Spark workers) inherit it."""
    root = tmp_path_factory.mktemp("index-cache")
    old = os.environ.get("CEC_INDEX_DIR")
    os.environ["CEC_INDEX_DIR"] = str(root)
    yield root
    if old is None:
        os.environ.pop("CEC_INDEX_DIR", None)
    else:
        os.environ["CEC_INDEX_DIR"] = old
