"""The watermark the ingest commits on every upstream log (issue 37), without Spark.

W (the token's ``wm``): every row with ``ts < W`` has been released to the logs, and
no row a log receives after the commit has a ``ts`` below it. Checked on data: the
planner's W per chunk (with and without ``allowed_lateness``), the writer's commits
(a quiet log gets a token-only commit; within a chunk; a re-made chunk after a crash),
rows below an idle advance, and the idle clock. Real logs on disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cec.errors import InputOrderError
from cec.ingest_token import IngestToken, decode_token, encode_token
from cec.spec import PipelineSpec
from cec.spec.parse import parse_spec
from cec_spark.ingest import writer as writer_module
from cec_spark.ingest.logs import commit_watermark, committed_chunk, create_logs
from cec_spark.ingest.watermark import IdleClock, below, later
from cec_spark.ingest.writer import PART, JobChunks, UpstreamWriter, WriterConfig, open_upstream
from cec_spark.recover.rescale import common_cut
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.order import LATE, OrderState, reorder, watermark
from cec_spark.source.planner import plan_source
from cec_spark.source.types import Chunk, TimeSpec
from storage_log.log import StreamLog
from tests.cec_spark.helpers import spec_text, write_items_csv

ROWS = 100  # per chunk


# --------------------------------------------------------------------------- the plan


@settings(max_examples=150, deadline=None)
@given(ts=st.lists(st.integers(0, 60), min_size=1, max_size=80),
       lateness=st.integers(0, 15), chunk_rows=st.integers(1, 12))
def test_the_planned_watermark_holds_and_is_the_largest(ts: list[int], lateness: int,
                                                        chunk_rows: int) -> None:
    """With ``allowed_lateness`` (late rows dropped): after chunk ``c`` every row
    released later has a time >= ``wm_c``, and ``wm_c`` is ``max_ts - lateness``
    (a later row may have exactly that time: no larger value is a watermark)."""
    times = np.array(ts, np.int64)
    state = OrderState(lateness, drop=True)
    chunks: list[Chunk] = []
    for i, lo in enumerate(range(0, len(times), chunk_rows)):
        hi = min(lo + chunk_rows, len(times))
        chunk = Chunk(i, "csv", "f", lo, hi, lo, hi - lo)
        chunks.append(state.plan(chunk, times[lo:hi], chunks))
    flush = state.flush(chunks[-1], chunks)
    if flush is not None:
        chunks.append(flush)

    def read(chunk: Chunk) -> pa.Table:
        return pa.table({"t": times[chunk.first_seq:chunk.next_seq]})

    released: list[np.ndarray] = []  # per chunk, the times of the rows it releases
    for chunk in chunks:
        out = reorder(chunk, TimeSpec("t", allowed_lateness_us=lateness, late="drop"), read)
        keep = ~out.column(LATE).to_numpy(zero_copy_only=False)
        released.append(out.column("t").to_numpy()[keep])
    wms = [c.wm for c in chunks]
    assert all(w is not None for w in wms)
    assert wms == sorted(wms)  # type: ignore[type-var]
    for c, w in enumerate(wms):
        assert w is not None
        later_rows = np.concatenate(released[c + 1:] or [np.zeros(0, np.int64)])
        assert (later_rows >= w).all(), (c, w)
        if not chunks[c].final:
            assert w == watermark(int(times[:chunks[c].next_seq].max()), lateness)
    # the flush (or the last chunk) ends with every row released: W is the largest time
    assert wms[-1] == (int(times.max()) if flush is not None
                       else int(times.max()) - lateness)


def _spec(tmp: Path, path: str, chunk_rows: int, extra: str = "") -> PipelineSpec:
    src = (f'kind = "csv"\npath = "{path}"\ntime_field = "item_time"\n'
           f"chunk_rows = {chunk_rows}\n{extra}")
    return parse_spec(spec_text(src), origin="t.toml", base=tmp)


def test_without_lateness_a_chunks_watermark_is_its_last_time(tmp_path: Path) -> None:
    """Times are non-decreasing: the last time of the chunk, filtered rows included."""
    df = write_items_csv(tmp_path / "a.csv", 1234)
    plan = plan_source(_spec(tmp_path, "a.csv", 100))
    times = df["item_time"].to_numpy()
    assert [c.wm for c in plan.chunks] == [int(times[c.next_seq - 1]) for c in plan.chunks]


def test_the_generators_watermark_is_its_chunks_last_time(tmp_path: Path) -> None:
    text = spec_text('kind = "generator"\nchunk_rows = 300\nrows = 1000\nkeys = 5\n'
                     "start_ts = 1000\ninterval_us = 7\nseed = 1", where=None)
    plan = plan_source(parse_spec(text, origin="t.toml", base=tmp_path))
    assert [c.wm for c in plan.chunks] == [1000 + (c.stop - 1) * 7 for c in plan.chunks]


# --------------------------------------------------------------------------- the writer


class Recorded:
    """A log whose commits are written down: (its last seq then, the token)."""

    def __init__(self, log: StreamLog, commits: list[tuple[int, IngestToken]]) -> None:
        self._log, self.commits = log, commits

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def commit(self, token: bytes | None = None) -> None:
        self._log.commit(token)
        tok = decode_token(token)
        assert tok is not None
        last = self._log.last_seq
        self.commits.append((-1 if last is None else last, tok))


def _chunks(n: int, ts_step: int = 10) -> list[Chunk]:
    """Chunks of ROWS rows whose row ``s`` has time ``s * ts_step``; W its last time."""
    return [Chunk(i, "csv", "f", i * ROWS, (i + 1) * ROWS, i * ROWS, ROWS,
                  wm=((i + 1) * ROWS - 1) * ts_step) for i in range(n)]


def _batches(chunks: list[Chunk], part: Any, per_chunk: int = 1, ts_step: int = 10,
             crash_after: int | None = None) -> Iterator[pa.RecordBatch]:
    """The chunks' rows in ``per_chunk`` batches each; a row's partition ``part(seq)``;
    an OSError (a crash) after ``crash_after`` batches."""
    done = 0
    for c in chunks:
        for piece in np.array_split(np.arange(c.first_seq, c.next_seq, dtype=np.int64),
                                    per_chunk):
            if crash_after is not None and done == crash_after:
                raise OSError("the task died (injected)")
            yield pa.RecordBatch.from_arrays(
                [pa.array(piece * ts_step), pa.array(piece), pa.array(piece % 7),
                 pa.array(piece * 0.5), pa.array(part(piece).astype(np.int32))],
                names=["ts", "seq", "key", "value", PART])
            done += 1


def _layout(tmp_path: Path, partitions: int) -> RunLayout:
    layout = RunLayout(tmp_path / "run")
    layout.state_file(0).parent.mkdir(parents=True, exist_ok=True)
    create_logs(layout, partitions, "never")
    return layout


def _write(layout: RunLayout, partitions: int, chunks: list[Chunk],
           batches: Iterator[pa.RecordBatch], commits: dict[int, list[Any]],
           late: str = "drop") -> UpstreamWriter:
    cfg = WriterConfig(str(layout.root), partitions, "never", "key", "value", trim=False,
                       late=late)
    logs = [open_upstream(cfg, p) for p in range(partitions)]
    wrapped: list[Any] = [Recorded(log, commits.setdefault(p, []))
                          for p, log in enumerate(logs)]
    writer = UpstreamWriter(cfg, layout, wrapped, JobChunks.of(chunks))
    try:
        writer.write(batches)
    finally:
        for log in logs:
            log.close()
    return writer


def _rows(layout: RunLayout, p: int) -> tuple[list[int], list[int]]:
    with StreamLog.open(layout.upstream(p)) as log:
        batches = list(log.read_forward())
    return ([s for b in batches for s in b.column("seq").to_pylist()],
            [t for b in batches for t in b.column("ts").to_pylist()])


@pytest.fixture(autouse=True)
def _commit_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "COMMIT_AT_END_ROWS", 0)


def test_a_quiet_log_gets_a_token_only_commit_with_each_chunks_watermark(
        tmp_path: Path) -> None:
    partitions, chunks = 3, _chunks(4)
    layout = _layout(tmp_path, partitions)
    commits: dict[int, list[Any]] = {}
    _write(layout, partitions, chunks, _batches(chunks, lambda s: s % 2), commits)
    # partition 2 got no row: committed after every chunk, no row, the chunk's W
    assert _rows(layout, 2) == ([], [])
    assert [(last, tok.chunk, tok.watermark) for last, tok in commits[2]] == \
        [(-1, c.index, c.wm) for c in chunks]
    for p in range(partitions):
        assert [tok.watermark for _, tok in commits[p]] == [c.wm for c in chunks]
        with StreamLog.open(layout.upstream(p)) as log:
            assert decode_token(log.last_token()) == IngestToken(3, 400, 400, 0, chunks[-1].wm)


def _check_contract(layout: RunLayout, p: int, commits: list[tuple[int, IngestToken]]
                    ) -> None:
    """Each commit's W: the log's rows after it are at or above W, and every row of the
    log below W is at or before the commit's last seq."""
    seqs, times = _rows(layout, p)
    for last, tok in commits:
        w = tok.watermark
        assert w is not None
        after = [t for s, t in zip(seqs, times, strict=True) if s > last]
        assert all(t >= w for t in after), (p, last, w)
        assert all(s <= last for s, t in zip(seqs, times, strict=True) if t < w), (p, w)


