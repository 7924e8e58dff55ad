"""Sources: validation, chunk planning and chunk reading of a pipeline's input.

A source is cut into **chunks**, the unit of ingest and of resumption. A chunk is a
contiguous run of source rows: a byte range of whole lines of a CSV/JSONL file, a run
of row groups of a parquet file, or a row range of the generator. Chunk ``c`` knows
``first_seq``, the source row number of its first row, so ``seq = first_seq + i`` is
the row's position in the stream *before* the filter (ARCHITECTURE §1); a text chunk
cut by bytes (:attr:`Chunk.sparse`) knows its first byte's place in the source
instead, and its rows take ``first_seq + i`` all the same. Chunks are
numbered densely from 0 in stream order; planning is deterministic (the same files
give the same chunks), which is what lets a restarted ingest skip what its logs'
commit tokens already cover.

A run plans a bounded source from its files' metadata (:func:`plan_source` with
``validate=False``: names, sizes and times, headers, parquet footers, a text file's
chunks cut by bytes; the rows of its first chunk and each chunk's last time): its cost
grows with the files and chunks, not the rows (a run from before, planned by rows,
also counts newlines and digests the bytes). The ingest task that reads a chunk checks its rows
before it yields one (:attr:`Chunk.check`): a missing file or column, a malformed row
or a time field that goes back raises :class:`InputError` (exit status 2) naming the
file, line (row for parquet) and field, and nothing from that chunk on is committed.
``plan_source`` with ``validate=True`` (its default) runs the same checks at once.
``stream-dir`` sources are watched by :class:`StreamDirWatcher`; its files are
consumed in name order (names starting with ``.`` or ``_`` are ignored: write a file
under such a name and rename it into place), each validated as it is found, and the
stream ends when a file named ``_END`` appears. A stream folder may start empty: a new
run waits for its first file (saying so on stderr), whose columns fix the run's types.

This module does no Spark: :func:`read_chunk` is what the Spark data source
(:mod:`cec_spark.ingest.job`) calls on an executor to produce Arrow batches.

The parts: :mod:`cec_spark.source.types` (Chunk, ColumnTypes, SourcePlan),
:mod:`cec_spark.source.read` (parsing bytes, :func:`read_chunk`),
:mod:`cec_spark.source.check` (validating and cutting files),
:mod:`cec_spark.source.folder` (:class:`StreamDirWatcher`); this module plans a whole
source (:func:`plan_source`) and re-exports their public names.
"""

from __future__ import annotations

import time

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.check import plan_file
from cec_spark.source.file_state import FileState
from cec_spark.source.files import file_digest, source_files
from cec_spark.source.folder import StreamDirWatcher
from cec_spark.source.read import chunk_table, read_chunk
from cec_spark.source.types import (
    END_MARKER,
    EXTENSIONS,
    SEQ,
    Chunk,
    ColumnTypes,
    SourcePlan,
    TimeSpec,
    WatchState,
)
from cec_spark.watchdog import announce_wait

__all__ = ["END_MARKER", "EXTENSIONS", "SEQ", "Chunk", "ColumnTypes", "InputError",
           "SourcePlan", "StreamDirWatcher", "WatchState", "plan_source", "read_chunk",
           "source_files"]


def plan_source(spec: PipelineSpec, *, max_rows: int | None = None,
                validate: bool = True, chunk_bytes: int | None = None,
                reports: bool = False) -> SourcePlan:
    """Cut a source into chunks and, with ``validate``, check every row of it.

    ``validate=False`` (a run's planning): the files' metadata is read (names, sizes,
    csv headers, parquet footers, newline counts, the fingerprint), and of the rows
    only the first chunk's (it fixes the column types) and each chunk's last time
    (its watermark); every other row is checked by the ingest task that reads it
    (:attr:`Chunk.check`, :func:`cec_spark.source.read.chunk_table`). ``validate=True``
    then runs those same checks here, chunk by chunk (the first bad row, in order,
    is the InputError). With lateness settings each chunk's times are read here
    either way (:mod:`cec_spark.source.order` plans from every row's time), the time
    column alone.

    ``chunk_bytes`` (a run planned by bytes, ``[cec] chunk_bytes``): with
    ``validate=False``, no lateness settings and no ``max_rows``, a csv or jsonl file
    is cut every that many bytes at a line start, its newlines not counted and its
    bytes not digested (:attr:`Chunk.sparse`; the tasks count and digest what they
    read, :mod:`cec_spark.source.chunk_report`): the plan reads a few bytes a chunk.
    ``reports`` (``[cec] source_reports``, implied by ``chunk_bytes``): the same for a
    parquet file's digest (:attr:`Chunk.reported`); its footer is all the plan reads.

    For ``stream-dir`` this is the plan of the files present now (use
    :class:`StreamDirWatcher` to follow the folder).
    """
    src = spec.source
    if src.kind == "generator":
        assert src.generator is not None
        total = src.generator.rows if max_rows is None else min(max_rows, src.generator.rows)
        cols = ColumnTypes(("item_id", "item_price", "item_time"),
                           ("int64", "float64", "int64"))
        gen = src.generator
        chunks = [Chunk(i, "generator", "", lo, min(lo + src.chunk_rows, total), lo,
                        min(lo + src.chunk_rows, total) - lo,  # row i's time: start + i*step
                        wm=gen.start_ts + (min(lo + src.chunk_rows, total) - 1) * gen.interval_us)
                  for i, lo in enumerate(range(0, total, src.chunk_rows))]
        return SourcePlan(cols, tuple(chunks), True)
    if src.kind == "stream-dir":
        watcher = StreamDirWatcher(spec, max_rows=max_rows)
        watcher.poll()
        return watcher.plan if watcher.plan.columns.names else _first_file(watcher, spec)
    assert src.path is not None
    st = FileState(spec, max_rows, light=True, chunk_bytes=None if validate else chunk_bytes,
                   reports=reports and not validate)
    files = source_files(src.path, src.kind if src.path.is_dir() else None)
    if not files:
        raise InputError(f"{src.path}: [source].path: no {src.kind} files in this folder")
    for path in files:
        if not st.full:
            plan_file(st, path, src.kind)
        elif st.light:  # past --max-tuples: in the fingerprint all the same
            st.files.append({"file": str(path), "bytes": path.stat().st_size,
                             "xxh64": file_digest(path)})
        else:
            break
    st.flush()
    if st.columns is None:
        raise InputError(f"{src.path}: the source holds no rows")
    plan = SourcePlan(st.columns, tuple(st.chunks), True, warnings=tuple(st.warnings()),
                      files=tuple(st.files) if st.light else ())
    if validate:
        time = TimeSpec.of(spec)
        for chunk in plan.chunks:
            if chunk.check:
                chunk_table(chunk, plan.columns, time)
    return plan


def _first_file(watcher: StreamDirWatcher, spec: PipelineSpec) -> SourcePlan:
    """Wait for the first file of an empty stream folder (its columns fix the run's
    types), saying so on stderr (:func:`announce_wait`); ``_END`` first is an error."""
    def first() -> SourcePlan:
        while True:
            watcher.poll()
            if watcher.plan.columns.names:
                return watcher.plan
            if watcher.ended:
                raise InputError(f"{spec.source.path}: the stream ended (_END) before its "
                                 "first data file")
            time.sleep(spec.source.poll_ms / 1000)
    return announce_wait(f"the first file in the stream folder {spec.source.path} (its "
                         "columns fix the run's types; Ctrl-C stops, nothing is written "
                         "before it)", first, first_s=1.0)
