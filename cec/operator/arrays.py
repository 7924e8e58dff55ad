"""The numpy arrays of the vectorized operator's stores: their types and growth rule.

The key registry (:mod:`.key_registry`), the window slots (:mod:`.slots`), the per-key
index (:mod:`.key_index`) and the footprint order (:mod:`.footprint_order`) hold their
data in numpy arrays that grow as one operator task sees more keys and windows.

Memory (docs/PROFILE.md, "Bytes per open window"): slot numbers and key indices are
32-bit wherever they are stored (a partition holds fewer than 2^31 open windows and
keys; past that a clear :class:`~cec.errors.UsageError`), arrays grow by
:data:`GROWTH` (1.25x) rather than doubling, positions and counts are uint32 until a
value does not fit, and what follows from other fields is not stored
(:class:`~.slot_layout.SlotLayout`).
"""

from __future__ import annotations

import contextlib
import mmap
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]

#: an empty int64 array (the kernels' "no windows"; never written to)
EMPTY_I64: I64 = np.empty(0, dtype=np.int64)

#: the most key indices / slots one operator holds (they are stored as int32)
MAX_INDEX = (1 << 31) - 1

#: arrays grow by 1 + 1 / GROWTH_DIV (1.25x): memory over the live entries is at most
#: 25 % (the doubling it replaces: up to 100 %); copies per entry, amortized, at most 5
GROWTH_DIV = 4
GROWTH = 1 + 1 / GROWTH_DIV


def grown(capacity: int, need: int) -> int:
    """The capacity after a growth of an array of ``capacity`` that must hold ``need``:
    1.25x (:data:`GROWTH`), or ``need`` if that is more."""
    return max(capacity + capacity // GROWTH_DIV, need)


#: Linux's MAP_NORESERVE (the mmap module does not name it): the reservation is not
#: counted against the commit limit, only the pages written are
_MAP_NORESERVE = 0x4000


class Reserved:
    """Arrays that grow in place: each one a view of an anonymous mapping reserved for
    up to ``items`` entries, whose pages the kernel backs only once they are written.

    A growth is then a longer view of the same pages: no copy, no old array beside the
    new one, no unwritten slack counted as memory (the resident part is the entries
    used, to the page). Measured on the memory benchmark's input (docs/PROFILE.md,
    "The peak memory, again"). An array that outgrows its reservation is copied into
    a new one twice its need; where no reservation can be made (no ``mmap`` with these
    flags, a strict commit limit, an address-space limit such as the one
    ``spark.executor.pyspark.memory`` sets) into a zeroed numpy array, as before.
    """

    def __init__(self, items: int) -> None:
        self.items = max(1024, min(items, MAX_INDEX + 1))
        self._maps: dict[str, mmap.mmap] = {}

    def new(self, name: str, dtype: npt.DTypeLike, capacity: int) -> npt.NDArray[Any]:
        """A zeroed array ``name`` of ``capacity`` entries (a new reservation)."""
        self._maps.pop(name, None)
        dt = np.dtype(dtype)
        room = max(self.items, 2 * capacity)  # an outgrown one: twice its need
        try:
            mm = mmap.mmap(-1, room * dt.itemsize,
                           flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
        except (OSError, ValueError, OverflowError, AttributeError):
            return np.zeros(capacity, dtype=dt)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):  # a huge page would back 2 MiB at a touch
            with contextlib.suppress(OSError):
                mm.madvise(mmap.MADV_NOHUGEPAGE)
        self._maps[name] = mm
        return np.frombuffer(mm, dtype=dt, count=capacity)

    def grow(self, name: str, arr: npt.NDArray[Any], capacity: int) -> npt.NDArray[Any]:
        """Array ``name`` (now ``arr``, its first entries kept) with ``capacity``
        entries, the new ones zero: in place within its reservation, else copied."""
        if self.in_place(name, capacity, arr.dtype.itemsize):
            return np.frombuffer(self._maps[name], dtype=arr.dtype, count=capacity)
        bigger = self.new(name, arr.dtype, capacity)
        bigger[: len(arr)] = arr
        return bigger

    def in_place(self, name: str, capacity: int, itemsize: int) -> bool:
        """Whether array ``name`` grows to ``capacity`` entries without a copy."""
        mm = self._maps.get(name)
        return mm is not None and capacity * itemsize <= len(mm)
