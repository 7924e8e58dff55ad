"""Sliding count windows (``slide < size``): a key has up to ``max_open`` windows open.

A key's ``j``-th tuple (0-based) opens a window iff ``j`` is a multiple of ``slide``; a
window holds the ``size`` tuples of its key from its opener on (id: key and the
opener's ``seq``, ``win_end = -1``). So a tuple belongs to the windows opened by the
key's tuples at ordinals ``o`` with ``j - size < o <= j``, ``o`` a multiple of
``slide``: at most ``max_open = ceil(size / slide)`` of them.

A key's open windows are ``KeyWindows.table[key, age]``, newest first (``age = 0`` the
newest). The key's *phase* is the newest one's ``cnt`` (the tuples since its opener);
a key without an open window has phase ``slide`` (its next tuple opens one). Within a
batch a tuple's *ordinal* is its key's phase plus its rank among the key's tuples in
the batch: its key ordinal counted from the newest open window's opener (which is at
ordinal 0; windows opened in the batch have positive opener ordinals).
"""

from __future__ import annotations

import numpy as np

from cec.operator.arrays import I64
from cec.operator.kernel import (
    CountWindowsStayOpen,
    KeyGroups,
    TupleBatch,
    WindowShape,
    key_groups,
)
from cec.operator.key_index import KeyWindows
from cec.operator.rows import Block, RowWriter
from cec.operator.slots import WindowSlots


class CountSlidingKernel(CountWindowsStayOpen):
    """Count windows with ``slide < size`` (see the module docstring)."""

    def __init__(self, shape: WindowShape, slots: WindowSlots, by_key: KeyWindows) -> None:
        self.size = shape.size
        self.slide = shape.slide
        self.max_open = shape.max_open
        self.slots = slots
        #: ``by_key.table[key, age]``: the key's open windows, newest first
        self.by_key = by_key

    def step(self, batch: TupleBatch, out: RowWriter) -> Block:
        ts, seq, vals, kidx = batch.ts, batch.seq, batch.values, batch.key_idx
        n = len(seq)
        size, slide, max_open = self.size, self.slide, self.max_open
        sl = self.slots
        self.by_key.ensure(batch.n_keys)
        g = key_groups(kidx)
        # per tuple, in input order: its rank among its key's tuples in the batch, and
        # the sorted index of its key's first tuple
        rank = np.empty(n, dtype=np.int64)
        rank[g.order] = g.idx - g.group_start
        group_start = np.empty(n, dtype=np.int64)
        group_start[g.order] = g.group_start
        # (n, max_open): the key's windows, newest first
        open_before = self.by_key.table[kidx].astype(np.int64)
        newest = open_before[:, 0]
        phase = np.where(newest >= 0, sl.counts(newest), slide)
        ordinal = phase + rank
        newest_opener = (ordinal // slide) * slide  # ordinal of the newest window's opener
        # open one window per tuple whose key ordinal is a multiple of the slide
        opens = np.flatnonzero(ordinal == newest_opener)
        new_slots = sl.alloc(len(opens))
        sl.open(new_slots, kidx[opens], seq[opens], -1, seq[opens], ts[opens])
        slot_opened_by = np.full(n, -1, dtype=np.int64)  # by the batch index of its opener
        slot_opened_by[opens] = new_slots
        # each tuple's candidate windows (oldest first), by their openers' ordinals:
        # <= 0 opened before the batch (found by age), > 0 by a tuple of the batch
        ages = np.arange(max_open - 1, -1, -1, dtype=np.int64)
        opener = newest_opener[:, None] - ages[None, :] * slide
        member = opener > (ordinal - size)[:, None]
        existing = opener <= 0
        age = np.clip((-opener) // slide, 0, max_open - 1)
        slot_existing = np.take_along_axis(open_before, age, axis=1)
        rank_of_opener = np.where(existing, 0, opener - phase[:, None])
        slot_new = slot_opened_by[g.order[group_start[:, None] + rank_of_opener]]
        slot = np.where(existing, slot_existing, slot_new)
        member &= slot >= 0
        flat_member = member.ravel()
        member_tuple = np.repeat(g.idx, max_open)[flat_member]
        member_slot = slot.ravel()[flat_member]
        pos = (ordinal[:, None] - opener).ravel()[flat_member]  # the tuple's place in it
        sl.accumulate(member_slot, vals[member_tuple], ts[member_tuple])
        # events: per membership G_open (pos 0) before R (pos size-1), in membership order
        ev = np.empty((len(member_slot), 2), dtype=np.bool_)
        np.equal(pos, 0, out=ev[:, 0])
        np.equal(pos, size - 1, out=ev[:, 1])
        flat = np.flatnonzero(ev.ravel())
        ev_member = flat >> 1
        is_close = (flat & 1).astype(np.bool_)
        blk = out.events(member_slot[ev_member], is_close, member_tuple[ev_member], ts, seq,
                         vals, kidx)
        self._update_index(g, ordinal, phase, group_start, slot_opened_by)
        sl.release(member_slot[flat[(flat & 1) == 1] >> 1])
        return blk

    def _update_index(self, g: KeyGroups, ordinal: I64, phase: I64, group_start: I64,
                      slot_opened_by: I64) -> None:
        """Set the batch's keys' rows to their open windows after the batch, newest first.

        From each key's last tuple in the batch: the windows whose openers' ordinals are
        ``> ordinal - size + 1`` stay open (the next tuple of the key still joins them).
        """
        size, slide, max_open = self.size, self.slide, self.max_open
        table = self.by_key.table
        ends = g.last_of_key
        keys = g.keys[ends]
        last = g.order[ends]  # batch index of each key's last tuple
        last_ordinal, last_phase, last_start = ordinal[last], phase[last], group_start[last]
        # the windows' openers' ordinals, newest first
        opener = ((last_ordinal // slide) * slide)[:, None] - (
            np.arange(max_open, dtype=np.int64)[None, :] * slide)
        still_open = opener > (last_ordinal - size + 1)[:, None]
        existed = opener <= 0
        age = np.clip((-opener) // slide, 0, max_open - 1)
        slot_existed = np.take_along_axis(table[keys], age, axis=1)
        rank_of_opener = np.where(existed, 0, opener - last_phase[:, None])
        slot_new = slot_opened_by[g.order[last_start[:, None] + np.clip(rank_of_opener, 0, None)]]
        table[keys] = np.where(still_open, np.where(existed, slot_existed, slot_new), -1)
