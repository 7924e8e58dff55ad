"""From any Spark streaming source (Kafka above all) into a cec stream folder.

cec reads a *replayable* upstream: after a crash its ingest reads the source again
from a position it stored. A ``stream-dir`` folder is that for files. For Kafka (or
any source of Spark Structured Streaming), :func:`to_stream_folder` runs a streaming
query that writes each micro-batch as one parquet file, ``batch-<id>.parquet`` with a
zero-padded id, so that name order is batch order, the order the folder's watcher
consumes them in:

* a file is written under a hidden name (``.batch-<id>.parquet.<host>.<pid>.tmp``)
  and renamed into place durably (:func:`storage_log.durable.commit_file`), so cec
  never sees half a file;
* a batch whose file already exists is not written again: Spark's own checkpoint
  (``checkpoint``) re-runs the last uncommitted batch after a crash with the same id
  and, for a replayable source such as Kafka, the same rows, so the file that exists
  holds exactly them;
* rows are sorted by ``order_by`` inside a batch; cec needs non-decreasing times
  along the stream, so a source whose batches overlap in time needs the run's late
  data policy (README, "Late data") or an upstream that orders them.

The bridge and ``cec run pipeline`` are separate processes (or jobs) that share the
folder; each recovers on its own: Spark from its checkpoint, cec from its logs.
Together they give what cec gives a folder: every row of the source in the results
exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from cec.errors import UsageError
from storage_log.durable import commit_file, temp_path

#: The digits of a batch id in a file name (Spark's batch ids are longs).
ID_DIGITS = 12


def batch_file(folder: Path, batch_id: int) -> Path:
    """The name the batch ``batch_id`` gets in ``folder``."""
    return folder / f"batch-{batch_id:0{ID_DIGITS}d}.parquet"


def write_batch(folder: Path, batch: DataFrame, batch_id: int,
                order_by: str | None = None) -> Path | None:
    """Write one micro-batch as its file (see the module docstring); the file, or
    None when it already existed or the batch is empty."""
    final = batch_file(folder, batch_id)
    if final.exists():
        return None
    if order_by is not None:
        batch = batch.orderBy(order_by)  # range-partitioned: collected in order
    table = batch.toArrow()
    if table.num_rows == 0:
        return None
    tmp = temp_path(final)
    pq.write_table(table, tmp)
    commit_file(tmp, final)  # durable before Spark commits the batch
    return final


def to_stream_folder(stream: DataFrame, folder: Path | str, checkpoint: Path | str, *,
                     order_by: str | None = None, available_now: bool = False,
                     processing_time: str | None = None) -> StreamingQuery:
    """Start a streaming query that feeds ``stream`` into the cec stream folder
    ``folder`` (created if absent); ``checkpoint`` is Spark's checkpoint location of
    that query. ``available_now``: process what the source holds now, then stop.
    Returns the running query (``query.awaitTermination()`` waits for it)."""
    if not stream.isStreaming:
        raise UsageError("to_stream_folder: the DataFrame is not a streaming one "
                         "(use spark.readStream)")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)

    def each(batch: DataFrame, batch_id: int) -> None:
        write_batch(out, batch, batch_id, order_by)

    writer: Any = stream.writeStream.foreachBatch(each).option(
        "checkpointLocation", str(checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time is not None:
        writer = writer.trigger(processingTime=processing_time)
    query: StreamingQuery = writer.start()
    return query
