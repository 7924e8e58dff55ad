"""Fixtures and helpers for the log tests: small real logs in tmp_path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

SCHEMA = pa.schema([("ts", pa.int64()), ("seq", pa.int64()), ("v", pa.float64())])


def make_batch(first_seq: int, n: int, *, ts_step: int = 10, stride: int = 1) -> pa.RecordBatch:
    seq = np.arange(first_seq, first_seq + n * stride, stride, dtype=np.int64)
    return pa.record_batch([seq * ts_step, seq, seq.astype(np.float64) / 2], schema=SCHEMA)


def rows(batches: Iterator[pa.RecordBatch] | list[pa.RecordBatch]) -> list[int]:
    """The seq column of every row, in the order the batches came."""
    out: list[int] = []
    for b in batches:
        out.extend(b.column("seq").to_pylist())
    return out


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture(autouse=True)
def no_fd_leak() -> Iterator[None]:
    """Every test closes what it opens (like zict's fd-leak check)."""
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    yield
    if before:
        after = len(os.listdir("/proc/self/fd"))
        assert after <= before, f"{after - before} file descriptors leaked"
