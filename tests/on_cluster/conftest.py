"""The standalone cluster of the cluster tests (one per module: it takes ~15 s to start)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.on_cluster.standalone import Cluster, missing_tools


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = missing_tools()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the cluster tests must run in CI: {why}")
        pytest.skip(why)
    base = tmp_path_factory.mktemp("cluster")
    shared, private = base / "shared", base / "private"
    shared.mkdir()
    private.mkdir()
    c = Cluster.start(base / "spark", shared, private, workers=3, cores=3)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def shared_dir(cluster: Cluster, request: pytest.FixtureRequest) -> Path:
    d = cluster.shared / request.node.name
    d.mkdir()
    return d
