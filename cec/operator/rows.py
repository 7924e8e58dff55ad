"""Output rows of the vectorized operator: row blocks, output seqs, ``N``, the batch.

A batch's output is built as a list of :data:`Block` s (one column array per output
field, rows in output order) and turned into one Arrow batch by
:meth:`RowWriter.to_batch`. :class:`RowWriter` owns what every row needs whatever the
window kind: the next output seq, ``N`` (the open windows' count), whether ``G_open``
rows are emitted (the policy mode) and the footprints they write (``fp_seq`` and the
:class:`~.footprint_order.FootprintOrder`).

The kernels (:mod:`cec.operator.kernel`) describe a batch's window events (opens and
closes, in output order) and call :meth:`RowWriter.events`; the background step and
end-of-stream closes call :meth:`RowWriter.block`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from cec.aggregates import Reducer
from cec.operator.arrays import F64, I64
from cec.operator.footprint_order import FootprintOrder
from cec.operator.key_registry import KeyRegistry
from cec.operator.slots import WindowSlots
from cec.records import G_OPEN, R, logged_of
from cec.window_state import LOGGED, UNTRACKED, names

#: output rows: one array per field (the output schema's columns but ``key``, which is
#: ``key_idx`` here, and ``value``, computed from the aggregate by :meth:`to_batch`)
Block = dict[str, npt.NDArray[np.generic]]
_ROW_FIELDS = ("ts", "seq", "type", "t_now", "n_open", "key_idx")
_FLOAT_FIELDS = tuple(f.name for f in LOGGED if f.dtype is np.float64)
#: what a G_open row holds in each aggregate field: of its one tuple (value v, time t)
_OPENED = {"sum": "v", "min": "v", "max": "v", "first_ts": "t", "last_ts": "t"}


class RowWriter:
    """Builds output rows; owns the output seq counter, ``N`` and the footprints."""

    def __init__(self, slots: WindowSlots, keys: KeyRegistry, reducer: Reducer,
                 schema: pa.Schema, *, emits_open: bool,
                 fp_order: FootprintOrder | None) -> None:
        self.slots = slots
        self.keys = keys
        self.reducer = reducer
        self.schema = schema
        #: the window-state fields the rows keep (the schema's: record format 1 or 2)
        self.logged = names(logged_of(schema))
        #: every field of a block
        self.block_fields = (*_ROW_FIELDS, *self.logged)
        #: the aggregate fields of a block but ``cnt``
        self._agg = tuple(f for f in self.logged if f in _OPENED)
        #: the policy emits ``G_open`` rows (every mode but ``none``)
        self.emits_open = emits_open
        #: the seq of the next output row
        self.next_out = 0
        #: ``N``: the number of open windows
        self.n_open = 0
        #: the open windows by footprint, kept from the start when the background step
        #: runs, else from the operator's first q/u query on (None until then)
        self.fp_order = fp_order

    def new_seqs(self, k: int, stride: int = 1) -> I64:
        """Output seqs for ``k`` rows each taking ``stride`` positions (the last one's)."""
        first = self.next_out
        self.next_out += stride * k
        return np.arange(first + stride - 1, self.next_out, stride, dtype=np.int64)

    def block(self, slots: I64, typ: npt.NDArray[np.int8], ts: I64, t_now: I64,
              n_open: I64) -> Block:
        """Rows with the slots' current state; seq numbers assigned here."""
        sl = self.slots
        return {
            "ts": ts, "seq": self.new_seqs(len(slots)), "type": typ, "t_now": t_now,
            "n_open": n_open, "key_idx": sl.column("key_idx", slots),
            **{f: sl.column(f, slots) for f in self.logged},
        }

    def events(self, slots: I64, is_close: npt.NDArray[np.bool_], tuples: I64, ts: I64,
               seq: I64, vals: F64, kidx: I64 | None = None,
               session_gap: int | None = None) -> Block:
        """The foreground rows of a batch's window events, in output order.

        Events are opens (``is_close`` False) and closes of ``slots`` caused by input
        tuple ``tuples`` (indices into the batch's ``ts``, ``seq``, ``vals``); ``N``
        after each event is counted over all of them, then the opens are dropped when
        the policy emits no ``G_open``. ``kidx`` (the batch's key indices) is given for
        count windows, whose ``G_open`` rows take their identity from the opening tuple;
        ``session_gap`` for session windows, whose ``G_open`` rows end at the opening
        tuple's ``ts`` plus the gap (the slot's ``win_end`` has moved on since).
        """
        n_after = self.n_open + np.cumsum(np.where(is_close, -1, 1))
        if len(n_after):
            self.n_open = int(n_after[-1])
        if not self.emits_open:
            slots, tuples, n_after = slots[is_close], tuples[is_close], n_after[is_close]
            is_close = np.ones(len(slots), dtype=np.bool_)
        return self._rows(slots, is_close, tuples, n_after, ts, seq, vals, kidx, session_gap)

    def _rows(self, slots: I64, is_close: npt.NDArray[np.bool_], tuples: I64, n_open: I64,
              ts: I64, seq: I64, vals: F64, kidx: I64 | None,
              session_gap: int | None = None) -> Block:
        """Foreground rows: R with the slot's state, G_open with the opening tuple's.

        Only the R rows read the (large, randomly accessed) slot arrays; a G_open row is
        built from its tuple, and for count windows (``kidx`` given) so is its identity.
        A G_open row is the window's footprint: its seq goes to ``fp_seq``.
        """
        sl = self.slots
        k = len(slots)
        ci = np.flatnonzero(is_close)
        if len(ci) == k:
            return self.block(slots, np.full(k, R, np.int8), ts[tuples], seq[tuples], n_open)
        oi = np.flatnonzero(~is_close)
        seqs = self.new_seqs(k)
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
            "cnt": merge(sl.counts(cs), 1, np.int64),
        }
        for f in self._agg:
            if _OPENED[f] == "v":
                blk[f] = merge(sl.column(f, cs), v_o, np.float64)
            else:
                blk[f] = merge(sl.column(f, cs), ts_o, np.int64)
        if kidx is not None:  # count windows: id (key, seq of the opening tuple), end -1
            seq_o = seq[to]
            blk["key_idx"] = merge(sl.key_idx[cs], kidx[to], np.int64)
            blk["win_start"] = merge(sl.win_start[cs], seq_o, np.int64)
            blk["win_end"] = merge(sl.ends(cs), -1, np.int64)
            blk["tau1"] = merge(sl.seqs("tau1", cs), seq_o, np.int64)
        else:
            for f in ("key_idx", "win_start", "win_end", "tau1"):
                blk[f] = sl.column(f, slots)
            if session_gap is not None:  # a session's end at its opening tuple
                blk["win_end"][oi] = ts_o + session_gap
        if self.emits_open:
            s_o, f_o = slots[oi], seqs[oi]
            sl.set_seqs("fp_seq", s_o, f_o)
            if self.fp_order is not None:
                self.fp_order.push(sl, f_o, s_o)
        return blk

    def to_batch(self, blocks: list[Block]) -> pa.RecordBatch:
        """One output batch of the blocks' rows, in order (keys and values filled in)."""
        blocks = [b for b in blocks if len(b["seq"])]
        if not blocks:
            cols: Block = {
                f: np.empty(0, dtype=np.float64 if f in _FLOAT_FIELDS
                            else np.int8 if f == "type" else np.int64)
                for f in self.block_fields
            }
        elif len(blocks) == 1:
            cols = blocks[0]
        else:
            cols = {f: np.concatenate([b[f] for b in blocks]) for f in self.block_fields}
        cnt = np.asarray(cols["cnt"], dtype=np.int64)

        def agg(name: str) -> F64:  # a field the function reads, or its identity
            if name in cols:
                return np.asarray(cols[name], np.float64)
            return np.broadcast_to(np.float64(UNTRACKED[name]), cnt.shape)

        value = self.reducer.result_array(cnt, agg("sum"), agg("min"), agg("max"))
        cols = {**cols, "type": np.asarray(cols["type"], dtype=np.int8), "cnt": cnt,
                "value": value}
        arrays = [
            self.keys.values(np.asarray(cols["key_idx"], dtype=np.int64)) if f.name == "key"
            else pa.array(cols[f.name], f.type)
            for f in self.schema
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
