"""Tumbling count windows (``slide == size``): the paper's workloads, the hot path.

A key's tuples are cut into consecutive runs of ``size``: the run's first tuple opens
the window (id: key and its ``seq``, ``win_end = -1``), the ``size``-th closes it. So a
key has at most one open window, ``KeyWindows.table[key, 0]`` (``-1``: none), and the
number of tuples it holds (its ``cnt``) is the key's *phase*: where the key's next tuple
falls in its run.

* :class:`CountSizeOneKernel`: ``size == 1``: every tuple opens and closes its own
  window, so no window outlives its tuple and no state is kept at all;
* :class:`CountTumblingKernel`: any other size.
"""

from __future__ import annotations

import numpy as np

from cec.operator.kernel import CountWindowsStayOpen, TupleBatch, WindowShape, key_groups
from cec.operator.key_index import KeyWindows
from cec.operator.rows import Block, RowWriter
from cec.operator.slots import WindowSlots
from cec.records import G_OPEN_R, R


class CountSizeOneKernel(CountWindowsStayOpen):
    """Count windows of size 1: the rows come straight from the tuples.

    One ``G_open+R`` row per tuple (its ``G_open`` and ``R``, two output positions), or
    only ``R`` in mode ``none``; ``N`` is unchanged. No window is ever stored.
    """

    def __init__(self, slots: WindowSlots, by_key: KeyWindows) -> None:
        self.slots = slots
        self.by_key = by_key  # never written: no window stays open

    def step(self, batch: TupleBatch, out: RowWriter) -> Block:
        ts, seq, vals = batch.ts, batch.seq, batch.values
        n = len(seq)
        per = 2 if out.emits_open else 1
        typ = np.full(n, G_OPEN_R if per == 2 else R, dtype=np.int8)
        one = {"sum": vals, "min": vals, "max": vals, "first_ts": ts, "last_ts": ts}
        return {
            "ts": ts, "seq": out.new_seqs(n, per), "type": typ, "t_now": seq,
            "n_open": np.full(n, out.n_open, dtype=np.int64), "key_idx": batch.key_idx,
            "win_start": seq, "win_end": np.full(n, -1, np.int64), "tau1": seq,
            "cnt": np.ones(n, dtype=np.int64),
            **{f: v for f, v in one.items() if f in out.logged},
        }


class CountTumblingKernel(CountWindowsStayOpen):
    """Count windows with ``slide == size > 1``: one window per tuple.

    Works in the key-sorted domain (tuples sorted by (key, position)), where a
    window's tuples are adjacent: the opener of a tuple's window is ``pos`` places
    before it, ``pos`` the tuple's position in its window.
    """

    def __init__(self, shape: WindowShape, slots: WindowSlots, by_key: KeyWindows) -> None:
        self.size = shape.size
        self.slots = slots
        #: ``by_key.table[key, 0]``: the key's open window (-1: none)
        self.by_key = by_key

    def step(self, batch: TupleBatch, out: RowWriter) -> Block:
        ts, seq, vals, kidx = batch.ts, batch.seq, batch.values, batch.key_idx
        n = len(seq)
        size = self.size
        sl = self.slots
        self.by_key.ensure(batch.n_keys)
        open_of_key = self.by_key.table[:, 0]  # a view: writes go to the index
        g = key_groups(kidx)
        # the key's window open before the batch, or -1
        open_slot = open_of_key[g.keys].astype(np.int64)
        # ordinal: the tuple's place in its key's runs, counted from the open window's
        # opener (phase + rank in the batch; a key without one starts a run: phase = size)
        ordinal = np.where(open_slot >= 0, sl.counts(open_slot), size) + (g.idx - g.group_start)
        pos = ordinal % size  # its position in its window: 0 opens, size - 1 closes
        opens = np.flatnonzero(pos == 0)
        new_slots = sl.alloc(len(opens))
        opener = g.order[opens]
        sl.open(new_slots, g.keys[opens], seq[opener], -1, seq[opener], ts[opener])
        slot_opened_by = np.empty(n, dtype=np.int64)  # by the sorted index of its opener
        slot_opened_by[opens] = new_slots
        member = np.where(ordinal < size, open_slot,  # the window of each sorted tuple
                          slot_opened_by[np.maximum(g.idx - pos, 0)])
        sl.accumulate(member, vals[g.order], ts[g.order])
        # the keys' open windows after the batch (the last tuple's, unless it closed)
        last = g.last_of_key
        open_of_key[g.keys[last]] = np.where(pos[last] < size - 1, member[last], -1)
        # events in input order: G_open (pos 0) before R (pos size - 1)
        pos_in = np.empty(n, dtype=np.int64)
        pos_in[g.order] = pos
        member_in = np.empty(n, dtype=np.int64)
        member_in[g.order] = member
        closes = pos_in == size - 1
        ev_tuple = np.flatnonzero(closes | (pos_in == 0))
        blk = out.events(member_in[ev_tuple], closes[ev_tuple], ev_tuple, ts, seq, vals, kidx)
        sl.release(member_in[closes])
        return blk
