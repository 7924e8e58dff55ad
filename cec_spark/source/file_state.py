"""The running state of one planning pass over a source's files (:class:`FileState`).

What a pass over several files carries from chunk to chunk and file to file: the
column types the source's first chunk fixed (:meth:`FileState.fix_types`), the next
``seq``, the last time seen and where (the order check), the chunks planned so far
(each with its watermark: :meth:`~FileState.add_chunk`, :meth:`~FileState.add_light`,
:meth:`~FileState.add_timed`), the cut at ``max_rows``, the lateness settings' side of
:mod:`cec_spark.source.order`, the fingerprint made on the way, and what
:func:`~cec_spark.source.times.unit_warnings` needs. The planners of text files
(:mod:`cec_spark.source.check`) and parquet files (:mod:`cec_spark.source.parquet`)
fill it; it reads no file.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.order import OrderState
from cec_spark.source.read import check_order, check_values, with_time_us
from cec_spark.source.times import duration_text, iso, kind_of, unit_warnings
from cec_spark.source.types import Chunk, ColumnTypes, TimeSpec


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int64"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float64"
    if pa.types.is_boolean(t):
        return "bool"
    return "string"


class FileState:
    """Running state of a validation pass over the files of one source."""

    def __init__(self, spec: PipelineSpec, max_rows: int | None, *,
                 light: bool = False, chunk_bytes: int | None = None,
                 reports: bool = False) -> None:
        self.spec = spec
        self.max_rows = max_rows
        # light: read the rows of the source's first chunk only (it fixes the column
        # types); every other chunk is planned from file metadata and checked by the
        # ingest task that reads it (Chunk.check). With lateness settings, whose plan
        # is made from every row's time (cec_spark.source.order), each chunk's times
        # are read (the time column alone: add_timed) and the rest left to its task.
        self.light = light
        self.files: list[dict[str, Any]] = []  # the fingerprint made on the way
        self.columns: ColumnTypes | None = None
        self.chunks: list[Chunk] = []
        self.next_seq = 0
        self.last_ts: int | None = None
        self.last_where = ""
        self.time = TimeSpec.of(spec)
        # for unit_warnings: the raw integers' largest magnitude, the times' range
        self.raw_max_abs: int | None = None
        self.min_us: int | None = None
        self.max_us: int | None = None
        # lateness settings: the planner's side of cec_spark.source.order
        self.order = OrderState(self.time.allowed_lateness_us, self.time.late == "drop") \
            if self.time.reorders else None
        # a light plan of a run planned by bytes (its text files cut every
        # ``chunk_bytes`` bytes, at a line start: Chunk.sparse); not with lateness
        # settings, whose plan reads every time, nor at a --max-tuples cut, which
        # counts rows
        plain = light and self.order is None and max_rows is None
        self.chunk_bytes = chunk_bytes if plain else None
        # a light plan of a run whose tasks report the chunks they read (rows, digest:
        # cec_spark.source.chunk_report): the files' fingerprint is their sizes and
        # times, no byte of them digested here (Chunk.reported)
        self.reports = plain and (reports or chunk_bytes is not None)

    def add_chunk(self, chunk: Chunk, table: pa.Table) -> None:
        """Plan ``chunk`` (its rows ``table``, after the cut) as the next chunk."""
        if self.order is not None:
            chunk = self.order.plan(chunk, table.column(self.time.field).to_numpy(),
                                    self.chunks)
        else:  # times are non-decreasing (check): no later row is before the last one
            chunk = replace(chunk, wm=self.last_ts)
        self.chunks.append(chunk)
        self.next_seq += chunk.rows

    def flush(self) -> None:
        """At the end of the source: the chunk that releases the rows still held."""
        if self.order is not None and self.chunks:
            last = self.order.flush(self.chunks[-1], self.chunks)
            if last is not None:
                self.chunks.append(last)

    @property
    def full(self) -> bool:
        return self.max_rows is not None and self.next_seq >= self.max_rows

    def needed(self) -> list[str]:
        agg = self.spec.aggregate
        cols = [self.spec.source.time_field, agg.group_by]
        if agg.field is not None:
            cols.append(agg.field)
        return cols

    def add_light(self, chunk: Chunk, last: int | None, last_where: str) -> None:
        """Plan ``chunk``, whose rows are not read here: the task that reads them checks
        them from the row before it (``prev_ts``); ``last``: the time of its last row
        (None: unknown; its task names what is wrong with it), its watermark."""
        chunk = replace(chunk, check=True, prev_ts=self.last_ts, prev_where=self.last_where,
                        wm=last)
        self.last_ts, self.last_where = last, last_where
        self.chunks.append(chunk)
        self.next_seq += chunk.rows

    def add_timed(self, chunk: Chunk, ts: np.ndarray, name: str, unit: str) -> None:
        """Plan ``chunk`` with lateness settings from its times ``ts`` alone (after the
        cut; read here, the late rows refused here with ``late = "error"``); its task
        checks the rest of its rows (:attr:`Chunk.check`)."""
        assert self.order is not None
        if not self.order.drop:
            late = self.order.first_late(ts)
            if late is not None:
                raise self.late_error(ts, late, name, chunk.first_line, unit)
        self.add_chunk(replace(chunk, check=True), pa.table({self.time.field: ts}))

    def late_error(self, ts: np.ndarray, late: tuple[int, int], name: str, first: int,
                   unit: str) -> InputError:
        i, before = late
        return InputError(
            f"{name}: {unit} {first + i}: {self.time.field}: {iso(int(ts[i]))} is more than "
            f"allowed_lateness ({duration_text(self.time.allowed_lateness_us)}) behind "
            f"{iso(before)}, the latest time before it (late = \"error\"; "
            "late = \"drop\" drops such rows)")

    def cut(self, rows: int) -> int:
        """``rows`` of a next chunk, cut at ``max_rows``."""
        if self.max_rows is None:
            return rows
        return max(0, min(rows, self.max_rows - self.next_seq))

    def fix_types(self, table: pa.Table, name: str) -> ColumnTypes:
        if self.columns is not None:
            return self.columns
        agg = self.spec.aggregate
        types = []
        for col in table.column_names:
            t = _type_name(table.schema.field(col).type)
            if col == self.spec.source.time_field:
                kind = kind_of(table.schema.field(col).type)
                if kind is None:
                    shown = table.column(col)[0].as_py() if table.num_rows else None
                    raise InputError(f"{name}: {col}: {shown!r} (a {table.schema.field(col).type} "
                                     "column) is no time: an integer epoch (with "
                                     "[source].time_unit), a TIMESTAMP or ISO-8601 text")
                if kind != "int64" and self.time.unit != "us":
                    what = "a TIMESTAMP" if kind == "timestamp" else "ISO-8601 text"
                    raise InputError(f"{name}: {col}: the time field is {what}, an instant "
                                     "with no unit to choose; leave [source].time_unit out "
                                     "(it is the unit of integer epochs)")
                t = kind
            elif col == agg.field:
                t = "float64"
            elif col == agg.group_by:
                t = "int64" if t == "int64" else "string"
            types.append(t)
        self.columns = ColumnTypes(tuple(table.column_names), tuple(types))
        return self.columns

    def time_us(self, table: pa.Table, name: str, first: int, unit_word: str) -> pa.Table:
        """The table with its time field in microseconds; notes what unit_warnings needs."""
        assert self.columns is not None
        tf = self.time.field
        kind = self.columns.kind(tf)
        raw = table.column(tf)
        if kind == "int64" and pa.types.is_integer(raw.type) and len(raw) \
                and not raw.null_count:
            big = int(pc.max(pc.abs_checked(raw.cast(pa.int64()))).as_py()) \
                if pc.min(raw).as_py() != -(1 << 63) else (1 << 63) - 1
            self.raw_max_abs = max(self.raw_max_abs or 0, big)
        table = with_time_us(table, self.time, kind, name, first, unit_word)
        ts = table.column(tf)
        if len(ts):
            lo, hi = int(pc.min(ts).as_py()), int(pc.max(ts).as_py())
            self.min_us = lo if self.min_us is None else min(self.min_us, lo)
            self.max_us = hi if self.max_us is None else max(self.max_us, hi)
        return table

    def warnings(self) -> list[str]:
        """What looks wrong about the time unit of what was planned (unit_warnings)."""
        if self.columns is None:
            return []
        return unit_warnings(self.time.field, self.columns.kind(self.time.field),
                             self.time.unit, self.raw_max_abs, self.min_us, self.max_us,
                             self.next_seq, self.spec.aggregate.window)

    def check(self, table: pa.Table, name: str, first_line: int, unit: str) -> pa.Table:
        """Nulls and non-decreasing time of one parsed chunk; returns it, cut to max_rows."""
        check_values(table, self.time, name, first_line, unit)
        if self.max_rows is not None and self.next_seq + table.num_rows > self.max_rows:
            table = table.slice(0, self.max_rows - self.next_seq)
        tf = self.spec.source.time_field
        ts = table.column(tf).to_numpy()
        if self.order is not None:  # late rows and allowed_lateness (source_order)
            late = None if self.order.drop else self.order.first_late(ts)
            if late is not None:
                raise self.late_error(ts, late, name, first_line, unit)
        elif len(ts):
            check_order(ts, tf, name, first_line, unit, self.last_ts, self.last_where)
            self.last_ts = int(ts[-1])
            self.last_where = f"{unit} {first_line + len(ts) - 1}"
        return table
