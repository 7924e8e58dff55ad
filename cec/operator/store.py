"""Columnar storage of the vectorized operator: a key registry and window slots.

:class:`KeyRegistry` maps keys (int64 or string) to dense key indices with a hashed
lookup (``pandas.Index.get_indexer``); new keys get the next indices in order of first
appearance. :class:`WindowSlots` holds every open window as one slot of parallel numpy
arrays (structure of arrays) with a free list, so a batch updates thousands of windows
with a handful of numpy calls. Pure in-memory data, no I/O.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


class KeyRegistry:
    """Dense indices for the keys seen so far.

    Int keys that stay in ``[0, DIRECT_LIMIT)`` (item ids, the usual case) are mapped
    through a direct table (one gather); other keys through a hashed
    ``pandas.Index.get_indexer``. String keys are dictionary-encoded by Arrow first,
    so only the distinct keys of a batch are hashed.
    """

    DIRECT_LIMIT = 1 << 22

    def __init__(self, key_type: str) -> None:
        self.key_type = key_type
        self._n = 0
        self._ints: I64 = np.empty(1024, dtype=np.int64)
        self._strs: npt.NDArray[np.object_] = np.empty(1024, dtype=object)
        self._index: pd.Index | None = None
        self._direct: I64 | None = (
            np.full(1024, -1, dtype=np.int64) if key_type == "int64" else None
        )

    def __len__(self) -> int:
        return self._n

    def _grow(self, need: int) -> None:
        cap = len(self._ints)
        if need <= cap:
            return
        new_cap = max(need, 2 * cap)
        ints = np.empty(new_cap, dtype=np.int64)
        ints[: self._n] = self._ints[: self._n]
        strs = np.empty(new_cap, dtype=object)
        strs[: self._n] = self._strs[: self._n]
        self._ints, self._strs = ints, strs

    def _register(self, new: npt.NDArray[np.generic]) -> None:
        start = self._n
        self._grow(start + len(new))
        if self.key_type == "int64":
            self._ints[start : start + len(new)] = new
        else:
            self._strs[start : start + len(new)] = new
        self._n = start + len(new)
        self._index = None

    def _hashed(self, values: npt.NDArray[np.generic]) -> I64:
        if self._index is None:
            if self.key_type == "int64":
                self._index = pd.Index(self._ints[: self._n].copy())
            else:
                self._index = pd.Index(self._strs[: self._n].copy(), dtype=object)
        idx = np.asarray(self._index.get_indexer(values), dtype=np.int64)
        missing = idx < 0
        if missing.any():
            self._register(pd.unique(values[missing]))
            return self._hashed(values)
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
        dict_idx = self._hashed(
            np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object)
        )
        codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        out: I64 = dict_idx[codes]
        return out

    def values(self, idx: I64) -> pa.Array:
        """The keys of the given indices, as an Arrow array of the key type."""
        if self.key_type == "int64":
            return pa.array(self._ints[idx], type=pa.int64())
        return pa.array(self._strs[idx], type=pa.string())

    def value(self, i: int) -> int | str:
        if self.key_type == "int64":
            return int(self._ints[i])
        return str(self._strs[i])


class WindowSlots:
    """Open windows as slots of parallel arrays, with a free list."""

    INT_FIELDS = ("key_idx", "win_start", "win_end", "tau1", "tau2", "fp_seq", "cnt",
                  "first_ts", "last_ts")
    FLOAT_FIELDS = ("sum", "min", "max")

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self.key_idx: I64 = np.zeros(capacity, dtype=np.int64)
        self.win_start: I64 = np.zeros(capacity, dtype=np.int64)
        self.win_end: I64 = np.zeros(capacity, dtype=np.int64)
        self.tau1: I64 = np.zeros(capacity, dtype=np.int64)
        self.tau2: I64 = np.zeros(capacity, dtype=np.int64)
        self.fp_seq: I64 = np.zeros(capacity, dtype=np.int64)
        self.cnt: I64 = np.zeros(capacity, dtype=np.int64)
        self.first_ts: I64 = np.zeros(capacity, dtype=np.int64)
        self.last_ts: I64 = np.zeros(capacity, dtype=np.int64)
        self.sum: F64 = np.zeros(capacity, dtype=np.float64)
        self.min: F64 = np.zeros(capacity, dtype=np.float64)
        self.max: F64 = np.zeros(capacity, dtype=np.float64)
        self.live = np.zeros(capacity, dtype=np.bool_)
        self._free: I64 = np.arange(capacity - 1, -1, -1, dtype=np.int64)
        self._n_free = capacity
        self.n_live = 0

    def _grow(self, need_free: int) -> None:
        old = self.capacity
        new_cap = max(2 * old, old + need_free - self._n_free + 1024)
        for name in (*self.INT_FIELDS, *self.FLOAT_FIELDS):
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
