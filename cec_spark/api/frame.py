"""A Spark DataFrame as the bounded source of a run: checked, then written once to
``RUN/source`` as parquet, which the run (and every later recovery) reads.

Exactness after a crash needs an upstream that can be read again, row for row in the
same order: the operator tasks replay their upstream logs after ``T``, and an ingest
that died between two chunks reads its source again from the chunk its logs' tokens
name. A DataFrame is a query, not data: run twice, a query over a changing table, a
``rand()`` or a shuffle with ties may give other rows or another order. So the API
writes the DataFrame once, before the run, sorted by its time column (rows of equal
time keep the DataFrame's own order, the order of ``monotonically_increasing_id``: its
partitions in order, each in its order), in files of ``chunk_rows`` rows, and the run
is an ordinary ``parquet`` run of that folder (sorted, so no row is late: the source's
``allowed_lateness`` and ``late`` have nothing to do): ``run.toml`` names it, ``cec recover``,
``cec export`` and ``spark.read.format("cec")`` work on the directory as on any run.
The cost: one Spark job that sorts the DataFrame (a shuffle) and its size on disk
(parquet, snappy) inside the run directory, which a run keeps as long as it is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cec.errors import SpecError, UsageError
from cec.spec import PipelineSpec
from cec.spec.parse import field_error
from storage_log.durable import fsync_dir

_ORDER = "__cec_order"
_PLAIN = (T.IntegralType, T.FractionalType, T.DecimalType, T.BooleanType, T.StringType)


def _columns_text(frame: DataFrame) -> str:
    return ", ".join(f"{f.name}: {f.dataType.simpleString()}" for f in frame.schema.fields)


def _field(frame: DataFrame, name: str, call: str, role: str) -> T.StructField:
    for f in frame.schema.fields:
        if f.name == name:
            return f
    raise SpecError(f"{call}: the DataFrame has no {role} column {name!r} (it has "
                    f"{_columns_text(frame)})")


def staged_frame(frame: DataFrame, spec: PipelineSpec, calls: dict[str, str]) -> DataFrame:
    """The DataFrame as the run's source will hold it, or a SpecError naming the call
    whose column is missing or of a type a run cannot take.

    The time column must be a ``TIMESTAMP`` (written as int64 microseconds since the
    epoch, exactly) or an integer (an epoch in ``[source].time_unit``, microseconds
    unless given); the group-by key an integer or a string; the aggregated
    field a number. Other columns are kept if they are numbers, strings or booleans
    (a ``[filter]`` may use them) and left out otherwise.
    """
    agg = spec.aggregate
    tf = spec.source.time_field
    time = _field(frame, tf, calls["source"], "time")
    if isinstance(time.dataType, T.TimestampType):
        if spec.source.time_unit != "us":
            raise field_error(calls["source"], ("source", "time_unit"), f"column {tf!r} is "
                              "a TIMESTAMP (an instant, no unit to choose); leave time_unit out")
        time_col: Column = F.unix_micros(F.col(tf)).alias(tf)
    elif isinstance(time.dataType, T.IntegralType):
        time_col = F.col(tf).cast("long").alias(tf)
    else:
        raise field_error(calls["source"], ("source", "time_field"), f"column {tf!r} is "
                          f"{time.dataType.simpleString()}; the time column must be a "
                          "TIMESTAMP or an integer epoch (in time_unit)")
    key = _field(frame, agg.group_by, calls["group_by"], "group-by")
    if not isinstance(key.dataType, T.IntegralType | T.StringType):
        raise field_error(calls["group_by"], ("aggregate", "group_by"), f"column "
                          f"{agg.group_by!r} is {key.dataType.simpleString()}; a key must be "
                          "an integer or a string")
    if agg.field is not None:
        value = _field(frame, agg.field, calls["agg"], "aggregated")
        if not isinstance(value.dataType, T.IntegralType | T.FractionalType | T.DecimalType):
            raise field_error(calls["agg"], ("aggregate", "field"), f"column {agg.field!r} "
                              f"is {value.dataType.simpleString()}; the aggregated field must "
                              "be a number")
    cols = [time_col if f.name == tf else F.col(f.name) for f in frame.schema.fields
            if f.name == tf or isinstance(f.dataType, _PLAIN)]
    return frame.select(*cols)


def stage(frame: DataFrame, target: Path, time_field: str, chunk_rows: int) -> int:
    """Write ``frame`` (:func:`staged_frame`) to ``target`` in time order, in files of at
    most ``chunk_rows`` rows whose names sort in that order; fsync'ed, so that a run
    that survives a machine's crash finds its source too. The number of rows written
    (from the files' footers)."""
    if target.exists():
        raise UsageError(f"{target}: exists already")
    ordered = (frame.withColumn(_ORDER, F.monotonically_increasing_id())
               .orderBy(time_field, _ORDER).drop(_ORDER))
    ordered.write.option("maxRecordsPerFile", chunk_rows).parquet(str(target))
    for dirpath, _, files in os.walk(target):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))
    fsync_dir(target.parent)
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(target.glob("*.parquet")))
