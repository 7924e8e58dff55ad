"""The upstream logs' lifecycle, as the ingest sees it: created by the driver, committed
by the writers (:mod:`cec_spark.ingest.writer`) with an :class:`~cec.ingest_token.
IngestToken`, trimmed below what every recovery replays, sealed at the source's end;
and what their last tokens say (the ingest's resume point, the late rows).

One upstream log per partition, ``layout.upstream(p)``. A log is created (with its
output log) on the driver only, before any task opens it; executors only open. Its
last token is the truth of the ingest: the oldest ``chunk`` over the P logs is where a
resumed ingest goes on (:func:`committed_chunk`), a log's ``late`` the late rows of its
partition, its ``wm`` the watermark (:mod:`cec_spark.ingest.watermark`). A sealed log
holds its partition's whole stream.
"""

from __future__ import annotations

from dataclasses import replace

from cec.ingest_token import decode_token, encode_token
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.layout import RunLayout
from recovery.upstream import upstream_trim_before
from storage_log.cache import ID_FILE
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


def committed_chunk(layout: RunLayout, partitions: int) -> tuple[int, int | None]:
    """The last chunk every upstream log has committed (-1 for none) and its ``next_seq``."""
    done: list[tuple[int, int | None]] = []
    for p in range(partitions):
        path = layout.upstream(p)
        if not path.exists():
            return -1, None
        with StreamLog.open(path) as log:
            tok = decode_token(log.last_token())
        done.append((-1, None) if tok is None else (tok.chunk, tok.next_seq))
    return min(done, key=lambda d: d[0]) if done else (-1, None)


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
        out.append(0 if tok is None else tok.late)
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
    many logs were committed (:mod:`cec_spark.ingest.watermark`: an idle source)."""
    done = 0
    for log in logs:
        if log is None or log.sealed:
            continue
        tok = decode_token(log.last_token())
        if tok is None or (tok.watermark is not None and tok.watermark >= w):
            continue
        log.commit(encode_token(replace(tok, watermark=w)))
        done += 1
    return done


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
