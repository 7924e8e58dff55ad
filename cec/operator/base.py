"""The operator interface (docs/ARCHITECTURE.md §4) and its frozen config.

Both implementations (:class:`cec.operator.reference.ReferenceOperator`, the oracle,
and :class:`cec.operator.vector.VectorOperator`, production) follow the semantics
written in :mod:`cec.records`, :mod:`cec.windows`, :mod:`cec.aggregates` and
:mod:`cec.policy`, summarised here:

* ``process(batch)`` consumes one input batch and returns its whole output as one
  batch (possibly 0 rows). Per input tuple ``p``: (1) all open time windows (any key)
  with ``win_end <= ts(p)`` close, ordered ``(win_end, tau1, win_start)``, each an
  ``R``; (2) the windows of ``p``'s key that ``p`` belongs to, in ``win_start`` order:
  update, update and close (``R``), or open (``G_open`` with the state after ``p``; a
  count window of size 1 gives ``G_open`` then ``R``). ``N`` is decremented before an
  ``R`` and incremented before a ``G_open``; rows carry ``t_now = seq(p)`` and
  ``ts = ts(p)``. After the batch's foreground output, the background step of
  :mod:`cec.policy` may append ``G_check`` rows (state now, ``t_now`` = last seq).
* Session windows (:class:`cec.windows.SessionWindow`) are time windows in (1) but
  close iff ``win_end < ts(p)`` (a tuple at exactly ``last_ts + gap`` joins, as in
  Spark); in (2) a key's tuple joins its one open session (``win_end`` moves to
  ``ts + gap``) or opens one. In reconstruction mode a session's ``win_end`` follows
  the tuples added (``last_ts + gap``).
* ``watermark(w, seq)``: event time has reached ``w`` (every upstream row with
  ``ts < w`` has been delivered) after the upstream log's row ``seq`` (its last seq, -1
  for none). It is step (1) of a tuple at ``ts = w``, without the tuple: time windows
  with ``win_end <= w`` and sessions with ``win_end < w`` close (a tuple at exactly
  ``w`` would still join a session ending at ``w``), count windows never; same order,
  each an ``R`` with ``ts = w``, ``t_now = seq``, ``N`` decremented before it. Then the
  background step runs as after a batch (``G_check`` rows with ``ts = w``, ``t_now =
  seq``). A watermark not above the largest event time seen (a tuple's ``ts``, an
  earlier watermark, ``t_c_ts`` after ``load_ec``) is a no-op: 0 rows, nothing changes.
  After a watermark ``w`` after seq ``s``, a tuple with ``ts < w`` or ``seq <= s`` is an
  :class:`~cec.errors.InputOrderError`; so is a watermark (not a no-op) whose ``seq``
  is below the last tuple's. The rows closed are the rows a later tuple would have
  closed (same window, state and order), only earlier. ``current_watermark`` is the
  last ``w`` applied or consumed (``None`` before the first). It is not part of the
  state dump: after ``load_ec`` the output's position ``(t_c, t_c_ts)`` gives every
  decision a replayed watermark takes (see ``load_ec``), and the replay re-delivers the
  watermarks (docs/ARCHITECTURE.md "Watermarks").
* ``finish()``: end of bounded input: all open time windows and sessions close (``R``, same order,
  ``t_now`` = last seq); count windows stay open. ``finish_parts(rows)``: the same rows in
  batches of at most ``rows`` rows, in order (instead of ``finish()``, not with it).
* ``load_ec(ec, t_c=, t_c_ts=, next_out_seq=)`` on a fresh operator: ``ec`` holds one
  output-schema row per open window (its latest footprint: state, ``t_now`` = ``tau2``,
  ``seq`` = footprint output seq). Afterwards tuples with ``seq <= t_c`` are consumed in
  reconstruction mode: a tuple of key ``k`` is applied to every EC window of ``k`` whose
  ``tau2 < seq``; nothing opens, closes or is emitted, and no background step runs
  until a tuple with ``seq > t_c`` has been processed. ``t_now`` is ``t_c`` meanwhile;
  the replay must start after ``T = min tau2`` (``t_c`` for an empty EC), replayed
  tuples must be in order among themselves, and the first tuple after ``t_c`` must not
  have ``ts < t_c_ts`` (else :class:`~cec.errors.InputOrderError`). Positions are
  ordered ``(seq, ts)`` lexicographically: a replayed watermark at ``(seq, w) <= (t_c,
  t_c_ts)`` is consumed in reconstruction mode (nothing closes, nothing is emitted: each
  EC window was open at ``t_c_ts >= w``); one above it that is not a no-op ends
  reconstruction mode as a tuple with ``seq > t_c`` does. The replay delivers the tuples
  with ``seq > T`` and the watermarks with ``seq >= T``, in their order (it may leave
  out those up to ``(t_c, t_c_ts)``: consumed, they change nothing but
  ``current_watermark``).
* Errors: input that breaks the order raises before the batch changes any state; a
  malformed batch (missing column, nulls, NaN values) raises
  :class:`~cec.errors.UsageError`; bad specs raise :class:`~cec.errors.SpecError`.
* In mode ``none`` windows have no footprint: ``tau2 = tau1``, ``fp_seq = -1``, and
  ``q`` is 0.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from cec.aggregates import Reducer, get_reducer
from cec.errors import SpecError
from cec.operator.memory import WindowMemory
from cec.operator.state import OperatorState
from cec.policy import Clock, PolicyConfig
from cec.records import key_arrow_type
from cec.window_state import AGGREGATE, LOGGED, StateField, logged_for, names, tracked_for
from cec.windows import WindowSpec

#: the output-log record formats an operator writes (:attr:`OperatorConfig.record_format`)
RECORD_FORMATS = (1, 2)


@dataclass(frozen=True)
class OperatorConfig:
    """What an aggregate operator computes and how it checkpoints (frozen)."""

    window: WindowSpec
    function: str = "avg"
    key_column: str = "key"
    value_column: str = "value"
    key_type: str = "int64"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    clock: Clock = field(default=time.monotonic, compare=False)
    #: the open windows' memory check (None: none; cec.operator.memory)
    memory: WindowMemory | None = field(default=None, compare=False)
    #: the output rows' format: 2 keeps only the function's aggregate fields (a new
    #: log), 1 all of them (a log begun in format 1 goes on in it; ARCHITECTURE §3)
    record_format: int = 2

    def __post_init__(self) -> None:
        key_arrow_type(self.key_type)
        get_reducer(self.function)
        if self.record_format not in RECORD_FORMATS:
            raise SpecError(f"record format must be one of {RECORD_FORMATS}, "
                            f"not {self.record_format!r}")
        if not self.key_column or not self.value_column or self.key_column == self.value_column:
            raise SpecError("key and value columns must be distinct non-empty names")

    @property
    def reducer(self) -> Reducer:
        return get_reducer(self.function)

    @property
    def logged(self) -> tuple[StateField, ...]:
        """The window-state fields the output rows keep in a column of their own."""
        if self.record_format == 1:
            return LOGGED
        return logged_for(self.function, self.window.kind)

    @property
    def tracked(self) -> tuple[str, ...]:
        """The partial-aggregate fields an open window keeps: every one in format 1
        (its rows log them), else the function's (:func:`~cec.window_state.tracked_for`)
        and a session's ``last_ts`` (its kernel reads it)."""
        if self.record_format == 1:
            return names(AGGREGATE)
        own = tracked_for(self.function, self.window.kind)
        if self.window.kind == "session" and "last_ts" not in own:
            return tuple(n for n in names(AGGREGATE) if n in own or n == "last_ts")
        return own


class AggregateOperator(Protocol):
    """The interface both implementations provide (ARCHITECTURE §4)."""

    config: OperatorConfig

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch: ...

    def watermark(self, w: int, seq: int) -> pa.RecordBatch: ...

    def finish(self) -> pa.RecordBatch: ...

    def finish_parts(self, rows: int) -> Iterator[pa.RecordBatch]: ...

    def load_ec(self, ec: pa.Table, *, t_c: int, t_c_ts: int, next_out_seq: int) -> None: ...

    def state_at(self) -> OperatorState: ...

    @property
    def n_open(self) -> int: ...

    @property
    def t_now(self) -> int | None: ...

    @property
    def next_out_seq(self) -> int: ...

    @property
    def current_watermark(self) -> int | None: ...

    @property
    def q(self) -> int: ...

    @property
    def u(self) -> int: ...
