"""EC load and dump for the vectorized operator: whatever the window kind.

* :func:`load_windows`: the open windows of an eventual checkpoint into fresh slots
  (each EC row is a window's latest footprint: its state, ``tau2 = t_now``,
  ``fp_seq = seq``); the kernel then enters them in its per-key index;
* :func:`reconstruct`: reconstruction mode after ``load_ec``: a replayed tuple of key
  ``k`` is added to every open window of ``k`` whose ``tau2`` is older than it; nothing
  opens, closes or is emitted;
* :func:`snapshot`: the operator's state as an :class:`~.state.OperatorState` (the
  ``state_at`` dump tests and recovery checks compare between implementations).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cec.errors import UsageError
from cec.operator.arrays import I64
from cec.operator.kernel import TupleBatch
from cec.operator.key_registry import KeyRegistry
from cec.operator.slots import WindowSlots
from cec.operator.state import OperatorState, WindowSnapshot, ec_rows
from cec.records import G_CHECK, G_OPEN, output_schema, with_every_field
from cec.window_state import AGGREGATE, FIELDS, LOGGED


def load_windows(ec: pa.Table, schema: pa.Schema, keys: KeyRegistry,
                 slots: WindowSlots, session_gap: int | None = None) -> tuple[I64, I64]:
    """The EC's windows into new slots; returns ``(slots, key indices)`` of them.

    The EC's rows may be of either record format (a field the slots do not track is
    not read; one they track and the rows lack is what it reads as untracked,
    :func:`cec.records.with_every_field`; ``session_gap`` for session windows). Raises
    :class:`~cec.errors.UsageError` unless every row is a ``G_open`` or ``G_check``
    footprint of the output schema.
    """
    if "key" in ec.schema.names and "win_end" in ec.schema.names:
        ec = with_every_field(ec, session_gap)
    ec = ec_rows(ec, output_schema(schema.field("key").type))  # every field, format 1's
    if not ec.num_rows:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    col = {name: np.asarray(ec.column(name).to_numpy(), dtype=None)
           for name in ec.schema.names if name != "key"}
    if not np.isin(col["type"], (G_OPEN, G_CHECK)).all():
        raise UsageError("EC rows must all be G_open or G_check footprints")
    kidx = keys.lookup(ec.column("key").combine_chunks())
    new = slots.alloc(ec.num_rows)
    slots.key_idx[new] = kidx
    for f in FIELDS:  # tau2 is the row's t_now, fp_seq its seq; win_start before win_end
        if f in AGGREGATE and f.name not in slots.tracked:
            continue
        slots.put(f.name, new, col[f.column])
    return new, kidx


def reconstruct(slots: WindowSlots, batch: TupleBatch, session_gap: int | None = None) -> None:
    """Add each replayed tuple to its key's open windows with an older ``tau2``.

    With ``session_gap`` (session windows) a window's end follows its last tuple:
    ``win_end = last_ts + gap``."""
    live = slots.live_slots()
    live_keys = slots.keys_of(live)
    o = np.argsort(live_keys, kind="stable")
    sorted_keys, sorted_slots = live_keys[o], live[o]
    lo = np.searchsorted(sorted_keys, batch.key_idx, side="left")
    n_windows = np.searchsorted(sorted_keys, batch.key_idx, side="right") - lo
    member_tuple = np.repeat(np.arange(len(batch.seq), dtype=np.int64), n_windows)
    offset = (np.arange(len(member_tuple), dtype=np.int64)
              - np.repeat(np.cumsum(n_windows) - n_windows, n_windows))
    member_slot = sorted_slots[lo[member_tuple] + offset]
    older = slots.seqs("tau2", member_slot) < batch.seq[member_tuple]
    member_slot, member_tuple = member_slot[older], member_tuple[older]
    slots.accumulate(member_slot, batch.values[member_tuple], batch.ts[member_tuple])
    if session_gap is not None:
        slots.win_end[member_slot] = slots.last_ts[member_slot] + session_gap
        slots.note_ends(slots.win_end[member_slot])  # (an EC's end may have been later)


def snapshot(slots: WindowSlots, keys: KeyRegistry, n_open: int, t_now: int | None,
             next_out: int) -> OperatorState:
    """The open windows and counters as a value-comparable :class:`OperatorState`."""
    live = slots.live_slots()
    key_values = keys.values(slots.keys_of(live)).to_pylist()
    cols = [slots.column(f.name, live).tolist() for f in FIELDS]
    wins = {(w.key, w.win_start): w for w in map(WindowSnapshot, key_values, *cols)}
    return OperatorState(n_open, t_now, next_out, dict(sorted(wins.items())))


def windows_columns(slots: WindowSlots, keys: KeyRegistry) -> dict[str, pa.Array]:
    """The open windows' identity and partial aggregates as Arrow columns (named as in
    the output schema), in slot order: what a rescale hands to the new partitions."""
    live = slots.live_slots()
    cols: dict[str, pa.Array] = {"key": keys.values(slots.keys_of(live))}
    for f in LOGGED:
        cols[f.name] = pa.array(slots.column(f.name, live))
    return cols
