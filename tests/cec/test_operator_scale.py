"""Larger streams: both implementations agree with big batches, many keys, tight budgets."""

from __future__ import annotations

import zlib
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cec.operator import OperatorConfig, ReferenceOperator, VectorOperator
from cec.operator.state import ec_rows
from cec.policy import PolicyConfig
from cec.records import G_CHECK, output_schema
from cec.windows import CountWindow, TimeWindow, WindowSpec, time_window

from .helpers import FakeClock, batch, rows


def stream(n: int, keys: int, seed: int, key_type: str = "int64") -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(0, 3, n)) + 10**12
    seq = np.cumsum(rng.integers(1, 3, n))
    k = rng.integers(0, keys, n) * 13
    v = np.round(rng.normal(100, 30, n), 2)
    key = pa.array(k) if key_type == "int64" else pa.array([f"item-{x}" for x in k])
    t = pa.table({"ts": ts, "seq": seq, "key": key, "value": v})
    cuts = np.sort(rng.choice(np.arange(1, n), size=12, replace=False))
    bounds = [0, *cuts.tolist(), n]
    return [t.slice(a, b - a).combine_chunks().to_batches()[0] for a, b in pairwise(bounds)]


CASES: list[tuple[WindowSpec, str]] = [
    (CountWindow(10, 10), "int64"),
    (CountWindow(7, 3), "string"),
    (CountWindow(1, 1), "int64"),
    (time_window(60, 25), "int64"),
    (TimeWindow(200, 200), "string"),
]


@pytest.mark.parametrize(("window", "key_type"), CASES)
@pytest.mark.parametrize("mode", ["open-only", "targets"])
def test_big_batches_agree(window: WindowSpec, key_type: str, mode: str) -> None:
    batches = stream(12_000, 400, seed=zlib.crc32(f"{window}{mode}".encode()), key_type=key_type)

    def make(impl: Any) -> Any:
        return impl(OperatorConfig(
            window=window, function="avg", key_type=key_type, clock=FakeClock(0.0004),
            policy=PolicyConfig(mode=mode, q="1x", u=300, ci_ms=5.0, cp_ms=100.0),  # type: ignore[arg-type]
        ))

    ref, vec = make(ReferenceOperator), make(VectorOperator)
    checks = 0
    for b in batches:
        a, v = ref.process(b), vec.process(b)
        assert rows(v) == rows(a)
        checks += int(np.count_nonzero(np.asarray(v.column("type")) == G_CHECK))
    assert rows(vec.finish()) == rows(ref.finish())
    assert vec.state_at() == ref.state_at()
    if mode == "targets" and isinstance(window, CountWindow) and window.size > 1:
        assert checks > 0


def test_int_keys_leave_the_direct_table() -> None:
    cfg = OperatorConfig(window=CountWindow(2, 2), function="sum",
                         policy=PolicyConfig(mode="open-only"))
    ref, vec = ReferenceOperator(cfg), VectorOperator(cfg)
    seqs = iter(range(100))
    for keys in ([5, 7, 5], [-1, 7, 2**40], [2**40, -1, 5, 3]):
        b = batch([(0, next(seqs), k, 1.5) for k in keys])
        assert rows(vec.process(b)) == rows(ref.process(b))
    assert vec.state_at() == ref.state_at()


def test_ec_rows_picks_columns_by_name() -> None:
    schema = output_schema("int64")
    row = {n: 0 for n in schema.names} | {"type": 2, "sum": 1.0}
    t = pa.Table.from_pylist([row]).select(list(reversed(schema.names)))
    assert ec_rows(t, schema).schema == schema


def test_bench_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.operator_bench import main

    assert main(["--tuples", "8000", "--ref-tuples", "1000", "--batch", "2048",
                 "--reps", "1", "--warmup", "4096"]) == 0
    out = capsys.readouterr().out
    assert "| recovery | vector | open-only |" in out
    assert out.count("| reference |") == 3
