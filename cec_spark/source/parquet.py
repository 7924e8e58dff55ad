"""Chunk planning of a parquet file: chunks of whole row groups, from the footer.

A chunk is the row groups that reach ``chunk_rows``; in a light plan
(:attr:`FileState.light <cec_spark.source.file_state.FileState.light>`) only the
source's first chunk is read (it fixes the column types), every other one planned
from the footer's row counts with its last row's time (its watermark) from the
footer's statistics or that row group's time column alone (:func:`_last_row_time`);
otherwise (lateness settings: the time column; a stream folder: every column) each
chunk is read and checked here. A bad file or row raises :class:`InputError` naming
the file and row.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cec_spark.errors import InputError
from cec_spark.source.file_state import FileState
from cec_spark.source.files import file_digest
from cec_spark.source.read import check_big_ints, parquet_file
from cec_spark.source.types import Chunk


def plan_parquet_file(st: FileState, path: Path) -> None:
    """Plan one parquet file into ``st``: its chunks, and, light, its fingerprint (of a
    run whose tasks report their chunks, its size and time: no byte digested here)."""
    name = path.name
    try:
        pf = parquet_file(str(path))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{name}: not a readable parquet file: {exc}") from exc
    missing = [c for c in st.needed() if c not in pf.schema_arrow.names]
    if missing:
        raise InputError(f"{name}: missing column {missing[0]!r} "
                         f"(the file has {', '.join(pf.schema_arrow.names)})")
    groups: list[tuple[int, int]] = []
    lo, rows = 0, 0
    for g in range(pf.num_row_groups):
        rows += pf.metadata.row_group(g).num_rows
        if rows >= st.spec.source.chunk_rows:
            groups.append((lo, g + 1))
            lo, rows = g + 1, 0
    if lo < pf.num_row_groups:
        groups.append((lo, pf.num_row_groups))
    row = 0
    for lo, hi in groups:
        if st.full:
            break
        if st.light and st.columns is not None:
            n = sum(pf.metadata.row_group(g).num_rows for g in range(lo, hi))
            rows = st.cut(n)
            if st.order is not None:  # lateness: the chunk's times (its time column)
                times = st.time_us(pf.read_row_groups(list(range(lo, hi)),
                                                      columns=[st.time.field]),
                                   name, row, "row")
                st.add_timed(Chunk(len(st.chunks), "parquet", str(path), lo, hi,
                                   st.next_seq, rows, row),
                             times.column(st.time.field).to_numpy()[:rows], name, "row")
                row += n
                continue
            st.add_light(Chunk(len(st.chunks), "parquet", str(path), lo, hi, st.next_seq,
                               rows, row, reported=st.reports),
                         _last_row_time(st, pf, name, hi - 1, row, n, rows),
                         f"row {row + rows - 1}")
            row += n
            continue
        table = pf.read_row_groups(list(range(lo, hi)))
        check_big_ints(table, st.spec.aggregate.field, name, row, lo, hi)
        if st.columns is None:
            st.fix_types(table, name)
        assert st.columns is not None
        try:
            table = st.time_us(table.select(list(st.columns.names)), name, row, "row")
            table = table.cast(st.columns.schema())
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(f"{name}: row groups {lo}-{hi - 1}: columns do not match the "
                             f"source's first file: {exc}") from exc
        cut = st.check(table, name, row, "row")
        st.add_chunk(Chunk(len(st.chunks), "parquet", str(path), lo, hi, st.next_seq,
                           cut.num_rows, row, reported=st.reports), cut)
        row += table.num_rows
    _fingerprint(st, path)


def _fingerprint(st: FileState, path: Path) -> None:
    """The file's fingerprint entry of a light plan: its size and time when the tasks
    report what they read (cec_spark.source.chunk_report), else the xxh64 of its bytes."""
    if st.reports:
        stat = path.stat()
        st.files.append({"file": str(path), "bytes": stat.st_size,
                         "mtime_ns": stat.st_mtime_ns})
    elif st.light:
        st.files.append({"file": str(path), "bytes": path.stat().st_size,
                         "xxh64": file_digest(path)})


def _last_row_time(st: FileState, pf: pq.ParquetFile, name: str, group: int, row: int,
                   n: int, rows: int) -> int | None:
    """The time of row ``rows - 1`` of a chunk of ``n`` rows (its row groups' last is
    ``group``), in microseconds, from the footer: the group's largest value of an
    integer or INT64 timestamp time field (its last one when the times are
    non-decreasing, which the task checks), else read from that group's time column
    alone (INT96 timestamps have no statistics). None: none to be had (the
    chunk's task names what is wrong)."""
    assert st.columns is not None
    tf = st.time.field
    if rows <= 0:
        return None
    try:
        field = pf.schema_arrow.field(tf)
        stats = None
        if rows == n and pf.metadata.num_columns == len(pf.schema_arrow):
            stats = pf.metadata.row_group(group).column(
                pf.schema_arrow.get_field_index(tf)).statistics
        if stats is not None and stats.has_min_max and not stats.null_count and (
                pa.types.is_integer(field.type) or (pa.types.is_timestamp(field.type)
                                                    and stats.physical_type == "INT64")):
            # the stored value: an integer, or a timestamp's count in its unit
            table = pa.table({tf: pa.array([stats.max_raw], pa.int64()).cast(field.type)})
            return int(st.time_us(table, name, row + rows - 1, "row").column(tf)[0].as_py())
        col = pf.read_row_group(group, columns=[tf])
        before = n - col.num_rows  # rows of the chunk's groups before the last
        i = rows - 1 - before
        if i < 0:  # the cut ends in an earlier group: read the groups' times
            return None
        table = col.slice(i, 1)
        return int(st.time_us(table, name, row + rows - 1, "row").column(tf)[0].as_py())
    except (InputError, KeyError, TypeError, ValueError, pa.ArrowInvalid,
            pa.ArrowNotImplementedError, OSError):
        return None
