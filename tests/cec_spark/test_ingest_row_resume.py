"""Issue 41 item 3: the ingest resumes at the row, not the chunk (no Spark).

A commit within a chunk says in its token up to which source row the log holds every
row of its partition (``row``); a resumed ingest starts reading at the smallest such
row of the logs, and the rows before it are neither read nor written again. Here:
the token's field (old tokens read as before), the resume point over the logs' tokens,
the writer's tokens and a resumed writer on real logs, and the reading of a chunk from
a row (csv, jsonl, parquet; checked or not) with the rows before it never parsed.
The real run killed -9 and recovered: test_ingest_row_resume_kill.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cec.errors import CecError
from cec.ingest_token import IngestToken, decode_token, encode_token
from cec.spec import PipelineSpec, parse_spec
from cec_spark.errors import InputError
from cec_spark.ingest import writer as writer_module
from cec_spark.ingest.logs import (
    ResumePoint,
    commit_watermark,
    first_read,
    late_rows,
    point_of,
    resume_chunks,
    resume_point,
)
from cec_spark.ingest.writer import PART, WriterConfig, open_upstream
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.planner import SEQ, plan_source, read_chunk
from cec_spark.source.read import _from_row
from cec_spark.source.types import Chunk, TimeSpec
from storage_log.log import StreamLog
from tests.cec_spark.helpers import spec_text, write_items_csv
from tests.cec_spark.test_ingest_watermark import _layout, _write

ROWS = 100  # per chunk (the writer tests)


# --------------------------------------------------------------------------- the token


def test_row_round_trips_after_the_other_fields_and_old_tokens_have_none() -> None:
    tok = IngestToken(1, 200, 200, 3, 2600, 1990, 250)
    raw = encode_token(tok)
    assert list(json.loads(raw)) == ["chunk", "next_seq", "seq_end", "late", "wm", "cw", "row"]
    assert decode_token(raw) == tok and tok.holds_below == 250
    assert tok.late_through == (3, 250)  # no late row between the chunk's end and row
    more = replace(tok, row_late=5)
    assert json.loads(encode_token(more))["rl"] == 5 and decode_token(encode_token(more)) == more
    assert more.late_through == (5, 250) and more.late == 3
    assert IngestToken(1, 200, 190, 3).late_through == (3, 190)  # the chunk's end
    # rl means nothing without row
    assert decode_token(b'{"chunk": 1, "next_seq": 2, "rl": 4}') == IngestToken(1, 2, 2)
    # the bytes written before it (a commit within a chunk, a chunk's): no row
    for old in (b'{"chunk": 1, "next_seq": 200, "seq_end": 200, "late": 3, "wm": 2600, '
                b'"cw": 1990}',
                b'{"chunk": 12, "next_seq": 4000000, "seq_end": 3999990, "late": 10}'):
        got = decode_token(old)
        assert got is not None and got.row is None and got.holds_below == got.next_seq
        assert encode_token(got) == old
    assert decode_token(b'{"chunk": 1, "next_seq": 2, "row": "7"}') == IngestToken(1, 2, 2)
    # a row below the chunk's end says no more than the chunk token itself
    assert IngestToken(1, 200, 200, row=150).holds_below == 200


# --------------------------------------------------------------------------- the resume point


def test_the_resume_row_is_the_smallest_row_a_log_holds_everything_below() -> None:
    ahead = IngestToken(2, 300, 300, 0, 2990)
    within = [IngestToken(1, 200, 200, 0, 2600, 1990, row) for row in (260, 240)]
    assert point_of([within[0], within[1], ahead]) == ResumePoint(1, 200, 240)
    # a log committed only at chunk 1's end: its rows of chunk 2 may be missing
    assert point_of([within[0], IngestToken(1, 200, 200, 0, 1990), ahead]) == \
        ResumePoint(1, 200, 200)
    assert point_of([within[0], None]) == ResumePoint(-1, None, 0)  # a log with none
    assert point_of([]) == ResumePoint()


def _chunks(n: int, ts_step: int = 10) -> list[Chunk]:
    """Chunks of ROWS rows whose row ``s`` has time ``s * ts_step``; W its last time."""
    return [Chunk(i, "csv", "f", i * ROWS, (i + 1) * ROWS, i * ROWS, ROWS,
                  wm=((i + 1) * ROWS - 1) * ts_step) for i in range(n)]


def test_resume_chunks_skip_the_rows_every_log_holds() -> None:
    chunks = _chunks(5)
    got = resume_chunks(chunks, ResumePoint(1, 200, 240))
    assert [(c.index, c.skip) for c in got] == [(2, 40), (3, 0), (4, 0)]
    assert first_read(got) == 240
    # a row past the next chunk (a job's last chunks are committed with its end): the
    # chunk every log holds whole is read as no row and still committed with its token
    got = resume_chunks(chunks, ResumePoint(1, 200, 330))
    assert [(c.index, c.skip) for c in got] == [(2, 100), (3, 30), (4, 0)]
    assert first_read(got) == 330 and first_read(got[:1]) == 300
    assert [(c.index, c.skip) for c in resume_chunks(chunks, ResumePoint(1, 200, 200))] == \
        [(2, 0), (3, 0), (4, 0)]
    # renumbered rows (allowed_lateness): their seqs are no rows, read whole
    moved = [replace(c, seq_base=c.first_seq, seq_end=c.next_seq) for c in chunks]
    assert all(c.skip == 0 for c in resume_chunks(moved, ResumePoint(1, 200, 240)))


# --------------------------------------------------------------------------- the writer


def _batches(chunks: list[Chunk], part: Any, per_chunk: int = 1, ts_step: int = 10,
             crash_after: int | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of the chunks (from each one's ``skip``) in ``per_chunk`` batches each,
    as a reader gives them; a row's partition ``part(seq)``; an OSError (a crash) after
    ``crash_after`` batches."""
    done = 0
    for c in chunks:
        seqs = np.arange(c.first_seq + c.skip, c.next_seq, dtype=np.int64)
        for piece in np.array_split(seqs, per_chunk):
            if crash_after is not None and done == crash_after:
                raise OSError("the task died (injected)")
            if len(piece):
                yield pa.RecordBatch.from_arrays(
                    [pa.array(piece * ts_step), pa.array(piece), pa.array(piece % 7),
                     pa.array(piece * 0.5), pa.array(part(piece).astype(np.int32))],
                    names=["ts", "seq", "key", "value", PART])
            done += 1


