"""Shared machinery of the recovery tests: streams, operators, logs, crash checks.

A crash test is data (STYLE.md 8): an input stream, a failure-free run, a cut of the
durable output log, a recovery, the rest of the input, and an exact comparison.

What must match exactly, and what may differ. The ``R`` rows (results) of the
surviving log plus those of the recovered run must equal the failure-free run's ``R``
rows on every column but ``seq``. ``G_check`` rows depend on batch boundaries and
clock readings (the background step runs at batch ends and spends a time budget); a
recovered run sees other batch boundaries (the replay ends at ``t_c``, mid-batch) and
a fresh clock, so it may checkpoint other windows at other times. That shifts the
output ``seq`` of later rows, never their content. ``G_open`` rows are foreground and
match too (also compared).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cec.operator import OperatorConfig, OperatorState, ReferenceOperator
from cec.policy import PolicyConfig
from cec.records import logical_rows
from cec.windows import CountWindow, TimeWindow, WindowSpec

try:  # the vectorized operator may land later than the reference one
    from cec.operator.vector import VectorOperator  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    VectorOperator = None

OPERATORS: dict[str, Any] = {"reference": ReferenceOperator}
# CEC_TEST_VECTOR=0 leaves the vectorized operator out (e.g. to bisect a failure).
if VectorOperator is not None and os.environ.get("CEC_TEST_VECTOR", "1") == "1":
    OPERATORS["vector"] = VectorOperator


class FakeClock:
    """A clock that advances ``step`` seconds per reading: deterministic budgets."""

    def __init__(self, step: float = 0.001) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def input_schema(key_type: str = "int64") -> pa.Schema:
    kt = pa.int64() if key_type == "int64" else pa.string()
    return pa.schema(
        [("ts", pa.int64()), ("seq", pa.int64()), ("key", kt), ("value", pa.float64())]
    )


def make_stream(
    n: int,
    keys: int,
    seed: int,
    *,
    key_type: str = "int64",
    ts_step: int = 3,
    sparse: bool = True,
    max_batch: int = 7,
) -> list[pa.RecordBatch]:
    """A random input stream cut into random batches (sizes 1..max_batch)."""
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(0, ts_step + 1, n)).astype(np.int64) + 1_000
    seq = (
        np.cumsum(rng.integers(1, 3, n)).astype(np.int64)
        if sparse
        else np.arange(n, dtype=np.int64)
    )
    k = rng.integers(0, keys, n)
    key: Any = k.astype(np.int64) if key_type == "int64" else [f"k{x}" for x in k]
    value = rng.integers(-50, 100, n).astype(np.float64)
    table = pa.table(
        {"ts": ts, "seq": seq, "key": key, "value": value}, schema=input_schema(key_type)
    )
    out: list[pa.RecordBatch] = []
    pos = 0
    while pos < n:
        size = int(rng.integers(1, max_batch + 1))
        out.append(table.slice(pos, size).combine_chunks().to_batches()[0])
        pos += size
    return out


@dataclass(frozen=True)
class Scenario:
    window: WindowSpec
    policy: PolicyConfig
    key_type: str = "int64"
    function: str = "avg"
    clock_step: float = 0.001
    impl: str = "reference"

    def operator(self) -> Any:
        config = OperatorConfig(
            window=self.window,
            function=self.function,
            key_type=self.key_type,
            policy=self.policy,
            clock=FakeClock(self.clock_step),
        )
        return OPERATORS[self.impl](config)


def random_scenario(rng: random.Random, impl: str = "reference") -> Scenario:
    if rng.random() < 0.6:
        size = rng.randint(1, 6)
        window: WindowSpec = CountWindow(size=size, slide=rng.randint(1, size))
    else:
        size = rng.randint(5, 40)
        window = TimeWindow(size_us=size, slide_us=rng.randint(1, size))
    mode = rng.choice(["targets", "targets", "open-only"])
    q: int | str = rng.choice([0, 3, 10, 1000, "1x", "2x"])
    policy = PolicyConfig(
        mode=mode,  # type: ignore[arg-type]
        q=q,
        u=rng.choice([0, 5, 50, 10**6]),
        ci_ms=rng.choice([1.0, 5.0]),
        cp_ms=rng.choice([10.0, 100.0]),
    )
    return Scenario(
        window,
        policy,
        key_type=rng.choice(["int64", "int64", "string"]),
        function=rng.choice(["avg", "sum", "count", "min", "max"]),
        clock_step=rng.choice([0.0005, 0.002]),
        impl=impl,
    )


@dataclass
class Run:
    """A failure-free run: one output record per input batch (empty ones not logged)."""

    inputs: list[pa.RecordBatch]
    outputs: list[pa.RecordBatch]  # per input batch, possibly 0 rows
    final: pa.RecordBatch  # finish()
    states: list[OperatorState]  # after each input batch

    def records(self) -> list[tuple[int, pa.RecordBatch]]:
        """(input batch index, output) for every output that would be a log record."""
        return [(i, b) for i, b in enumerate(self.outputs) if b.num_rows]


def run(scn: Scenario, inputs: Sequence[pa.RecordBatch], keep_states: bool = True) -> Run:
    op = scn.operator()
    outs, states = [], []
    for b in inputs:
        outs.append(op.process(b))
        if keep_states:
            states.append(op.state_at())
    return Run(list(inputs), outs, op.finish(), states)


class MemLog:
    """An in-memory stand-in for StreamLog's read side (committed records only)."""

    def __init__(self, records: Sequence[pa.RecordBatch] = ()) -> None:
        self.records = [r for r in records if r.num_rows]

    @property
    def first_seq(self) -> int | None:
        return int(self.records[0].column("seq")[0].as_py()) if self.records else None

    @property
    def last_seq(self) -> int | None:
        return int(self.records[-1].column("seq")[-1].as_py()) if self.records else None

    def read_forward(
        self, *, after_seq: int | None = None, from_ts: int | None = None,
        tokens: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """The records (it holds no commit tokens: ``tokens`` adds none)."""
        for r in self.records:
            seq = r.column("seq").to_numpy()
            lo = 0 if after_seq is None else int(np.searchsorted(seq, after_seq, side="right"))
            if from_ts is not None:
                lo = max(lo, int(np.searchsorted(r.column("ts").to_numpy(), from_ts)))
            if lo < r.num_rows:
                yield r.slice(lo)

    def read_backward(
        self, *, before_seq: int | None = None, chunk_bytes: int = 256 << 10
    ) -> Iterator[pa.RecordBatch]:
        for r in reversed(self.records):
            seq = r.column("seq").to_numpy()
            hi = r.num_rows if before_seq is None else int(np.searchsorted(seq, before_seq))
            if hi:
                yield r.slice(0, hi)


def r_rows(batches: Sequence[pa.RecordBatch], types: tuple[int, ...] = (1,)) -> pa.Table:
    """The output tuples of the given types (G_open+R rows written out), without ``seq``
    (see the module docstring)."""
    if not batches:
        raise ValueError("no batches")
    t = pa.Table.from_batches([logical_rows(b) for b in batches])
    t = t.filter(pc.is_in(t.column("type"), pa.array(types, type=pa.int8())))
    return t.drop_columns(["seq"]).combine_chunks()


def logical(state: OperatorState) -> tuple[Any, ...]:
    """A state without footprints (tau2, fp_seq) and output position."""
    wins = {wid: replace(w, tau2=0, fp_seq=0) for wid, w in sorted(state.windows.items())}
    return (state.n_open, state.t_now, wins)


def upto(inputs: Sequence[pa.RecordBatch], t_c: int) -> list[pa.RecordBatch]:
    """The input tuples with seq <= t_c, batch boundaries kept."""
    out = []
    for b in inputs:
        seq = b.column("seq").to_numpy()
        cut = int(np.searchsorted(seq, t_c, side="right"))
        if cut:
            out.append(b.slice(0, cut))
        if cut < b.num_rows:
            break
    return out


@dataclass
class CrashCheck:
    """Everything a crash test compares, collected for good failure messages."""

    surviving: list[pa.RecordBatch]
    after: list[pa.RecordBatch] = field(default_factory=list)


def continue_run(
    op: Any, upstream_batches: Iterator[pa.RecordBatch], next_out_seq: int
) -> list[pa.RecordBatch]:
    """Process the rest of the input normally, then finish; check the output seq."""
    outs = [op.process(b) for b in upstream_batches]
    outs.append(op.finish())
    seqs = np.concatenate([logical_rows(b).column("seq").to_numpy() for b in outs])
    assert np.array_equal(seqs, np.arange(next_out_seq, next_out_seq + seqs.size)), (
        "output seq after recovery is not dense from next_out_seq"
    )
    return outs


def check_state(
    scn: Scenario,
    original: Run,
    rec: Any,
    recovered_state: OperatorState,
    record_batch: int | None,
    finished: bool = False,
) -> None:
    """The recovered state at t_c equals a reference run's over exactly the input <= t_c.

    Footprints (tau2, fp_seq) must be the EC rows' (t_now, seq); when t_c is the last
    input tuple of the batch whose output is the last durable record, the whole state
    (footprints and next_out_seq too) equals the failure-free run's after that batch.
    ``finished``: the last durable record is the end-of-input flush.
    """
    ref = Scenario(scn.window, scn.policy, scn.key_type, scn.function, scn.clock_step)
    ref_op = ref.operator()
    for b in upto(original.inputs, rec.t_c):
        ref_op.process(b)
    if finished:
        ref_op.finish()
    assert logical(recovered_state) == logical(ref_op.state_at())
    ec = rec.table
    fps = {
        (k, w): (t, s)
        for k, w, t, s in zip(
            ec.column("key").to_pylist(),
            ec.column("win_start").to_pylist(),
            ec.column("t_now").to_pylist(),
            ec.column("seq").to_pylist(),
            strict=True,
        )
    }
    assert {wid: (w.tau2, w.fp_seq) for wid, w in recovered_state.windows.items()} == fps
    assert recovered_state.next_out_seq == rec.next_out_seq
    if record_batch is not None:
        last_in = int(original.inputs[record_batch].column("seq")[-1].as_py())
        if last_in == rec.t_c:
            assert recovered_state == original.states[record_batch]


Clock = Callable[[], float]
