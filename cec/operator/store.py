"""Columnar storage of the vectorized operator: a key registry and window slots.

:class:`KeyRegistry` maps keys (int64 or string) to dense key indices with a hashed
lookup (``pandas.Index.get_indexer``); new keys get the next indices in order of first
appearance. :class:`WindowSlots` holds every open window as one slot of parallel numpy
arrays (structure of arrays) with a free list, so a batch updates thousands of windows
with a handful of numpy calls. :class:`FootprintOrder` keeps the open windows ordered by
footprint for the background step. Pure in-memory data, no I/O.

Memory (docs/PROFILE.md, "Bytes per open window"): slot numbers and key indices are
32-bit wherever they are stored (a partition holds fewer than 2^31 open windows and
keys; past that a clear :class:`~cec.errors.UsageError`), arrays grow by
:data:`GROWTH` (1.25x) rather than doubling, positions and counts are uint32 until a
value does not fit, and what follows from other fields is not stored
(:class:`SlotLayout`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import UsageError
from cec.operator.memory import WindowMemory
from cec.window_state import FIELDS, declares

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

    @property
    def end_stored(self) -> bool:
        return self.end_offset is None and self.end_constant is None


#: every field stored as itself (sessions; slots made without a window kind)
STORED = SlotLayout()

_TS_FIELDS = ("first_ts", "last_ts")
#: input and output positions: held as ``value + 1`` in uint32 (so ``fp_seq = -1``,
#: no footprint, is 0) while every value written is in ``[-1, 2^32 - 2]``; the first
#: value outside widens the array to int64 for good (:meth:`WindowSlots.set_seqs`)
SEQ_FIELDS = ("tau1", "tau2", "fp_seq")
_U32_MAX = (1 << 32) - 1


def seq_fits(values: I64 | int, dtype: np.dtype[np.generic]) -> bool:
    """Whether ``values + 1`` fit an array of ``dtype`` (uint32 or int64)."""
    if dtype != np.uint32:
        return True
    v = np.asarray(values)
    return v.size == 0 or (int(v.min()) >= -1 and int(v.max()) <= _U32_MAX - 1)


@declares(FIELDS, first=("key_idx",), form="array")
class WindowSlots:
    """Open windows as slots of parallel arrays, with a free list.

    One array per field of a window's state (:data:`cec.window_state.FIELDS`, of its
    numpy type; checked when the class is made), plus ``key_idx``, the window's key
    index in the :class:`KeyRegistry` (int32), and ``live``. What follows from other
    fields is stored by ``layout`` (:class:`SlotLayout`): ``win_end`` is an array only
    if it is stored (else not an attribute at all: read it with :meth:`ends`), and
    ``first_ts``/``last_ts`` may be int32 offsets from ``win_start`` (read them with
    :meth:`column`); ``cnt`` is uint32 until a window could pass 2^32 - 1 tuples (then
    int64, :meth:`_cnt_room`; read it with :meth:`counts`); ``tau1``, ``tau2`` and
    ``fp_seq`` hold ``value + 1``, uint32 until a value does not fit
    (:data:`SEQ_FIELDS`; read and write them with :meth:`seqs`, :meth:`seq_at`,
    :meth:`set_seqs`). :meth:`column` and :meth:`put` read and write
    any field whatever the layout; the kernels use the other arrays directly. (The
    annotations below name the fields, checked by :func:`~cec.window_state.declares`;
    the arrays' numpy types are :attr:`arrays`'.)

    Free slots: the ones never used are ``[_fresh, capacity)``; released ones are a
    stack (int32) popped before them, so slots are reused newest-released first.
    """

    key_idx: I32
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

    def __init__(self, capacity: int = 1024, memory: WindowMemory | None = None,
                 layout: SlotLayout = STORED) -> None:
        self.capacity = capacity
        self.memory = memory  # checked before every growth (None: no limit)
        self.layout = layout
        narrow_ts = layout.ts_from_start
        #: every array but ``live``, and its numpy type
        self.arrays: tuple[tuple[str, type[np.generic]], ...] = (
            ("key_idx", np.int32),
            *((f.name, np.int32 if narrow_ts and f.name in _TS_FIELDS
               else np.uint32 if f.name in (*SEQ_FIELDS, "cnt") else f.dtype)
              for f in FIELDS if f.name != "win_end" or layout.end_stored))
        for name, dtype in self.arrays:
            setattr(self, name, np.zeros(capacity, dtype=dtype))
        self.live = np.zeros(capacity, dtype=np.bool_)
        self._free: I32 = np.empty(0, dtype=np.int32)  # released slots, a stack
        self._n_free = 0  # entries of _free in use
        self._fresh = 0  # slots >= _fresh were never used
        self.n_live = 0
        #: no open window's ``cnt`` is above this (``cnt`` is uint32 while it fits)
        self._cnt_bound = 0

    def slot_bytes(self) -> int:
        """Bytes per slot: every array (as it is now: a widened one counts 8), ``live``
        and the slot's free-list entry."""
        return sum(np.dtype(t).itemsize for _, t in self.arrays) + 1 + 4

    def _grow(self, n: int) -> None:
        """Room for ``n`` more windows (``n`` > the free slots): 1.25x, or as needed."""
        old = self.capacity
        new_cap = grown(old, old + n - self._n_free - (old - self._fresh) + 1024)
        if new_cap > MAX_INDEX + 1:
            raise UsageError(f"{self.n_live + n:,} open windows in one operator task, over "
                             f"its limit of {MAX_INDEX + 1:,} (slot numbers are 32-bit): "
                             "give the run more partitions (--partitions)")
        if self.memory is not None:
            self.memory.check(self.n_live + n, old, new_cap, self.slot_bytes())
        for name, _ in self.arrays:
            arr = getattr(self, name)
            bigger = np.zeros(new_cap, dtype=arr.dtype)
            bigger[:old] = arr
            setattr(self, name, bigger)
        live = np.zeros(new_cap, dtype=np.bool_)
        live[:old] = self.live
        self.live = live
        self.capacity = new_cap

    def alloc(self, n: int) -> I64:
        """``n`` fresh slots (marked live; fields to be initialised by the caller):
        released slots first (the latest released first), then never used ones."""
        reuse = min(n, self._n_free)
        if n - reuse > self.capacity - self._fresh:
            self._grow(n)
        slots = np.empty(n, dtype=np.int64)
        slots[:reuse] = self._free[self._n_free - reuse: self._n_free][::-1]
        self._n_free -= reuse
        slots[reuse:] = np.arange(self._fresh, self._fresh + n - reuse, dtype=np.int64)
        self._fresh += n - reuse
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
            bigger = np.empty(grown(len(self._free), self._n_free + n), np.int32)
            bigger[: self._n_free] = self._free[: self._n_free]
            self._free = bigger
        self._free[self._n_free : self._n_free + n] = slots[::-1]
        self._n_free += n

    def live_slots(self) -> I64:
        return np.flatnonzero(self.live[: self._fresh]).astype(np.int64, copy=False)

    def ends(self, slots: I64) -> I64:
        """The ``win_end`` of the windows in ``slots`` (stored or derived)."""
        lay = self.layout
        if lay.end_offset is not None:
            out: I64 = self.win_start[slots] + lay.end_offset
            return out
        if lay.end_constant is not None:
            return np.full(len(slots), lay.end_constant, dtype=np.int64)
        return self.win_end[slots]

    def keys_of(self, slots: I64) -> I64:
        """The key indices of the windows in ``slots``, as int64."""
        return self.key_idx[slots].astype(np.int64)

    def column(self, name: str, slots: I64) -> npt.NDArray[np.generic]:
        """Field ``name`` (``key_idx`` or one of :data:`~cec.window_state.FIELDS`) of
        the windows in ``slots``, as int64/float64."""
        if name == "win_end":
            return self.ends(slots)
        if name == "key_idx":
            return self.keys_of(slots)
        if name in _TS_FIELDS and self.layout.ts_from_start:
            ts: I64 = self.win_start[slots] + getattr(self, name)[slots]
            return ts
        if name in SEQ_FIELDS:
            return self.seqs(name, slots)
        if name == "cnt":
            return self.counts(slots)
        out: npt.NDArray[np.generic] = getattr(self, name)[slots]
        return out

    def _ts_offsets(self, slots: I64, ts: I64) -> I32:
        """``ts - win_start`` of the windows in ``slots``, checked to fit int32."""
        off = ts - self.win_start[slots]
        if len(off) and (int(off.min()) < 0 or int(off.max()) > MAX_INDEX):
            i = int(np.flatnonzero((off < 0) | (off > MAX_INDEX))[0])
            raise UsageError(f"a tuple at ts {int(ts[i])} added to the time window starting "
                             f"at {int(self.win_start[slots[i]])}: outside it (an EC or "
                             "replay that does not belong to this window spec?)")
        return off.astype(np.int32)

    def seqs(self, name: str, slots: I64) -> I64:
        """``tau1``, ``tau2`` or ``fp_seq`` (:data:`SEQ_FIELDS`) of the windows in
        ``slots``, as int64 (the arrays hold ``value + 1``)."""
        out: I64 = getattr(self, name)[slots].astype(np.int64)
        out -= 1
        return out

    def counts(self, slots: I64) -> I64:
        """The ``cnt`` of the windows in ``slots``, as int64."""
        return self.cnt[slots].astype(np.int64)

    def _cnt_room(self, k: int) -> None:
        """Make room for ``k`` more tuples in any window's uint32 ``cnt``: the bound is
        recomputed from the open windows, and the array widened if that is not enough."""
        live = self.live_slots()
        self._cnt_bound = int(self.cnt[live].max()) if len(live) else 0
        if self._cnt_bound + k > _U32_MAX:
            self._widen("cnt")

    def seq_at(self, name: str, slot: int) -> int:
        """One window's ``tau1``, ``tau2`` or ``fp_seq``."""
        return int(getattr(self, name)[slot]) - 1

    def set_seqs(self, name: str, slots: I64, values: I64 | int) -> None:
        """Set ``tau1``, ``tau2`` or ``fp_seq`` of the windows in ``slots`` (widens the
        array to int64 first if a value does not fit its uint32)."""
        arr = getattr(self, name)
        if not seq_fits(values, arr.dtype):
            arr = self._widen(name)
        arr[slots] = np.asarray(values, dtype=np.int64) + 1

    def _widen(self, name: str) -> I64:
        """Field ``name``'s array as int64 from now on (4 more bytes per slot; not
        checked against the memory limit: a one-time 4 bytes per slot)."""
        wide: I64 = getattr(self, name).astype(np.int64)
        setattr(self, name, wide)
        self.arrays = tuple((n, np.int64 if n == name else t) for n, t in self.arrays)
        return wide

    def put(self, name: str, slots: I64, values: npt.NDArray[np.generic]) -> None:
        """Set field ``name`` of the windows in ``slots`` (loading an EC): a derived
        ``win_end`` must be what it derives to (after ``win_start`` is set), else a
        :class:`~cec.errors.UsageError`."""
        if name in _TS_FIELDS and self.layout.ts_from_start:
            getattr(self, name)[slots] = self._ts_offsets(slots, np.asarray(values, np.int64))
            return
        if name in SEQ_FIELDS:
            self.set_seqs(name, slots, np.asarray(values, np.int64))
            return
        if name == "cnt" and len(values):
            v = np.asarray(values, np.int64)
            if self.cnt.dtype == np.uint32 and not 0 <= int(v.min()) <= int(v.max()) <= _U32_MAX:
                self._widen("cnt")
            self._cnt_bound = max(self._cnt_bound, int(v.max()))
        if name == "win_end" and not self.layout.end_stored:
            want = self.ends(slots)
            bad = np.flatnonzero(want != values)
            if len(bad):
                i = int(bad[0])
                raise UsageError(f"EC window starting at {int(self.win_start[slots[i]])} "
                                 f"has win_end {int(values[i])}, not {int(want[i])} (the "
                                 "window spec's): an EC of another window spec?")
            return
        getattr(self, name)[slots] = values

    def open(self, slots: I64, key_idx: I64, win_start: I64, win_end: I64 | int,
             seq: I64, ts: I64) -> None:
        """Initialise freshly allocated ``slots`` as empty windows opened by tuple ``seq``.

        ``tau1 = tau2 = seq``, no footprint yet (``fp_seq = -1``), an empty aggregate;
        the opening tuple itself is added by :meth:`accumulate` like every other one.
        ``win_end`` is written only where it is stored (it is the derived one else).
        """
        self.key_idx[slots] = key_idx
        self.win_start[slots] = win_start
        if self.layout.end_stored:
            self.win_end[slots] = win_end
        if not seq_fits(seq, self.tau1.dtype):
            self._widen("tau1")
        if not seq_fits(seq, self.tau2.dtype):
            self._widen("tau2")
        raw = seq + 1  # the arrays hold value + 1 (SEQ_FIELDS)
        self.tau1[slots] = raw
        self.tau2[slots] = raw
        self.fp_seq[slots] = 0  # -1: no footprint yet
        self.cnt[slots] = 0
        self.sum[slots] = 0.0
        self.min[slots] = np.inf
        self.max[slots] = -np.inf
        if self.layout.ts_from_start:
            first = np.asarray(ts - win_start, dtype=np.int32)  # in the window: fits
            self.first_ts[slots] = first
            self.last_ts[slots] = first
        else:
            self.first_ts[slots] = ts
            self.last_ts[slots] = ts

    def accumulate(self, slots: I64, values: F64, ts: I64,
                   ts_offset: I64 | None = None) -> None:
        """Add tuple ``i`` (``values[i]``, ``ts[i]``) to window ``slots[i]``, for every ``i``.

        Unbuffered ``ufunc.at`` in the given (input) order, so float sums are
        bit-identical to the reference's sequential additions. ``ts_offset``: the
        tuples' ``ts - win_start`` if the caller knows them (the time kernel), used when
        ``last_ts`` is held as offsets (else computed, and checked to be in range).
        """
        k = len(slots)
        if self._cnt_bound + k > _U32_MAX and self.cnt.dtype == np.uint32:
            self._cnt_room(k)
        self._cnt_bound += k
        # a 1 of the array's own type: ufunc.at's fast path (a Python 1 takes numpy's
        # generic loop: 50x slower on uint32)
        np.add.at(self.cnt, slots, self.cnt.dtype.type(1))
        np.add.at(self.sum, slots, values)
        np.minimum.at(self.min, slots, values)
        np.maximum.at(self.max, slots, values)
        if self.layout.ts_from_start:
            off = (self._ts_offsets(slots, ts) if ts_offset is None
                   else ts_offset.astype(np.int32))
            np.maximum.at(self.last_ts, slots, off)
        else:
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
