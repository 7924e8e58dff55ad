"""Per-key index of the open windows: which slots hold the windows of each key.

:class:`KeyWindows` is a ``(keys, max_open)`` table of slot numbers (``-1``: none),
row ``k`` for key index ``k``, ``max_open = ceil(size / slide)`` columns (the most
windows one key can have open at once). The kernels read it to find a tuple's open
windows without a search; what a column means depends on the window kind:

* **count windows**: newest first: ``table[k, age]`` is the key's ``age``-th newest
  open window (``age = 0`` the newest), ``-1`` past the oldest; kept exact by the count
  kernels (an entry is removed when its window closes);
* **time windows**: a ring: window ``[m * slide, m * slide + size)`` of key ``k`` is at
  ``table[k, m % max_open]`` (a key's open time windows span at most ``max_open``
  consecutive ``m``); entries of closed windows are left behind (*stale*) and fail the
  check "slot live, of key ``k``, starting at ``m * slide``".

Key compaction (:meth:`cec.operator.vector.VectorOperator._maybe_compact`) uses
:meth:`current_rows` and :meth:`compact`. Pure in-memory data, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from cec.errors import UsageError
from cec.operator.arrays import I32, I64, grown
from cec.operator.slots import WindowSlots

#: the table's rows looked at at once by :meth:`KeyWindows.live_keys`
LOOK_ROWS = 1 << 14


class KeyWindows:
    """The open windows' slots per key index (see the module docstring for the layout)."""

    #: rows allocated at first and after a compaction, at least
    MIN_ROWS = 1024

    def __init__(self, max_open: int) -> None:
        #: ceil(size / slide): the columns of :attr:`table`
        self.max_open = max_open
        #: ``table[key_idx, j]``: slot of an open window of the key, or -1 (module doc);
        #: int32 (slot numbers are 32-bit, :data:`~cec.operator.arrays.MAX_INDEX`)
        self.table: I32 = np.full((self.MIN_ROWS, max_open), -1, dtype=np.int32)

    def ensure(self, n_keys: int) -> None:
        """Rows for key indices ``0 .. n_keys - 1`` (grows the table by 1.25x)."""
        cap = self.table.shape[0]
        if n_keys > cap:
            bigger = np.full((grown(cap, n_keys), self.max_open), -1, dtype=np.int32)
            bigger[:cap] = self.table
            self.table = bigger

    def _current(self, lo: int, hi: int, slots: WindowSlots
                 ) -> tuple[npt.NDArray[np.bool_], I32]:
        """Rows ``lo:hi`` of the table (``hi`` at most its rows) with every entry that
        is not a current window set to -1, and which of those entries are current."""
        rows = self.table[lo:hi].copy()
        s = np.maximum(rows, 0)
        cur = (rows >= 0) & slots.live[s] & \
            (slots.key_idx[s] == np.arange(lo, hi, dtype=np.int32)[:, None])
        rows[~cur] = -1
        return cur, rows

    def live_keys(self, n_keys: int, slots: WindowSlots) -> npt.NDArray[np.bool_]:
        """``keep[k]`` iff key ``k`` has an open window (``k < n_keys``).

        Every open window of key ``k`` is referenced from ``table[k]`` (count windows
        exactly; time windows among stale entries, which fail the check "slot live and
        of key ``k``"). So the live keys are found from the rows of the registered keys,
        O(keys * max_open), without a scan of the slot arrays; :data:`LOOK_ROWS` rows at
        a time, so that the look's temporaries stay small whatever the keys (at 1.25 M
        keys, the whole table at once made 35 MiB of them: docs/PROFILE.md)."""
        keep = np.zeros(n_keys, dtype=np.bool_)
        for lo, hi in self._blocks(n_keys):
            keep[lo:hi] = self._current(lo, hi, slots)[0].any(axis=1)
        return keep

    def current_rows(self, n_keys: int, slots: WindowSlots) -> tuple[npt.NDArray[np.bool_], I32]:
        """Which keys have an open window (:meth:`live_keys`), and their rows with only
        current entries: ``(keep, rows)``, ``rows`` being ``table[:n_keys]`` with every
        entry that is not a current window set to -1."""
        keep = np.zeros(n_keys, dtype=np.bool_)
        rows = np.full((n_keys, self.max_open), -1, dtype=np.int32)
        for lo, hi in self._blocks(n_keys):
            cur, rows[lo:hi] = self._current(lo, hi, slots)
            keep[lo:hi] = cur.any(axis=1)
        return keep, rows

    def _blocks(self, n_keys: int) -> Iterator[tuple[int, int]]:
        """The table's rows of keys below ``n_keys``, :data:`LOOK_ROWS` at a time, as
        ``(lo, hi)``: keys the table has no row for have no window (size-1 count
        windows never grow the table)."""
        h = min(n_keys, self.table.shape[0])
        for lo in range(0, h, LOOK_ROWS):
            yield lo, min(h, lo + LOOK_ROWS)

    def compact(self, keep: npt.NDArray[np.bool_], rows: I32, slots: WindowSlots) -> None:
        """Keep only the keys in ``keep``; kept key ``k`` becomes ``cumsum(keep)[k] - 1``.

        ``rows`` are the cleaned rows of :meth:`current_rows`; they reference every open
        window, so renumbering the windows' ``key_idx`` through them covers all slots.
        (The caller compacts the key registry the same way.)
        """
        rows = rows[keep]  # row i is the kept key whose new index is i
        kept = len(rows)
        wins = rows >= 0
        slots.key_idx[rows[wins]] = np.nonzero(wins)[0]
        table = np.full((max(self.MIN_ROWS, grown(kept, kept)), self.max_open), -1,
                        dtype=np.int32)
        table[:kept] = rows
        self.table = table

    # -- filling the index from loaded windows (load_ec) -----------------------------
    def fill_newest_first(self, new: I64, key_idx: I64, slots: WindowSlots) -> None:
        """Count windows: enter the windows ``new`` (of keys ``key_idx``), newest first.

        Raises :class:`~cec.errors.UsageError` if a key has more than ``max_open``.
        """
        k = len(new)
        order = np.lexsort((-slots.win_start[new], key_idx))
        by_key, keys = new[order], key_idx[order]
        first = np.ones(k, dtype=np.bool_)
        first[1:] = keys[1:] != keys[:-1]
        group_start = np.maximum.accumulate(np.where(first, np.arange(k), 0))
        age = np.arange(k) - group_start
        if (age >= self.max_open).any():
            raise UsageError("EC has more open windows for one key than the spec allows")
        self.table[keys, age] = by_key

    def fill_ring(self, new: I64, key_idx: I64, slots: WindowSlots, slide: int) -> None:
        """Time windows: enter the windows ``new`` (of keys ``key_idx``) in the ring.

        Raises :class:`~cec.errors.UsageError` if two of a key's windows share a ring
        position (they cannot be open together).
        """
        ring = (slots.win_start[new] // slide) % self.max_open
        if len(np.unique(key_idx * self.max_open + ring)) != len(new):
            raise UsageError("EC has time windows of one key that cannot be open together")
        self.table[key_idx, ring] = new
