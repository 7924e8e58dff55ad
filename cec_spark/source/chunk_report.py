"""The reports of the chunks a run's tasks read: what the task that read one saw.

A csv, jsonl or parquet file source of a run made with ``[cec] source_reports`` is not
digested by the planner, and a text one is cut by bytes (``[cec] chunk_bytes``,
:attr:`~cec_spark.source.types.Chunk.sparse`), its rows not counted: the ingest task
that reads a chunk (:attr:`~cec_spark.source.types.Chunk.reported`) counts its rows and
digests its bytes. Once every row of a chunk is checked, and before it yields the
first, that task writes ``RUN/source_chunks/cNNNNNNNN.json``
(``RunLayout.source_chunk_report``, the :data:`ReportPath` every function here takes):
``{"file", "start", "stop", "rows", "bytes", "xxh3"}`` (``bytes``: the span digested,
a parquet chunk's row groups'), synced as the upstream logs are (:class:`Reports`; a
retried or speculative task writes the same). A resume that skips a chunk's first rows
reads only part of it and writes nothing: the whole chunk was read, and reported,
before any of its rows was committed. The reports are

* the fingerprint of what the run read (:func:`check_reported`): a resume that finds a
  file changed (its size or modification time) reads again the bytes of each reported
  chunk of it before its resume point and compares the digests, so a file changed
  where rows were committed is refused naming the file and the bytes, and a file fixed
  after them is read on;
* the rows the ingest read (:func:`counted_rows`): the seqs of a chunk cut by bytes are
  places in the source's bytes, not row numbers, so the progress, the run's report and
  its metrics count its rows from here.

A report counts only for a chunk of the current plan with the same file and bytes: a
fixed file may move the chunks after the fix, whose old reports are then ignored (and
written over when the chunk is read). The file is JSON, never pickle; a report that
does not parse is treated as missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import xxhash

from cec_spark.errors import InputError
from cec_spark.source.files import digest_range
from cec_spark.source.types import Chunk
from storage_log.durable import write_durable

__all__ = ["ReportPath", "Reports", "check_reported", "chunk_digest", "counted_rows",
           "group_bytes", "read_reports", "report_chunk", "write_report"]

def chunk_digest(data: bytes) -> str:
    """The digest of a chunk's bytes a report holds (xxh3, 64 bits, hex)."""
    return xxhash.xxh3_64_hexdigest(data)


#: where chunk ``index``'s report is (RunLayout.source_chunk_report)
ReportPath = Callable[[int], Path]


@dataclass(frozen=True)
class Reports:
    """Where a task reports the chunks it reads, and whether each report is synced
    (with the run's upstream logs: not on a local master whose logs are a cache of the
    source, where a report lost in a machine crash is only a row count short and, for
    a file changed since, a resume that says the source cannot be checked)."""

    path: ReportPath
    sync: bool = True


def write_report(reports: Reports, chunk: Chunk, rows: int, span: tuple[int, int],
                 digest: str) -> None:
    """Report ``chunk`` read whole: its ``rows`` and the ``digest`` of its bytes
    ``span`` (a text chunk's ``start``-``stop``; a parquet chunk's row groups'), in the
    task, before its first row is yielded."""
    path = reports.path(chunk.index)
    path.parent.mkdir(exist_ok=True)
    write_durable(path, sync=reports.sync, data=json.dumps(
        {"file": chunk.file, "start": chunk.start, "stop": chunk.stop, "rows": rows,
         "bytes": list(span), "xxh3": digest}))


def report_chunk(reports: Reports, chunk: Chunk, rows: int,
                 read: bytes | pq.FileMetaData) -> None:
    """Report ``chunk`` read whole (:func:`write_report`): a text chunk's digest of the
    bytes it parsed (``read``), a parquet chunk's of its row groups' bytes (found in
    its file's footer, ``read``), read again raw (the page cache holds them: pyarrow
    just read them)."""
    if isinstance(read, bytes):
        write_report(reports, chunk, rows, (chunk.start, chunk.stop), chunk_digest(read))
        return
    span = group_bytes(read, chunk.start, chunk.stop)
    h = xxhash.xxh3_64()
    digest_range(chunk.file, *span, h)
    write_report(reports, chunk, rows, span, h.hexdigest())


