"""The vectorized aggregate operator: a whole input batch per handful of numpy calls.

Same semantics and output as :class:`cec.operator.reference.ReferenceOperator` (see
:mod:`cec.operator.base`), row for row; this is the production hot path.

:class:`VectorOperator` is the shell every window kind shares; what one kind computes
from a batch is its kernel's (:mod:`cec.operator.kernel`, one module per kind). The
pieces:

* keys become dense indices through a hashed lookup (:class:`~.key_registry.KeyRegistry`),
  open windows live in slots of parallel arrays (:class:`~.slots.WindowSlots`), each
  key's open windows are found through :class:`~.key_index.KeyWindows`;
* the kernel (:mod:`.count_tumbling`, :mod:`.count_sliding`, :mod:`.time_windows`)
  assigns tuples to windows arithmetically, opens, updates (unbuffered ``ufunc.at`` in
  input order, so float sums are bit-identical to the reference's) and closes windows;
* a watermark (:meth:`VectorOperator.watermark`) closes through the kernel's
  ``close_due``: the windows a tuple at ``ts = w`` would close first, in the same order;
* output rows, output seqs, ``N`` and the ``G_open`` footprints: :mod:`.rows`; the
  background step (``G_check``): :mod:`.background`; EC load, reconstruction and the
  state dump: :mod:`.ec_io`;
* keys without an open window are forgotten now and then (:meth:`VectorOperator._maybe_compact`),
  so per-key memory follows the live keys, not every key ever seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from cec.errors import UsageError
from cec.operator.background import checkpoint_step
from cec.operator.base import OperatorConfig
from cec.operator.count_sliding import CountSlidingKernel
from cec.operator.count_tumbling import CountSizeOneKernel, CountTumblingKernel
from cec.operator.ec_io import load_windows, reconstruct, snapshot, windows_columns
from cec.operator.footprint_order import FootprintOrder
from cec.operator.kernel import TupleBatch, WindowKernel, WindowShape
from cec.operator.key_index import KeyWindows
from cec.operator.key_registry import KeyRegistry
from cec.operator.rows import Block, RowWriter
from cec.operator.sessions import SessionKernel
from cec.operator.slot_layout import slot_layout
from cec.operator.slots import WindowSlots
from cec.operator.state import OperatorState
from cec.operator.time_windows import TimeKernel
from cec.policy import PolicyConfig, budget_for
from cec.records import (
    Position,
    check_after_watermark,
    check_order,
    check_resume,
    check_watermark,
    decode_input,
    output_schema,
)
from cec.windows import CountWindow, SessionWindow, TimeWindow, WindowSpec, gap_of


def make_kernel(spec: WindowSpec, slots: WindowSlots, by_key: KeyWindows) -> WindowKernel:
    """The kernel of a window spec (the table in :mod:`cec.operator.kernel`)."""
    if isinstance(spec, CountWindow):
        shape = WindowShape(spec.size, spec.slide, spec.max_open_per_key)
        if spec.size == 1:
            return CountSizeOneKernel(slots, by_key)
        if shape.max_open == 1:
            return CountTumblingKernel(shape, slots, by_key)
        return CountSlidingKernel(shape, slots, by_key)
    if isinstance(spec, SessionWindow):
        return SessionKernel(spec.gap_us, slots, by_key)
    return TimeKernel(WindowShape(spec.size_us, spec.slide_us, spec.max_open_per_key),
                      slots, by_key)


@dataclass
class StreamPosition:
    """Where the operator is in its input stream (``None``: not yet known)."""

    #: seq of the last tuple processed (``t_c`` after ``load_ec``)
    t_now: int | None = None
    #: ts of that tuple (``t_c_ts`` after ``load_ec``)
    ts_now: int | None = None
    #: ts of the last input tuple, for the order check (``None`` after ``load_ec``)
    last_ts: int | None = None
    #: seq of the last input tuple (after ``load_ec``: the replay starts after it)
    last_seq: int | None = None
    #: after ``load_ec``: ``t_c`` while tuples with ``seq <= t_c`` reconstruct, else None
    recon_until: int | None = None
    #: after ``load_ec``: ``t_c_ts`` (the first tuple after ``t_c`` must not be older)
    recon_ts: int | None = None
    #: the largest event time seen: a tuple's ts or a watermark applied (``t_c_ts``
    #: after ``load_ec``); a watermark not above it is a no-op
    event_time: int | None = None
    #: the last watermark applied or consumed ``(ts=W, seq)``: later tuples follow it
    watermark: Position | None = None

    def saw(self, ts: int) -> None:
        """Event time has reached ``ts`` (a tuple's, or a watermark's)."""
        if self.event_time is None or ts > self.event_time:
            self.event_time = ts

    def note_watermark(self, w: int, seq: int) -> None:
        """A watermark ``w`` after seq ``seq`` was applied or consumed."""
        if self.watermark is None or w > self.watermark.ts:
            self.watermark = Position(w, seq)

    def consumes(self, w: int, seq: int) -> bool:
        """In reconstruction mode, a watermark at ``(seq, w) <= (t_c, t_c_ts)``: its
        effect is in the EC already (nothing closes; the EC's windows were open at
        ``t_c_ts >= w``)."""
        return (self.recon_until is not None and self.recon_ts is not None
                and (seq, w) <= (self.recon_until, self.recon_ts))

    def is_noop(self, w: int) -> bool:
        """A watermark not above the event time seen changes nothing."""
        return self.event_time is not None and w <= self.event_time


class VectorOperator:
    """Batch-at-a-time implementation of the CEC aggregate operator."""

    #: registry size below which keys are never compacted (see :meth:`_maybe_compact`)
    COMPACT_MIN = 4096

    def __init__(self, config: OperatorConfig) -> None:
        self.config = config
        self._policy = config.policy
        self._budget = budget_for(config.policy, config.clock)
        self._schema = output_schema(config.key_type, config.logged)
        #: the keys seen (and not forgotten by compaction) as dense key indices
        self._keys = KeyRegistry(config.key_type)
        #: the open windows: identity, footprint and partial aggregate, one slot each
        self._slots = WindowSlots(memory=config.memory, layout=slot_layout(config.window),
                                  tracked=config.tracked)
        #: each key's open windows' slots (layout per window kind: see KeyWindows)
        self._by_key = KeyWindows(config.window.max_open_per_key)
        #: what the window kind computes from a batch
        self._kernel = make_kernel(config.window, self._slots, self._by_key)
        #: output rows, the next output seq, N and the footprint order
        self._out = RowWriter(
            self._slots, self._keys, config.reducer, self._schema,
            emits_open=config.policy.emits_open,
            fp_order=FootprintOrder() if config.policy.emits_check else None)
        #: t_now and the input-order and reconstruction bookkeeping
        self._pos = StreamPosition()
        #: key compaction: the registry size at which the live keys are counted next
        self._compact_at = self.COMPACT_MIN

    # -- properties ---------------------------------------------------------------
    @property
    def n_open(self) -> int:
        return self._out.n_open

    @property
    def t_now(self) -> int | None:
        return self._pos.t_now

    @property
    def next_out_seq(self) -> int:
        return self._out.next_out

    @property
    def current_watermark(self) -> int | None:
        """The last watermark applied (or consumed in reconstruction mode), ``None``
        before the first (and after ``load_ec``, until the replay brings one)."""
        wm = self._pos.watermark
        return None if wm is None else wm.ts

    def _oldest(self) -> tuple[int, int] | None:
        """(fp_seq, tau2) of the window with the oldest footprint."""
        sl = self._slots
        if sl.n_live == 0:
            return None
        out = self._out
        if out.fp_order is None and self._policy.emits_open:  # every window has one
            out.fp_order = FootprintOrder()
            out.fp_order.rebuild(sl)
        if out.fp_order is not None:
            w = out.fp_order.front(sl)
            return sl.seq_at("fp_seq", w), sl.seq_at("tau2", w)
        live = sl.live_slots()
        fp = sl.seqs("fp_seq", live)
        fpmin = int(fp.min())
        return fpmin, int(sl.seqs("tau2", live)[fp == fpmin].min())

    @property
    def q(self) -> int:
        o = self._oldest()
        return 0 if o is None or o[0] < 0 else self._out.next_out - o[0]

    @property
    def u(self) -> int:
        o = self._oldest()
        t_now = self._pos.t_now
        return 0 if o is None or t_now is None else t_now - o[1]

    @property
    def policy(self) -> PolicyConfig:
        """The background policy in force (the spec's, or a recovery-time objective's)."""
        return self._policy

    def retarget(self, *, q: int, u: int, ci_ms: float) -> None:
        """New targets ``Q``/``U`` and budget ``CI`` for the background step (set by a
        recovery-time objective, :func:`cec.policy.rto_targets`): they change when
        ``G_check`` rows come, never a result."""
        self._policy = replace(self._policy, q=q, u=u, ci_ms=ci_ms)
        self._budget.ci_ms = ci_ms

    # -- key compaction -----------------------------------------------------------
    def _maybe_compact(self) -> None:
        """Forget the keys that need no state, once the registry has doubled.

        A key needs state iff it has an open window. Forgetting one without is
        indistinguishable from keeping it, for every window kind:

        * time windows: the key's ring entries are all stale; its next tuple opens the
          windows containing its ts whether the key is new or known;
        * count windows: a key's only count state is its open windows (its row of
          :class:`~.key_index.KeyWindows`; its ordinal is the newest window's count).
          With none open, its next tuple opens a window exactly as a new key's first
          tuple does (phase ``slide``). That is the state right after a tumbling window
          closed (the key's count a multiple of the slide); with sliding count windows
          (``slide < size``) a key that has seen a tuple always has an open window and
          is never forgotten. Size-1 count windows keep no window at all, so every key
          is forgotten.

        This is what recovery does too: a key without an open window at ``t_c`` has no
        row in the eventual checkpoint and restarts fresh after ``load_ec``; the
        reference operator (the oracle) drops a key from its per-key dict when its last
        window closes. Outputs carry keys, never key indices, so rows are unchanged.

        Amortized O(max_open) per new key: the live keys are counted only when the
        registry has reached ``_compact_at``; then, if more than half of the keys are
        dead, they are dropped and the rest renumbered (registry, per-key index, the
        open windows' ``key_idx``). The next count comes after at least as many new keys
        as the ones counted live (and never below :attr:`COMPACT_MIN`), so a count of
        ``R`` keys follows at least ``R / 3`` new ones. Called between batches only (no
        key index is held outside the operator's arrays then).
        """
        n = len(self._keys)
        if n < self._compact_at:
            return
        kept = int(np.count_nonzero(self._by_key.live_keys(n, self._slots)))
        if n > 2 * kept:
            keep, rows = self._by_key.current_rows(n, self._slots)
            self._by_key.compact(keep, rows, self._slots)
            self._keys.compact(keep)
            n = kept
        self._compact_at = max(self.COMPACT_MIN, n + kept)

    # -- the interface ------------------------------------------------------------
    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        cfg = self.config
        pos = self._pos
        cols = decode_input(batch, key_column=cfg.key_column, value_column=cfg.value_column,
                            key_type=cfg.key_type)
        ts, seq, vals = cols.ts, cols.seq, cols.values
        n = len(seq)
        check_order(ts, seq, pos.last_ts, pos.last_seq)
        if isinstance(cfg.window, TimeWindow | SessionWindow):
            cfg.window.check_ts(ts, seq)
        check_resume(ts, seq, pos.recon_until, pos.recon_ts)
        check_after_watermark(ts, seq, pos.watermark)
        blocks: list[Block] = []
        if n:
            pos.last_ts, pos.last_seq = int(ts[-1]), int(seq[-1])
            pos.saw(pos.last_ts)
            kidx = self._keys.lookup(cols.keys)
            start = 0
            if pos.recon_until is not None:
                start = int(np.searchsorted(seq, pos.recon_until, side="right"))
                if start:
                    reconstruct(self._slots, TupleBatch(
                        ts[:start], seq[:start], vals[:start], kidx[:start], len(self._keys)),
                        session_gap=gap_of(cfg.window))
                if start < n:
                    pos.recon_until = None
            if start < n:
                tail = TupleBatch(ts[start:], seq[start:], vals[start:], kidx[start:],
                                  len(self._keys))
                blocks.append(self._kernel.step(tail, self._out))
                pos.t_now, pos.ts_now = int(seq[-1]), int(ts[-1])
        out = self._with_background(blocks)
        self._maybe_compact()  # after the rows are built: they hold key indices until then
        return out

    def _with_background(self, blocks: list[Block]) -> pa.RecordBatch:
        """The output batch of ``blocks`` then the background step's rows, if any."""
        pos = self._pos
        bg = None
        if pos.recon_until is None and pos.t_now is not None:
            assert pos.ts_now is not None
            bg = checkpoint_step(self._policy, self._budget, self._out, pos.t_now, pos.ts_now)
        if bg is None:
            return self._out.to_batch(blocks)
        blocks.append(bg)
        out = self._out.to_batch(blocks)
        self._budget.spend(len(bg["seq"]))  # the step's time includes building its rows
        return out

    def watermark(self, w: int, seq: int) -> pa.RecordBatch:
        """Event time has reached ``w`` after the input's seq ``seq`` (the semantics in
        :mod:`cec.operator.base`): the windows a tuple at ``ts = w`` would close close,
        through the kernel's close path (:meth:`~.kernel.WindowKernel.close_due`), then
        the background step runs as after a batch."""
        w, seq = int(w), int(seq)
        pos = self._pos
        if pos.consumes(w, seq):
            pos.note_watermark(w, seq)
            return self._out.to_batch([])
        if pos.is_noop(w):
            return self._out.to_batch([])
        check_watermark(w, seq, pos.last_seq, pos.watermark)
        pos.recon_until = None
        pos.saw(w)
        pos.note_watermark(w, seq)
        pos.t_now, pos.ts_now = seq, w
        closes = self._kernel.close_due(self._out, w, seq)
        return self._with_background([] if closes is None else [closes])

    def finish(self) -> pa.RecordBatch:
        t_now = self._pos.t_now
        closes = None if t_now is None else self._kernel.close_all(self._out, t_now)
        return self._out.to_batch([] if closes is None else [closes])

    def finish_parts(self, rows: int) -> Iterator[pa.RecordBatch]:
        """:meth:`finish`'s rows in batches of at most ``rows`` rows, in order (the same
        rows; none when no window closes): a task appends each as it comes instead of
        holding every open window's row at once."""
        t_now = self._pos.t_now
        if t_now is None:
            return
        for blk in self._kernel.close_all_parts(self._out, t_now, rows):
            yield self._out.to_batch([blk])

    def load_ec(self, ec: pa.Table, *, t_c: int, t_c_ts: int, next_out_seq: int) -> None:
        if self._slots.n_live or self._pos.t_now is not None or self._out.next_out:
            raise UsageError("load_ec needs a fresh operator")
        slots, kidx = load_windows(ec, self._schema, self._keys, self._slots,
                                   gap_of(self.config.window))
        k = len(slots)
        if k:
            if self._out.fp_order is not None:
                self._out.fp_order.rebuild(self._slots)
            self._by_key.ensure(len(self._keys))
            self._kernel.index_loaded(slots, kidx)
        self._out.n_open = k
        self._out.next_out = next_out_seq
        last_seq = int(self._slots.seqs("tau2", self._slots.live_slots()).min()) if k else t_c
        self._pos = StreamPosition(t_now=t_c, ts_now=t_c_ts, last_ts=None, last_seq=last_seq,
                                   recon_until=t_c, recon_ts=t_c_ts, event_time=t_c_ts)

    def open_windows(self) -> pa.Table:
        """The open windows (key, bounds, ``tau1``, partial aggregate) as a table, one
        row each: :meth:`state_at` without its per-window Python objects."""
        return pa.table(windows_columns(self._slots, self._keys))

    def state_at(self) -> OperatorState:
        return snapshot(self._slots, self._keys, self._out.n_open, self._pos.t_now,
                        self._out.next_out)
