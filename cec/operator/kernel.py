"""The kernel interface of the vectorized operator: what one window kind computes.

:class:`~cec.operator.vector.VectorOperator` is a shell around one :class:`WindowKernel`,
chosen from the window spec by :func:`cec.operator.vector.make_kernel`:

=========================  ======================  ==================================
window kind                kernel                  module
=========================  ======================  ==================================
count, size 1              ``CountSizeOneKernel``  :mod:`cec.operator.count_tumbling`
count, tumbling            ``CountTumblingKernel`` :mod:`cec.operator.count_tumbling`
count, sliding             ``CountSlidingKernel``  :mod:`cec.operator.count_sliding`
time, tumbling or sliding  ``TimeKernel``          :mod:`cec.operator.time_windows`
session                    ``SessionKernel``       :mod:`cec.operator.sessions`
=========================  ======================  ==================================

From one input batch (:class:`TupleBatch`) a kernel computes, with a handful of numpy
calls and no per-tuple Python:

* the **window assignment**: which windows of its key each tuple belongs to (the
  *memberships*, pairs (tuple, slot)), through the per-key index
  (:class:`~.key_index.KeyWindows`) for windows already open;
* the **windows that open**: new slots (:meth:`~.slots.WindowSlots.alloc`,
  :meth:`~.slots.WindowSlots.open`);
* the **aggregates' updates**: :meth:`~.slots.WindowSlots.accumulate` over the
  memberships in input order (bit-identical float sums);
* the **windows that close**, and all opens and closes in output order, rendered as
  rows by :meth:`~.rows.RowWriter.events` before the closed slots are released.

Everything else is the shell's and the same for every kind (:mod:`cec.operator.vector`):
keys to indices, the input checks, ``G_open``/``G_check`` policy (:mod:`.rows`,
:mod:`.background`), key compaction, EC load and reconstruction (:mod:`.ec_io`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from cec.operator.arrays import F64, I64
from cec.operator.key_index import KeyWindows
from cec.operator.rows import Block, RowWriter
from cec.operator.slots import WindowSlots
from cec.records import END_OF_STREAM_TS, R


@dataclass(frozen=True)
class TupleBatch:
    """The tuples of one input batch a kernel processes (input order, non-empty)."""

    ts: I64  #: event timestamps
    seq: I64  #: input positions (the tuples' ``seq``, increasing)
    values: F64  #: the aggregated values
    key_idx: I64  #: dense key indices (:class:`~.key_registry.KeyRegistry`)
    n_keys: int  #: keys registered so far (every ``key_idx`` is below it)


@dataclass(frozen=True)
class WindowShape:
    """A window spec in the kernels' units (tuples for count, microseconds for time)."""

    size: int  #: a window's length
    slide: int  #: the distance between two consecutive windows' starts
    max_open: int  #: ceil(size / slide): the most windows one key has open at once


@dataclass(frozen=True)
class KeyGroups:
    """A batch in the key-sorted domain: tuples sorted by (key, position).

    Index ``i`` below is a position in that sorted order.
    """

    idx: I64  #: ``arange(n)``
    order: I64  #: ``order[i]``: the batch index of sorted tuple ``i`` (a stable key sort)
    keys: I64  #: ``key_idx[order]``
    first: npt.NDArray[np.bool_]  #: sorted tuple ``i`` is its key's first in the batch
    group_start: I64  #: the sorted index of the first tuple of ``i``'s key

    @property
    def last_of_key(self) -> I64:
        """Sorted indices of each key's last tuple in the batch (keys ascending)."""
        return np.flatnonzero(np.append(self.first[1:], True))


def key_groups(key_idx: I64) -> KeyGroups:
    """The batch's tuples grouped by key (:class:`KeyGroups`); ``key_idx`` non-empty."""
    n = len(key_idx)
    idx = np.arange(n, dtype=np.int64)
    order = np.argsort(key_idx * n + idx)
    keys = key_idx[order]
    first = np.empty(n, dtype=np.bool_)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    group_start = np.maximum.accumulate(np.where(first, idx, 0))
    return KeyGroups(idx, order, keys, first, group_start)


class WindowKernel(Protocol):
    """What one window kind computes (see the module docstring)."""

    def step(self, batch: TupleBatch, out: RowWriter) -> Block:
        """Process one batch: open, update and close windows; return its foreground rows.

        The rows are the opens and closes in output order (:meth:`RowWriter.events`),
        the closed windows' slots are released and the per-key index is up to date.
        """
        ...

    def close_due(self, out: RowWriter, w: int, t_now: int) -> Block | None:
        """A watermark ``w``: the closes a tuple at ``ts = w`` causes before its own
        events (step (1) of :mod:`cec.operator.base`), as ``R`` rows with ``ts = w`` and
        ``t_now``, slots released (``None``: windows without event time, count ones)."""
        ...

    def close_all(self, out: RowWriter, t_now: int) -> Block | None:
        """End of bounded input: the closes of all open windows (``None``: they stay)."""
        ...

    def close_all_parts(self, out: RowWriter, t_now: int, rows: int) -> Iterator[Block]:
        """:meth:`close_all`'s rows in parts of at most ``rows`` rows, in order (none:
        the windows stay)."""
        ...

    def index_loaded(self, slots: I64, key_idx: I64) -> None:
        """Enter windows just loaded from an EC into the per-key index (rows ensured).

        Raises :class:`~cec.errors.UsageError` if they cannot be open together.
        """
        ...



