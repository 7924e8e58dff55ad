"""Key compaction of the vectorized operator: forgotten keys never change the output.

Streams with churning keys (many distinct keys, each in a short burst) run through the
reference and through a vectorized operator that compacts its key registry as eagerly
as it can (``COMPACT_MIN = 1``: the live keys are counted whenever the registry has
doubled), row for row, across batch splits and recoveries; and the registry stays
bounded by the keys with open windows on a long churning stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cec.operator import OperatorConfig, ReferenceOperator, VectorOperator
from cec.operator.key_registry import KeyRegistry
from cec.policy import PolicyConfig
from cec.windows import CountWindow, TimeWindow, WindowSpec

from .helpers import FakeClock, rows
from .test_operator_property import (
    SETTINGS,
    check_load_ec_round_trip,
    config,
    scenarios,
    split,
)


class EagerCompaction(VectorOperator):
    """The vectorized operator, compacting its keys from the first ones on."""

    COMPACT_MIN = 1


@st.composite
def churning(draw: st.DrawFn) -> dict[str, Any]:
    """Bursts of tuples of fresh keys, overlapping a little, plus a few returning keys."""
    key_type = draw(st.sampled_from(["int64", "string"]))
    kind = draw(st.sampled_from(["count-tumbling", "count-sliding", "time-tumbling",
                                 "time-sliding"]))
    size = draw(st.integers(1, 5) if kind.startswith("count") else st.integers(1, 12))
    slide = size if kind.endswith("tumbling") else draw(st.integers(1, size))
    window: WindowSpec = (CountWindow(size, slide) if kind.startswith("count")
                          else TimeWindow(size, slide))
    mode = draw(st.sampled_from(["none", "open-only", "targets"]))
    policy = PolicyConfig(
        mode=mode, q=draw(st.one_of(st.integers(0, 8), st.sampled_from(["1x", "2x"]))),
        u=draw(st.integers(0, 20)), ci_ms=draw(st.sampled_from([0.0, 0.05, 1.0])),
        cp_ms=draw(st.sampled_from([100.0, 0.5])),
    )
    n_bursts = draw(st.integers(1, 25))
    tuples = []
    ts, seq = draw(st.integers(-20, 20)), draw(st.integers(-5, 5))
    active: list[int] = []
    next_key = 0
    for _ in range(n_bursts):
        # a burst: a fresh key (or, now and then, a key seen long ago), a few tuples,
        # interleaved with the key of the previous burst
        if draw(st.integers(0, 5)) == 0 and next_key > 2:
            k = draw(st.integers(0, next_key - 1))
        else:
            k, next_key = next_key, next_key + 1
        active = [*active[-1:], k]
        for _ in range(draw(st.integers(1, 6))):
            ts += draw(st.integers(0, 3))
            seq += draw(st.integers(1, 2))
            kk = draw(st.sampled_from(active))
            key: int | str = kk * 5 + 1 if key_type == "int64" else f"user-{kk}"
            tuples.append((ts, seq, key, float(draw(st.integers(-5, 5)))))
    cuts = sorted(draw(st.lists(st.integers(0, len(tuples)), max_size=10)))
    return {
        "key_type": key_type, "window": window, "policy": policy,
        "function": draw(st.sampled_from(["count", "sum", "min", "max", "avg"])),
        "tuples": tuples, "cuts": cuts,
        "clock_step": draw(st.sampled_from([0.0, 0.0001, 0.001, 0.02])),
    }


def check_against_reference(sc: dict[str, Any]) -> None:
    batches = split(sc["tuples"], sc["cuts"], sc["key_type"])
    ref, vec = ReferenceOperator(config(sc)), EagerCompaction(config(sc))
    for b in batches:
        assert rows(vec.process(b)) == rows(ref.process(b))
        # the reference keeps only keys with open windows, so the states agree as is
        assert vec.state_at() == ref.state_at()
        assert (vec.n_open, vec.t_now, vec.next_out_seq, vec.q, vec.u) == (
            ref.n_open, ref.t_now, ref.next_out_seq, ref.q, ref.u)
    assert rows(vec.finish()) == rows(ref.finish())


@SETTINGS
@given(churning())
def test_churning_equals_reference(sc: dict[str, Any]) -> None:
    check_against_reference(sc)


@SETTINGS
@given(scenarios())
def test_eager_compaction_equals_reference(sc: dict[str, Any]) -> None:
    """The general scenarios of the property tests, compacting whenever possible."""
    check_against_reference(sc)


@SETTINGS
@given(churning(), st.integers(0, 10), st.booleans())
def test_churning_load_ec_round_trip(sc: dict[str, Any], at: int, straddle: bool) -> None:
    """Recover from the EC after a churning prefix; compaction before and after.

    A key forgotten by the first operator has no EC row; the recovered operator
    restarts it fresh, as the first one does: the rest of the output is identical.
    """
    check_load_ec_round_trip(sc, at, EagerCompaction, straddle, reference=True)


def churn_stream(n_keys: int, live: int, seed: int, key_type: str,
                 batch_size: int) -> list[pa.RecordBatch]:
    """Keys ``0 .. n_keys-1``, 6 tuples each, spread over a burst of ``~live`` keys' span.

    About ``live`` keys are active at a time; a key never comes back after its burst,
    and its 6 tuples fill whole tumbling count windows of size 1, 2, 3 or 6.
    """
    rng = np.random.default_rng(seed)
    k = np.repeat(np.arange(n_keys), 6)
    k = k[np.argsort(k + rng.uniform(0, live, len(k)), kind="stable")]
    n = len(k)
    ts = np.cumsum(rng.integers(0, 2, n))
    seq = np.arange(1, n + 1)
    v = rng.integers(-50, 50, n).astype(np.float64)
    key = pa.array(k) if key_type == "int64" else pa.array([f"s{x}" for x in k])
    t = pa.table({"ts": ts, "seq": seq, "key": key, "value": v})
    return t.to_batches(max_chunksize=batch_size)


class SmallCompaction(VectorOperator):
    COMPACT_MIN = 64


@pytest.mark.parametrize("impl", [VectorOperator, SmallCompaction])
@pytest.mark.parametrize(("window", "key_type"), [
    (CountWindow(3, 3), "int64"), (CountWindow(4, 1), "string"),
    (TimeWindow(20, 20), "int64"), (TimeWindow(30, 7), "string"), (CountWindow(1, 1), "int64"),
])
def test_registry_bounded_on_churning_stream(window: WindowSpec, key_type: str,
                                             impl: type[VectorOperator]) -> None:
    """Ever new keys: the registry stays within 3x the keys with open windows (+ a batch).

    The live keys are counted when the registry reaches ``registry + live`` as of the
    last count (at least ``COMPACT_MIN``), and the dead ones dropped if they are more
    than half; so between counts the registry is below 3x the live keys of the last
    count, plus the new keys of the batch that triggers the next one.
    """
    batch_size = 997
    batches = churn_stream(20_000, 200, seed=7, key_type=key_type, batch_size=batch_size)
    op = impl(OperatorConfig(window=window, key_type=key_type,
                             policy=PolicyConfig(mode="open-only"), clock=FakeClock(0.0)))
    seen: set[Any] = set()
    worst = max_live = 0
    for b in batches:
        op.process(b)
        seen.update(b.column("key").to_pylist())
        sl = op._slots
        live = len(np.unique(sl.key_idx[sl.live_slots()]))  # keys with open windows
        max_live = max(max_live, live)
        worst = max(worst, len(op._keys))
        assert op._by_key.table.shape[0] <= 2 * max(1024, len(op._keys) + batch_size)
    assert len(seen) == 20_000
    if not (isinstance(window, CountWindow) and window.slide < window.size):
        assert max_live <= 600  # sliding count windows: every key seen has an open window
    assert worst <= max(impl.COMPACT_MIN, 3 * max_live) + batch_size


@pytest.mark.parametrize(("key_type", "keys"), [
    ("int64", [5, 3, 9, 7, 0]),  # direct table
    ("int64", [5, -3, 9, 1 << 40, 0]),  # hashed
    ("string", ["e", "c", "i", "g", "a"]),
])
def test_registry_compact_renumbers_in_order(key_type: str, keys: list[Any]) -> None:
    typ = pa.int64() if key_type == "int64" else pa.string()
    reg = KeyRegistry(key_type)
    assert reg.lookup(pa.array(keys, typ)).tolist() == [0, 1, 2, 3, 4]
    reg.compact(np.array([False, True, False, True, True]))
    assert len(reg) == 3
    assert reg.values(np.arange(3)).to_pylist() == [keys[1], keys[3], keys[4]]
    # kept keys keep their new indices, forgotten ones come back as new keys
    got = reg.lookup(pa.array([keys[4], keys[0], keys[1], keys[2], keys[0]], typ))
    assert got.tolist() == [2, 3, 0, 4, 3]
    assert reg.values(got).to_pylist() == [keys[4], keys[0], keys[1], keys[2], keys[0]]
    assert [reg.value(i) for i in range(len(reg))] == [keys[1], keys[3], keys[4], keys[0],
                                                        keys[2]]
    with pytest.raises(ValueError):
        reg.compact(np.array([True]))
