"""What a log accepts as a record: checks of an appended batch's schema and positions.

Pure functions of the batch and of the log's state (its schema, its last ``seq`` and
``ts``); :meth:`storage_log.log.StreamLog.append` runs them in this order:
:func:`conform`, :func:`check_schema` (for a log's first record), :func:`positions`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from storage_log.errors import LogOrderError, LogSchemaError


def conform(batch: pa.RecordBatch, log_schema: pa.Schema | None) -> pa.RecordBatch:
    """The batch with the log's schema: same names and types are required;
    nullability flags and metadata may differ (Spark varies them) and are taken
    from the log's schema."""
    schema = batch.schema
    if log_schema is None or schema.equals(log_schema):
        return batch
    if schema.names == log_schema.names and schema.types == log_schema.types:
        for f, lf in zip(schema, log_schema, strict=True):
            if f.nullable and not lf.nullable and batch.column(f.name).null_count:
                raise LogSchemaError(f"column {f.name!r} has nulls; the log's field is "
                                     "not nullable")
        return pa.RecordBatch.from_arrays(batch.columns, schema=log_schema)
    raise LogSchemaError(
        f"batch schema differs from the log's:\n{schema}\nlog:\n{log_schema}")


def check_schema(schema: pa.Schema) -> None:
    """The schema of a log's first record: int64 ``ts`` and ``seq``, no dictionaries."""
    for name in ("ts", "seq"):
        idx = schema.get_field_index(name)
        if idx < 0 or schema.field(idx).type != pa.int64():
            raise LogSchemaError(f"a logged batch needs an int64 column {name!r}: {schema}")
    for f in schema:
        if pa.types.is_dictionary(f.type):
            raise LogSchemaError(f"dictionary column {f.name!r} cannot be logged")


def positions(batch: pa.RecordBatch, last_seq: int | None, last_ts: int | None,
              path: Path) -> tuple[int, int, int, int]:
    """(first_seq, last_seq, first_ts, last_ts) of a batch appended to the log at
    ``path`` whose last record ends at ``last_seq``/``last_ts`` (None: no record yet);
    LogOrderError if its positions break the log's order."""
    seq_col = batch.column("seq")
    ts_col = batch.column("ts")
    if seq_col.null_count or ts_col.null_count:
        raise LogOrderError("ts and seq must not be null")
    seq = seq_col.to_numpy()
    ts = ts_col.to_numpy()
    first_seq, end_seq = int(seq[0]), int(seq[-1])
    first_ts, end_ts = int(ts[0]), int(ts[-1])
    if last_seq is not None and first_seq <= last_seq:
        raise LogOrderError(
            f"seq {first_seq} is not after the log's last seq {last_seq} "
            f"(log {path})")
    if first_seq < 0:
        raise LogOrderError(f"seq {first_seq} is negative")
    if last_ts is not None and first_ts < last_ts:
        raise LogOrderError(
            f"ts {first_ts} (seq {first_seq}) is before the log's last ts {last_ts}")
    if len(seq) > 1:
        bad = np.flatnonzero(seq[1:] <= seq[:-1])
        if len(bad):
            i = int(bad[0]) + 1
            raise LogOrderError(f"seq does not increase inside the batch at row {i} "
                                f"({int(seq[i - 1])} then {int(seq[i])})")
        bad = np.flatnonzero(ts[1:] < ts[:-1])
        if len(bad):
            i = int(bad[0]) + 1
            raise LogOrderError(f"ts decreases inside the batch at row {i} "
                                f"(seq {int(seq[i])}: {int(ts[i - 1])} then {int(ts[i])})")
    return first_seq, end_seq, first_ts, end_ts