def test_within_a_chunk_w_is_committed_and_a_remade_chunk_appends_no_row_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "WM_EVERY_S", 0.0)  # a W after every batch
    partitions, chunks = 2, _chunks(4)
    layout = _layout(tmp_path, partitions)
    commits: dict[int, list[Any]] = {}
    # the task dies in chunk 2's third of four batches: its first two are committed
    # by W commits within the chunk, with chunk 1's token
    with pytest.raises(OSError, match="injected"):
        _write(layout, partitions, chunks,
               _batches(chunks, lambda s: (s // 10) % 2, per_chunk=4, crash_after=10),
               commits)
    for p in range(partitions):
        with StreamLog.open(layout.upstream(p)) as log:
            tok = decode_token(log.last_token())
            assert tok is not None and tok.chunk == 1  # chunk 2 is not complete
            assert tok.watermark == (2 * ROWS + 2 * ROWS // 4 - 1) * 10  # its last row's
            assert tok.chunk_watermark == chunks[1].wm  # and W at chunk 1's end
            assert log.last_seq is not None and log.last_seq >= 2 * ROWS  # rows of chunk 2
        _check_contract(layout, p, commits[p])
    # the ingest resumes after the oldest token's chunk and makes chunk 2 again
    resume, _ = committed_chunk(layout, partitions)
    assert resume == 1
    todo = chunks[resume + 1:]
    again: dict[int, list[Any]] = {}
    _write(layout, partitions, todo, _batches(todo, lambda s: (s // 10) % 2, per_chunk=4),
           again)
    for p in range(partitions):
        seqs, _ = _rows(layout, p)
        assert seqs == [s for s in range(4 * ROWS) if (s // 10) % 2 == p]  # once each
        _check_contract(layout, p, commits[p] + again[p])
        wms = [tok.watermark for _, tok in commits[p] + again[p]]
        assert wms == sorted(wms)  # non-decreasing along the log, across the crash


def test_a_rescale_starts_new_logs_at_the_cuts_chunk_end_watermark(tmp_path: Path) -> None:
    """Not at a W committed within the next chunk: the new logs get its rows again."""
    layout = _layout(tmp_path, 3)
    cfg = WriterConfig(str(layout.root), 3, "never", "key", "value")
    logs = [open_upstream(cfg, p) for p in range(3)]
    logs[0].commit(encode_token(IngestToken(1, 200, 200, 4, 2600, 1990)))  # within chunk 2
    logs[1].commit(encode_token(IngestToken(1, 200, 200, 1, 2100)))  # idle advance
    logs[2].commit(encode_token(IngestToken(2, 300, 300, 2, 2990)))  # ahead
    for log in logs:
        log.close()
    cut, tok, sealed = common_cut(layout, 0, 3)
    assert (cut, tok, sealed) == (199, IngestToken(1, 200, 200, 7, 2100), False)


def test_rows_below_an_idle_watermark_are_late(tmp_path: Path) -> None:
    partitions, chunks = 2, _chunks(2)
    layout = _layout(tmp_path, partitions)
    _write(layout, partitions, chunks[:1], _batches(chunks[:1], lambda s: s % 2), {})
    # the folder was idle: W advanced past the first 30 rows of chunk 1 (times 1000..)
    cfg = WriterConfig(str(layout.root), partitions, "never", "key", "value")
    logs = [open_upstream(cfg, p) for p in range(partitions)]
    assert commit_watermark(logs, 1300) == 2
    assert commit_watermark(logs, 1200) == 0  # never back
    for log in logs:
        log.close()
    with pytest.raises(InputOrderError, match="idle_close"):
        _write(layout, partitions, chunks[1:], _batches(chunks[1:], lambda s: s % 2), {},
               late="error")
    commits: dict[int, list[Any]] = {}
    _write(layout, partitions, chunks[1:], _batches(chunks[1:], lambda s: s % 2), commits)
    for p in range(partitions):
        seqs, times = _rows(layout, p)
        assert seqs == [s for s in range(2 * ROWS) if s % 2 == p and not 100 <= s < 130]
        assert min(t for t in times if t >= 1000) == 1300 + (10 if p else 0)
        assert commits[p][-1][1] == IngestToken(1, 200, 200, 15, chunks[1].wm)


def test_commit_watermark_leaves_logs_without_a_token_and_sealed_ones(tmp_path: Path) -> None:
    layout = _layout(tmp_path, 2)
    cfg = WriterConfig(str(layout.root), 2, "never", "key", "value")
    logs = [open_upstream(cfg, p) for p in range(2)]
    logs[1].commit(encode_token(IngestToken(0, 10, 10, 2, 5)))
    assert commit_watermark(logs, 50) == 1
    assert logs[0].last_token() is None
    assert decode_token(logs[1].last_token()) == IngestToken(0, 10, 10, 2, 50)
    logs[1].seal()
    assert commit_watermark(logs, 60) == 0
    for log in logs:
        log.close()


# --------------------------------------------------------------------------- pure parts


def test_later_and_below() -> None:
    assert later(None, None) is None and later(None, 3) == 3 and later(4, None) == 4
    assert later(4, 3) == 4 and later(-5, -2) == -2
    ts = np.array([1, 5, 9])
    assert below(ts, None).tolist() == [False] * 3
    assert below(ts, 5).tolist() == [True, False, False]


def test_the_idle_clock_advances_w_by_the_wall_time_since_the_newest_row() -> None:
    clock = IdleClock(idle_close_us=5_000_000)
    assert clock.watermark(100.0) is None  # no row yet: nothing to advance from
    clock.arrived(10.0, 1_000)
    assert clock.watermark(14.9) is None  # idle for less than idle_close
    assert clock.watermark(15.0) == 1_000 + 5_000_000
    assert clock.watermark(17.5) == 1_000 + 7_500_000
    assert clock.watermark(17.5, cap=2_000_000) == 2_000_000  # a held row's time
    clock.arrived(20.0, 900)  # a smaller W with new rows: the clock keeps the larger
    assert clock.watermark(26.0) == 1_000 + 6_000_000


def test_idle_close_is_read_from_the_spec(tmp_path: Path) -> None:
    src = ('kind = "stream-dir"\npath = "in"\nformat = "csv"\ntime_field = "item_time"\n'
           'idle_close = "5s"')
    (tmp_path / "in").mkdir()
    spec = parse_spec(spec_text(src), origin="t.toml", base=tmp_path)
    assert spec.source.idle_close_us == 5_000_000

