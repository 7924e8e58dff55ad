"""The ingest writer's group commit (cec_spark.ingest.writer), without Spark: a commit
(one fsync per log) covers at least GROUP_COMMIT_ROWS source rows but at the job's end,
and its token names the last chunk it holds."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cec_spark.ingest import writer as writer_mod
from cec_spark.ingest.writer import PART, WriterConfig, _JobChunks, _UpstreamWriter
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.types import Chunk


class _Log:
    """A log as the writer uses it: appends and commits recorded."""

    def __init__(self) -> None:
        self.last_seq: int | None = None
        self.sealed = False
        self.rows: list[int] = []
        self.commits: list[tuple[int, dict[str, int]]] = []

    def last_token(self) -> bytes | None:
        return None

    def append(self, batch: pa.RecordBatch) -> None:
        self.rows.extend(batch.column(1).to_pylist())

    def commit(self, token: bytes) -> None:
        self.commits.append((len(self.rows), json.loads(token)))


def _batch(lo: int, hi: int, partitions: int) -> pa.RecordBatch:
    seq = np.arange(lo, hi, dtype=np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array(seq), pa.array(seq), pa.array(seq % 7), pa.array(np.ones(len(seq))),
         pa.array((seq % partitions).astype(np.int32))],
        names=["ts", "seq", "key", "value", PART])


@pytest.mark.parametrize("group", [1, 250, 10_000])
def test_commits_are_grouped_and_name_the_last_chunk(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     group: int) -> None:
    monkeypatch.setattr(writer_mod, "GROUP_COMMIT_ROWS", group)
    monkeypatch.setattr(writer_mod, "COMMIT_AT_END_ROWS", 0)
    chunks = [Chunk(i, "csv", "/x.csv", 0, 0, i * 100, 100) for i in range(10)]
    logs = [_Log(), _Log()]
    cfg = WriterConfig(str(tmp_path), 2, "never", "key", "value", trim=False)
    w = _UpstreamWriter(cfg, RunLayout(tmp_path), logs, _JobChunks.of(chunks))  # type: ignore[arg-type]
    w.write(iter([_batch(lo, lo + 100, 2) for lo in range(0, 1000, 100)]))
    assert w.written == 1000
    for p, log in enumerate(logs):
        assert log.rows == list(range(p, 1000, 2))  # every row once, in order
        tokens = [t["chunk"] for _, t in log.commits]
        assert tokens[-1] == 9 and tokens == sorted(set(tokens))
        # each commit but the job's last holds at least `group` source rows more than
        # the one before
        ends = [0, *[100 * (c + 1) for c in tokens]]
        assert all(b - a >= group for a, b in itertools.pairwise(ends[:-1]))
    want = {1: 9, 250: 3, 10_000: 0}[group] + 1  # batch commits + the job's last one
    assert len(logs[0].commits) == want
