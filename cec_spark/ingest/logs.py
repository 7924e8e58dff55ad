"""The upstream logs' lifecycle, as the ingest sees it: created by the driver, committed
by the writers (:mod:`cec_spark.ingest.writer`) with an :class:`~cec.ingest_token.
IngestToken`, trimmed below what every recovery replays, sealed at the source's end;
and what their last tokens say (the ingest's resume point, the late rows).

One upstream log per partition, ``layout.upstream(p)``. A log is created (with its
output log) on the driver only, before any task opens it; executors only open. Its
last token is the truth of the ingest: the oldest ``chunk`` over the P logs is where a
resumed ingest goes on (:func:`committed_chunk`), and the smallest row below which
every log holds all its rows (``row`` of a commit within a chunk, else the chunk's end)
is the row it starts reading at (:func:`resume_point`, :func:`resume_chunks`); a log's
``late`` is the late rows of its partition, its ``wm`` the watermark
(:mod:`cec_spark.ingest.watermark`). A sealed log holds its partition's whole stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cec.ingest_token import IngestToken, decode_token, encode_token
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.types import Chunk
from recovery.upstream import upstream_trim_before
from storage_log.cache import ID_FILE
from storage_log.faults import crash_point
from storage_log.log import StreamLog


def create_logs(layout: RunLayout, partitions: int, fsync: str) -> None:
    """On the driver: every upstream and output log of the run that does not exist yet
    (executors only open). A log with its id file exists: a writable open here would
    only start a new writer epoch (two fsyncs) that its task's open starts again (a
    resume or a takeover paid 0.4 s for 2P such opens); a log without one (a crash
    while it was created, a damaged id file) is opened, as before."""
    for p in range(partitions):
        for path in (layout.upstream(p), layout.output(p)):
            if not (path / ID_FILE).exists():
                StreamLog.open(path, writable=True, create=True, fsync=fsync).close()


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed ingest goes on, from the upstream logs' last tokens."""

    chunk: int = -1  # the last chunk every log has committed (-1: none)
    next_seq: int | None = None  # that chunk's ``next_seq`` (None: none)
    # the source row below which every log holds all the rows of its partition: the
    # smallest of the logs' IngestToken.holds_below (0: a log without a token)
    row: int = 0


def resume_point(layout: RunLayout, partitions: int,
                 owned: Sequence[int] | None = None) -> ResumePoint:
    """The oldest chunk token of the upstream logs and the row the ingest reads from;
    ``owned``: of those logs only (one writer's, when several each own a slice)."""
    toks: list[IngestToken | None] = []
    for p in (range(partitions) if owned is None else owned):
        path = layout.upstream(p)
        if not path.exists():
            return ResumePoint()
        with StreamLog.open(path) as log:
            toks.append(decode_token(log.last_token()))
    return point_of(toks)


def point_of(toks: Sequence[IngestToken | None]) -> ResumePoint:
    """:func:`resume_point` of the logs' last tokens (pure)."""
    if not toks or any(t is None for t in toks):
        return ResumePoint()
    held = [t for t in toks if t is not None]
    first = min(held, key=lambda t: t.chunk)
    return ResumePoint(first.chunk, first.next_seq, min(t.holds_below for t in held))


def committed_chunk(layout: RunLayout, partitions: int) -> tuple[int, int | None]:
    """The last chunk every upstream log has committed (-1 for none) and its ``next_seq``."""
    point = resume_point(layout, partitions)
    return point.chunk, point.next_seq


def renumbered(chunk: Chunk) -> bool:
    """The chunk's rows take seqs that are not their source rows (``allowed_lateness``,
    ``late = "drop"``: :mod:`cec_spark.source.order`), or it releases held rows."""
    return chunk.seq_base >= 0 or chunk.seq_end >= 0 or bool(chunk.carry)


def resume_chunks(chunks: Sequence[Chunk], point: ResumePoint) -> list[Chunk]:
    """The chunks a resumed ingest reads: those after ``point.chunk``, each with the rows
    below ``point.row`` skipped (:attr:`Chunk.skip`: not read, filtered, hashed or
    written again; a chunk every log holds whole is read as no row, and still
    committed with its token). A renumbered chunk (:func:`renumbered`) is read whole:
    its seqs are not source rows (their tokens carry no ``row``, so ``point.row`` is
    the chunk's start anyway)."""
    out = []
    for chunk in chunks:
        if chunk.index <= point.chunk:
            continue
        skip = min(chunk.rows, point.row - chunk.first_seq)
        out.append(replace(chunk, skip=skip) if skip > 0 and not renumbered(chunk)
                   else chunk)
    return out


