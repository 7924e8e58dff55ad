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


def _module_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("cluster") is not None:
        return 0
    return 1 if item.get_closest_marker("spark") is not None else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules in this order: those with a standalone cluster, then those with Spark,
    then the rest; each module's tests stay together and in their order.

    The suite runs on two workers, a file at a time each (setup.cfg: ``-n 2 --dist
    loadfile --no-loadscope-reorder``, so xdist keeps this order), and a worker takes
    the next file when it is done: the long files start first and the many short ones
    at the end fill both workers up to about the same moment. The cluster tests mostly
    wait (for Spark's timeouts, for a late Worker): the other worker runs Spark files
    beside them. The order is the same in every worker (xdist requires it), and
    without xdist too."""
    rank: dict[object, int] = {}
    for item in items:
        rank[item.path] = min(rank.get(item.path, 2), _module_rank(item))
    items.sort(key=lambda item: rank[item.path])  # stable: the collection's order else


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
