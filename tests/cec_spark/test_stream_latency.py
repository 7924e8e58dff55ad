"""The low-latency ingest of a stream folder (issue 16 item 4), on a real local Spark.

One Spark query serves every ingest job of a file source (the job's chunks travel as
a Spark local property); the writer commits the chunks a batch completes together;
the folder's watcher looks only at names it has not seen. What must not change: the
upstream logs hold every kept row exactly once, in source order, with the last
chunk's token, whatever the jobs were, and a job run again (a resumed ingest) writes
nothing twice. No timing is asserted here: bench/latency.py measures the latency.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cec.ingest_token import decode_token
from cec.spec import load_spec
from cec_spark.ingest.logs import committed_chunk, create_logs
from cec_spark.ingest.query import IngestProgress, IngestQuery
from cec_spark.ingest.writer import PART
from cec_spark.run.plan import RunPlan
from cec_spark.run.session import build_session
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import KEY_GROUPS, run_text, settings_for, write_run_text
from cec_spark.source.planner import InputError, StreamDirWatcher
from storage_log.log import StreamLog
from tests.cec_spark.helpers import spec_text, write_items_csv

pytestmark = pytest.mark.spark

P = 2


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = build_session(f"local[{P + 2},3]", P)
    yield session
    session.stop()


def _stream(tmp_path: Path, rows: int, files: int, *, tasks: int = 1,
            chunk_rows: int = 1_000_000) -> tuple[Path, pd.DataFrame]:
    """A spec over a stream folder and the rows of ``files`` files (not written yet)."""
    (tmp_path / "in").mkdir()
    df = write_items_csv(tmp_path / "all.csv", rows, keys=40)
    src = (f'kind = "stream-dir"\npath = "in"\nformat = "csv"\ntime_field = "item_time"\n'
           f'poll_ms = 20\nchunk_rows = {chunk_rows}')
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text(src, partitions=P, extra_run=f"ingest_tasks = {tasks}"))
    return spec, df


def _drop(folder: Path, df: pd.DataFrame, i: int, lo: int, hi: int) -> None:
    """File ``i`` with rows [lo, hi): written under a hidden name, renamed into place."""
    tmp = folder / f".f{i:04d}.csv"
    df.iloc[lo:hi].to_csv(tmp, index=False)
    tmp.rename(folder / f"f{i:04d}.csv")


def _setup(spark: object, spec_path: Path, run: Path) -> tuple[object, RunLayout, object]:
    spec = load_spec(spec_path)
    watcher = StreamDirWatcher(spec)
    watcher.poll()
    settings = settings_for(spec, watcher.plan.columns, None, ())
    layout = RunLayout(run)
    write_run_text(layout, run_text(spec, settings))
    create_logs(layout, P, spec.run.fsync)
    return spec, layout, IngestQuery(spark, RunPlan(spec, settings, layout))  # type: ignore[arg-type]


def _expected(spark: object, df: pd.DataFrame) -> list[np.ndarray]:
    """Per key partition, the seqs of the kept rows (item_price >= 0), the partition
    computed by Spark SQL from the documented rule (key group ``pmod(xxhash64(key), G)``
    with Spark's seed 42, owned by partition ``floor(kg * P / G)``), written out here
    rather than taken from the code under test (``partition_expr``)."""
    kept = df.assign(seq=np.arange(len(df)))[df.item_price >= 0]
    sdf = spark.createDataFrame(kept[["item_id", "seq"]])  # type: ignore[attr-defined]
    rows = sdf.selectExpr(
        "seq", f"CAST(FLOOR(pmod(xxhash64(item_id), {KEY_GROUPS}) * {P} / {KEY_GROUPS}) "
        f"AS INT) AS {PART}").collect()
    out: list[list[int]] = [[] for _ in range(P)]
    for r in rows:
        out[int(r[PART])].append(int(r["seq"]))
    return [np.array(sorted(x), dtype=np.int64) for x in out]


def _logs(layout: RunLayout) -> list[pa.Table]:
    out = []
    for p in range(P):
        with StreamLog.open(layout.upstream(p)) as log:
            batches = list(log.read_forward())
            out.append(pa.Table.from_batches(batches) if batches else pa.table({"seq": []}))
    return out


def _check_exactly_once(spark: object, layout: RunLayout, df: pd.DataFrame,
                        last_chunk: int) -> None:
    expected = _expected(spark, df)
    for p, table in enumerate(_logs(layout)):
        seqs = table.column("seq").to_numpy()
        assert (np.diff(seqs) > 0).all(), f"partition {p}: not in source order"
        np.testing.assert_array_equal(seqs, expected[p])
        with StreamLog.open(layout.upstream(p)) as log:
            tok = decode_token(log.last_token())
            assert tok is not None and tok.chunk == last_chunk


@pytest.mark.parametrize("tasks", [1, 2])
def test_one_query_serves_every_job(spark: object, tmp_path: Path, tasks: int) -> None:
    """Files arrive between polls, several per job, some cut into several chunks: one
    query built once runs every job, and the logs hold exactly the kept rows."""
    spec, df = _stream(tmp_path, 6_000, 6, tasks=tasks, chunk_rows=400)
    folder = tmp_path / "in"
    _drop(folder, df, 0, 0, 500)
    _, layout, query = _setup(spark, spec, tmp_path / "run")
    watcher = StreamDirWatcher(load_spec(spec))
    progress = IngestProgress()
    cuts = [(0, 500), (500, 1_700), (1_700, 1_701), (1_701, 3_000)]
    built = None
    for i, (lo, hi) in enumerate(cuts):
        if i:
            _drop(folder, df, i, lo, hi)
        if i == 3:  # two files in one poll: one job of their chunks
            _drop(folder, df, 9, 3_000, 6_000)
        new = watcher.poll()
        assert new and new[0].first_seq == lo
        progress.tuples += query.run(new, progress)  # type: ignore[attr-defined]
        if built is None:
            built = query._reused  # type: ignore[attr-defined]
        assert query._reused is built  # type: ignore[attr-defined]
    assert watcher.poll() == []
    chunks = watcher.plan.chunks
    assert chunks[-1].next_seq == 6_000 and len(chunks) > 6
    assert progress.tuples == int((df.item_price >= 0).sum())
    _check_exactly_once(spark, layout, df, chunks[-1].index)
    assert committed_chunk(layout, P) == (chunks[-1].index, 6_000)


def test_a_job_run_again_writes_nothing_twice(spark: object, tmp_path: Path) -> None:
    """A resumed ingest may run chunks some logs already hold (a crash between the
    commits of two logs): rows at or below a log's last seq are not written again,
    and a job that starts inside what was written completes the logs exactly."""
    spec, df = _stream(tmp_path, 4_000, 2, chunk_rows=500)
    folder = tmp_path / "in"
    _drop(folder, df, 0, 0, 2_000)
    _drop(folder, df, 1, 2_000, 4_000)
    _, layout, query = _setup(spark, spec, tmp_path / "run")
    chunks = StreamDirWatcher(load_spec(spec)).poll()
    assert len(chunks) == 8
    progress = IngestProgress()
    written = [query.run(job, progress)  # type: ignore[attr-defined]
               for job in (chunks[:5], chunks[2:], chunks[7:])]  # overlaps 2..4, then 7
    assert written[2] == 0
    _check_exactly_once(spark, layout, df, chunks[-1].index)
    assert sum(written) == int((df.item_price >= 0).sum())


def test_the_query_outside_a_job_is_a_clear_error(spark: object, tmp_path: Path) -> None:
    """The shared query reads its chunks from the job: run without one (no local
    property) it fails naming why, and writes nothing."""
    spec, df = _stream(tmp_path, 1_000, 1)
    _drop(tmp_path / "in", df, 0, 0, 1_000)
    _, layout, query = _setup(spark, spec, tmp_path / "run")
    with pytest.raises(Exception, match="carries no chunk list"):
        query._query(None, 1).collect()  # type: ignore[attr-defined]
    assert all(t.num_rows == 0 for t in _logs(layout))


def test_watcher_looks_only_at_new_names(tmp_path: Path) -> None:
    """Many files consumed: a poll plans only the new ones, in name order; a hidden
    file counts once renamed; other file types are ignored; a name sorting before
    the last consumed one is refused, naming both."""
    spec, df = _stream(tmp_path, 3_000, 30)
    folder = tmp_path / "in"
    watcher = StreamDirWatcher(load_spec(spec))
    for i in range(20):
        _drop(folder, df, i, i * 100, (i + 1) * 100)
    (folder / "notes.txt").write_text("not data")
    assert [c.first_seq for c in watcher.poll()] == [i * 100 for i in range(20)]
    assert watcher.poll() == []
    df.iloc[2_000:2_100].to_csv(folder / ".f0020.csv", index=False)
    assert watcher.poll() == []  # still being written
    (folder / ".f0020.csv").rename(folder / "f0020.csv")
    _drop(folder, df, 21, 2_100, 2_200)
    assert [c.first_seq for c in watcher.poll()] == [2_000, 2_100]
    df.iloc[2_200:2_300].to_csv(folder / "e0000.csv", index=False)
    with pytest.raises(InputError, match=r"e0000\.csv: arrived after f0021\.csv"):
        watcher.poll()
    (folder / "_END").touch()
    (folder / "e0000.csv").unlink()
    assert watcher.poll() == [] and watcher.ended


def test_many_batches_commit_as_chunks_complete(spark: object, tmp_path: Path) -> None:
    """Batches of 7,000 rows over chunks of 25,000 (a job of 200,000 rows): chunks are
    committed as batches complete them, the last ones with the job's last commit;
    the logs hold exactly the kept rows, a job run again adds nothing."""
    spec, df = _stream(tmp_path, 200_000, 1, chunk_rows=25_000)
    _drop(tmp_path / "in", df, 0, 0, 200_000)
    _, layout, query = _setup(spark, spec, tmp_path / "run")
    chunks = StreamDirWatcher(load_spec(spec)).poll()
    assert len(chunks) == 8
    conf = spark.conf  # type: ignore[attr-defined]
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = conf.get(key)
    conf.set(key, "7000")
    try:
        progress = IngestProgress()
        written = query.run(chunks, progress)  # type: ignore[attr-defined]
        assert query.run(chunks, progress) == 0  # type: ignore[attr-defined]
    finally:
        conf.set(key, before)
    assert written == int((df.item_price >= 0).sum())
    _check_exactly_once(spark, layout, df, chunks[-1].index)
    with StreamLog.open(layout.upstream(0)) as log:
        assert sum(1 for _ in log.read_forward()) > len(chunks)  # many batches came
