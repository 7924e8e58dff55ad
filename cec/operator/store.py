"""Columnar storage of the vectorized operator: a key registry and window slots.

:class:`KeyRegistry` maps keys (int64 or string) to dense key indices with a hashed
lookup (``pandas.Index.get_indexer``); new keys get the next indices in order of first
appearance. :class:`WindowSlots` holds every open window as one slot of parallel numpy
arrays (structure of arrays) with a free list, so a batch updates thousands of windows
with a handful of numpy calls. :class:`FootprintOrder` keeps the open windows ordered by
footprint for the background step. Pure in-memory data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cec.operator.memory import WindowMemory
from cec.window_state import FIELDS, declares

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class KeyRegistry:
    """Dense indices for the keys seen so far.

    Int keys that stay in ``[0, DIRECT_LIMIT)`` (item ids, the usual case) are mapped
    through a direct table (one gather); other int keys through a hashed
    ``pandas.Index.get_indexer``. String keys stay in Arrow: a batch is
    dictionary-encoded, its distinct keys are found in the registry (an Arrow string
    array) with ``pyarrow.compute.index_in``, and output keys are an Arrow ``take``, so
    no Python string objects are made on the hot path. :meth:`compact` forgets keys
    (the operator drops the keys without open windows).
    """

    DIRECT_LIMIT = 1 << 22

    def __init__(self, key_type: str) -> None:
        self.key_type = key_type
        self._n = 0
        self._ints: I64 = np.empty(1024, dtype=np.int64)
        self._index: pd.Index | None = None
        self._direct: I64 | None = (
            np.full(1024, -1, dtype=np.int64) if key_type == "int64" else None
        )
        self._arrow: pa.Array = pa.array([], type=pa.string())

    def __len__(self) -> int:
        return self._n

    def _register(self, new: I64) -> None:
        """Append new int keys (indices ``n, n+1, ...`` in the given order)."""
        start = self._n
        need = start + len(new)
        if need > len(self._ints):
            ints = np.empty(max(need, 2 * len(self._ints)), dtype=np.int64)
            ints[:start] = self._ints[:start]
            self._ints = ints
        self._ints[start:need] = new
        self._n = need
        self._index = None

    def _hashed(self, values: I64) -> I64:
        if self._index is None:
            self._index = pd.Index(self._ints[: self._n].copy())
        idx = np.asarray(self._index.get_indexer(values), dtype=np.int64)
        missing = idx < 0
        if missing.any():
            new = np.asarray(pd.unique(values[missing]), dtype=np.int64)
            start = self._n
            self._register(new)
            idx[missing] = start + np.asarray(pd.Index(new).get_indexer(values[missing]))
        return idx

    def _direct_map(self, values: I64) -> I64 | None:
        table = self._direct
        if table is None:
            return None
        lo, hi = int(values.min()), int(values.max())
        if lo < 0 or hi >= self.DIRECT_LIMIT:
            self._direct = None  # keys outside the table's range: hash from now on
            return None
        if hi >= len(table):
            grown = np.full(min(self.DIRECT_LIMIT, max(hi + 1, 2 * len(table))), -1, np.int64)
            grown[: len(table)] = table
            self._direct = table = grown
        idx: I64 = table[values]
        missing = idx < 0
        if missing.any():
            new = np.asarray(pd.unique(values[missing]), dtype=np.int64)
            start = self._n
            self._register(new)
            table[new] = np.arange(start, start + len(new), dtype=np.int64)
            idx = table[values]
        return idx

    def lookup(self, keys: pa.Array) -> I64:
        """Key indices of an Arrow key column (registers new keys)."""
        if len(keys) == 0:
            return np.empty(0, dtype=np.int64)
        if self.key_type == "int64":
            values = np.asarray(keys.to_numpy(zero_copy_only=False), dtype=np.int64)
            direct = self._direct_map(values)
            return direct if direct is not None else self._hashed(values)
        enc = pc.dictionary_encode(keys)
        if isinstance(enc, pa.ChunkedArray):  # pragma: no cover - arrays stay arrays
            enc = enc.combine_chunks()
        distinct = enc.dictionary
        pos = pc.fill_null(pc.index_in(distinct, value_set=self._arrow), -1)
        dict_idx = np.asarray(pos.to_numpy(zero_copy_only=False), dtype=np.int64)
        missing = dict_idx < 0
        if missing.any():
            new = distinct.filter(pa.array(missing))  # distinct, in order of appearance
            start = self._n
            self._arrow = pa.concat_arrays([self._arrow, new])
            self._n = start + len(new)
            dict_idx[missing] = np.arange(start, self._n, dtype=np.int64)
        codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        out: I64 = dict_idx[codes]
        return out

    def compact(self, keep: npt.NDArray[np.bool_]) -> None:
        """Forget the keys with ``keep[i]`` false; the kept ones become ``0, 1, ...``.

        ``keep`` has one entry per registered key. Kept keys stay in their relative
        order (so indices still follow first appearance among them); a forgotten key
        that comes back later is registered anew, like a key never seen. O(keys held).
        The caller renumbers everything it indexes by key (``cumsum(keep) - 1``).
        """
        n = self._n
        if len(keep) != n:
            raise ValueError(f"keep mask of {len(keep)} entries for {n} keys")
        kept = int(np.count_nonzero(keep))
        if self.key_type == "int64":
            ints = self._ints[:n]
            if self._direct is not None:
                self._direct[ints] = -1  # every registered key is in the table's range
                self._direct[ints[keep]] = np.arange(kept, dtype=np.int64)
            fresh = np.empty(max(1024, 2 * kept), dtype=np.int64)
            fresh[:kept] = ints[keep]
            self._ints = fresh
            self._index = None  # rebuilt on the next hashed lookup
        else:
            self._arrow = self._arrow.filter(pa.array(keep, type=pa.bool_()))
        self._n = kept

    def values(self, idx: I64) -> pa.Array:
        """The keys of the given indices, as an Arrow array of the key type."""
        if self.key_type == "int64":
            return pa.array(self._ints[idx], type=pa.int64())
        return pc.take(self._arrow, pa.array(idx, type=pa.int64()))

    def value(self, i: int) -> int | str:
        if self.key_type == "int64":
            return int(self._ints[i])
        return str(self._arrow[i].as_py())


@declares(FIELDS, first=("key_idx",), form="array")
class WindowSlots:
    """Open windows as slots of parallel arrays, with a free list.

    One array per field of a window's state (:data:`cec.window_state.FIELDS`, of its
    numpy type; checked when the class is made), plus ``key_idx``, the window's key
    index in the :class:`KeyRegistry`, and ``live``.
    """

    key_idx: I64
    win_start: I64
    win_end: I64
    tau1: I64
    tau2: I64
    fp_seq: I64
    cnt: I64
    sum: F64
    min: F64
    max: F64
    first_ts: I64
    last_ts: I64

    #: every array but ``live``, and its numpy type
    ARRAYS = (("key_idx", np.int64), *((f.name, f.dtype) for f in FIELDS))

    def __init__(self, capacity: int = 1024, memory: WindowMemory | None = None) -> None:
        self.capacity = capacity
        self.memory = memory  # checked before every growth (None: no limit)
        for name, dtype in self.ARRAYS:
            setattr(self, name, np.zeros(capacity, dtype=dtype))
        self.live = np.zeros(capacity, dtype=np.bool_)
        self._free: I64 = np.arange(capacity - 1, -1, -1, dtype=np.int64)
        self._n_free = capacity
        self.n_live = 0

    @classmethod
    def slot_bytes(cls) -> int:
        """Bytes per slot: every array, ``live`` and the slot's free-list entry."""
        return sum(np.dtype(t).itemsize for _, t in cls.ARRAYS) + 1 + 8

    def _grow(self, need_free: int) -> None:
        old = self.capacity
        new_cap = max(2 * old, old + need_free - self._n_free + 1024)
        if self.memory is not None:
            self.memory.check(self.n_live + need_free, old, new_cap, self.slot_bytes())
        for name, _ in self.ARRAYS:
            arr = getattr(self, name)
            grown = np.zeros(new_cap, dtype=arr.dtype)
            grown[:old] = arr
            setattr(self, name, grown)
        live = np.zeros(new_cap, dtype=np.bool_)
        live[:old] = self.live
        self.live = live
        added = np.arange(new_cap - 1, old - 1, -1, dtype=np.int64)
        # keep the stack order: pop from the end, so old free slots are reused first
        self._free = np.concatenate([added, self._free[: self._n_free]])
        self._n_free = len(self._free)
        self.capacity = new_cap

    def alloc(self, n: int) -> I64:
        """``n`` fresh slots (marked live; fields to be initialised by the caller)."""
        if n > self._n_free:
            self._grow(n)
        slots = self._free[self._n_free - n : self._n_free][::-1].copy()
        self._n_free -= n
        self.live[slots] = True
        self.n_live += n
        return slots

    def release(self, slots: I64) -> None:
        """Return slots to the free list."""
        n = len(slots)
        if n == 0:
            return
        self.live[slots] = False
        self.n_live -= n
        if self._n_free + n > len(self._free):
            self._free = np.concatenate([self._free[: self._n_free], np.empty(n, np.int64)])
        self._free[self._n_free : self._n_free + n] = slots[::-1]
        self._n_free += n

    def live_slots(self) -> I64:
        return np.flatnonzero(self.live).astype(np.int64, copy=False)

    def open(self, slots: I64, key_idx: I64, win_start: I64, win_end: I64 | int,
             seq: I64, ts: I64) -> None:
        """Initialise freshly allocated ``slots`` as empty windows opened by tuple ``seq``.

        ``tau1 = tau2 = seq``, no footprint yet (``fp_seq = -1``), an empty aggregate;
        the opening tuple itself is added by :meth:`accumulate` like every other one.
        """
        self.key_idx[slots] = key_idx
        self.win_start[slots] = win_start
        self.win_end[slots] = win_end
        self.tau1[slots] = seq
        self.tau2[slots] = seq
        self.fp_seq[slots] = -1
        self.cnt[slots] = 0
        self.sum[slots] = 0.0
        self.min[slots] = np.inf
        self.max[slots] = -np.inf
        self.first_ts[slots] = ts
        self.last_ts[slots] = ts

    def accumulate(self, slots: I64, values: F64, ts: I64) -> None:
        """Add tuple ``i`` (``values[i]``, ``ts[i]``) to window ``slots[i]``, for every ``i``.

        Unbuffered ``ufunc.at`` in the given (input) order, so float sums are
        bit-identical to the reference's sequential additions.
        """
        np.add.at(self.cnt, slots, 1)
        np.add.at(self.sum, slots, values)
        np.minimum.at(self.min, slots, values)
        np.maximum.at(self.max, slots, values)
        np.maximum.at(self.last_ts, slots, ts)


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
        self._fp: I64 = np.empty(capacity, dtype=np.int64)
        self._slot: I64 = np.empty(capacity, dtype=np.int64)
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
            cap = max(2 * cap, n + k)
            self._fp = np.empty(cap, dtype=np.int64)
            self._slot = np.empty(cap, dtype=np.int64)
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
        self._reserve(sl, k)
        self._fp[self._tail : self._tail + k] = fps
        self._slot[self._tail : self._tail + k] = slots
        self._tail += k
        self._last = int(fps[-1])

    def rebuild(self, sl: WindowSlots) -> None:
        """Reorder from scratch: every open window by ``(fp_seq, tau2, win_start)``."""
        live = sl.live_slots()
        order = np.lexsort((sl.win_start[live], sl.tau2[live], sl.fp_seq[live]))
        slot = live[order]
        n = len(slot)
        cap = max(16, 2 * n)
        self._fp = np.empty(cap, dtype=np.int64)
        self._slot = np.empty(cap, dtype=np.int64)
        self._fp[:n] = sl.fp_seq[slot]
        self._slot[:n] = slot
        self._head, self._tail = 0, n
        self._last = int(self._fp[n - 1]) if n else None

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
                yield self._slot[pos], pos
            lo = hi
            step *= 4

    def drop_through(self, pos: int) -> None:
        """Forget the entries up to queue position ``pos`` (all stale by now)."""
        self._head = max(self._head, pos + 1)
