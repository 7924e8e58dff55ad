"""Session windows: per key one open session, closed once event time passes its end.

A session holds ``win_start`` (its first tuple's ``ts``) and ``win_end`` (its last
tuple's ``ts`` plus the gap, kept up to date in the slot). A key's open session is at
``KeyWindows.table[key, 0]`` (``max_open = 1``); an entry is current iff its slot is
live and of the key (a key has at most one session open, so a reused slot of the same
key is its current session), else stale.

In a batch, tuples are grouped by key (a stable sort, :func:`~.kernel.key_groups`); a
tuple starts a new session iff its key has no session open before it or its ``ts`` is
more than the gap after its key's previous tuple (the previous in the batch, or the open
session's ``last_ts``): Spark's convention, a tuple at exactly ``last_ts + gap`` joins.
That is the same as "the open session closed before the tuple": a session closes at the
first tuple of any key with ``ts > win_end``, and ts ascends, so a tuple of the key that
comes after that close is more than the gap after the session's last tuple, and one
that comes before it is not.

A session's state once the batch is applied is its state when it closed (a closed
session takes no later tuple), so ``R`` rows read the slots after the batch; a
``G_open`` row is built from its opening tuple (``win_end = ts + gap``, not the slot's
later end). Closes caused by one tuple are ordered ``(win_end, tau1, win_start)`` and
come before that tuple's open, as for time windows. A watermark ``w`` closes the
sessions a tuple at ``ts = w`` would: ``win_end < w`` (:meth:`SessionKernel.close_due`).
"""

from __future__ import annotations

import numpy as np

from cec.errors import UsageError
from cec.operator.arrays import EMPTY_I64, I64
from cec.operator.kernel import (
    ClosedByEventTime,
    TupleBatch,
    key_groups,
    ordered_events,
)
from cec.operator.key_index import KeyWindows
from cec.operator.rows import Block, RowWriter
from cec.operator.slots import NO_START, WindowSlots


class SessionKernel(ClosedByEventTime):
    """Session windows (see the module docstring)."""

    def __init__(self, gap: int, slots: WindowSlots, by_key: KeyWindows) -> None:
        self.gap = gap  # microseconds
        self.slots = slots
        #: ``by_key.table[key, 0]``: the slot of the key's open session (or stale / -1)
        self.by_key = by_key

    def _open_session(self, key_idx: I64) -> I64:
        """The slot of each key's open session, -1 for none."""
        sl = self.slots
        cand = self.by_key.table[key_idx, 0].astype(np.int64)
        s = np.maximum(cand, 0)
        ok = (cand >= 0) & sl.live[s] & (sl.key_idx[s] == key_idx)
        return np.where(ok, cand, -1)

    def step(self, batch: TupleBatch, out: RowWriter) -> Block:
        ts, seq, vals, kidx = batch.ts, batch.seq, batch.values, batch.key_idx
        gap = self.gap
        sl = self.slots
        self.by_key.ensure(batch.n_keys)
        g = key_groups(kidx)
        ts_s = ts[g.order]
        # each sorted tuple's predecessor of its key: in the batch, or the open session
        first_pos = np.flatnonzero(g.first)
        cur = self._open_session(g.keys[first_pos])
        prev = np.empty(len(ts_s), dtype=np.int64)
        prev[1:] = ts_s[:-1]
        has_prev = ~g.first
        has_prev[first_pos] = cur >= 0
        prev[first_pos] = np.where(cur >= 0, sl.last_ts[np.maximum(cur, 0)], 0)
        new = ~has_prev | (ts_s > prev + gap)  # prev + gap < 2^63 - 1: check_ts
        seg_start = new | g.first  # a segment: a key's run of tuples in one session
        seg = np.cumsum(seg_start) - 1
        starts = np.flatnonzero(seg_start)
        seg_slot = np.full(len(starts), -1, dtype=np.int64)
        cont = ~new[first_pos]  # keys whose first tuple continues their open session
        seg_slot[seg[first_pos[cont]]] = cur[cont]
        opening_sorted = starts[new[starts]]
        opening_b = g.order[opening_sorted]  # their batch indices
        by_input = np.argsort(opening_b, kind="stable")
        opener = opening_b[by_input]  # opening tuples, in input order
        new_slots = sl.alloc(len(opener))
        seg_slot[seg[opening_sorted[by_input]]] = new_slots
        sl.open(new_slots, kidx[opener], ts[opener], ts[opener] + gap, seq[opener],
                ts[opener])
        slot_in = np.empty(len(seq), dtype=np.int64)
        slot_in[g.order] = seg_slot[seg]
        sl.accumulate(slot_in, vals, ts)
        touched = seg_slot
        sl.win_end[touched] = sl.last_ts[touched] + gap
        # closes: every open session (new ones included) that ends before the last ts,
        # caused by the first tuple after its end
        closing = self.due(int(ts[-1]))
        closer = np.searchsorted(ts, sl.win_end[closing], side="right")
        ev_slot, ev_tuple, is_close = ordered_events(sl, closing, closer, new_slots, opener)
        blk = out.events(ev_slot, is_close, ev_tuple, ts, seq, vals, session_gap=gap)
        sl.release(closing)
        # each key's last segment, if still open, is its open session
        last = seg_slot[seg[g.last_of_key]]
        alive = sl.live[last]
        self.by_key.table[g.keys[g.last_of_key][alive], 0] = last[alive]
        return blk

    def due(self, ts: int) -> I64:
        """The open sessions (any key) a tuple at ``ts`` closes: ``win_end < ts`` (a
        tuple at exactly ``win_end`` would join its key's session); so a watermark ``w``
        closes the sessions that end before ``w``."""
        sl = self.slots
        if ts <= sl.min_end:  # none ends before ts (a session's end only moves later)
            return EMPTY_I64
        live = sl.live_slots()
        ends = sl.win_end[live]
        out: I64 = live[ends < ts]
        sl.min_end = int(ends.min()) if len(ends) else NO_START  # as the time kernel's
        return out

    def index_loaded(self, slots: I64, key_idx: I64) -> None:
        if len(np.unique(key_idx)) != len(key_idx):
            raise UsageError("EC has two open sessions of one key")
        self.by_key.table[key_idx, 0] = slots