def _seqs(layout: RunLayout, p: int) -> list[int]:
    with StreamLog.open(layout.upstream(p)) as log:
        return [s for b in log.read_forward() for s in b.column("seq").to_pylist()]


def _last_token(layout: RunLayout, p: int) -> IngestToken:
    with StreamLog.open(layout.upstream(p)) as log:
        tok = decode_token(log.last_token())
    assert tok is not None
    return tok


@pytest.fixture(autouse=True)
def _commit_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk's commit after its last batch; a commit within a chunk after each batch."""
    monkeypatch.setattr(writer_module, "COMMIT_AT_END_ROWS", 0)
    monkeypatch.setattr(writer_module, "WM_EVERY_S", 0.0)


def test_a_commit_within_a_chunk_says_its_row_and_the_resume_reads_only_the_rest(
        tmp_path: Path) -> None:
    partitions, chunks = 2, _chunks(4)
    part = lambda s: (s // 10) % 2  # noqa: E731
    layout = _layout(tmp_path, partitions)
    commits: dict[int, list[Any]] = {}
    # the task dies in chunk 2's third of four batches: its first two are committed
    # within the chunk, with chunk 1's token and the row after the second batch's last
    with pytest.raises(OSError, match="injected"):
        _write(layout, partitions, chunks, _batches(chunks, part, per_chunk=4,
                                                    crash_after=10), commits)
    had = []
    for p in range(partitions):
        tok = _last_token(layout, p)
        assert (tok.chunk, tok.row, tok.chunk_watermark) == (1, 2 * ROWS + ROWS // 2,
                                                             chunks[1].wm)
        assert tok.watermark == (2 * ROWS + ROWS // 2 - 1) * 10
        had.append(len(_seqs(layout, p)))
        # every row of the partition below the token's row is in the log
        assert _seqs(layout, p) == [s for s in range(tok.row or 0) if part(s) == p]
    # the commits within a chunk carry the row received so far, chunk tokens none
    rows = [tok.row for _, tok in commits[0]]
    assert rows == [None, ROWS + ROWS // 4, ROWS + ROWS // 2, ROWS + 3 * ROWS // 4,
                    None, 2 * ROWS + ROWS // 4, 2 * ROWS + ROWS // 2]
    point = resume_point(layout, partitions)
    assert point == ResumePoint(1, 2 * ROWS, 2 * ROWS + ROWS // 2)
    todo = resume_chunks(chunks, point)
    assert [(c.index, c.skip) for c in todo] == [(2, ROWS // 2), (3, 0)]
    again: dict[int, list[Any]] = {}
    writer = _write(layout, partitions, todo, _batches(todo, part, per_chunk=4), again)
    # the resumed writer received only the rows after the resume row, and wrote them
    # all: each log got exactly the rows it did not have
    assert writer.first_seq == point.row
    assert writer.received == writer.written == 4 * ROWS - point.row
    for p in range(partitions):
        seqs = _seqs(layout, p)
        assert seqs == [s for s in range(4 * ROWS) if part(s) == p]  # once each
        assert len(seqs) - had[p] == sum(1 for s in range(point.row, 4 * ROWS)
                                         if part(s) == p)
        assert _last_token(layout, p) == IngestToken(3, 4 * ROWS, 4 * ROWS, 0, chunks[3].wm)
        wms = [tok.watermark for _, tok in commits[p] + again[p]]
        assert wms == sorted(wms)


def test_a_log_ahead_of_the_resume_row_gets_no_row_twice_and_no_row_behind_its_own(
        tmp_path: Path) -> None:
    """A crash between the commits of two logs: one holds chunk 2 whole, the other up
    to row 250. The resume reads from 250; the log ahead drops the rows it has and
    never commits a row below its chunk's end."""
    partitions, chunks = 2, _chunks(4)
    part = lambda s: s % 2  # noqa: E731
    layout = _layout(tmp_path, partitions)
    with pytest.raises(OSError, match="injected"):
        _write(layout, partitions, chunks, _batches(chunks, part, per_chunk=4,
                                                    crash_after=10), {})
    with StreamLog.open(layout.upstream(1), writable=True, fsync="never") as log:
        rest = np.arange(2 * ROWS + ROWS // 2 + 1, 3 * ROWS, 2, dtype=np.int64)
        log.append(pa.RecordBatch.from_arrays(
            [pa.array(rest * 10), pa.array(rest), pa.array(rest % 7), pa.array(rest * 0.5)],
            names=["ts", "seq", "key", "value"]))
        log.commit(encode_token(IngestToken(2, 3 * ROWS, 3 * ROWS, 0, chunks[2].wm)))
    point = resume_point(layout, partitions)
    assert point == ResumePoint(1, 2 * ROWS, 2 * ROWS + ROWS // 2)
    todo = resume_chunks(chunks, point)
    again: dict[int, list[Any]] = {}
    writer = _write(layout, partitions, todo, _batches(todo, part, per_chunk=4), again)
    assert writer.received == 4 * ROWS - point.row
    assert writer.written == writer.received - len(rest)  # log 1 had those
    for p in range(partitions):
        assert _seqs(layout, p) == [s for s in range(4 * ROWS) if part(s) == p]
        for _, tok in again[p]:
            assert tok.row is None or tok.row > tok.next_seq, (p, tok)
    # the log ahead: no commit while the rows it had flowed, then chunk 2's end again
    first = again[1][0][1]
    assert (first.chunk, first.row) == (2, None)


def test_a_resumed_writer_refuses_a_row_below_its_resume_row(tmp_path: Path) -> None:
    layout = _layout(tmp_path, 2)
    todo = resume_chunks(_chunks(2), ResumePoint(0, ROWS, ROWS + 30))
    whole = [replace(c, skip=0) for c in todo]  # a reader that read the chunk whole
    with pytest.raises(CecError, match=r"row seq 100 is outside the job's chunks \(rows 130"):
        _write(layout, 2, todo, _batches(whole, lambda s: s % 2), {})


def test_late_rows_below_the_row_are_counted_with_it_and_never_again(
        tmp_path: Path) -> None:
    """Rows below an idle watermark (late, dropped) in the part of a chunk a commit
    covers: its token counts them (``rl``; ``late`` stays the count at the chunk's
    end), and the resumed writer counts only those at or after its row. (A resume at
    the chunk's start lost them: they are below the log's last seq, so a re-read
    skipped them before the late check.)"""
    partitions, chunks = 2, _chunks(2)
    # partition 0: every row before seq 130 (the late ones among them), 1: the others
    part = lambda s: np.where(s < 130, 0, s % 2)  # noqa: E731
    layout = _layout(tmp_path, partitions)
    _write(layout, partitions, chunks[:1], _batches(chunks[:1], part), {})
    cfg = WriterConfig(str(layout.root), partitions, "never", "key", "value")
    logs: list[StreamLog | None] = [open_upstream(cfg, p) for p in range(partitions)]
    assert commit_watermark(logs, 1300) == 2  # an idle advance past rows 100-129
    for log in logs:
        assert log is not None
        log.close()
    with pytest.raises(OSError, match="injected"):
        _write(layout, partitions, chunks[1:], _batches(chunks[1:], part, per_chunk=4,
                                                        crash_after=2), {})
    toks = [_last_token(layout, p) for p in range(partitions)]
    assert [(t.chunk, t.late, t.row, t.row_late) for t in toks] == \
        [(0, 0, 150, 30), (0, 0, 150, None)]
    assert late_rows(layout, partitions) == [30, 0]
    point = resume_point(layout, partitions)
    assert point == ResumePoint(0, ROWS, 150)
    todo = resume_chunks(chunks, point)
    again = _write(layout, partitions, todo, _batches(todo, part, per_chunk=4), {})
    assert again.first_seq == 150
    assert [_last_token(layout, p).late for p in range(partitions)] == [30, 0]
    assert _seqs(layout, 0) == [s for s in range(2 * ROWS) if part(s) == 0
                                and not 100 <= s < 130]
    assert _seqs(layout, 1) == [s for s in range(2 * ROWS) if part(s) == 1]


def test_renumbered_rows_commit_no_row(tmp_path: Path) -> None:
    partitions = 2
    chunks = [replace(c, seq_base=c.first_seq, seq_end=c.next_seq) for c in _chunks(3)]
    layout = _layout(tmp_path, partitions)
    commits: dict[int, list[Any]] = {}
    with pytest.raises(OSError, match="injected"):
        _write(layout, partitions, chunks, _batches(chunks, lambda s: s % 2, per_chunk=4,
                                                    crash_after=6), commits)
    within = [tok for _, tok in commits[0] if tok.chunk_watermark is not None]
    assert within and all(tok.row is None for _, tok in commits[0])
    assert resume_point(layout, partitions) == ResumePoint(0, ROWS, ROWS)


# --------------------------------------------------------------------------- the reader


def _spec(tmp: Path, kind: str, path: str, chunk_rows: int) -> PipelineSpec:
    src = (f'kind = "{kind}"\npath = "{path}"\ntime_field = "item_time"\n'
           f"chunk_rows = {chunk_rows}")
    return parse_spec(spec_text(src), origin="t.toml", base=tmp)


def _table(chunk: Chunk, spec: PipelineSpec, schema: pa.Schema | None = None) -> pa.Table:
    """The rows ``read_chunk`` yields for ``chunk`` (``schema``: of none)."""
    columns = plan_source(spec, validate=False).columns
    return pa.Table.from_batches(list(read_chunk(chunk, columns, TimeSpec.of(spec),
                                                 batch_rows=64)), schema=schema)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_chunk_read_from_a_row_is_the_rest_of_the_chunk(tmp_path: Path, fmt: str) -> None:
    df = write_items_csv(tmp_path / "a.csv", 1000)
    name = f"a.{fmt}"
    if fmt == "jsonl":
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n"
                                             for r in df.to_dict("records")))
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / name,
                       row_group_size=100)
    spec = _spec(tmp_path, fmt, name, 400)
    plan = plan_source(spec, validate=False)
    assert [c.check for c in plan.chunks] == [False, True, True]  # read by the planner or not
    for chunk in plan.chunks:
        whole = _table(chunk, spec)
        assert whole.column(SEQ).to_pylist() == list(range(chunk.first_seq, chunk.next_seq))
        for skip in (1, 99, 100, 137, chunk.rows - 1, chunk.rows):
            got = _table(replace(chunk, skip=skip), spec, whole.schema)
            assert got.equals(whole.slice(skip)), (chunk.index, skip)
        # what is parsed: from the row group holding the row (groups of 100 rows), from
        # the row's line (a checked chunk: the line before, to check the row's order)
        part, drop = _from_row(replace(chunk, skip=137))
        if fmt == "parquet":
            assert (part.start - chunk.start, part.first_seq - chunk.first_seq, drop) == \
                (1, 100, 37)
        else:
            assert drop == (1 if chunk.check else 0) and part.start > chunk.start
            assert part.first_seq == chunk.first_seq + 137 - drop
            assert part.first_line == chunk.first_line + 137 - drop


def _edit_line(path: Path, line: int, old: bytes, new: bytes) -> None:
    """Line ``line`` (1-based) of a text file with ``old`` replaced (the same length: the
    plan's byte offsets hold)."""
    assert len(old) == len(new)
    lines = path.read_bytes().split(b"\n")
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    path.write_bytes(b"\n".join(lines))


def test_the_rows_before_the_resume_row_are_not_parsed_but_its_order_is_checked(
        tmp_path: Path) -> None:
    df = write_items_csv(tmp_path / "a.csv", 1000)
    spec = _spec(tmp_path, "csv", "a.csv", 400)
    plan = plan_source(spec, validate=False)
    chunk = plan.chunks[1]  # rows 400-799, lines 402-801 (checked by its task)
    assert chunk.check and chunk.first_line == 402
    # row 410 made unreadable: a read of the whole chunk refuses it, one from row 450
    # never parses it
    _edit_line(tmp_path / "a.csv", 412, str(df.item_time[410]).encode(),
               b"x" * len(str(df.item_time[410])))
    with pytest.raises(InputError, match=r"a\.csv: line 412: item_time"):
        _table(chunk, spec)
    got = _table(replace(chunk, skip=50), spec)
    assert got.column(SEQ).to_pylist() == list(range(450, 800))
    assert got.column("item_time").to_pylist() == df.item_time[450:800].tolist()
    # row 449 (the last one skipped) after row 450: the order of the first row read is
    # still checked, against the row before it
    later = str(df.item_time[450] + 1).encode()
    _edit_line(tmp_path / "a.csv", 451, str(df.item_time[449]).encode(), later)
    with pytest.raises(InputError, match=r"a\.csv: line 452: item_time: .* is before the "
                                         r"previous row's"):
        _table(replace(chunk, skip=50), spec)


def test_a_resumed_chunk_whose_file_lost_lines_is_an_input_error(tmp_path: Path) -> None:
    write_items_csv(tmp_path / "a.csv", 1000)
    spec = _spec(tmp_path, "csv", "a.csv", 400)
    chunk = plan_source(spec, validate=False).chunks[2]
    data = (tmp_path / "a.csv").read_bytes()
    (tmp_path / "a.csv").write_bytes(data[:chunk.start + 100])  # cut mid-chunk
    with pytest.raises(InputError, match="the source changed"):
        _table(replace(chunk, skip=150), spec)
