"""The pure part of rescale on recovery (:mod:`recovery.rescale`): Spark's xxhash64
in Python, and the handoff record a new partition starts from."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cec.operator import OperatorConfig, VectorOperator
from cec.policy import PolicyConfig
from cec.records import G_CHECK
from cec.windows import window_spec
from recovery.ec import reconstruct
from recovery.rescale import handoff, partitions_of, spark_xxhash64, windows_table

# ------------------------------------------------------------------- pure handoff


def test_spark_xxhash64_is_signed_and_typed() -> None:
    """(Equality with Spark's own: tests/cec_spark/test_rescale.py.)"""
    values = [spark_xxhash64(k) for k in range(-1000, 1000)] + \
        [spark_xxhash64(str(k)) for k in range(1000)]
    assert min(values) < 0 < max(values)
    assert all(-(1 << 63) <= v < (1 << 63) for v in values)
    assert spark_xxhash64("é") != spark_xxhash64("e")
    with pytest.raises(TypeError):
        spark_xxhash64(True)
    with pytest.raises(TypeError):
        spark_xxhash64(1.5)  # type: ignore[arg-type]


def _operator(window: str = "count", size: int = 5, slide: int | None = None
              ) -> VectorOperator:
    return VectorOperator(OperatorConfig(
        window=window_spec(window, size, slide), function="sum", key_column="k",
        value_column="v", key_type="int64",
        policy=PolicyConfig(mode="none", q="2x", u=1_000_000, ci_ms=5, cp_ms=100)))


def test_handoff_reconstructs_to_the_cut_and_loads() -> None:
    rng = np.random.default_rng(1)
    n = 500
    keys = rng.integers(0, 60, n)
    batch = pa.RecordBatch.from_pydict({
        "ts": pa.array(np.arange(n, dtype=np.int64) * 10), "seq": pa.array(np.arange(n)),
        "k": pa.array(keys), "v": pa.array(rng.uniform(0, 9, n))})
    ops = [_operator("count", 5, 2) for _ in range(2)]  # two old partitions
    old = partitions_of(keys.tolist(), 2, 128)
    for q, op in enumerate(ops):
        op.process(batch.filter(pa.array(old == q)))
    wins = [windows_table(op.state_at(), "int64") for op in ops]
    for op, w in zip(ops, wins, strict=True):  # the operator's own columnar dump: equal
        fast = op.open_windows().select(w.column_names)
        order = [("key", "ascending"), ("win_start", "ascending")]
        assert fast.sort_by(order).equals(w.sort_by(order))
    total = sum(w.num_rows for w in wins)
    records = handoff(wins, cut=n - 1, ts=(n - 1) * 10, partitions=3, groups=128,
                      function="sum", key_type="int64", window_kind="count")
    assert sum(r.num_rows for r in records) == total > 0
    before = {w.id: w for op in ops for w in op.state_at().windows.values()}
    loaded = {}
    for p, rec in enumerate(records):
        assert set(rec.column("type").to_pylist()) <= {G_CHECK}
        assert set(partitions_of(rec.column("key").to_pylist(), 3, 128).tolist()) <= {p}
        ec = reconstruct([rec])
        assert (ec.n_c, ec.t_c, ec.replay_after_seq) == (rec.num_rows, n - 1, n - 1)
        op = _operator("count", 5, 2)
        op.load_ec(ec.table, t_c=ec.t_c, t_c_ts=ec.t_c_ts, next_out_seq=ec.next_out_seq)
        for wid, w in op.state_at().windows.items():
            b = before[wid]
            assert (w.cnt, w.sum, w.tau1, w.first_ts, w.last_ts, w.win_end) == \
                (b.cnt, b.sum, b.tau1, b.first_ts, b.last_ts, b.win_end)
            loaded[wid] = p
    assert set(loaded) == set(before)


def test_handoff_refuses_a_window_in_two_partitions_and_a_late_ts() -> None:
    op = _operator("time", 100)
    op.process(pa.RecordBatch.from_pydict({"ts": pa.array([5], pa.int64()),
                                           "seq": pa.array([0], pa.int64()),
                                           "k": pa.array([1], pa.int64()),
                                           "v": pa.array([1.0])}))
    w = windows_table(op.state_at(), "int64")
    with pytest.raises(ValueError, match="two old partitions"):
        handoff([w, w], cut=0, ts=5, partitions=2, groups=128, function="sum",
                key_type="int64", window_kind="time")
    with pytest.raises(ValueError, match="too late"):
        handoff([w], cut=0, ts=100, partitions=2, groups=128, function="sum",
                key_type="int64", window_kind="time")
