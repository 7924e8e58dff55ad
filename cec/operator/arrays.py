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

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]

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
