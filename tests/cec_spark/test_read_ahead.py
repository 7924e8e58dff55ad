"""The direct ingest reads the next chunk while it writes this one
(cec_spark.ingest.query.read_ahead): the chunks come in order, each with what its read
returned; a chunk's error comes when its turn comes, after every chunk before it; the
next read really runs while the caller holds the current chunk; a caller that stops
early leaves no read running."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from cec_spark.ingest.query import read_ahead
from cec_spark.source.types import Chunk


def _chunks(n: int) -> list[Any]:
    return [Chunk(index=i, fmt="csv", file=f"f{i}.csv", start=0, stop=1, first_seq=i, rows=1)
            for i in range(n)]


def test_chunks_in_order_with_their_reads() -> None:
    chunks = _chunks(5)
    got = [(c.index, batches) for c, batches in read_ahead(chunks, lambda c: [c.index * 10])]
    assert got == [(i, [i * 10]) for i in range(5)]
    assert list(read_ahead([], lambda c: [])) == []


def test_an_error_comes_at_its_chunk() -> None:
    def read(c: Chunk) -> list[Any]:
        if c.index == 2:
            raise ValueError("f2.csv: line 7: bad")
        return [c.index]

    seen = []
    with pytest.raises(ValueError, match="line 7"):
        for c, _ in read_ahead(_chunks(4), read):
            seen.append(c.index)
    assert seen == [0, 1]


def test_the_next_read_runs_beside_the_caller() -> None:
    started: list[int] = []
    second = threading.Event()

    def read(c: Chunk) -> list[Any]:
        started.append(c.index)
        if c.index == 1:
            second.set()
        return []

    it = read_ahead(_chunks(3), read)
    first, _ = next(it)
    assert first.index == 0
    assert second.wait(10)  # chunk 1 read while the caller still holds chunk 0
    assert [c.index for c, _ in it] == [1, 2]
    assert started == [0, 1, 2]


def test_an_early_stop_waits_for_the_read_under_way() -> None:
    begun, done = threading.Event(), threading.Event()

    def read(c: Chunk) -> list[Any]:
        if c.index == 1:
            begun.set()
            time.sleep(0.3)
            done.set()
        return []

    it = read_ahead(_chunks(3), read)
    next(it)
    assert begun.wait(10)
    it.close()  # the generator's end: the pool waits for chunk 1's read
    assert done.is_set()
