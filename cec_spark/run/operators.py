"""The operator a task runs: built from the spec, its open windows' memory bounded.

:func:`operator_for` makes a fresh :class:`~cec.operator.VectorOperator` for a run's
spec and settings (window, function, key and value columns, checkpoint policy); in a
partition's task it carries the check that its open windows fit this worker's memory
(:func:`window_memory`). The task (:mod:`cec_spark.run.task`, which hands one to its
recovery-time model, :mod:`cec_spark.run.rto_task`) and the offline rescale
(:mod:`cec_spark.recover.rescale`) build theirs here. No Spark.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from cec.errors import UsageError
from cec.operator import OperatorConfig, VectorOperator
from cec.operator.memory import WindowMemory, task_limit
from cec.policy import PolicyConfig
from cec.records import record_format
from cec.spec import PipelineSpec
from cec.windows import window_spec
from cec_spark.rundir.run_file import RunSettings, value_column
from storage_log import StreamLog


def operator_for(spec: PipelineSpec, settings: RunSettings,
                 partition: int | None = None, fmt: int = 2) -> VectorOperator:
    """A fresh vectorized operator for the spec; in partition ``partition``'s task, with
    the check that its open windows fit this worker's memory (:func:`window_memory`).
    ``fmt``: the record format of the rows it writes (:func:`record_format_of` the output
    log it goes on). ``U`` counts input positions: for a text source planned by bytes
    (``settings.chunk_bytes``), whose positions are bytes, the operator takes ``U``
    times the run's bytes a row, so that it keeps meaning about ``U`` rows."""
    w = spec.aggregate.window
    cp = spec.checkpoint
    q: int | str = cp.q_records if cp.q_records is not None else cp.q_text
    u = cp.u if settings.chunk_bytes is None \
        else round(cp.u * settings.chunk_bytes / spec.source.chunk_rows)
    config = OperatorConfig(
        window=window_spec(w.kind, w.size, None if w.kind == "session" else w.slide),
        function=spec.aggregate.function,
        key_column=spec.aggregate.group_by,
        value_column=value_column(spec),
        key_type=settings.key_type,
        policy=PolicyConfig(mode=cp.mode, q=q, u=u,  # type: ignore[arg-type]
                            ci_ms=cp.ci_ms, cp_ms=cp.cp_ms),
        memory=None if partition is None else window_memory(spec, partition),
        record_format=fmt,
    )
    return VectorOperator(config)


def record_format_of(output: Path) -> int:
    """The record format an operator goes on writing into the output log at ``output``:
    the one of its rows (1 for a log begun before format 2), or 2 for a log without
    rows or not there yet (docs/ARCHITECTURE.md §3). ``CEC_RECORD_FORMAT=1`` in the
    environment makes that 1: a run written as cec wrote runs before format 2 (the
    compatibility tests make their old run directories so)."""
    raw = os.environ.get("CEC_RECORD_FORMAT", "2")
    if raw not in ("1", "2"):
        raise UsageError(f"CEC_RECORD_FORMAT={raw!r}: the record format of new output "
                         "logs is 1 or 2")
    if not output.exists():
        return int(raw)
    with StreamLog.open(output) as log:
        schema = log.schema
    return int(raw) if schema is None else record_format(schema)


def window_memory(spec: PipelineSpec, partition: int) -> WindowMemory:
    """The open windows' memory check of an operator task on this host: Spark's limit
    of this Python worker (``PYSPARK_EXECUTOR_MEMORY_MB``) or a share of the host's
    available memory (:func:`cec.operator.memory.task_limit`)."""
    raw = os.environ.get("PYSPARK_EXECUTOR_MEMORY_MB", "")
    available = 0
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    if not available:  # not Linux: the physical memory
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = task_limit(pyspark_memory_mb=int(raw) if raw.isdigit() else None,
                       host_available=available, tasks_on_host=spec.run.partitions)
    return WindowMemory(partition, limit)


