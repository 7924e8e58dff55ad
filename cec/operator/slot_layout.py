"""What the window slots store per window kind, and how positions are held.

:class:`SlotLayout` says which fields of a window's state follow from others and are
therefore not stored (:func:`slot_layout` picks it from the window spec);
:data:`SEQ_FIELDS` are the positions held as ``value + 1`` in uint32 until a value does
not fit (:func:`seq_fits`). The arrays themselves: :class:`~.slots.WindowSlots`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cec.operator.arrays import I64, MAX_INDEX
from cec.windows import CountWindow, SessionWindow, WindowSpec


@dataclass(frozen=True)
class SlotLayout:
    """What the slots store of fields that follow from others, per window kind.

    * ``win_end``: time windows end ``size`` after they start (``win_end = win_start +
      size``, :attr:`end_offset`), count windows have ``win_end = -1``
      (:attr:`end_constant`): neither stores it (8 bytes per window less); session
      windows' ends move with their last tuple and are stored;
    * ``first_ts``, ``last_ts`` (:attr:`ts_from_start`): a time window's tuples have
      ``win_start <= ts < win_end``, so with ``size < 2^31`` microseconds (35 minutes)
      both are int32 offsets from ``win_start`` (8 bytes per window less).
    """

    #: ``win_end = win_start + end_offset`` (time windows: the size)
    end_offset: int | None = None
    #: ``win_end = end_constant`` (count windows: -1)
    end_constant: int | None = None
    #: ``first_ts``/``last_ts`` are held as int32 ``ts - win_start``
    ts_from_start: bool = False
    #: ``first_ts = win_start`` (sessions: a session starts at its first tuple), so an
    #: untracked ``first_ts`` reads as ``win_start``
    first_is_start: bool = False

    @property
    def end_stored(self) -> bool:
        return self.end_offset is None and self.end_constant is None


#: every field stored as itself (sessions; slots made without a window kind)
STORED = SlotLayout()

#: held as int32 offsets from ``win_start`` when :attr:`SlotLayout.ts_from_start`
TS_FIELDS = ("first_ts", "last_ts")
#: input and output positions: held as ``value + 1`` in uint32 (so ``fp_seq = -1``,
#: no footprint, is 0) while every value written is in ``[-1, 2^32 - 2]``; the first
#: value outside widens the array to int64 for good (:meth:`~.slots.WindowSlots.set_seqs`)
SEQ_FIELDS = ("tau1", "tau2", "fp_seq")
U32_MAX = (1 << 32) - 1


def seq_fits(values: I64 | int, dtype: np.dtype[np.generic]) -> bool:
    """Whether ``values + 1`` fit an array of ``dtype`` (uint32 or int64)."""
    if dtype != np.uint32:
        return True
    v = np.asarray(values)
    return v.size == 0 or (int(v.min()) >= -1 and int(v.max()) <= U32_MAX - 1)


def slot_layout(spec: WindowSpec) -> SlotLayout:
    """What the slots store of a window kind: time windows derive ``win_end``
    (``win_start + size``) and hold ``first_ts``/``last_ts`` as int32 offsets from
    ``win_start`` (if ``size`` fits), count windows derive ``win_end`` (-1), sessions
    store every field."""
    if isinstance(spec, CountWindow):
        return SlotLayout(end_constant=-1)
    if isinstance(spec, SessionWindow):
        return SlotLayout(first_is_start=True)
    return SlotLayout(end_offset=spec.size_us, ts_from_start=spec.size_us <= MAX_INDEX)
