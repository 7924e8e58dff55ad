"""The reference aggregate operator: one tuple at a time, short and obviously right.

It is the oracle of the property tests (the vectorized operator must produce the same
rows) and the definition of the semantics written in :mod:`cec.operator.base`. It keeps
every open window in a dict by id and, per key, a list ordered by ``win_start``; the
oldest footprint is found by a scan. Speed is not a goal.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import pyarrow as pa

from cec import aggregates
from cec.errors import UsageError
from cec.operator.base import OperatorConfig
from cec.operator.state import OperatorState, WindowId, WindowSnapshot, ec_rows
from cec.policy import budget_for
from cec.records import (
    END_OF_STREAM_TS,
    G_CHECK,
    G_OPEN,
    G_OPEN_R,
    Position,
    R,
    check_after_watermark,
    check_order,
    check_resume,
    check_watermark,
    decode_input,
    keys_to_python,
    output_schema,
    with_every_field,
)
from cec.window_state import AGGREGATE, FIELDS, LOGGED, UNTRACKED, names
from cec.windows import CountWindow, SessionWindow, TimeWindow, gap_of

# a window's state (cec.window_state.FIELDS) is its _Window's own fields then its agg's
_OWN = tuple(f for f in FIELDS if f not in AGGREGATE)
_own = attrgetter(*names(_OWN))
_own_logged = attrgetter(*(f.name for f in LOGGED if f in _OWN))
_agg = attrgetter(*names(AGGREGATE))


@dataclass
class _Window:
    """An open window: its key, :data:`_OWN` (its identity and footprint), its aggregate."""

    key: Any
    win_start: int
    win_end: int
    tau1: int
    tau2: int
    fp_seq: int
    agg: aggregates.AggState


class ReferenceOperator:
    """Per-tuple implementation of the CEC aggregate operator (the oracle)."""

    def __init__(self, config: OperatorConfig) -> None:
        self.config = config
        self._reducer = config.reducer
        self._policy = config.policy
        self._budget = budget_for(config.policy, config.clock)
        self._schema = output_schema(config.key_type, config.logged)
        #: the aggregate fields the rows log (all in record format 1)
        self._agg_logged = tuple(f.name for f in config.logged if f in AGGREGATE)
        #: the aggregate fields a window keeps (state_at shows the others as untracked)
        self._tracked = frozenset(config.tracked)
        self._session_gap = gap_of(config.window)
        self._windows: dict[WindowId, _Window] = {}
        self._by_key: dict[Any, list[_Window]] = {}
        self._n = 0
        self._t_now: int | None = None
        self._ts_now: int | None = None
        self._next_out = 0
        self._last_ts: int | None = None
        self._last_seq: int | None = None
        self._recon_until: int | None = None
        self._recon_ts: int | None = None
        self._event_time: int | None = None  # the largest tuple ts or watermark seen
        self._watermark: Position | None = None  # the last watermark (ts=W, seq)
        self._rows: list[tuple[Any, ...]] = []

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

    @property
    def current_watermark(self) -> int | None:
        return None if self._watermark is None else self._watermark.ts

    def _oldest(self) -> _Window | None:
        if not self._windows:
            return None
        return min(self._windows.values(), key=lambda w: (w.fp_seq, w.tau2, w.win_start))

    @property
    def q(self) -> int:
        w = self._oldest()
        return 0 if w is None or w.fp_seq < 0 else self._next_out - w.fp_seq

    @property
    def u(self) -> int:
        w = self._oldest()
        return 0 if w is None or self._t_now is None else self._t_now - w.tau2

    # -- output -------------------------------------------------------------------
    def _emit(self, typ: int, w: _Window) -> int:
        assert self._t_now is not None and self._ts_now is not None
        seq = self._next_out
        self._next_out += 1
        a = w.agg
        self._rows.append((self._ts_now, seq, typ, self._t_now, self._n, w.key,
                           *_own_logged(w), *(getattr(a, n) for n in self._agg_logged),
                           self._reducer.result(a)))
        return seq

    def _flush_rows(self) -> pa.RecordBatch:
        rows, self._rows = self._rows, []
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(self._schema)
        return pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, self._schema, strict=True)],
            schema=self._schema,
        )

    # -- window life cycle --------------------------------------------------------
    def _open(self, key: Any, win_start: int, win_end: int, seq: int, ts: int, v: float) -> None:
        w = _Window(key, win_start, win_end, seq, seq, -1, aggregates.initialize(v, ts))
        self._windows[(key, win_start)] = w
        lst = self._by_key.setdefault(key, [])
        lst.append(w)
        lst.sort(key=lambda x: x.win_start)
        self._n += 1
        if self._policy.emits_open:
            w.fp_seq = self._emit(G_OPEN, w)

    def _close(self, w: _Window) -> None:
        del self._windows[(w.key, w.win_start)]
        self._by_key[w.key].remove(w)
        if not self._by_key[w.key]:
            del self._by_key[w.key]
        self._n -= 1
        self._emit(R, w)

    def _due(self, ts: int) -> list[_Window]:
        """The windows a tuple at ``ts`` closes (none for count windows)."""
        spec = self.config.window
        # a time window ends before its win_end; a session takes a tuple at its win_end
        if isinstance(spec, SessionWindow):
            return [w for w in self._windows.values() if w.win_end < ts]
        if isinstance(spec, TimeWindow):
            return [w for w in self._windows.values() if w.win_end <= ts]
        return []

    def _close_time_windows(self, ts: int) -> None:
        for w in sorted(self._due(ts), key=lambda w: (w.win_end, w.tau1, w.win_start)):
            self._close(w)

    def _apply(self, key: Any, seq: int, ts: int, v: float) -> None:
        spec = self.config.window
        if isinstance(spec, CountWindow):
            existing = list(self._by_key.get(key, []))
            opens = not existing or existing[-1].agg.cnt == spec.slide
            for w in existing:
                aggregates.add(w.agg, v, ts)
                if w.agg.cnt == spec.size:
                    self._close(w)
            if opens:
                self._open(key, seq, -1, seq, ts, v)
                if spec.size == 1:
                    self._close(self._windows[(key, seq)])
                    if self._policy.emits_open:  # G_open, R of one tuple: one G_open+R row
                        r = self._rows.pop()
                        self._rows[-1] = (*r[:2], G_OPEN_R, *r[3:])
        elif isinstance(spec, SessionWindow):
            self._apply_session(spec, key, seq, ts, v)
        else:
            assert isinstance(spec, TimeWindow)
            for start in spec.starts_containing(ts):
                tw = self._windows.get((key, start))
                if tw is None:
                    self._open(key, start, start + spec.size_us, seq, ts, v)
                else:
                    aggregates.add(tw.agg, v, ts)

    def _apply_session(self, spec: SessionWindow, key: Any, seq: int, ts: int,
                       v: float) -> None:
        sessions = self._by_key.get(key)
        if sessions:  # the key's one open session (win_end >= ts: not closed)
            aggregates.add(sessions[0].agg, v, ts)
            sessions[0].win_end = ts + spec.gap_us
        else:
            self._open(key, ts, ts + spec.gap_us, seq, ts, v)

    def _reconstruct(self, key: Any, seq: int, ts: int, v: float) -> None:
        for w in self._by_key.get(key, []):
            if w.tau2 < seq:
                aggregates.add(w.agg, v, ts)
                if isinstance(self.config.window, SessionWindow):
                    w.win_end = w.agg.last_ts + self.config.window.gap_us

    # -- the interface ------------------------------------------------------------
    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        cfg = self.config
        cols = decode_input(
            batch, key_column=cfg.key_column, value_column=cfg.value_column,
            key_type=cfg.key_type,
        )
        check_order(cols.ts, cols.seq, self._last_ts, self._last_seq)
        if isinstance(cfg.window, TimeWindow | SessionWindow):
            cfg.window.check_ts(cols.ts, cols.seq)
        check_resume(cols.ts, cols.seq, self._recon_until, self._recon_ts)
        check_after_watermark(cols.ts, cols.seq, self._watermark)
        keys = keys_to_python(cols.keys)
        for ts_, seq_, key, v in zip(
            cols.ts.tolist(), cols.seq.tolist(), keys, cols.values.tolist(), strict=True
        ):
            self._last_ts, self._last_seq = ts_, seq_
            self._event_time = ts_ if self._event_time is None else max(self._event_time, ts_)
            if self._recon_until is not None:
                if seq_ <= self._recon_until:
                    self._reconstruct(key, seq_, ts_, v)
                    continue
                self._recon_until = None
            self._t_now, self._ts_now = seq_, ts_
            if isinstance(cfg.window, TimeWindow | SessionWindow):
                self._close_time_windows(ts_)
            self._apply(key, seq_, ts_, v)
        return self._with_background()

    def _with_background(self) -> pa.RecordBatch:
        emitted = self._background()
        out = self._flush_rows()
        if emitted is not None:
            self._budget.spend(emitted)  # the step's time includes building its rows
        return out

    def watermark(self, w: int, seq: int) -> pa.RecordBatch:
        """Event time has reached ``w`` after input seq ``seq``: step (1) of a tuple at
        ``ts = w``, without the tuple, then the background step."""
        if self._recon_until is not None and (seq, w) <= (self._recon_until, self._recon_ts):
            assert not self._due(w), "a watermark up to t_c would close an EC window"
        elif self._event_time is not None and w <= self._event_time:
            return self._flush_rows()  # not above the event time seen: a no-op
        else:
            check_watermark(w, seq, self._last_seq, self._watermark)
            self._recon_until = None
            self._event_time = w
            self._t_now, self._ts_now = seq, w
            self._close_time_windows(w)
        if self._watermark is None or w > self._watermark.ts:
            self._watermark = Position(w, seq)
        return self._with_background()

    def _background(self) -> int | None:
        """The background step: ``None`` if no step ran, else the G_check rows emitted."""
        pol = self._policy
        if not pol.emits_check or self._recon_until is not None or self._t_now is None:
            return None
        oldest = self._oldest()
        if oldest is None or oldest.tau2 >= self._t_now:
            return None
        if not pol.wants_check(self.q, self.u, self._n):
            return None
        allowed = self._budget.grant()
        if allowed <= 0:
            return None
        step_start = self._next_out
        emitted = 0
        while emitted < allowed and pol.wants_check(self.q, self.u, self._n):
            w = self._oldest()
            assert w is not None
            if w.fp_seq >= step_start or w.tau2 >= self._t_now:
                break
            w.fp_seq = self._emit(G_CHECK, w)
            w.tau2 = self._t_now
            emitted += 1
        return emitted

    def finish(self) -> pa.RecordBatch:
        if self._t_now is not None and isinstance(self.config.window,
                                                  TimeWindow | SessionWindow):
            self._ts_now = END_OF_STREAM_TS  # flush rows: the end-of-stream watermark
            self._close_time_windows(END_OF_STREAM_TS)
        return self._flush_rows()

    def finish_parts(self, rows: int) -> Iterator[pa.RecordBatch]:
        """:meth:`finish`'s rows, in batches of at most ``rows`` rows (the oracle's are
        made at once, then sliced)."""
        out = self.finish()
        for lo in range(0, out.num_rows, max(1, rows)):
            yield out.slice(lo, rows)

    def load_ec(self, ec: pa.Table, *, t_c: int, t_c_ts: int, next_out_seq: int) -> None:
        if self._windows or self._t_now is not None or self._next_out:
            raise UsageError("load_ec needs a fresh operator")
        if "key" in ec.schema.names and "win_end" in ec.schema.names:
            ec = with_every_field(ec, self._session_gap)  # either record format
        ec = ec_rows(ec, output_schema(self.config.key_type))
        for row in ec.to_pylist():
            if row["type"] not in (G_OPEN, G_CHECK):
                raise UsageError(f"EC row of type {row['type']} is not a footprint")
            agg = aggregates.AggState(*(row[f.column] for f in AGGREGATE))
            w = _Window(row["key"], **{f.name: row[f.column] for f in _OWN}, agg=agg)
            self._windows[w.key, w.win_start] = w
            self._by_key.setdefault(w.key, []).append(w)
        for lst in self._by_key.values():
            lst.sort(key=lambda x: x.win_start)
        self._n = len(self._windows)
        self._t_now, self._ts_now = t_c, t_c_ts
        self._next_out = next_out_seq
        self._recon_until, self._recon_ts = t_c, t_c_ts
        self._event_time = t_c_ts
        self._last_ts = None
        self._last_seq = min((w.tau2 for w in self._windows.values()), default=t_c)

    def _kept(self, w: _Window) -> tuple[Any, ...]:
        """The window's aggregate as the vector operator's slots hold it: a field it
        does not track as :data:`~cec.window_state.UNTRACKED` (a session's ``first_ts``:
        its ``win_start``)."""
        out = list(_agg(w.agg))
        for i, f in enumerate(AGGREGATE):
            if f.name not in self._tracked:
                out[i] = (w.win_start if f.name == "first_ts" and self._session_gap is not None
                          else UNTRACKED[f.name])
        return tuple(out)

    def state_at(self) -> OperatorState:
        wins = {
            wid: WindowSnapshot(w.key, *_own(w), *self._kept(w))
            for wid, w in sorted(self._windows.items())
        }
        return OperatorState(self._n, self._t_now, self._next_out, wins)
