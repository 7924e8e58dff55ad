"""A Spark data source for a run's results: ``spark.read.format("cec").load(RUN_DIR)``.

Installed, it is found by Spark itself (:mod:`pyspark_cec`); from a checkout that is not
installed (or an editable install, whose import hook Spark's lookup does not see),
register it once per session with :func:`register` (PySpark's Python Data Source API).
Then::

    spark.read.format("cec").load("runs/items")                      # the results
    spark.read.format("cec").option("asOf", ts).load("runs/items")   # as of output ts
    spark.read.format("cec").option("controls", "true").load(...)    # every record
    spark.readStream.format("cec").load("runs/items")                # tail new results

Results have the columns of ``cec export`` (``key, window_start, window_end, count,
value``) plus ``partition`` and ``seq`` (the record's position in its partition's
output log): the same rows as ``cec export``, in no particular order. The bounds are
TIMESTAMPs. For a count window they are the timestamps of its first and last tuple
(both inside the window: ``window_end`` inclusive); for a time window its own bounds,
``[window_start, window_end)`` (``window_end`` exclusive, as Spark's ``window()``).

``asOf`` (int64 microseconds, or ISO-8601 text) keeps the records whose output ``ts``
is at or before it: the results as they stood when the operators had seen input up to
that time.
``controls`` gives every record of the output logs (``R``, ``G_open``, ``G_check``,
``G_open+R``) with all of its columns, for inspection: the columns of record format 1
whatever the log's format (ARCHITECTURE §3; a format-2 log's rows get the aggregate
fields it does not keep as :func:`cec.records.with_every_field` fills them).

One Spark partition per output log; each reads only committed records (a log being
written is read up to its last commit). The stream reader's offset is the last seq
read per output log, so a query restarted from its checkpoint continues exactly.

A rescaled run (``cec recover --partitions``) has output logs in several generations:
every one is read (an old generation's up to the end its successor recorded), and
``partition`` is the partition within its generation; offsets are keyed ``"3"`` in
generation 0 and ``"g1/3"`` in generation 1 (:func:`cec_spark.rundir.acks.ack_key`). A
stream query sees a rescale's new generation when it is restarted. A rescale whose
old partition had run ahead of the cut leaves that partition's rows after the cut
out of the results; a stream that had read them already has seen them, and sees
their results again from the new generation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from cec.errors import UsageError
from cec.records import RESULT_TYPES, output_schema, with_every_field
from cec.windows import gap_of
from cec_spark.read.export import TIMESTAMP
from cec_spark.rundir.acks import ack_key
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file
from cec_spark.source.times import TimeValueError, to_us
from storage_log.log import StreamLog

NAME = "cec"


def register(spark: SparkSession) -> None:
    """Make ``format("cec")`` known to this session."""
    spark.dataSource.register(CecDataSource)


class _Run:
    """What a reader needs of a run directory: partitions, key type, window kind."""

    def __init__(self, options: dict[str, str]) -> None:
        raw = options.get("path")
        if not raw:
            raise UsageError('format("cec"): give the run directory, e.g. '
                             'spark.read.format("cec").load("runs/items")')
        self.root = str(Path(raw).expanduser().absolute())
        layout = RunLayout(Path(self.root))
        spec, settings = read_run_file(layout)
        self.logs = layout.output_logs(spec.run.partitions)  # (gen, p, path, end)
        self.partitions = len(self.logs)
        self.keys = [ack_key(gen, p) for gen, p, _, _ in self.logs]
        w = spec.aggregate.window
        self.count_window = w.kind == "count"
        #: a session's gap: a format-2 log's rows get their first_ts/last_ts from it
        self.session_gap = gap_of(w)
        self.key_type = "bigint" if settings.key_type == "int64" else "string"
        self.controls = options.get("controls", "false").strip().lower() in ("1", "true", "yes")
        as_of = options.get("asOf", options.get("asof"))
        try:
            self.as_of = None if as_of is None else int(as_of)
        except ValueError:
            try:  # or ISO-8601 text (without an offset: UTC)
                self.as_of = int(to_us(pa.array([str(as_of)]), "iso", "us")[0])
            except TimeValueError:
                raise UsageError(f'format("cec"): option asOf={as_of!r} is neither an '
                                 "integer timestamp (microseconds) nor an ISO-8601 "
                                 "time") from None

    def schema(self) -> str:
        if self.controls:
            arrow = output_schema(pa.int64() if self.key_type == "bigint" else pa.string())
            types = {pa.int64(): "bigint", pa.int8(): "tinyint", pa.float64(): "double",
                     pa.string(): "string"}
            return "partition int, " + ", ".join(f"`{f.name}` {types[f.type]}"
                                                 for f in arrow)
        return (f"partition int, seq bigint, key {self.key_type}, window_start timestamp, "
                "window_end timestamp, count bigint, value double")

    def rows(self, i: int, after: int | None, upto: int | None) -> Iterator[pa.RecordBatch]:
        """Output log ``i``'s records in (after, upto] (committed ones only), converted."""
        _, p, path, end = self.logs[i]
        if not path.exists():
            return
        if end is not None:
            upto = end if upto is None else min(upto, end)
        with StreamLog.open(path) as log:
            last = log.last_seq if upto is None else min(upto, log.last_seq or -1)
            if last is None or last < 0 or (after is not None and after >= last):
                return
            for raw in (log.read_forward(after_seq=after) if after is not None
                        else log.read_forward()):
                batch = raw.filter(pc.less_equal(raw.column("seq"), last))
                if self.as_of is not None:
                    batch = batch.filter(pc.less_equal(batch.column("ts"), self.as_of))
                out = self.convert(p, batch)
                if out is not None and out.num_rows:
                    yield out
                if raw.num_rows and raw.column("seq")[-1].as_py() >= last:
                    return

    def convert(self, p: int, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        if batch.num_rows == 0:
            return None
        part = pa.array([p] * batch.num_rows, pa.int32())
        if self.controls:  # the columns of record format 1, whatever the log's
            batch = with_every_field(batch, self.session_gap)
            return pa.RecordBatch.from_arrays([part, *batch.columns],
                                              names=["partition", *batch.schema.names])
        r = batch.filter(pc.is_in(batch.column("type"), pa.array(RESULT_TYPES, pa.int8())))
        if r.num_rows == 0:
            return None
        cols = [pa.array([p] * r.num_rows, pa.int32()), r.column("seq"), r.column("key"),
                r.column("first_ts" if self.count_window else "win_start").cast(TIMESTAMP),
                r.column("last_ts" if self.count_window else "win_end").cast(TIMESTAMP),
                r.column("cnt"), r.column("value")]
        return pa.RecordBatch.from_arrays(cols, names=["partition", "seq", "key",
                                                       "window_start", "window_end",
                                                       "count", "value"])

    def last_seqs(self) -> dict[str, int]:
        out = {}
        for key, (_, _, path, end) in zip(self.keys, self.logs, strict=True):
            last = -1
            if path.exists():
                with StreamLog.open(path) as log:
                    last = -1 if log.last_seq is None else log.last_seq
            out[key] = last if end is None else min(last, end)
        return out


class _Part(InputPartition):
    def __init__(self, p: int, after: int | None = None, upto: int | None = None) -> None:
        super().__init__(p)
        self.p, self.after, self.upto = p, after, upto


class CecDataSource(DataSource):
    """``format("cec")``: the results (or every record) of a cec run directory."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return _Run(dict(self.options)).schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(dict(self.options))


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.run = _Run(options)

    def partitions(self) -> Sequence[InputPartition]:
        return [_Part(p) for p in range(self.run.partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Part)
        yield from self.run.rows(partition.p, None, None)


class _StreamReader(DataSourceStreamReader):
    """Offsets: ``{"0": last seq read, ...}`` per output log (-1: nothing yet)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.run = _Run(options)

    def initialOffset(self) -> dict[str, Any]:
        return dict.fromkeys(self.run.keys, -1)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None
                     ) -> dict[str, Any]:
        """Every committed record (no admission limit: a batch reads what is there)."""
        return dict(self.run.last_seqs())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]
                   ) -> Sequence[InputPartition]:
        return [_Part(i, int(start.get(k, -1)), int(end[k]))
                for i, k in enumerate(self.run.keys)
                if k in end and int(end[k]) > int(start.get(k, -1))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Part)
        after = None if partition.after is None or partition.after < 0 else partition.after
        yield from self.run.rows(partition.p, after, partition.upto)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the output logs are the user's data: reading never changes them
