"""The operator's memory: bytes per open window by part, the limit of a task and the
check before the window slots grow (a clear error, never a killed worker)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cec.errors import UsageError, WindowMemoryError, exit_code
from cec.operator import arrays
from cec.operator.base import OperatorConfig
from cec.operator.memory import (
    HOST_SHARE,
    Limit,
    WindowMemory,
    state_bytes,
    task_limit,
)
from cec.operator.slots import WindowSlots
from cec.operator.vector import VectorOperator
from cec.policy import PolicyConfig
from cec.windows import window_spec


def _batch(keys: np.ndarray, first_seq: int) -> pa.RecordBatch:
    seq = np.arange(first_seq, first_seq + len(keys), dtype=np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array(seq // 1000), pa.array(seq), pa.array(keys.astype(np.int64)),
         pa.array(np.ones(len(keys)))], names=["ts", "seq", "key", "value"])


def _operator(memory: WindowMemory | None) -> VectorOperator:
    return VectorOperator(OperatorConfig(window=window_spec("time", "10s"), key_type="int64",
                                         policy=PolicyConfig(), memory=memory))


def test_the_limit_is_sparks_python_worker_memory_else_a_share_of_the_host() -> None:
    mine = task_limit(pyspark_memory_mb=512, host_available=64 << 30, tasks_on_host=4)
    assert mine.bytes == 512 << 20 and "spark.executor.pyspark.memory" in mine.source
    shared = task_limit(pyspark_memory_mb=None, host_available=8 << 30, tasks_on_host=4)
    assert shared.bytes == int((8 << 30) * HOST_SHARE) // 4
    assert "8,192 MiB" in shared.source and "4 operator tasks" in shared.source


def test_a_growth_past_the_limit_names_the_partition_and_the_sizes() -> None:
    # int32 key_idx, 11 state fields (tau1, tau2, fp_seq, cnt as uint32), live, int32
    # free-list entry (sessions: every field stored); time windows derive win_end from
    # win_start; an avg's windows keep cnt and sum of the partial aggregate only
    assert WindowSlots().slot_bytes() == 4 + 7 * 8 + 4 * 4 + 1 + 4
    per = _operator(None)._slots.slot_bytes()
    assert per == 4 + 2 * 8 + 4 * 4 + 1 + 4
    check = WindowMemory(3, Limit(60 << 20, "a test's limit"))
    check.check(300_000, 300_000, 600_000, per)  # 0.9 M slots * 41 B = 35 MiB: fits
    with pytest.raises(WindowMemoryError) as err:
        check.check(600_000, 600_000, 1_200_000, per)
    text = str(err.value)
    assert text.startswith("partition 3: 600,000 open windows do not fit")
    assert "1,200,000 windows needs 70 MiB" in text and "limit of 60 MiB" in text
    assert "a test's limit" in text and "--partitions" in text
    assert isinstance(err.value, UsageError) and exit_code(err.value) == 2


def _stops_at_12000(limit_slots: int, copied: bool) -> None:
    # every key opens a window: 8,000 keys grow the slots to 9,024, 4,000 more to
    # 13,024 (12,000 + 1,024 spare, over 1.25x)
    per = _operator(WindowMemory(0, Limit(1 << 40, "unused")))._slots.slot_bytes()
    op = _operator(WindowMemory(0, Limit(limit_slots * per - 1, "a test's limit")))
    op.process(_batch(np.arange(0, 8000), 0))
    assert op.n_open == 8000 and op._slots.capacity == 9024
    with pytest.raises(WindowMemoryError, match=r"^partition 0: 12,000 open windows do not "
                       r"fit in its memory: growing their state to 13,024 windows") as err:
        op.process(_batch(np.arange(8000, 12_000), 8000))
    assert ("old and new arrays while they are copied" in str(err.value)) == copied
    # the same input with room for it: no error, the same windows as without a check
    roomy, free = _operator(WindowMemory(0, Limit(1 << 30, "roomy"))), _operator(None)
    for op in (roomy, free):
        op.process(_batch(np.arange(0, 8000), 0))
        op.process(_batch(np.arange(8000, 12_000), 8000))
    assert roomy.n_open == free.n_open == 12_000
    assert roomy.open_windows().equals(free.open_windows())


def test_the_operator_stops_before_its_windows_outgrow_the_limit() -> None:
    # the arrays grow in place (arrays.Reserved): 13,024 slots are what the growth needs
    _stops_at_12000(13_024, copied=False)


def test_without_a_reservation_the_growth_counts_both_copies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # no anonymous mapping (a strict commit limit, an address-space limit): the arrays
    # are copied, and both sets are held while they are (9,024 + 13,024 slots)
    def refused(*_: object, **__: object) -> None:
        raise OSError(12, "Cannot allocate memory")
    monkeypatch.setattr(arrays.mmap, "mmap", refused)
    _stops_at_12000(9024 + 13_024, copied=True)


def test_reserved_arrays_grow_in_place_and_keep_their_entries() -> None:
    res = arrays.Reserved(1 << 20)
    a = res.new("x", np.int64, 1024)
    a[:] = np.arange(1024)
    b = res.grow("x", a, 5000)
    assert len(b) == 5000 and np.shares_memory(a, b)
    assert np.array_equal(b[:1024], np.arange(1024)) and not b[1024:].any()
    c = res.grow("x", b, 2 << 20)  # past its reservation: a copy, then in place again
    assert not np.shares_memory(b, c) and np.array_equal(c[:1024], np.arange(1024))
    assert not c[1024:].any() and np.shares_memory(c, res.grow("x", c, (2 << 20) + 8))


def test_state_bytes_by_part() -> None:
    op = _operator(None)
    op.process(_batch(np.arange(0, 5000), 0))
    parts = state_bytes(op)
    cap = op._slots.capacity
    # int32 key_idx, win_start and an avg's sum (8 bytes), tau1/tau2/fp_seq/cnt as
    # uint32 (a time window's win_end is win_start + size)
    assert parts["window slots (key_idx + state fields)"] == cap * (4 + 2 * 8 + 4 * 4)
    assert parts["window slots: live flags"] == cap
    assert parts["per-key index (KeyWindows)"] == op._by_key.table.nbytes
    assert all(v >= 0 for v in parts.values())
