"""The open windows of the vectorized operator: slots of parallel numpy arrays.

:class:`WindowSlots` holds every open window as one slot of parallel numpy arrays
(structure of arrays) with a free list, so a batch updates thousands of windows with a
handful of numpy calls. What it stores per window kind: :mod:`.slot_layout`. Pure
in-memory data, no I/O.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cec.errors import UsageError
from cec.operator.arrays import F64, I32, I64, MAX_INDEX, Reserved, grown
from cec.operator.memory import WindowMemory
from cec.operator.slot_layout import (
    SEQ_FIELDS,
    STORED,
    TS_FIELDS,
    U32_MAX,
    SlotLayout,
    seq_fits,
)
from cec.window_state import AGGREGATE, FIELDS, UNTRACKED, declares, names

#: :attr:`WindowSlots.min_start` with no window open
NO_START = 1 << 62
#: the windows a slot array is reserved for when the task has no memory limit
UNLIMITED_ROOM = 1 << 26


@declares(FIELDS, first=("key_idx",), form="array")
class WindowSlots:
    """Open windows as slots of parallel arrays, with a free list.

    One array per field of a window's state (:data:`cec.window_state.FIELDS`, of its
    numpy type; checked when the class is made), plus ``key_idx``, the window's key
    index in the :class:`~.key_registry.KeyRegistry` (int32), and ``live``. What
    follows from other fields is stored by ``layout``
    (:class:`~.slot_layout.SlotLayout`): ``win_end`` is an array only if it is stored
    (else not an attribute at all: read it with :meth:`ends`), and ``first_ts``/
    ``last_ts`` may be int32 offsets from ``win_start`` (read them with :meth:`column`);
    ``cnt`` is uint32 until a window could pass 2^32 - 1 tuples (then int64,
    :meth:`_cnt_room`; read it with :meth:`counts`); ``tau1``, ``tau2`` and ``fp_seq``
    hold ``value + 1``, uint32 until a value does not fit
    (:data:`~.slot_layout.SEQ_FIELDS`; read and write them with :meth:`seqs`,
    :meth:`seq_at`, :meth:`set_seqs`). :meth:`column` and :meth:`put` read and write
    any field whatever the layout; the kernels use the other arrays directly. (The
    annotations below name the fields, checked by :func:`~cec.window_state.declares`;
    the arrays' numpy types are :attr:`arrays`'.)

    ``tracked`` names the partial-aggregate fields kept (default: every one; the
    operator's :attr:`~cec.operator.base.OperatorConfig.tracked`): an untracked field
    has no array and reads as :data:`~cec.window_state.UNTRACKED` (a session's
    ``first_ts`` as its ``win_start``) through :meth:`column`; ``cnt`` is always kept.

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
                 layout: SlotLayout = STORED, tracked: tuple[str, ...] | None = None) -> None:
        self.capacity = capacity
        self.memory = memory  # checked before every growth (None: no limit)
        self.layout = layout
        #: the partial-aggregate fields kept in an array (the others: :meth:`column`)
        self.tracked = frozenset(names(AGGREGATE) if tracked is None else (*tracked, "cnt"))
        narrow_ts = layout.ts_from_start
        #: every array but ``live``, and its numpy type
        self.arrays: tuple[tuple[str, type[np.generic]], ...] = (
            ("key_idx", np.int32),
            *((f.name, np.int32 if narrow_ts and f.name in TS_FIELDS
               else np.uint32 if f.name in (*SEQ_FIELDS, "cnt") else f.dtype)
              for f in FIELDS if (f.name != "win_end" or layout.end_stored)
              and (f not in AGGREGATE or f.name in self.tracked)))
        # each array reserved for more windows than the memory limit allows (all of
        # them at once, after a widening too), so every growth the check lets pass is
        # in place (arrays.Reserved)
        # (no limit: 64 M windows, 512 MiB of address space an 8-byte array; past it an
        # array moves to a reservation twice its need)
        room = (UNLIMITED_ROOM if memory is None else
                memory.limit.bytes // self.slot_bytes() * 2 + 1024)
        self._reserved = Reserved(room)
        for name, dtype in self.arrays:
            setattr(self, name, self._reserved.new(name, dtype, capacity))
        self.live = self._reserved.new("live", np.bool_, capacity)
        self._free: I32 = np.empty(0, dtype=np.int32)  # released slots, a stack
        self._n_free = 0  # entries of _free in use
        self._fresh = 0  # slots >= _fresh were never used
        self.n_live = 0
        #: no open window's ``cnt`` is above this (``cnt`` is uint32 while it fits)
        self._cnt_bound = 0
        #: no open window starts before this (a bound: lowered by every ``win_start``
        #: written, raised only by a caller that looked at every open window; the time
        #: kernel's ``due`` skips its scan while no window can end)
        self.min_start: int = NO_START
        #: the same for a stored ``win_end`` (sessions: an end only moves later)
        self.min_end: int = NO_START

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
            copied = not all(self._reserved.in_place(name, new_cap, np.dtype(t).itemsize)
                             for name, t in self.arrays)
            self.memory.check(self.n_live + n, old, new_cap, self.slot_bytes(), copied)
        for name, _ in self.arrays:
            setattr(self, name, self._reserved.grow(name, getattr(self, name), new_cap))
        self.live = self._reserved.grow("live", self.live, new_cap)
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
        if name in ("win_end", "key_idx"):
            return self.ends(slots) if name == "win_end" else self.keys_of(slots)
        if name not in self.tracked and name in UNTRACKED:
            return self.untracked(name, slots)
        if name in TS_FIELDS and self.layout.ts_from_start:
            ts: I64 = self.win_start[slots] + getattr(self, name)[slots]
            return ts
        if name in SEQ_FIELDS:
            return self.seqs(name, slots)
        if name == "cnt":
            return self.counts(slots)
        out: npt.NDArray[np.generic] = getattr(self, name)[slots]
        return out

    def untracked(self, name: str, slots: I64) -> npt.NDArray[np.generic]:
        """What untracked field ``name`` reads as for the windows in ``slots``
        (:data:`~cec.window_state.UNTRACKED`; a session's ``first_ts``: ``win_start``)."""
        if name == "first_ts" and self.layout.first_is_start:
            out: I64 = self.win_start[slots]
            return out
        dtype = np.float64 if isinstance(UNTRACKED[name], float) else np.int64
        return np.full(len(slots), UNTRACKED[name], dtype=dtype)

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
        if self._cnt_bound + k > U32_MAX:
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
        wide: I64 = self._reserved.new(name, np.int64, self.capacity)
        wide[:] = getattr(self, name)
        setattr(self, name, wide)
        self.arrays = tuple((n, np.int64 if n == name else t) for n, t in self.arrays)
        return wide

    def put(self, name: str, slots: I64, values: npt.NDArray[np.generic]) -> None:
        """Set field ``name`` of the windows in ``slots`` (loading an EC): a derived
        ``win_end`` must be what it derives to (after ``win_start`` is set), else a
        :class:`~cec.errors.UsageError`."""
        if name in TS_FIELDS and self.layout.ts_from_start:
            getattr(self, name)[slots] = self._ts_offsets(slots, np.asarray(values, np.int64))
            return
        if name in SEQ_FIELDS:
            self.set_seqs(name, slots, np.asarray(values, np.int64))
            return
        if name == "cnt" and len(values):
            v = np.asarray(values, np.int64)
            if self.cnt.dtype == np.uint32 and not 0 <= int(v.min()) <= int(v.max()) <= U32_MAX:
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
        if name == "win_start":
            self.note_starts(values)
        elif name == "win_end":
            self.note_ends(values)

    def note_starts(self, win_start: npt.NDArray[np.generic] | int) -> None:
        """Starts written outside :meth:`open` and :meth:`put`: keep
        :attr:`min_start` a bound."""
        self.min_start = _lowered(self.min_start, win_start)

    def note_ends(self, win_end: npt.NDArray[np.generic] | int) -> None:
        """The same for stored ends (:attr:`min_end`): one written earlier than before
        (only an end moved later needs no note)."""
        self.min_end = _lowered(self.min_end, win_end)

    def open(self, slots: I64, key_idx: I64, win_start: I64, win_end: I64 | int,
             seq: I64, ts: I64) -> None:
        """Initialise freshly allocated ``slots`` as empty windows opened by tuple ``seq``.

        ``tau1 = tau2 = seq``, no footprint yet (``fp_seq = -1``), an empty aggregate;
        the opening tuple itself is added by :meth:`accumulate` like every other one.
        ``win_end`` is written only where it is stored (it is the derived one else).
        """
        self.key_idx[slots] = key_idx
        self.win_start[slots] = win_start
        self.note_starts(win_start)
        if self.layout.end_stored:
            self.win_end[slots] = win_end
            self.note_ends(win_end)
        if not seq_fits(seq, self.tau1.dtype):
            self._widen("tau1")
        if not seq_fits(seq, self.tau2.dtype):
            self._widen("tau2")
        raw = seq + 1  # the arrays hold value + 1 (SEQ_FIELDS)
        self.tau1[slots] = raw
        self.tau2[slots] = raw
        self.fp_seq[slots] = 0  # -1: no footprint yet
        self.cnt[slots] = 0
        tracked = self.tracked
        for name in ("sum", "min", "max"):
            if name in tracked:
                getattr(self, name)[slots] = UNTRACKED[name]  # each one's identity
        first = (np.asarray(ts - win_start, dtype=np.int32)  # in the window: fits
                 if self.layout.ts_from_start else ts)
        for name in TS_FIELDS:
            if name in tracked:
                getattr(self, name)[slots] = first

    def accumulate(self, slots: I64, values: F64, ts: I64,
                   ts_offset: I64 | None = None) -> None:
        """Add tuple ``i`` (``values[i]``, ``ts[i]``) to window ``slots[i]``, for every ``i``.

        Unbuffered ``ufunc.at`` in the given (input) order, so float sums are
        bit-identical to the reference's sequential additions. ``ts_offset``: the
        tuples' ``ts - win_start`` if the caller knows them (the time kernel), used when
        ``last_ts`` is held as offsets (else computed, and checked to be in range).
        """
        k = len(slots)
        if self._cnt_bound + k > U32_MAX and self.cnt.dtype == np.uint32:
            self._cnt_room(k)
        self._cnt_bound += k
        # a 1 of the array's own type: ufunc.at's fast path (a Python 1 takes numpy's
        # generic loop: 50x slower on uint32)
        np.add.at(self.cnt, slots, self.cnt.dtype.type(1))
        tracked = self.tracked
        if "sum" in tracked:
            np.add.at(self.sum, slots, values)
        if "min" in tracked:
            np.minimum.at(self.min, slots, values)
        if "max" in tracked:
            np.maximum.at(self.max, slots, values)
        if "last_ts" not in tracked:
            return
        if self.layout.ts_from_start:
            off = (self._ts_offsets(slots, ts) if ts_offset is None
                   else ts_offset.astype(np.int32))
            np.maximum.at(self.last_ts, slots, off)
        else:
            np.maximum.at(self.last_ts, slots, ts)


def _lowered(bound: int, values: npt.NDArray[np.generic] | int) -> int:
    """``bound``, lowered to the least of ``values`` if that is below it."""
    v = np.asarray(values)
    return min(bound, int(v.min())) if v.size else bound
