"""The result of EC reconstruction: the eventual checkpoint and its extent metrics.

Plain frozen data (JSON through ``to_dict``); :mod:`recovery.ec` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cec import records

TYPE_R = records.R
TYPE_G_OPEN = records.G_OPEN
TYPE_G_CHECK = records.G_CHECK
TYPE_G_OPEN_R = records.G_OPEN_R  # a G_open and its R in one row (cec.records)

#: The row types of an output log (an input stream's ``data`` is not one).
TYPE_NAMES = {t: records.TYPE_NAMES[t]
              for t in (TYPE_R, TYPE_G_OPEN, TYPE_G_CHECK, TYPE_G_OPEN_R)}

#: How many of the oldest footprints the extent metrics list.
OLDEST_LISTED = 5


@dataclass(frozen=True)
class Footprint:
    """One window's latest checkpoint in the EC, as the extent metrics list it."""

    key: Any
    win_start: int
    kind: str  # "G_open" or "G_check"
    t_w: int  # input position of the footprint (the row's t_now)
    out_seq: int  # output position of the footprint row
    age: int  # t_c - t_w, in input positions (= input tuples when seq is dense)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "win_start": self.win_start,
            "kind": self.kind,
            "t_w": self.t_w,
            "out_seq": self.out_seq,
            "age": self.age,
        }


@dataclass(frozen=True)
class ExtentMetrics:
    """What the backward scan went through.

    ``records`` is the extent size ``q``: output rows from the oldest footprint up to
    and including the start row (``last_out_seq - oldest out_seq + 1``); 1 for
    ``N_c = 0``. ``batches`` and ``bytes`` count the log records (stream events) the
    scan decoded and their in-memory Arrow size, including rows decoded past the stop
    point inside the last record. ``replay_length`` is ``u = t_c - T`` in input
    positions.
    """

    records: int
    batches: int
    bytes: int
    windows_found: int
    g_open_found: int
    g_check_found: int
    closed_skipped: int
    replay_length: int
    oldest: tuple[Footprint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "batches": self.batches,
            "bytes": self.bytes,
            "windows_found": self.windows_found,
            "g_open_found": self.g_open_found,
            "g_check_found": self.g_check_found,
            "closed_skipped": self.closed_skipped,
            "replay_length": self.replay_length,
            "oldest": [f.to_dict() for f in self.oldest],
        }


@dataclass(frozen=True)
class EventualCheckpoint:
    """The EC at output position ``last_out_seq`` (input position ``t_c``).

    ``table`` holds the ``N_c`` footprint rows (G_open/G_check, the log's own schema),
    in output order (ascending ``seq``). ``T`` is the replay start: the upstream must
    replay every input tuple with ``seq > T``.
    """

    table: pa.Table
    n_c: int
    t_c: int
    t_c_ts: int
    T: int
    last_out_seq: int
    extent: ExtentMetrics = field(repr=False)

    @property
    def next_out_seq(self) -> int:
        return self.last_out_seq + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_c": self.n_c,
            "t_c": self.t_c,
            "t_c_ts": self.t_c_ts,
            "T": self.T,
            "last_out_seq": self.last_out_seq,
            "next_out_seq": self.next_out_seq,
            "extent": self.extent.to_dict(),
        }


@dataclass(frozen=True)
class NothingToRecover:
    """The scanned log holds no output row (at or before the requested position).

    The operator never emitted anything, so it never had an open window: recovery is
    a fresh start from the beginning of the input. ``schema`` is the log's schema if
    any record (even an empty one) was seen.
    """

    reason: str
    schema: pa.Schema | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"nothing_to_recover": True, "reason": self.reason}


Reconstruction = EventualCheckpoint | NothingToRecover
