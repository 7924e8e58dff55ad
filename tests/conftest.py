"""Session-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


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