def group_bytes(meta: pq.FileMetaData, lo: int, hi: int) -> tuple[int, int]:
    """The bytes ``[start, stop)`` of a parquet file that its row groups ``lo..hi-1``
    hold: from the first page of group ``lo``'s first column to the end of group
    ``hi - 1``'s last column chunk."""
    def first(col: pq.ColumnChunkMetaData) -> int:
        data_at = int(col.data_page_offset)
        dict_at = int(col.dictionary_page_offset or 0) if col.has_dictionary_page else 0
        return min(data_at, dict_at) if dict_at else data_at

    head, tail = meta.row_group(lo), meta.row_group(hi - 1)
    start = min(first(head.column(c)) for c in range(head.num_columns))
    stop = max(first(tail.column(c)) + tail.column(c).total_compressed_size
               for c in range(tail.num_columns))
    return start, stop


def _matches(report: dict[str, Any] | None, chunk: Chunk) -> bool:
    return report is not None and report.get("file") == chunk.file \
        and report.get("start") == chunk.start and report.get("stop") == chunk.stop


def read_reports(folder: ReportPath, chunks: Sequence[Chunk]) -> dict[int, dict[str, Any]]:
    """The reports of ``chunks`` (of the current plan; reported ones) that match them."""
    out: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        if chunk.reported and _matches(report := _load(folder, chunk.index), chunk):
            assert report is not None
            out[chunk.index] = report
    return out


def counted_rows(folder: ReportPath, chunks: Sequence[Chunk], upto: int) -> int:
    """The source rows of the chunks up to index ``upto``: a dense chunk's from its seqs,
    a sparse one's from its report (one not reported yet: none)."""
    done = [c for c in chunks if c.index <= upto]
    if not done:
        return 0
    if not any(c.sparse for c in done):
        return done[-1].next_seq
    reports = read_reports(folder, done)
    return sum(int(reports[c.index]["rows"]) if c.sparse and c.index in reports
               else (0 if c.sparse else c.rows) for c in done)


def _load(folder: ReportPath, index: int) -> dict[str, Any] | None:
    try:
        report = json.loads(folder(index).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    keys = {"file": str, "start": int, "stop": int, "rows": int, "xxh3": str, "bytes": list}
    ok = isinstance(report, dict) and all(isinstance(report.get(k), t) for k, t in keys.items()) \
        and len(report["bytes"]) == 2 and all(isinstance(b, int) for b in report["bytes"])
    return report if ok else None


def _digest_now(file: str, start: int, stop: int) -> str | None:
    """The digest of bytes ``[start, stop)`` of ``file`` now (None: not there)."""
    h = xxhash.xxh3_64()
    try:
        whole = digest_range(file, start, stop, h) == stop - start
    except OSError:
        return None
    return h.hexdigest() if whole else None


def check_reported(folder: ReportPath, chunks: Sequence[Chunk], files: set[str],
                   upto: int | None) -> None:
    """InputError unless the chunks of ``files`` the run read, up to index ``upto``
    (None: all it read), hold the bytes their reports say it read (each report's own
    file and bytes: a committed chunk is never planned otherwise). Up to ``upto`` every
    chunk of the current plan in ``files`` was read whole: without its report the
    source cannot be checked, and that is refused too."""
    todo = [c for c in chunks if c.reported and c.file in files
            and (upto is None or c.index <= upto)]
    for chunk in todo:
        report = _load(folder, chunk.index)
        if report is None:
            if upto is None:
                continue  # never read whole, nothing of it committed
            raise InputError(f"{chunk.file}: chunk {chunk.index}: the run "
                             f"read it, but its report "
                             f"({folder(chunk.index)}) is missing or damaged: the "
                             "source cannot be checked against what the run read (put "
                             "the file back as the run read it, or start a new run)")
        file, (start, stop) = report["file"], report["bytes"]
        if _digest_now(file, start, stop) != report["xxh3"]:
            raise InputError(f"{file}: bytes {start}-{stop}: the source changed since the "
                             f"run read them (xxh3 {report['xxh3']} then; a resumed run "
                             "must read the same input up to where it stopped, and may "
                             "read a fixed file after it)")
