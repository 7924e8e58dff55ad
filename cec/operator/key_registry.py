"""The key registry of the vectorized operator: keys to dense key indices.

:class:`KeyRegistry` maps keys (int64 or string) to dense key indices with a hashed
lookup (:class:`~.int_hash.IntHash`) or a direct table; new keys get the next indices
in order of first appearance. Pure in-memory data, no I/O.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import UsageError
from cec.operator.arrays import I32, I64, MAX_INDEX, grown
from cec.operator.int_hash import IntHash


class KeyRegistry:
    """Dense indices for the keys seen so far.

    Int keys that stay in ``[0, DIRECT_LIMIT)`` (item ids, the usual case) are mapped
    through a direct table (one gather); other int keys through a hash table of their
    indices (:class:`~.int_hash.IntHash`, built when the direct table is given up,
    grown as keys come). String keys stay in Arrow: a batch is
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
        self._hash: IntHash | None = None  # the hashed lookup (None: not built)
        #: key value -> key index (int32: key indices stay below MAX_INDEX)
        self._direct: I32 | None = (
            np.full(1024, -1, dtype=np.int32) if key_type == "int64" else None
        )
        self._arrow: pa.Array = pa.array([], type=pa.string())

    def __len__(self) -> int:
        return self._n

    @staticmethod
    def _check_count(n: int) -> None:
        if n > MAX_INDEX:
            raise UsageError(f"{n:,} distinct keys held by one operator task, over its "
                             f"limit of {MAX_INDEX:,} (key indices are 32-bit): give the "
                             "run more partitions (--partitions)")

    def _register(self, new: I64) -> None:
        """Append new int keys (indices ``n, n+1, ...`` in the given order)."""
        start = self._n
        need = start + len(new)
        self._check_count(need)
        if need > len(self._ints):
            ints = np.empty(grown(len(self._ints), need), dtype=np.int64)
            ints[:start] = self._ints[:start]
            self._ints = ints
        self._ints[start:need] = new
        self._n = need

    def _hashed(self, values: I64) -> I64:
        if self._hash is None:
            self._hash = IntHash.of(self._ints[: self._n])
        idx = self._hash.find(values, self._ints)
        missing = idx < 0
        if missing.any():
            new = np.asarray(pd.unique(values[missing]), dtype=np.int64)
            start = self._n
            self._register(new)
            self._hash.insert(new, np.arange(start, self._n, dtype=np.int64), self._ints)
            idx[missing] = self._hash.find(values[missing], self._ints)
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
            bigger = np.full(min(self.DIRECT_LIMIT, max(hi + 1, 2 * len(table))), -1, np.int32)
            bigger[: len(table)] = table
            self._direct = table = bigger
        idx = table[values]
        missing = idx < 0
        if missing.any():
            new = np.asarray(pd.unique(values[missing]), dtype=np.int64)
            start = self._n
            self._register(new)
            table[new] = np.arange(start, start + len(new), dtype=np.int32)
            idx = table[values]
        return idx.astype(np.int64)

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
            self._check_count(start + len(new))
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
                self._direct[ints[keep]] = np.arange(kept, dtype=np.int32)
            fresh = np.empty(max(1024, grown(kept, kept)), dtype=np.int64)
            fresh[:kept] = ints[keep]
            self._ints = fresh
            self._hash = None  # rebuilt on the next hashed lookup
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

