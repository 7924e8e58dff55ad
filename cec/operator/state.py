"""Snapshots of an operator's state, for tests, recovery checks and inspection.

:class:`OperatorState` is frozen and compares by value: two operators that went
through the same states give equal snapshots, whichever implementation they are.
It holds ``N`` (open windows), ``t_now`` and, per window id ``(key, win_start)``, a
:class:`WindowSnapshot` with ``tau1``, ``tau2`` (footprint input position), the
footprint's output seq ``fp_seq`` and the partial aggregate. The windows' order by
footprint (oldest first) is the order of ``(fp_seq, tau2)``.

:func:`ec_from_output` builds the eventual checkpoint a recovery would find: for every
open window of a snapshot, the output row of its latest footprint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import UsageError
from cec.window_state import FIELDS, declares

WindowId = tuple[int | str, int]


@declares(FIELDS, first=("key",))
@dataclass(frozen=True)
class WindowSnapshot:
    """One open window: its key, then its state, :data:`cec.window_state.FIELDS` (its
    identity, footprint and partial aggregate; checked when the class is made)."""

    key: int | str
    win_start: int
    win_end: int
    tau1: int
    tau2: int
    fp_seq: int
    cnt: int
    sum: float
    min: float
    max: float
    first_ts: int
    last_ts: int

    @property
    def id(self) -> WindowId:
        return (self.key, self.win_start)


@dataclass(frozen=True)
class OperatorState:
    """The full state of an operator at a batch boundary (comparable by value)."""

    n_open: int
    t_now: int | None
    next_out_seq: int
    windows: Mapping[WindowId, WindowSnapshot]

    def oldest_first(self) -> list[WindowSnapshot]:
        """Open windows ordered by footprint, oldest first."""
        return sorted(self.windows.values(), key=lambda w: (w.fp_seq, w.tau2, w.win_start))

    @property
    def q(self) -> int:
        """Extent: output records from the oldest footprint to now (0 without one)."""
        fps = [w.fp_seq for w in self.windows.values() if w.fp_seq >= 0]
        return self.next_out_seq - min(fps) if fps else 0

    @property
    def u(self) -> int:
        """Replay length: input positions after the oldest footprint (0 without windows)."""
        if not self.windows or self.t_now is None:
            return 0
        return self.t_now - min(w.tau2 for w in self.windows.values())


def ec_rows(ec: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """EC rows in exactly the output ``schema`` (columns picked by name, then cast)."""
    table = ec if isinstance(ec, pa.Table) else pa.Table.from_batches([ec])
    missing = [n for n in schema.names if n not in table.schema.names]
    if missing:
        raise UsageError(f"EC rows lack the output columns {missing}")
    table = table.select(schema.names)
    if table.schema != schema:
        try:
            table = table.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UsageError(f"EC rows do not fit the output schema: {exc}") from exc
    return table


def ec_from_output(
    outputs: Iterable[pa.RecordBatch] | pa.Table, state: OperatorState
) -> pa.Table:
    """The EC rows of ``state``: each open window's latest footprint row from ``outputs``.

    ``outputs`` is the operator's output log up to the snapshot (any order). The rows
    come back ordered by their output seq, as a backward scan would find them.
    """
    table = outputs if isinstance(outputs, pa.Table) else pa.Table.from_batches(list(outputs))
    want = sorted(w.fp_seq for w in state.windows.values())
    if len(want) != len(state.windows) or (want and want[0] < 0):
        raise ValueError("state has windows without a footprint (policy mode 'none'?)")
    mask = pc.is_in(table.column("seq"), value_set=pa.array(want, type=pa.int64()))
    ec = table.filter(mask).sort_by("seq")
    if ec.num_rows != len(want):
        raise ValueError(f"found {ec.num_rows} footprint rows for {len(want)} windows")
    return ec
