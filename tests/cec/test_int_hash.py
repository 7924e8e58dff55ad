"""The key registry's int64 hash table (cec.operator.int_hash) against a dict."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cec.operator.int_hash import MAX_LOAD, IntHash
from cec.operator.key_registry import KeyRegistry


def test_find_and_insert_agree_with_a_dict_through_growth() -> None:
    rng = np.random.default_rng(5)
    keys = np.empty(0, dtype=np.int64)
    table = IntHash()
    want: dict[int, int] = {}
    # strided, negative, extreme and random keys, in batches that make the table grow
    pools = [np.arange(0, 1 << 20, 1 << 10), -np.arange(1, 5_000) * 7,
             np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1]),
             rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 30_000)]
    for pool in pools:
        values = np.asarray(pool, dtype=np.int64)
        new = np.array([v for v in dict.fromkeys(values.tolist()) if v not in want],
                       dtype=np.int64)
        start = len(keys)
        keys = np.concatenate([keys, new])
        table.insert(new, np.arange(start, len(keys), dtype=np.int64), keys)
        want.update({int(v): start + i for i, v in enumerate(new.tolist())})
        assert table.count == len(want) <= MAX_LOAD * len(table.table)
        got = table.find(values, keys)
        assert got.tolist() == [want[int(v)] for v in values.tolist()]
    absent = np.array([3, 1 << 50, -2], dtype=np.int64)
    assert table.find(absent, keys).tolist() == [-1, -1, -1]
    rebuilt = IntHash.of(keys)
    assert rebuilt.find(keys, keys).tolist() == list(range(len(keys)))
    none = np.empty(0, dtype=np.int64)  # an empty table over an empty keys array
    assert IntHash.of(none).find(absent, none).tolist() == [-1, -1, -1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(-50, 50),
                         max_size=40), max_size=8))
def test_the_registry_numbers_hashed_keys_in_order_of_first_appearance(
        batches: list[list[int]]) -> None:
    reg = KeyRegistry("int64")
    seen: dict[int, int] = {}
    reg.lookup(pa.array([-1], pa.int64()))  # below the direct table: hashed from here on
    seen[-1] = 0
    for b in batches:
        got = reg.lookup(pa.array(b, pa.int64())).tolist()
        for v in b:
            seen.setdefault(v, len(seen))
        assert got == [seen[v] for v in b]
    assert len(reg) == len(seen)
    assert reg.values(np.arange(len(reg))).to_pylist() == list(seen)
