"""What the operator's state costs in memory, and the check that it fits.

:func:`state_bytes` counts the bytes the operator's arrays hold, by part (the open
windows' slots, their free list, the per-key index, the key registry, the footprint
order): measured by ``python bench/datapath.py window-bytes`` (docs/PROFILE.md).

The open windows live in :class:`~cec.operator.slots.WindowSlots`, whose arrays grow
by 1.25x when they are full, in place where they can (the bytes of a slot:
``WindowSlots.slot_bytes()``, which depends on the window kind's layout,
:class:`~cec.operator.slot_layout.SlotLayout`).
A task whose open windows outgrow its memory would otherwise be
killed by the kernel (or Spark's ``spark.executor.pyspark.memory`` limit) with no word
about why. :class:`WindowMemory` checks every growth first: the bytes the slots need
after it (and the old arrays while they are copied, when they do not grow in place:
:class:`~cec.operator.arrays.Reserved`) against the task's
limit (:func:`task_limit`: ``spark.executor.pyspark.memory`` per task if set, else a
share of the host's available memory), and raises a :class:`~cec.errors.WindowMemoryError` (a
:class:`~cec.errors.UsageError`, exit 2; a failed task carrying it is not retried,
:data:`cec_spark.driver.jobs._FATAL`) naming the partition, the open windows, the
bytes needed and the limit, and what to change. Pure logic: the limit's inputs are
handed in, nothing is read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cec.errors import WindowMemoryError

#: share of the host's available memory an operator task may hold in open windows when
#: no explicit limit is set (the rest: the other tasks' Python workers, the JVM, Arrow
#: buffers of the batches in flight)
HOST_SHARE = 0.5


@dataclass(frozen=True)
class Limit:
    """The bytes an operator task's open windows may take, and where that comes from."""

    bytes: int
    source: str


def task_limit(*, pyspark_memory_mb: int | None, host_available: int,
               tasks_on_host: int) -> Limit:
    """The memory limit of one operator task's open windows.

    ``pyspark_memory_mb``: Spark's hard limit of this Python worker when
    ``spark.executor.pyspark.memory`` is set (Spark hands each worker its share as
    ``PYSPARK_EXECUTOR_MEMORY_MB``); else :data:`HOST_SHARE` of the host's available
    memory over the operator tasks that may share the host (the run's P: every one in
    local mode, an upper bound on a cluster).
    """
    if pyspark_memory_mb is not None and pyspark_memory_mb > 0:
        return Limit(pyspark_memory_mb << 20, f"spark.executor.pyspark.memory: "
                                              f"{pyspark_memory_mb} MiB for this Python worker")
    per = int(host_available * HOST_SHARE) // max(1, tasks_on_host)
    return Limit(per, f"{HOST_SHARE:.0%} of the host's available memory "
                      f"({host_available >> 20:,} MiB) over {tasks_on_host} operator tasks")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


@dataclass(frozen=True)
class WindowMemory:
    """The check made before the window slots grow (see the module docstring)."""

    partition: int | None
    limit: Limit

    def check(self, open_windows: int, old_capacity: int, new_capacity: int,
              slot_bytes: int, copied: bool = True) -> None:
        """UsageError if growing the slots from ``old_capacity`` to ``new_capacity`` slots
        of ``slot_bytes`` each passes the limit. ``copied``: the growth copies the
        arrays, and both sets exist while it does (else they grow in place:
        :class:`~cec.operator.arrays.Reserved`)."""
        need = ((old_capacity if copied else 0) + new_capacity) * slot_bytes
        if need <= self.limit.bytes:
            return
        where = "the operator" if self.partition is None else f"partition {self.partition}"
        how = ", old and new arrays while they are copied" if copied else ""
        raise WindowMemoryError(
            f"{where}: {open_windows:,} open windows do not fit in its memory: growing "
            f"their state to {new_capacity:,} windows needs {_mib(need)} "
            f"({slot_bytes} bytes per window{how}), over the limit of "
            f"{_mib(self.limit.bytes)} "
            f"({self.limit.source}). Give the run more partitions (--partitions), its "
            "Python workers more memory (spark.executor.pyspark.memory, more executors) "
            "or fewer open windows (a smaller window or fewer keys)")


def state_bytes(op: Any) -> dict[str, int]:
    """The bytes held by a :class:`~cec.operator.vector.VectorOperator`'s arrays, by part."""
    sl = op._slots
    arrays = sum(getattr(sl, name).nbytes for name, _ in sl.arrays)
    keys = op._keys
    registry = keys._ints.nbytes + (keys._direct.nbytes if keys._direct is not None else 0)
    registry += keys._hash.nbytes if keys._hash is not None else 0
    registry += keys._arrow.nbytes if keys.key_type != "int64" else 0
    fp = op._out.fp_order
    return {"window slots (key_idx + state fields)": arrays,
            "window slots: live flags": sl.live.nbytes,
            "window slots: free list": sl._free.nbytes,
            "per-key index (KeyWindows)": op._by_key.table.nbytes,
            "key registry": registry,
            "footprint order": 0 if fp is None else fp._fp.nbytes + fp._slot.nbytes}