def first_read(chunks: Sequence[Chunk]) -> int:
    """The seq of the first row consecutive chunks emit, after the rows a resumed ingest
    skips (a chunk skipped whole emits none; its end when all are)."""
    for chunk in chunks:
        if renumbered(chunk) or chunk.skip < chunk.rows:
            return chunk.emit_base + chunk.skip
    return chunks[-1].emit_end


def late_rows(layout: RunLayout, partitions: int) -> list[int]:
    """The late rows dropped in each partition so far (committed; 0 before any commit)."""
    out = []
    for p in range(partitions):
        path = layout.upstream(p)
        if not path.exists():
            out.append(0)
            continue
        with StreamLog.open(path) as log:
            tok = decode_token(log.last_token())
        # within a chunk: the late rows below its row (else below the chunk's end)
        out.append(0 if tok is None else tok.late_through[0])
    return out


def trim_upstream(layout: RunLayout, logs: list[StreamLog | None]) -> int:
    """Drop upstream segments below what every recovery of their partition replays.

    Each operator task reports ``replay_after_seq`` in its state file
    (:class:`cec_spark.run.task.ReplayAfterSeq`); a segment whose records all lie at or
    before it is never read again. A missing or unreadable report trims nothing.
    Returns the number of segments deleted.
    """
    dropped = 0
    for p, log in enumerate(logs):
        if log is None:  # another writer's log
            continue
        after = read_advisory(layout.state_file(p)).get("replay_after_seq")
        if isinstance(after, int) and not isinstance(after, bool) and after >= 0:
            dropped += log.trim(before_seq=upstream_trim_before(after))
    return dropped


def watermarks(layout: RunLayout, partitions: int) -> list[int | None]:
    """Each upstream log's committed watermark (None: none yet, or no log)."""
    out: list[int | None] = []
    for p in range(partitions):
        path = layout.upstream(p)
        if not path.exists():
            out.append(None)
            continue
        with StreamLog.open(path) as log:
            tok = decode_token(log.last_token())
        out.append(None if tok is None else tok.watermark)
    return out


def least(values: list[int | None]) -> int | None:
    """The smallest watermark of logs that have one (None: none has)."""
    held = [v for v in values if v is not None]
    return min(held) if held else None


def commit_watermark(logs: list[StreamLog | None], w: int) -> int:
    """Commit watermark ``w`` on every open log whose last token is below it: the
    token again, with ``wm = w`` (a TOKEN frame, no row). A log without a token (no
    chunk committed yet), a sealed one or one not this writer's is left. Returns how
    many logs were committed (:mod:`cec_spark.ingest.watermark`: an idle source).

    The logs are committed one after the other; the crash points are the writer's
    (:mod:`storage_log.faults`): ``ingest.between_logs`` after the first of two or more
    logs' commits, ``ingest.after_token`` after the last."""
    todo = []
    for log in logs:
        if log is None or log.sealed:
            continue
        tok = decode_token(log.last_token())
        if tok is None or (tok.watermark is not None and tok.watermark >= w):
            continue
        todo.append((log, encode_token(replace(tok, watermark=w))))
    for i, (log, token) in enumerate(todo):
        log.commit(token)
        if i == 0 and len(todo) > 1:
            crash_point("ingest.between_logs")
    if todo:
        crash_point("ingest.after_token")
    return len(todo)


def upstream_sealed(layout: RunLayout, partitions: int) -> bool:
    """Every upstream log is sealed: the ingest of the run is complete."""
    for p in range(partitions):
        path = layout.upstream(p)
        if not path.exists():
            return False
        with StreamLog.open(path) as log:
            if not log.sealed:
                return False
    return True


def seal_upstream(layout: RunLayout, partitions: int, fsync: str) -> None:
    """At the source's end: seal every upstream log (a sealed log is left as it is)."""
    for p in range(partitions):
        with StreamLog.open(layout.upstream(p), writable=True, create=True,
                            fsync=fsync) as log:
            if not log.sealed:
                log.seal()
