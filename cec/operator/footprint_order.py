"""The open windows of the vectorized operator in footprint order.

:class:`FootprintOrder` keeps the open windows ordered by footprint for the background
step (:mod:`.background`). Pure in-memory data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from cec.operator.arrays import I32, I64, grown
from cec.operator.slot_layout import seq_fits
from cec.operator.slots import WindowSlots


class FootprintOrder:
    """The open windows ordered by footprint, kept incrementally (lazy deletion).

    The background step needs the window with the oldest footprint at every input batch,
    and the few oldest when it emits ``G_check`` rows; a scan of all open windows per
    batch costs as much as the batch itself. A footprint's seq is the output seq of the
    ``G_open``/``G_check`` row that wrote it, and output seqs only grow, so appending
    ``(fp_seq, slot)`` whenever a footprint is written keeps this queue sorted. An entry
    is *current* while its slot is live and still holds that footprint
    (``slots.fp_seq[slot] == fp``); entries of closed windows and of moved footprints
    are stale and skipped, and the stale ones before the first current entry are
    dropped for good (a stale entry never becomes current again: that would need the
    same footprint seq written twice). The current entries, in queue order, are the
    open windows ordered by ``(fp_seq, tau2, win_start)`` (the reference's order).

    If a footprint is ever appended that is not newer than the last one (only possible
    with an inconsistent EC), the queue is rebuilt by one sort of the open windows, so
    the order stays exact. Memory: stale entries are filtered out when the buffer is
    full and more than half of it is stale, so it stays O(open windows + one batch).
    Pure in-memory data, no I/O.
    """

    def __init__(self, capacity: int = 1024, slack: int = 1024) -> None:
        self._slack = slack  # stale entries tolerated beyond 2x the open windows
        #: footprint seqs as the slots hold them (``fp_seq + 1``, uint32 until a value
        #: does not fit, then int64), so entries compare with ``slots.fp_seq`` as they are
        self._fp: npt.NDArray[np.uint32] | I64 = np.empty(capacity, dtype=np.uint32)
        self._slot: I32 = np.empty(capacity, dtype=np.int32)
        self._head = 0
        self._tail = 0
        self._last: int | None = None

    def __len__(self) -> int:
        """Entries held, current or stale (for tests and inspection)."""
        return self._tail - self._head

    def _current(self, sl: WindowSlots, lo: int, hi: int) -> npt.NDArray[np.bool_]:
        s = self._slot[lo:hi]
        out: npt.NDArray[np.bool_] = sl.live[s] & (sl.fp_seq[s] == self._fp[lo:hi])
        return out

    def _reserve(self, sl: WindowSlots, k: int) -> None:
        if self._tail + k <= len(self._fp):
            return
        h, t = self._head, self._tail
        if t - h > 2 * sl.n_live + self._slack:  # mostly stale: keep the current ones
            keep = h + np.flatnonzero(self._current(sl, h, t))
            fp, slot = self._fp[keep], self._slot[keep]
        else:
            fp, slot = self._fp[h:t], self._slot[h:t]
        n = len(fp)
        cap = len(self._fp)
        if n + k > cap:
            cap = grown(cap, n + k)
            self._fp = np.empty(cap, dtype=self._fp.dtype)
            self._slot = np.empty(cap, dtype=np.int32)
        self._fp[:n] = fp  # a move down within the buffer: numpy copies overlaps safely
        self._slot[:n] = slot
        self._head, self._tail = 0, n

    def push(self, sl: WindowSlots, fps: I64, slots: I64) -> None:
        """Footprints just written: ``fps`` (increasing) into ``slots``."""
        k = len(fps)
        if k == 0:
            return
        if self._last is not None and int(fps[0]) <= self._last:
            self.rebuild(sl)
            return
        if not seq_fits(fps, self._fp.dtype):
            self._fp = self._fp.astype(np.int64)
        self._reserve(sl, k)
        self._fp[self._tail : self._tail + k] = fps + 1
        self._slot[self._tail : self._tail + k] = slots
        self._tail += k
        self._last = int(fps[-1])

    def rebuild(self, sl: WindowSlots) -> None:
        """Reorder from scratch: every open window by ``(fp_seq, tau2, win_start)``."""
        live = sl.live_slots()
        order = np.lexsort((sl.win_start[live], sl.seqs("tau2", live), sl.seqs("fp_seq", live)))
        slot = live[order]
        n = len(slot)
        cap = max(16, grown(n, n))
        self._fp = np.empty(cap, dtype=sl.fp_seq.dtype)
        self._slot = np.empty(cap, dtype=np.int32)
        self._fp[:n] = sl.fp_seq[slot]  # both hold fp_seq + 1
        self._slot[:n] = slot
        self._head, self._tail = 0, n
        self._last = int(self._fp[n - 1]) - 1 if n else None

    def front(self, sl: WindowSlots) -> int:
        """The slot of the window with the oldest footprint, or -1 if none is open."""
        h = self._head
        if h < self._tail:  # usually the front entry is current: scalar reads only
            s = int(self._slot[h])
            if sl.live[s] and sl.fp_seq[s] == self._fp[h]:
                return s
        step = 64
        while self._head < self._tail:
            hi = min(self._tail, self._head + step)
            cur = self._current(sl, self._head, hi)
            i = int(np.argmax(cur))
            if cur[i]:
                self._head += i
                return int(self._slot[self._head])
            self._head = hi
            step *= 4
        return -1

    def walk(self, sl: WindowSlots, k: int) -> Iterator[tuple[I64, I64]]:
        """Up to ``k`` open windows, oldest footprint first, in chunks.

        Yields ``(slots, positions)``: the current entries' slots and their queue
        positions (for :meth:`drop_through`). The order must not change while walking.
        """
        lo, left, step = self._head, k, 256
        while left > 0 and lo < self._tail:
            hi = min(self._tail, lo + step)
            pos = lo + np.flatnonzero(self._current(sl, lo, hi))[:left]
            if len(pos):
                left -= len(pos)
                yield self._slot[pos].astype(np.int64), pos
            lo = hi
            step *= 4

    def drop_through(self, pos: int) -> None:
        """Forget the entries up to queue position ``pos`` (all stale by now)."""
        self._head = max(self._head, pos + 1)

