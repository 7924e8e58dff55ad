"""The vectorized aggregate operator: a whole input batch per handful of numpy calls.

Same semantics and output as :class:`cec.operator.reference.ReferenceOperator` (see
:mod:`cec.operator.base`), row for row; this is the production hot path.

How a batch is processed:

* keys become dense indices through a hashed lookup (:class:`~.store.KeyRegistry`),
  open windows live in slots of parallel arrays (:class:`~.store.WindowSlots`);
* each (tuple, window) membership is computed arithmetically: for **count windows**
  from the tuple's ordinal within its key (a sort by ``(key, position)``) and the
  key's phase (the newest window's count; ``kslots[key, age]`` holds the key's open
  windows, newest first); for **time windows** from ``m = floor(ts / slide)``, matched
  to open windows through the ring ``kslots[key, m % ceil(size / slide)]`` (a key's
  open time windows span at most that many consecutive ``m``), new ones factorized by
  a ``(key, m)`` code; special cases: size-1 count windows need no state at all, and
  tumbling count windows (the paper's workloads) have a leaner path;
* aggregates are updated with unbuffered ``ufunc.at`` calls in input order, so float
  sums are bit-identical to the reference's sequential additions;
* the output rows (opens, closes, time closes ordered ``(win_end, tau1, win_start)``)
  are ordered by one flat mask or one ``lexsort``, ``N`` is a cumulative sum;
* keys without an open window are forgotten now and then (:meth:`VectorOperator._maybe_compact`),
  so per-key memory follows the live keys, not every key ever seen;
* the background step keeps the open windows in footprint order incrementally
  (:class:`~.store.FootprintOrder`: footprint seqs only grow), so a batch that emits no
  ``G_check`` reads only the oldest window, and one that does walks the oldest windows
  until the first at which the loop of the reference would stop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from cec.errors import UsageError
from cec.operator.base import OperatorConfig
from cec.operator.state import OperatorState, WindowSnapshot, ec_rows
from cec.operator.store import F64, I64, FootprintOrder, KeyRegistry, WindowSlots
from cec.policy import budget_for
from cec.records import (
    END_OF_STREAM_TS,
    G_CHECK,
    G_OPEN,
    G_OPEN_R,
    R,
    check_order,
    check_resume,
    decode_input,
    output_schema,
)
from cec.windows import CountWindow, TimeWindow

Block = dict[str, npt.NDArray[np.generic]]
_BLOCK_FIELDS = ("ts", "seq", "type", "t_now", "n_open", "key_idx", "win_start", "win_end",
                 "tau1", "cnt", "sum", "min", "max", "first_ts", "last_ts")
_EMPTY_I64: I64 = np.empty(0, dtype=np.int64)


def _key_groups(kidx: I64) -> tuple[I64, I64, I64, npt.NDArray[np.bool_], I64]:
    """A batch in the key-sorted domain: tuples sorted by (key, position).

    Returns ``(ar, order, ks, first, gs)``: ``ar = arange(n)``; ``order`` the stable
    key sort of the batch; ``ks = kidx[order]``; ``first[i]`` iff sorted tuple ``i``
    is its key's first in the batch; ``gs[i]`` the sorted index of that first tuple.
    """
    n = len(kidx)
    ar = np.arange(n, dtype=np.int64)
    order = np.argsort(kidx * n + ar)
    ks = kidx[order]
    first = np.empty(n, dtype=np.bool_)
    first[0] = True
    np.not_equal(ks[1:], ks[:-1], out=first[1:])
    gs = np.maximum.accumulate(np.where(first, ar, 0))
    return ar, order, ks, first, gs


class VectorOperator:
    """Batch-at-a-time implementation of the CEC aggregate operator."""

    #: registry size below which keys are never compacted (see :meth:`_maybe_compact`)
    COMPACT_MIN = 4096

    def __init__(self, config: OperatorConfig) -> None:
        self.config = config
        self._reducer = config.reducer
        self._policy = config.policy
        self._budget = budget_for(config.policy, config.clock)
        self._schema = output_schema(config.key_type)
        spec = config.window
        self._is_count = isinstance(spec, CountWindow)
        if isinstance(spec, CountWindow):
            self._S, self._L = spec.size, spec.slide
        else:
            self._S, self._L = spec.size_us, spec.slide_us
        self._M = spec.max_open_per_key
        self._keys = KeyRegistry(config.key_type)
        self._slots = WindowSlots()
        # the open windows by footprint: kept from the start when the background step
        # runs, else from the first q/u query on (the pipeline asks after every batch)
        self._fp_order: FootprintOrder | None = (
            FootprintOrder() if config.policy.emits_check else None)
        self._kslots: I64 = np.full((1024, self._M), -1, dtype=np.int64)
        self._n = 0
        self._t_now: int | None = None
        self._ts_now: int | None = None
        self._next_out = 0
        self._last_ts: int | None = None
        self._last_seq: int | None = None
        self._recon_until: int | None = None
        self._recon_ts: int | None = None
        # key compaction: the registry size at which the live keys are counted next
        self._compact_at = self.COMPACT_MIN

    # -- properties ---------------------------------------------------------------
    @property
    def n_open(self) -> int:
        return self._n

    @property
    def t_now(self) -> int | None:
        return self._t_now

    @property
    def next_out_seq(self) -> int:
        return self._next_out

    def _oldest(self) -> tuple[int, int] | None:
        """(fp_seq, tau2) of the window with the oldest footprint."""
        sl = self._slots
        if sl.n_live == 0:
            return None
        if self._fp_order is None and self._policy.emits_open:  # every window has one
            self._fp_order = FootprintOrder()
            self._fp_order.rebuild(sl)
        if self._fp_order is not None:
            w = self._fp_order.front(sl)
            return int(sl.fp_seq[w]), int(sl.tau2[w])
        live = sl.live_slots()
        fp = sl.fp_seq[live]
        fpmin = int(fp.min())
        return fpmin, int(sl.tau2[live][fp == fpmin].min())

    @property
    def q(self) -> int:
        o = self._oldest()
        return 0 if o is None or o[0] < 0 else self._next_out - o[0]

    @property
    def u(self) -> int:
        o = self._oldest()
        return 0 if o is None or self._t_now is None else self._t_now - o[1]

    # -- helpers ------------------------------------------------------------------
    def _ensure_kslots(self) -> None:
        need = len(self._keys)
        cap = self._kslots.shape[0]
        if need > cap:
            grown = np.full((max(need, 2 * cap), self._M), -1, dtype=np.int64)
            grown[:cap] = self._kslots
            self._kslots = grown

    def _init_slots(self, slots: I64, kidx: I64, start: I64, end: I64 | int,
                    seq: I64, ts: I64) -> None:
        sl = self._slots
        sl.key_idx[slots] = kidx
        sl.win_start[slots] = start
        sl.win_end[slots] = end
        sl.tau1[slots] = seq
        sl.tau2[slots] = seq
        sl.fp_seq[slots] = -1
        sl.cnt[slots] = 0
        sl.sum[slots] = 0.0
        sl.min[slots] = np.inf
        sl.max[slots] = -np.inf
        sl.first_ts[slots] = ts
        sl.last_ts[slots] = ts

    def _accumulate(self, ms: I64, v: F64, t: I64) -> None:
        sl = self._slots
        np.add.at(sl.cnt, ms, 1)
        np.add.at(sl.sum, ms, v)
        np.minimum.at(sl.min, ms, v)
        np.maximum.at(sl.max, ms, v)
        np.maximum.at(sl.last_ts, ms, t)

    def _block(self, slots: I64, typ: npt.NDArray[np.int8], ts: I64, t_now: I64,
               n_open: I64) -> Block:
        """Rows with the slots' current state; seq numbers assigned here."""
        sl = self._slots
        k = len(slots)
        seqs = np.arange(self._next_out, self._next_out + k, dtype=np.int64)
        self._next_out += k
        return {
            "ts": ts, "seq": seqs, "type": typ, "t_now": t_now, "n_open": n_open,
            "key_idx": sl.key_idx[slots], "win_start": sl.win_start[slots],
            "win_end": sl.win_end[slots], "tau1": sl.tau1[slots], "cnt": sl.cnt[slots],
            "sum": sl.sum[slots], "min": sl.min[slots], "max": sl.max[slots],
            "first_ts": sl.first_ts[slots], "last_ts": sl.last_ts[slots],
        }

    def _to_batch(self, blocks: list[Block]) -> pa.RecordBatch:
        blocks = [b for b in blocks if len(b["seq"])]
        if not blocks:
            cols: Block = {
                f: np.empty(0, dtype=np.float64 if f in ("sum", "min", "max")
                            else np.int8 if f == "type" else np.int64)
                for f in _BLOCK_FIELDS
            }
        elif len(blocks) == 1:
            cols = blocks[0]
        else:
            cols = {f: np.concatenate([b[f] for b in blocks]) for f in _BLOCK_FIELDS}
        cnt = np.asarray(cols["cnt"], dtype=np.int64)
        value = self._reducer.result_array(
            cnt, np.asarray(cols["sum"], np.float64), np.asarray(cols["min"], np.float64),
            np.asarray(cols["max"], np.float64),
        )
        arrays = [
            pa.array(cols["ts"], pa.int64()),
            pa.array(cols["seq"], pa.int64()),
            pa.array(np.asarray(cols["type"], dtype=np.int8), pa.int8()),
            pa.array(cols["t_now"], pa.int64()),
            pa.array(cols["n_open"], pa.int64()),
            self._keys.values(np.asarray(cols["key_idx"], dtype=np.int64)),
            pa.array(cols["win_start"], pa.int64()),
            pa.array(cols["win_end"], pa.int64()),
            pa.array(cols["tau1"], pa.int64()),
            pa.array(cnt, pa.int64()),
            pa.array(cols["sum"], pa.float64()),
            pa.array(cols["min"], pa.float64()),
            pa.array(cols["max"], pa.float64()),
            pa.array(cols["first_ts"], pa.int64()),
            pa.array(cols["last_ts"], pa.int64()),
            pa.array(value, pa.float64()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _events(self, slots: I64, is_close: npt.NDArray[np.bool_], tuples: I64, ts: I64,
                seq: I64, vals: F64, kidx: I64 | None = None) -> Block:
        """The foreground rows of a batch's window events, in output order.

        Events are opens (``is_close`` False) and closes of ``slots`` caused by input
        tuple ``tuples``; ``N`` after each event is counted over all of them, then the
        opens are dropped when the policy emits no ``G_open`` (:meth:`_rows`).
        """
        n_after = self._n + np.cumsum(np.where(is_close, -1, 1))
        if len(n_after):
            self._n = int(n_after[-1])
        if not self._policy.emits_open:
            slots, tuples, n_after = slots[is_close], tuples[is_close], n_after[is_close]
            is_close = np.ones(len(slots), dtype=np.bool_)
        return self._rows(slots, is_close, tuples, n_after, ts, seq, vals, kidx)

    def _rows(self, slots: I64, is_close: npt.NDArray[np.bool_], tuples: I64, n_open: I64,
              ts: I64, seq: I64, vals: F64, kidx: I64 | None = None) -> Block:
        """Foreground rows: R with the slot's state, G_open with the opening tuple's.

        Only the R rows read the (large, randomly accessed) slot arrays; a G_open row is
        built from its tuple, and for count windows (``kidx`` given) so is its identity.
        """
        sl = self._slots
        k = len(slots)
        ci = np.flatnonzero(is_close)
        if len(ci) == k:
            return self._block(slots, np.full(k, R, np.int8), ts[tuples], seq[tuples], n_open)
        oi = np.flatnonzero(~is_close)
        seqs = np.arange(self._next_out, self._next_out + k, dtype=np.int64)
        self._next_out += k
        cs, to = slots[ci], tuples[oi]
        v_o, ts_o = vals[to], ts[to]

        def merge(close: npt.ArrayLike, opened: npt.ArrayLike, dtype: type) -> npt.NDArray[Any]:
            out: npt.NDArray[Any] = np.empty(k, dtype=dtype)
            out[ci] = close
            out[oi] = opened
            return out

        typ = np.full(k, G_OPEN, dtype=np.int8)
        typ[ci] = R
        blk: Block = {
            "ts": ts[tuples], "seq": seqs, "type": typ, "t_now": seq[tuples], "n_open": n_open,
            "cnt": merge(sl.cnt[cs], 1, np.int64),
            "sum": merge(sl.sum[cs], v_o, np.float64),
            "min": merge(sl.min[cs], v_o, np.float64),
            "max": merge(sl.max[cs], v_o, np.float64),
            "first_ts": merge(sl.first_ts[cs], ts_o, np.int64),
            "last_ts": merge(sl.last_ts[cs], ts_o, np.int64),
        }
        if kidx is not None:  # count windows: id (key, seq of the opening tuple), end -1
            seq_o = seq[to]
            blk["key_idx"] = merge(sl.key_idx[cs], kidx[to], np.int64)
            blk["win_start"] = merge(sl.win_start[cs], seq_o, np.int64)
            blk["win_end"] = merge(sl.win_end[cs], -1, np.int64)
            blk["tau1"] = merge(sl.tau1[cs], seq_o, np.int64)
        else:
            for f in ("key_idx", "win_start", "win_end", "tau1"):
                blk[f] = getattr(sl, f)[slots]
        if self._policy.emits_open:
            s_o, f_o = slots[oi], seqs[oi]
            sl.fp_seq[s_o] = f_o
            if self._fp_order is not None:
                self._fp_order.push(sl, f_o, s_o)
        return blk

    # -- count windows ------------------------------------------------------------
    def _count_size_one(self, ts: I64, seq: I64, vals: F64, kidx: I64) -> Block:
        """Count windows of size 1: every tuple opens and closes its own window.

        No window outlives its tuple, so the rows come straight from the tuples: one
        ``G_open+R`` row per tuple (its ``G_open`` and ``R``, two output positions), or
        only ``R`` in mode ``none``; ``N`` is unchanged.
        """
        n = len(seq)
        per = 2 if self._policy.emits_open else 1
        typ = np.full(n, G_OPEN_R if per == 2 else R, dtype=np.int8)
        seqs = np.arange(self._next_out + per - 1, self._next_out + per * n, per,
                         dtype=np.int64)
        self._next_out += per * n
        return {
            "ts": ts, "seq": seqs, "type": typ, "t_now": seq,
            "n_open": np.full(n, self._n, dtype=np.int64), "key_idx": kidx, "win_start": seq,
            "win_end": np.full(n, -1, np.int64), "tau1": seq,
            "cnt": np.ones(n, dtype=np.int64), "sum": vals, "min": vals, "max": vals,
            "first_ts": ts, "last_ts": ts,
        }

    def _count_tumbling(self, ts: I64, seq: I64, vals: F64, kidx: I64) -> Block:
        """Count windows with slide == size: one window per tuple, the hot path.

        Works in the key-sorted domain (tuples sorted by (key, position)), where a
        window's tuples are adjacent: the opener of a tuple's window is ``pos`` places
        before it.
        """
        n = len(seq)
        S = self._S
        sl = self._slots
        self._ensure_kslots()
        kslot = self._kslots[:, 0]
        ar, order, ks, first, gs = _key_groups(kidx)
        newest = kslot[ks]
        g = np.where(newest >= 0, sl.cnt[newest], S) + (ar - gs)
        pos = g % S
        open_s = np.flatnonzero(pos == 0)
        new_slots = sl.alloc(len(open_s))
        ti = order[open_s]
        self._init_slots(new_slots, ks[open_s], seq[ti], -1, seq[ti], ts[ti])
        slot_of_opener = np.empty(n, dtype=np.int64)
        slot_of_opener[open_s] = new_slots
        ms = np.where(g < S, newest, slot_of_opener[np.maximum(ar - pos, 0)])
        self._accumulate(ms, vals[order], ts[order])
        # the keys' newest windows after the batch (the last tuple's, unless it closed)
        ends = np.flatnonzero(np.append(first[1:], True))
        kslot[ks[ends]] = np.where(pos[ends] < S - 1, ms[ends], -1)
        # events in input order: G_open (pos 0) before R (pos S-1)
        pos_t = np.empty(n, dtype=np.int64)
        pos_t[order] = pos
        ms_t = np.empty(n, dtype=np.int64)
        ms_t[order] = ms
        closes = pos_t == S - 1
        if S == 1:
            ev_t = np.repeat(ar, 2)
            is_close = np.tile(np.array([False, True]), n)
        else:
            ev_t = np.flatnonzero(closes | (pos_t == 0))
            is_close = closes[ev_t]
        blk = self._events(ms_t[ev_t], is_close, ev_t, ts, seq, vals, kidx)
        sl.release(ms_t[closes])
        return blk

    def _count_batch(self, ts: I64, seq: I64, vals: F64, kidx: I64) -> Block:
        n = len(seq)
        S, L, M = self._S, self._L, self._M
        sl = self._slots
        self._ensure_kslots()
        ar, order, ks, first, gs_sorted = _key_groups(kidx)
        r = np.empty(n, dtype=np.int64)
        r[order] = ar - gs_sorted
        gstart = np.empty(n, dtype=np.int64)
        gstart[order] = gs_sorted
        old_rows = self._kslots[kidx]  # (n, M), newest first
        newest = old_rows[:, 0]
        phi = np.where(newest >= 0, sl.cnt[newest], L)
        g = phi + r
        base = (g // L) * L
        # open one window per tuple whose key ordinal is a multiple of L
        open_idx = np.flatnonzero(g == base)
        new_slots = sl.alloc(len(open_idx))
        self._init_slots(new_slots, kidx[open_idx], seq[open_idx], -1, seq[open_idx],
                         ts[open_idx])
        open_slot = np.full(n, -1, dtype=np.int64)
        open_slot[open_idx] = new_slots
        if M == 1:
            existing = base <= 0
            opener = order[np.where(existing, gstart, gstart + base - phi)]
            ms = np.where(existing, newest, open_slot[opener])
            mi = ar
            pos = g - base
        else:
            ages = np.arange(M - 1, -1, -1, dtype=np.int64)  # oldest window first
            o = base[:, None] - ages[None, :] * L
            valid = o > (g - S)[:, None]
            existing = o <= 0
            a = np.clip((-o) // L, 0, M - 1)
            slot_ex = np.take_along_axis(old_rows, a, axis=1)
            rel = np.where(existing, 0, o - phi[:, None])
            slot_new = open_slot[order[gstart[:, None] + rel]]
            slot = np.where(existing, slot_ex, slot_new)
            valid &= slot >= 0
            vm = valid.ravel()
            mi = np.repeat(ar, M)[vm]
            ms = slot.ravel()[vm]
            pos = (g[:, None] - o).ravel()[vm]
        self._accumulate(ms, vals[mi], ts[mi])
        # events: per membership G_open (pos 0) before R (pos S-1), in membership order
        ev = np.empty((len(ms), 2), dtype=np.bool_)
        np.equal(pos, 0, out=ev[:, 0])
        np.equal(pos, S - 1, out=ev[:, 1])
        flat = np.flatnonzero(ev.ravel())
        em = flat >> 1
        is_close = (flat & 1).astype(np.bool_)
        blk = self._events(ms[em], is_close, mi[em], ts, seq, vals, kidx)
        # the keys' open windows after the batch, newest first
        ends = np.flatnonzero(np.append(first[1:], True))
        kb = ks[ends]
        il = order[ends]
        gl, phl, gsl = g[il], phi[il], gstart[il]
        o2 = ((gl // L) * L)[:, None] - np.arange(M, dtype=np.int64)[None, :] * L
        alive = o2 > (gl - S + 1)[:, None]
        ex2 = o2 <= 0
        a2 = np.clip((-o2) // L, 0, M - 1)
        s_ex = np.take_along_axis(self._kslots[kb], a2, axis=1)
        rel2 = np.where(ex2, 0, o2 - phl[:, None])
        s_new = open_slot[order[gsl[:, None] + np.clip(rel2, 0, None)]]
        self._kslots[kb] = np.where(alive, np.where(ex2, s_ex, s_new), -1)
        sl.release(ms[flat[(flat & 1) == 1] >> 1])
        return blk

    # -- time windows -------------------------------------------------------------
    def _factorize(self, k: I64, m: I64) -> tuple[I64, int]:
        """Codes 0, 1, ... of the distinct (key, m) pairs, in order of first appearance."""
        base = int(m.min())
        span = int(m.max()) - base + 1
        if span * (len(self._keys) + 1) < 2**62:
            codes, uniq = pd.factorize(k * span + (m - base))
        else:  # pragma: no cover - astronomically many keys or a huge time span
            codes, uniq = pd.factorize(pd.MultiIndex.from_arrays([k, m]))
        return np.asarray(codes, dtype=np.int64), len(uniq)

    def _time_batch(self, ts: I64, seq: I64, vals: F64, kidx: I64) -> Block:
        n = len(seq)
        S, L, M = self._S, self._L, self._M
        sl = self._slots
        ar = np.arange(n, dtype=np.int64)
        m = (ts // L)[:, None] - np.arange(M - 1, -1, -1, dtype=np.int64)[None, :]
        valid = (m * L > (ts - S)[:, None]).ravel()
        mi = np.repeat(ar, M)[valid]
        mm = m.ravel()[valid]
        # existing windows through the ring kslots[key, m % M]: the open windows of a key
        # span at most M consecutive m, so the ring holds each; stale entries fail the check
        self._ensure_kslots()
        km = kidx[mi]
        ms = self._kslots[km, mm % M]
        hit = np.flatnonzero(ms >= 0)
        s_hit = ms[hit]
        good = (sl.live[s_hit] & (sl.key_idx[s_hit] == km[hit])
                & (sl.win_start[s_hit] == mm[hit] * L))
        ms[hit[~good]] = -1
        newm = np.flatnonzero(ms < 0)
        if len(newm):
            fac, n_new = self._factorize(km[newm], mm[newm])
            first_at = np.unique(fac, return_index=True)[1]
            op = newm[first_at]  # opening memberships, in order
            new_slots = sl.alloc(n_new)
            ti = mi[op]
            self._init_slots(new_slots, kidx[ti], mm[op] * L, mm[op] * L + S, seq[ti], ts[ti])
            ms[newm] = new_slots[fac]
        else:
            op = _EMPTY_I64
            new_slots = _EMPTY_I64
        self._accumulate(ms, vals[mi], ts[mi])
        live = sl.live_slots()  # includes the new windows
        cs = live[sl.win_end[live] <= ts[-1]]
        cc = np.searchsorted(ts, sl.win_end[cs], side="left")
        ev_slot = np.concatenate([cs, new_slots])
        ev_tuple = np.concatenate([cc, mi[op]])
        ev_phase = np.concatenate([np.zeros(len(cs), np.int64), np.ones(len(op), np.int64)])
        order = np.lexsort((sl.win_start[ev_slot], sl.tau1[ev_slot], sl.win_end[ev_slot],
                            ev_phase, ev_tuple))
        ev_slot, ev_tuple = ev_slot[order], ev_tuple[order]
        is_close = ev_phase[order] == 0
        blk = self._events(ev_slot, is_close, ev_tuple, ts, seq, vals)
        sl.release(cs)
        alive = new_slots[sl.live[new_slots]]
        self._kslots[sl.key_idx[alive], (sl.win_start[alive] // L) % M] = alive
        return blk

    def _close_all_time(self) -> Block:
        sl = self._slots
        live = sl.live_slots()
        order = np.lexsort((sl.win_start[live], sl.tau1[live], sl.win_end[live]))
        slots = live[order]
        k = len(slots)
        n_after = self._n - np.arange(1, k + 1, dtype=np.int64)
        self._n -= k
        assert self._t_now is not None and self._ts_now is not None
        eos = np.full(k, END_OF_STREAM_TS, np.int64)  # flush rows: end-of-stream watermark
        blk = self._block(slots, np.full(k, R, np.int8), eos,
                          np.full(k, self._t_now, np.int64), n_after)
        sl.release(slots)
        return blk

    # -- key compaction -----------------------------------------------------------
    def _live_keys(self) -> tuple[npt.NDArray[np.bool_], I64]:
        """Which registered keys have an open window, and their ``kslots`` rows cleaned.

        Every open window of key ``k`` is referenced from ``kslots[k]`` (count windows:
        the key's open windows, newest first; time windows: the ring, where an entry is
        current iff its slot is live and belongs to ``k``; stale ring entries of time
        windows fail that check). So the live keys and all open windows are found from
        the rows of the registered keys, O(keys * M), without a scan of the slot arrays.
        Returns ``(keep, rows)``: ``keep[k]`` iff key ``k`` has an open window, and
        ``kslots[:len(keys)]`` with every entry that is not a current window set to -1.
        """
        sl = self._slots
        n = len(self._keys)
        rows = np.full((n, self._M), -1, dtype=np.int64)
        h = min(n, self._kslots.shape[0])  # size-1 count windows never grow kslots
        rows[:h] = self._kslots[:h]
        s = np.maximum(rows, 0)
        cur = (rows >= 0) & sl.live[s] & (sl.key_idx[s] == np.arange(n)[:, None])
        rows[~cur] = -1
        return cur.any(axis=1), rows

    def _maybe_compact(self) -> None:
        """Forget the keys that need no state, once the registry has doubled.

        A key needs state iff it has an open window. Forgetting one without is
        indistinguishable from keeping it, for both window kinds:

        * time windows: the key's ring entries are all stale; its next tuple opens the
          windows containing its ts whether the key is new or known;
        * count windows: a key's only count state is its open windows (``kslots[k]``;
          its ordinal is the newest window's count). With none open, its next tuple
          opens a window exactly as a new key's first tuple does (phase ``L``). That
          is the state right after a tumbling window closed (the key's count a multiple
          of the slide); with sliding count windows (``slide < size``) a key that has
          seen a tuple always has an open window and is never forgotten. Size-1 count
          windows keep no window at all, so every key is forgotten.

        This is what recovery does too: a key without an open window at ``t_c`` has no
        row in the eventual checkpoint and restarts fresh after ``load_ec``; the
        reference operator (the oracle) drops a key from its per-key dict when its last
        window closes. Outputs carry keys, never key indices, so rows are unchanged.

        Amortized O(M) per new key: the live keys are counted only when the registry
        has reached ``_compact_at``; then, if more than half of the keys are dead, they
        are dropped and the rest renumbered (registry, ``kslots``, the open windows'
        ``key_idx``). The next count comes after at least as many new keys as the ones
        counted live (and never below :attr:`COMPACT_MIN`), so a count of ``R`` keys
        follows at least ``R / 3`` new ones. Called between batches only (no key index
        is held outside the operator's arrays then).
        """
        n = len(self._keys)
        if n < self._compact_at:
            return
        keep, rows = self._live_keys()
        kept = int(np.count_nonzero(keep))
        if n > 2 * kept:
            self._compact(keep, rows)
            n = kept
        self._compact_at = max(self.COMPACT_MIN, n + kept)

    def _compact(self, keep: npt.NDArray[np.bool_], rows: I64) -> None:
        """Drop the keys not in ``keep``; kept key ``k`` becomes ``cumsum(keep)[k] - 1``.

        ``rows`` are the cleaned ``kslots`` rows of :meth:`_live_keys`; they reference
        every open window, so renumbering the windows through them covers all slots.
        """
        rows = rows[keep]  # row i is the kept key whose new index is i
        kept = len(rows)
        wins = rows >= 0
        self._slots.key_idx[rows[wins]] = np.nonzero(wins)[0]
        kslots = np.full((max(1024, 2 * kept), self._M), -1, dtype=np.int64)
        kslots[:kept] = rows
        self._kslots = kslots
        self._keys.compact(keep)

    # -- reconstruction and background ----------------------------------------------
    def _reconstruct(self, ts: I64, seq: I64, vals: F64, kidx: I64) -> None:
        sl = self._slots
        live = sl.live_slots()
        o = np.argsort(sl.key_idx[live], kind="stable")
        sk, sslots = sl.key_idx[live][o], live[o]
        lo = np.searchsorted(sk, kidx, side="left")
        cnts = np.searchsorted(sk, kidx, side="right") - lo
        rep = np.repeat(np.arange(len(seq), dtype=np.int64), cnts)
        offs = np.arange(len(rep), dtype=np.int64) - np.repeat(np.cumsum(cnts) - cnts, cnts)
        ms = sslots[lo[rep] + offs]
        keep = sl.tau2[ms] < seq[rep]
        ms, mi = ms[keep], rep[keep]
        self._accumulate(ms, vals[mi], ts[mi])

    def _background(self) -> Block | None:
        """The background step; O(1) per batch unless ``G_check`` rows are emitted.

        Returns ``None`` if no step ran (no budget read), else the step's rows (maybe
        none), for which :meth:`process` calls ``spend`` after building the output.

        The oldest footprint comes from :class:`~.store.FootprintOrder` (amortized
        O(1)), and the candidates of a step are walked from it in footprint order until
        the first one the reference's loop would stop at, so a step costs O(rows it
        emits) plus the stale entries it skips, never a scan of all open windows.
        """
        pol = self._policy
        fpo = self._fp_order
        if (not pol.emits_check or fpo is None or self._recon_until is not None
                or self._t_now is None):
            return None
        sl = self._slots
        oldest = fpo.front(sl)
        if oldest < 0:
            return None
        fp_min, tau2_oldest = int(sl.fp_seq[oldest]), int(sl.tau2[oldest])
        q = self._next_out - fp_min if fp_min >= 0 else 0
        if tau2_oldest >= self._t_now:
            return None
        if not pol.wants_check(q, self._t_now - tau2_oldest, self._n):
            return None
        allowed = self._budget.grant()
        if allowed <= 0:
            return None
        # the reference's loop: the j-th oldest window (j = 0, 1, ...) is checkpointed
        # while the extent or the replay length it leaves is over target, it was not
        # written by this step and its footprint is older than t_now; at most `allowed`
        q_target = pol.q_target(self._n)
        picked: list[I64] = []
        got, end = 0, -1
        for cand, pos in fpo.walk(sl, min(allowed, sl.n_live)):
            fpj = sl.fp_seq[cand]
            qj = np.where(fpj >= 0, self._next_out + got + np.arange(len(cand)) - fpj, 0)
            uj = self._t_now - sl.tau2[cand]
            ok = (fpj < self._next_out) & (uj > 0) & ((qj > q_target) | (uj > pol.u))
            n_ok = len(cand) if ok.all() else int(np.argmin(ok))
            if n_ok:
                picked.append(cand[:n_ok])
                got += n_ok
                end = int(pos[n_ok - 1])
            if n_ok < len(cand):
                break
        slots = np.concatenate(picked) if len(picked) > 1 else picked[0] if picked else _EMPTY_I64
        emitted = len(slots)
        blk = self._block(slots, np.full(emitted, G_CHECK, np.int8),
                          np.full(emitted, self._ts_now, np.int64),
                          np.full(emitted, self._t_now, np.int64),
                          np.full(emitted, self._n, np.int64))
        sl.fp_seq[slots] = blk["seq"]
        sl.tau2[slots] = self._t_now
        if emitted:
            fpo.drop_through(end)  # every entry up to the last candidate is stale now
            fpo.push(sl, np.asarray(blk["seq"], dtype=np.int64), slots)
        return blk  # process() spends the budget once the output is built

    # -- the interface ------------------------------------------------------------
    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        cfg = self.config
        cols = decode_input(batch, key_column=cfg.key_column, value_column=cfg.value_column,
                            key_type=cfg.key_type)
        ts, seq, vals = cols.ts, cols.seq, cols.values
        n = len(seq)
        check_order(ts, seq, self._last_ts, self._last_seq)
        if isinstance(cfg.window, TimeWindow):
            cfg.window.check_ts(ts, seq)
        check_resume(ts, seq, self._recon_until, self._recon_ts)
        blocks: list[Block] = []
        if n:
            self._last_ts, self._last_seq = int(ts[-1]), int(seq[-1])
            kidx = self._keys.lookup(cols.keys)
            start = 0
            if self._recon_until is not None:
                start = int(np.searchsorted(seq, self._recon_until, side="right"))
                if start:
                    self._reconstruct(ts[:start], seq[:start], vals[:start], kidx[:start])
                if start < n:
                    self._recon_until = None
            if start < n:
                ts, seq, vals, kidx = ts[start:], seq[start:], vals[start:], kidx[start:]
                if self._is_count and self._S == 1:
                    blocks.append(self._count_size_one(ts, seq, vals, kidx))
                elif self._is_count and self._M == 1:
                    blocks.append(self._count_tumbling(ts, seq, vals, kidx))
                elif self._is_count:
                    blocks.append(self._count_batch(ts, seq, vals, kidx))
                else:
                    blocks.append(self._time_batch(ts, seq, vals, kidx))
                self._t_now, self._ts_now = int(seq[-1]), int(ts[-1])
        bg = self._background()
        if bg is None:
            out = self._to_batch(blocks)
        else:
            blocks.append(bg)
            out = self._to_batch(blocks)
            self._budget.spend(len(bg["seq"]))  # the step's time includes building its rows
        self._maybe_compact()  # after the rows are built: they hold key indices until then
        return out

    def finish(self) -> pa.RecordBatch:
        if self._is_count or self._t_now is None:
            return self._to_batch([])
        return self._to_batch([self._close_all_time()])

    def load_ec(self, ec: pa.Table, *, t_c: int, t_c_ts: int, next_out_seq: int) -> None:
        if self._slots.n_live or self._t_now is not None or self._next_out:
            raise UsageError("load_ec needs a fresh operator")
        ec = ec_rows(ec, self._schema)
        k = ec.num_rows
        if k:
            col = {name: np.asarray(ec.column(name).to_numpy(), dtype=None)
                   for name in ec.schema.names if name != "key"}
            if not np.isin(col["type"], (G_OPEN, G_CHECK)).all():
                raise UsageError("EC rows must all be G_open or G_check footprints")
            kidx = self._keys.lookup(ec.column("key").combine_chunks())
            slots = self._slots.alloc(k)
            sl = self._slots
            sl.key_idx[slots] = kidx
            for f in ("win_start", "win_end", "tau1", "cnt", "first_ts", "last_ts"):
                getattr(sl, f)[slots] = col[f]
            for f in ("sum", "min", "max"):
                getattr(sl, f)[slots] = col[f]
            sl.tau2[slots] = col["t_now"]
            sl.fp_seq[slots] = col["seq"]
            if self._fp_order is not None:
                self._fp_order.rebuild(sl)
            self._ensure_kslots()
            if not self._is_count:
                ring = (sl.win_start[slots] // self._L) % self._M
                if len(np.unique(kidx * self._M + ring)) != k:
                    raise UsageError("EC has time windows of one key that cannot be open together")
                self._kslots[kidx, ring] = slots
            else:
                order = np.lexsort((-sl.win_start[slots], kidx))
                so, ko = slots[order], kidx[order]
                first = np.ones(k, dtype=np.bool_)
                first[1:] = ko[1:] != ko[:-1]
                gs = np.maximum.accumulate(np.where(first, np.arange(k), 0))
                age = np.arange(k) - gs
                if (age >= self._M).any():
                    raise UsageError("EC has more open windows for one key than the spec allows")
                self._kslots[ko, age] = so
        self._n = k
        self._t_now, self._ts_now = t_c, t_c_ts
        self._next_out = next_out_seq
        self._recon_until, self._recon_ts = t_c, t_c_ts
        self._last_ts = None
        self._last_seq = int(self._slots.tau2[self._slots.live_slots()].min()) if k else t_c

    def state_at(self) -> OperatorState:
        sl = self._slots
        live = sl.live_slots()
        keys = self._keys.values(sl.key_idx[live]).to_pylist()
        cols = [getattr(sl, f)[live].tolist() for f in (
            "win_start", "win_end", "tau1", "tau2", "fp_seq", "cnt", "sum", "min", "max",
            "first_ts", "last_ts")]
        wins = {(w.key, w.win_start): w for w in map(WindowSnapshot, keys, *cols)}
        return OperatorState(self._n, self._t_now, self._next_out, dict(sorted(wins.items())))
