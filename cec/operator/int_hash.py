"""An int64 -> dense index hash table in numpy, for the key registry's hashed keys.

:class:`IntHash` is open addressing with linear probing over an int32 table (``-1``:
empty) whose capacity is a power of two, at most :data:`MAX_LOAD` full: each entry is
the index of a key in an array the caller owns (the registry's keys, in order of first
appearance), so a key is stored once. Lookups and inserts are vectorized: one round of
gathers per probe step, over the keys not yet resolved. Keys are never deleted (the
registry's compaction builds a new table). The slot of a key is Fibonacci hashing, the
high bits of ``key * 0x9E3779B97F4A7C15`` (mod 2^64).

It replaces a ``pandas.Index`` rebuilt after every batch that brought a new key: at
1.25 M keys that index and its hash table held about 40 MB (32 bytes a key) and were
rebuilt whole, where this table holds 4 to 8 bytes a key and grows by rehashing only
when it passes its load. Pure: no I/O.
"""

from __future__ import annotations

import numpy as np

from cec.operator.arrays import I64

__all__ = ["MAX_LOAD", "IntHash"]

#: the most entries per table slot before the table doubles
MAX_LOAD = 0.7
_MULT = np.uint64(0x9E3779B97F4A7C15)
_MIN_BITS = 10


class IntHash:
    """Positions of int64 keys in the caller's ``keys`` array (see the module docstring)."""

    def __init__(self, bits: int = _MIN_BITS) -> None:
        self.bits = bits
        self.table = np.full(1 << bits, -1, dtype=np.int32)
        self.count = 0

    @classmethod
    def of(cls, keys: I64) -> IntHash:
        """A table of ``keys`` (distinct), key ``keys[i]`` at index ``i``."""
        out = cls(_bits_for(len(keys)))
        out._place(keys, np.arange(len(keys), dtype=np.int64))
        return out

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def _home(self, values: I64) -> I64:
        with np.errstate(over="ignore"):
            h = values.astype(np.uint64, copy=False) * _MULT
        return (h >> np.uint64(64 - self.bits)).astype(np.int64)

    def find(self, values: I64, keys: I64) -> I64:
        """The index in ``keys`` of each of ``values`` (``-1``: not in the table)."""
        out = np.full(len(values), -1, dtype=np.int64)
        todo = np.arange(len(values), dtype=np.int64)
        pos = self._home(values)
        mask = len(self.table) - 1
        table = self.table
        while len(todo):
            cand = table[pos].astype(np.int64)
            held = cand >= 0
            hit = held.copy()  # of the held entries, those of this key
            hit[held] = keys[cand[held]] == values[todo[held]]
            out[todo[hit]] = cand[hit]
            on = held & ~hit  # another key's entry: probe the next slot
            todo, pos = todo[on], (pos[on] + 1) & mask
        return out

    def insert(self, values: I64, indices: I64, keys: I64) -> None:
        """Enter ``values`` (distinct, none in the table yet) at ``indices`` of ``keys``.
        ``keys[:count + len(values)]`` are every key entered, at their index (the
        registry's keys array, the new ones appended): a table past its load is built
        again from them, larger."""
        if (self.count + len(values)) > MAX_LOAD * len(self.table):
            n = self.count + len(values)
            self.bits = _bits_for(n)
            self.table = np.full(1 << self.bits, -1, dtype=np.int32)
            self.count = 0
            self._place(keys[:n], np.arange(n, dtype=np.int64))  # rehash all
            return
        self._place(values, indices)

    def _place(self, values: I64, indices: I64) -> None:
        """Linear probing, one round per step: every key whose slot is free writes its
        index there, and the write that stays (the last of a slot's) has placed its
        key; the others (and those on a taken slot) step on."""
        table, mask = self.table, len(self.table) - 1
        todo = indices.astype(np.int32)
        pos = self._home(values)
        while len(todo):
            free = table[pos] < 0
            at, mine = pos[free], todo[free]
            table[at] = mine  # several on one slot: one write stays
            placed = np.zeros(len(todo), dtype=np.bool_)
            placed[np.flatnonzero(free)[table[at] == mine]] = True
            rest = ~placed
            todo, pos = todo[rest], (pos[rest] + 1) & mask
        self.count += len(values)


def _bits_for(n: int) -> int:
    """The table size (log2) that holds ``n`` keys at most :data:`MAX_LOAD` full."""
    bits = _MIN_BITS
    while n > MAX_LOAD * (1 << bits):
        bits += 1
    return bits