def _libc(name: str) -> Callable[..., int] | None:
    """glibc's function ``name`` (``malloc_trim``, ``mallopt``), or None where the C
    library has none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn: Callable[..., int] = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    return fn


_TRIM = _libc("malloc_trim")

#: glibc's ``M_MMAP_THRESHOLD`` (``<malloc.h>``)
_M_MMAP_THRESHOLD = -3
#: the threshold an operator task starts with (:class:`HeapBound`)
MMAP_THRESHOLD = 1 << 20
#: bytes a row of the largest record counts for in the threshold
#: (:meth:`HeapBound.fit`): an 8-byte column of the record and a quarter more
RECORD_ROW_BYTES = 10
#: another threshold, in bytes (0: glibc's own rule; then no task changes it)
MMAP_THRESHOLD_VAR = "CEC_MMAP_THRESHOLD"


_MALLOPT = _libc("mallopt")


def _threshold_setting() -> int:
    raw = os.environ.get(MMAP_THRESHOLD_VAR, "").strip()
    try:
        return int(raw) if raw else MMAP_THRESHOLD
    except ValueError:  # said in the task's log (the executor's stderr), not fatal
        print(f"cec: {MMAP_THRESHOLD_VAR}={raw!r} is not a number of bytes; using "
              f"{MMAP_THRESHOLD}", file=sys.stderr)
        return MMAP_THRESHOLD


def set_mmap_threshold(size: int) -> bool:
    """glibc's ``mallopt(M_MMAP_THRESHOLD, size)``; False where it is not glibc or the
    call was refused (glibc takes at most 32 MiB)."""
    return _MALLOPT is not None and _MALLOPT(_M_MMAP_THRESHOLD, size) == 1


class HeapBound:
    """An operator task's mmap threshold (glibc's ``M_MMAP_THRESHOLD``, fixed from the
    task's start): at least its records' size (:meth:`fit`), so that a record's
    temporaries (numpy arrays of its rows, freed and made again for every record) stay
    in the heap, which reuses their pages, while blocks larger than any record's
    columns (the arrays that grow with the state, the close order at the end) get
    pages of their own and go back to the system when they are freed.

    By default glibc raises its threshold to the size of every mmapped block freed (up
    to 32 MiB), so after the first ones even the state-sized arrays came from the heap,
    which kept their pages beside the state until :func:`release_freed`. Measured
    (docs/PROFILE.md, "The heap's threshold"): one operator task of the memory
    benchmark's input in one process, peak 131 MiB over its start against 139; a
    threshold below the records' size (512 KiB, 125 k-row records) made it 99 MiB but
    cost 5.9 times the page faults and 1.6 times the task's CPU. Not glibc, or
    ``CEC_MMAP_THRESHOLD=0``: nothing is set.
    """

    def __init__(self) -> None:
        self.size = _threshold_setting()
        if self.size > 0 and not set_mmap_threshold(self.size):
            self.size = 0  # not glibc: nothing to set

    def fit(self, rows: int) -> None:
        """A record of ``rows`` rows is about to be processed."""
        want = rows * RECORD_ROW_BYTES
        if self.size > 0 and want > self.size:
            self.size = min(want, 32 << 20)  # glibc's own ceiling (64-bit)
            set_mmap_threshold(self.size)


def release_freed(arrow: bool = True) -> None:
    """Give the pages the C heap holds free back to the system (glibc ``malloc_trim``;
    a no-op elsewhere), and those Arrow's memory pool holds unused. An operator task's
    numpy temporaries and the window arrays it outgrew are freed into glibc's heap,
    which keeps their pages: measured on a partition of 1.25 M open 1-day windows
    (bench/memory_bench.py's input), the task held 184 MiB more than at its start for
    96 MiB of window arrays, and 132 MiB when trimmed after each batch. About 3 ms a
    call there: the task calls it with its state report (every
    :data:`cec_spark.run.task.STATE_EVERY_S`) and at its end; the direct ingest when
    its chunks are written. ``arrow``: Arrow's pool too (mimalloc's collection: about
    6 ms a call in the ingest, and the next chunk would take the same pages again)."""
    if arrow:
        pa.default_memory_pool().release_unused()  # Arrow's own pool (mimalloc, jemalloc)
    if _TRIM is not None:
        _TRIM(0)