class CountWindowsStayOpen:
    """What the three count kernels answer alike (:mod:`cec.operator.count_tumbling`,
    :mod:`cec.operator.count_sliding`): count windows have no event time, so a
    watermark closes none and the end of the input leaves them open; windows loaded
    from an EC enter the per-key index newest first."""

    slots: WindowSlots
    by_key: KeyWindows

    def close_due(self, out: RowWriter, w: int, t_now: int) -> Block | None:
        return None  # count windows do not close on event time

    def close_all(self, out: RowWriter, t_now: int) -> Block | None:
        return None  # count windows stay open at the end of input

    def close_all_parts(self, out: RowWriter, t_now: int, rows: int) -> Iterator[Block]:
        return iter(())  # count windows stay open at the end of input

    def index_loaded(self, slots: I64, key_idx: I64) -> None:
        self.by_key.fill_newest_first(slots, key_idx, self.slots)

def close_windows(slots: WindowSlots, out: RowWriter, closing: I64, ts: int,
                  t_now: int) -> Block:
    """The ``R`` rows of the windows in ``closing``, closed at event time ``ts`` without
    a tuple (a watermark, or the end of the stream): ordered ``(win_end, tau1,
    win_start)`` as a tuple's closes are, ``N`` decremented before each, ``ts`` and
    ``t_now`` on every row; the slots are released."""
    return _closed(slots, out, _close_order(slots, closing), ts, t_now)


def _close_order(slots: WindowSlots, closing: I64) -> I64:
    """``closing`` ordered ``(win_end, tau1, win_start)``, as a tuple's closes are.

    Sorted on the narrowest keys that give that order (at the end of the input this
    sorts every open window at once: its keys are the task's largest temporaries):
    ``tau1`` as stored (``value + 1``, the same order), and where ``win_end`` is
    ``win_start`` plus a constant (time windows) or a constant (count windows) the
    order is ``(win_start, tau1)`` or ``(tau1, win_start)``."""
    lay = slots.layout
    start, tau1 = slots.win_start[closing], slots.tau1[closing]
    if lay.end_offset is not None:
        keys: tuple[npt.NDArray[np.generic], ...] = (tau1, start)
    elif lay.end_constant is not None:
        keys = (start, tau1)
    else:
        keys = (start, tau1, slots.ends(closing))
    order = np.lexsort(keys)
    del start, tau1, keys
    return closing[order]


def _closed(slots: WindowSlots, out: RowWriter, closing: I64, ts: int, t_now: int) -> Block:
    """The ``R`` rows of ``closing`` (in order), ``N`` decremented before each; the slots
    are released."""
    k = len(closing)
    n_after = out.n_open - np.arange(1, k + 1, dtype=np.int64)
    out.n_open -= k
    blk = out.block(closing, np.full(k, R, np.int8), np.full(k, ts, np.int64),
                    np.full(k, t_now, np.int64), n_after)
    slots.release(closing)
    return blk


def close_every_window(slots: WindowSlots, out: RowWriter, t_now: int) -> Block | None:
    """At the end of the stream every open window closes: ``R`` rows ordered
    ``(win_end, tau1, win_start)`` at the end-of-stream watermark ``END_OF_STREAM_TS``
    (the time and session kernels' ``close_all``)."""
    return close_windows(slots, out, slots.live_slots(), END_OF_STREAM_TS, t_now)


def close_every_window_parts(slots: WindowSlots, out: RowWriter, t_now: int, rows: int
                             ) -> Iterator[Block]:
    """:func:`close_every_window`'s rows in parts of at most ``rows`` rows, in order,
    each part's slots released once its rows are made, so the rows of a million open
    windows are never held at once (with every window open until the end, that one
    batch and its encoding were a third of an operator task's peak memory). For the
    end only: the free list's order (which later opens would follow) differs from
    one release's."""
    closing = _close_order(slots, slots.live_slots())
    for lo in range(0, len(closing), max(1, rows)):
        yield _closed(slots, out, closing[lo:lo + max(1, rows)], END_OF_STREAM_TS, t_now)


class ClosedByEventTime:
    """What the time and session kernels answer alike (:mod:`cec.operator.time_windows`,
    :mod:`cec.operator.sessions`): a watermark ``w`` closes the windows a tuple at ``w``
    would close (their :meth:`due`), the end of the input every open window."""

    slots: WindowSlots

    def due(self, ts: int) -> I64:
        """The open windows (any key) a tuple at ``ts`` closes."""
        raise NotImplementedError

    def close_due(self, out: RowWriter, w: int, t_now: int) -> Block | None:
        """The windows :meth:`due` names at ``w`` close (:func:`close_windows`)."""
        return close_windows(self.slots, out, self.due(w), w, t_now)

    def close_all(self, out: RowWriter, t_now: int) -> Block | None:
        """Every open window closes (:func:`close_every_window`)."""
        return close_every_window(self.slots, out, t_now)

    def close_all_parts(self, out: RowWriter, t_now: int, rows: int) -> Iterator[Block]:
        return close_every_window_parts(self.slots, out, t_now, rows)


def ordered_events(slots: WindowSlots, closing: I64, closer: I64, opening: I64,
                   opener: I64) -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """A batch's window events by causing tuple (``closer``/``opener``: the tuple of each
    closing/opening slot); per tuple the closes, ordered by ``(win_end, tau1,
    win_start)``, before the opens (ordered by ``win_start``). ``(slots, tuples,
    is_close)`` in that order (the time and session kernels)."""
    ev_slot = np.concatenate([closing, opening])
    ev_tuple = np.concatenate([closer, opener])
    ev_is_open = np.concatenate([np.zeros(len(closing), np.int64),
                                 np.ones(len(opening), np.int64)])
    order = np.lexsort((slots.win_start[ev_slot], slots.seqs("tau1", ev_slot), slots.ends(ev_slot),
                        ev_is_open, ev_tuple))
    return ev_slot[order], ev_tuple[order], ev_is_open[order] == 0
