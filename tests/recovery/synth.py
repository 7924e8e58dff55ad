"""Synthetic output logs for EC tests: hand-written rows and a tiny count-window model.

The model is not the project's operator: it only produces rows that follow the output
contract (docs/ARCHITECTURE.md §3), so EC reconstruction can be tested with data alone.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

R, GO, GC = 1, 2, 3


def output_schema(key_type: pa.DataType | None = None) -> pa.Schema:
    key_type = pa.int64() if key_type is None else key_type
    return pa.schema(
        [
            ("ts", pa.int64()),
            ("seq", pa.int64()),
            ("type", pa.int8()),
            ("t_now", pa.int64()),
            ("n_open", pa.int64()),
            ("key", key_type),
            ("win_start", pa.int64()),
            ("win_end", pa.int64()),
            ("tau1", pa.int64()),
            ("cnt", pa.int64()),
            ("sum", pa.float64()),
            ("min", pa.float64()),
            ("max", pa.float64()),
            ("first_ts", pa.int64()),
            ("last_ts", pa.int64()),
            ("value", pa.float64()),
        ]
    )


def row(ty: int, t_now: int, n_open: int, key: Any, win_start: int, cnt: int = 1) -> dict[str, Any]:
    """A row with filler state; ``seq`` and ``ts`` are set by :func:`rows_to_batches`."""
    return {
        "type": ty,
        "t_now": t_now,
        "n_open": n_open,
        "key": key,
        "win_start": win_start,
        "win_end": -1,
        "tau1": win_start,
        "cnt": cnt,
        "sum": float(cnt),
        "min": 1.0,
        "max": 1.0,
        "first_ts": win_start * 10,
        "last_ts": t_now * 10,
        "value": float(cnt),
    }


def rows_to_batches(
    rows: Sequence[dict[str, Any]],
    sizes: Sequence[int] | None = None,
    key_type: pa.DataType | None = None,
) -> list[pa.RecordBatch]:
    """Number the rows (seq dense from 0, ts = 10 * t_now) and cut them into records.

    Returns the records oldest first; pass ``reversed(...)`` to the scan.
    """
    schema = output_schema(key_type)
    full = [dict(r, seq=i, ts=r["t_now"] * 10) for i, r in enumerate(rows)]
    sizes = list(sizes) if sizes is not None else [len(full)]
    out: list[pa.RecordBatch] = []
    pos = 0
    for size in sizes:
        part = full[pos : pos + size]
        pos += size
        out.append(pa.RecordBatch.from_pylist(part, schema=schema))
    if pos < len(full):
        out.append(pa.RecordBatch.from_pylist(full[pos:], schema=schema))
    return out


@dataclass
class Model:
    """Count windows (size, slide) per key; random G_checks at tuple boundaries."""

    size: int
    slide: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    # window id -> count; key -> tuples seen
    open: dict[tuple[Any, int], int] = field(default_factory=dict)
    seen: dict[Any, int] = field(default_factory=dict)
    # After each row: the open windows and the index of each one's newest G row.
    truth: list[dict[tuple[Any, int], int]] = field(default_factory=list)
    latest: dict[tuple[Any, int], int] = field(default_factory=dict)

    def _emit(self, r: dict[str, Any]) -> None:
        self.rows.append(r)
        w = (r["key"], r["win_start"])
        if r["type"] == R:
            self.latest.pop(w, None)
        else:
            self.latest[w] = len(self.rows) - 1
        self.truth.append(dict(self.latest))

    def feed(self, seq: int, key: Any, rng: random.Random, check_p: float) -> None:
        k = self.seen.get(key, 0)
        self.seen[key] = k + 1
        # The key's windows in win_start order; the one p opens has the largest start.
        for w in sorted(w for w in self.open if w[0] == key):
            self.open[w] += 1
            if self.open[w] == self.size:
                del self.open[w]
                self._emit(row(R, seq, len(self.open), key, w[1], self.size))
        if k % self.slide == 0:
            self.open[(key, seq)] = 1
            self._emit(row(GO, seq, len(self.open), key, seq, 1))
        if self.open and rng.random() < check_p:
            for w in rng.sample(sorted(self.open), k=min(len(self.open), rng.randint(1, 3))):
                self._emit(row(GC, seq, len(self.open), w[0], w[1], self.open[w]))


def simulate(n: int, keys: int, size: int, slide: int, seed: int, check_p: float = 0.1) -> Model:
    rng = random.Random(seed)
    m = Model(size, slide)
    for seq in range(n):
        m.feed(seq * 2 + 1, rng.randrange(keys), rng, check_p)  # sparse input seq
    return m
