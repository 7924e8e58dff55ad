"""Shared helpers of the operator tests: batch builders and row views."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from cec.operator import OperatorConfig


def batch(
    rows: Sequence[tuple[int, int, Any, float]], *, key_type: str = "int64"
) -> pa.RecordBatch:
    """An input batch from (ts, seq, key, value) tuples."""
    kt = pa.int64() if key_type == "int64" else pa.string()
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(cols[0], pa.int64()),
            pa.array(cols[1], pa.int64()),
            pa.array(cols[2], kt),
            pa.array([float(v) for v in cols[3]], pa.float64()),
        ],
        names=["ts", "seq", "key", "value"],
    )


def rows(out: pa.RecordBatch | pa.Table, *cols: str) -> list[tuple[Any, ...]]:
    """Output rows as tuples of the chosen columns (all columns if none given)."""
    names = cols or tuple(out.schema.names)
    d = out.to_pydict()
    return list(zip(*(d[c] for c in names), strict=True))


class FakeClock:
    """A clock that advances by a fixed step (seconds) on every reading."""

    def __init__(self, step: float = 0.001, start: float = 0.0) -> None:
        self.now = start
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def run(
    make: Callable[[OperatorConfig], Any],
    config: OperatorConfig,
    batches: Sequence[pa.RecordBatch],
    *,
    finish: bool = True,
) -> tuple[Any, list[pa.RecordBatch]]:
    """Run an operator over batches; returns it and its output batches."""
    op = make(config)
    outs = [op.process(b) for b in batches]
    if finish:
        outs.append(op.finish())
    return op, outs
