"""What the LMDB index stores, and its byte encoding: where a committed record lives
(:class:`Entry`), the committed end of the log (:class:`Committed`), and what a reader
reads in one transaction (:class:`Snapshot`). :mod:`storage_log.index` re-exports them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

ENTRY = struct.Struct("<qQIqqqqII")
COMMITTED = struct.Struct("<qQqqQBI")
_EPOCH_BITS = 24  # storage_log.segment.EPOCH_BITS (segment ids: base << 24 | epoch)
_EPOCH_MASK = (1 << _EPOCH_BITS) - 1


def _split(sid: int) -> tuple[int, int]:
    return (-1, 0) if sid < 0 else (sid >> _EPOCH_BITS, sid & _EPOCH_MASK)


def _join(base: int, epoch: int) -> int:
    return -1 if base < 0 else (base << _EPOCH_BITS) | epoch


class Entry(NamedTuple):
    """Where one committed record lives (``segment``: the segment id)."""

    segment: int
    offset: int
    size: int
    first_seq: int
    last_seq: int
    first_ts: int
    last_ts: int
    rows: int

    def encode(self) -> bytes:
        base, epoch = _split(self.segment)
        return ENTRY.pack(base, *self[1:], epoch)

    @classmethod
    def decode(cls, data: bytes) -> Entry:
        base, *rest, epoch = ENTRY.unpack(data)
        return cls(_join(base, epoch), *rest)


@dataclass(frozen=True)
class Committed:
    """The committed end of the log."""

    segment: int
    end: int
    last_seq: int | None
    last_ts: int | None
    records: int

    def encode(self) -> bytes:
        has = self.last_seq is not None
        base, epoch = _split(self.segment)
        return COMMITTED.pack(base, self.end, self.last_seq if has else -1,
                              self.last_ts if self.last_ts is not None else 0,
                              self.records, 1 if has else 0, epoch)

    @classmethod
    def decode(cls, data: bytes) -> Committed:
        base, end, last_seq, last_ts, records, has, epoch = COMMITTED.unpack(data)
        seg = _join(base, epoch)
        if not has:
            return cls(seg, end, None, None, records)
        return cls(seg, end, last_seq, last_ts, records)

    @property
    def position(self) -> tuple[int, int]:
        """(segment id, end): commit points compare in chain order."""
        return (self.segment, self.end)


EMPTY = Committed(-1, 0, None, None, 0)


@dataclass(frozen=True)
class Snapshot:
    """Everything a reader needs, read in one transaction."""

    committed: Committed
    first_seq: int | None
    schema: bytes | None
    token: bytes | None
    sealed: bool
    trimmed: int | None
