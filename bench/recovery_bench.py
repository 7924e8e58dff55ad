"""Recovery benchmark: the paper's recovery-time experiment (§IV.B, Figs. 6 and 7).

Usage: ``python bench/recovery_bench.py [--quick] [--keys K] [--tuples N] [--json F]``

The workload of ``bench/workload.py`` (100 000 item ids, uniform) feeds a count-window
aggregate (window 10 tuples per key, tumbling, avg of the price), the vectorized
operator, one output record per input batch of ``--batch`` tuples. The input is first
written to an upstream ``StreamLog`` (the filter's logged output in the paper); each
configuration then runs the operator over it, writing its own output log, and
"crashes" after ``--tuples`` tuples (the middle of the paper's runs: the operator stops,
nothing is sealed). Recovery is :func:`recovery.partition.recover_partition` with a fresh operator:
reconcile (writable open), EC reconstruction (backward scan), EC load, replay of the
upstream after ``T`` up to ``t_c``. A correctness check follows, outside the timings:
the recovered operator, fed the tuples after ``t_c``, must hold the same windows and
aggregates as the operator that "crashed".

Experiments: **Q** ∈ {1, 2, 4, 8} × open windows with ``U`` unbounded, and
**U** ∈ {125 000, 250 000, 500 000, 1 000 000} with ``Q`` unbounded; ``CI``/``CP`` =
5 ms / 100 ms. The budget reads a cost-model clock (:class:`BatchClock`): ``--batch-ms``
(10 ms: 1000 tuples at the workload's 100 000 tuples/s) per input batch plus
``--row-us`` (1 µs) per output row emitted, so a step of ``k`` G_checks costs ``k`` µs
of the 5 % budget, and every run is deterministic.

Columns: ``G_check`` rows emitted up to the crash, open windows ``N_c`` at the crash,
the extent ``q`` (output rows from the oldest footprint to the end), the scan (EC
reconstruction: read backward + rebuild) time and rate in extent records/s, the rate
of the rebuild alone on records already decoded ("pure", best of 3), replayed
tuples (and those the replay filter hands to the operator), bytes (Arrow, 32 bytes per
tuple) and time, and the whole recovery time (reconcile + scan + load + replay). Times
are wall clock with the process CPU time (all threads) in parentheses: on a shared,
oversubscribed machine the CPU time is the stable measure of the work; the scan rate
is per CPU second. Logs are written with ``fsync="never"`` and read
with a warm page cache (the machine did not reboot: this measures CPU, not the disk).
Targets (issue 5): reconstruction >= 3 M extent records/s; at ``Q = 2x`` scan + replay
< 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import DEFAULT_SEED, WorkloadSpec, generate_columns
from cec.operator import OperatorConfig
from cec.operator.vector import VectorOperator
from cec.policy import PolicyConfig
from cec.windows import CountWindow
from recovery.ec import reconstruct
from recovery.partition import recover_partition
from storage_log.log import StreamLog

UNBOUNDED = 10**15
Q_MULTS = (1, 2, 4, 8)
U_VALUES = (125_000, 250_000, 500_000, 1_000_000)


class BatchClock:
    """Deterministic cost-model clock for the checkpoint budget.

    Time = ``batch_s`` per input batch (``tick()``) + ``row_s`` per output row the
    operator has emitted so far (its ``next_out_seq``). A background step that emits
    ``k`` G_check rows therefore costs ``k * row_s`` of the ``CI``/``CP`` budget, as CPU
    time would, but the same on every run and machine.
    """

    def __init__(self, batch_s: float, row_s: float) -> None:
        self.ticks = 0
        self.batch_s = batch_s
        self.row_s = row_s
        self.op: Any = None

    def tick(self) -> None:
        self.ticks += 1

    def __call__(self) -> float:
        rows = self.op.next_out_seq if self.op is not None else 0
        return self.ticks * self.batch_s + rows * self.row_s


@dataclass(frozen=True)
class Setup:
    keys: int
    tuples: int
    window: int
    batch: int
    batch_ms: float
    row_us: float
    seed: int
    u_scale: float


@dataclass
class Result:
    experiment: str
    target: str
    g_check: int
    run_s: float
    n_c: int
    extent: int
    replay_length: int
    reconcile_s: float
    scan_s: float
    scan_cpu: float
    scan_rate: float
    pure_rate: float
    load_s: float
    replay_tuples: int
    replay_bytes: int
    replay_applied: int
    replay_s: float
    replay_cpu: float
    total_s: float
    total_cpu: float
    estimated_s: float
    verified: bool


def clock_for(setup: Setup) -> BatchClock:
    return BatchClock(setup.batch_ms / 1000, setup.row_us / 1e6)


def operator(setup: Setup, policy: PolicyConfig, clock: BatchClock) -> VectorOperator:
    config = OperatorConfig(
        window=CountWindow(setup.window, setup.window),
        function="avg",
        key_column="item_id",
        value_column="item_price",
        policy=policy,
        clock=clock,
    )
    op = VectorOperator(config)
    clock.op = op
    return op


def write_upstream(setup: Setup, path: Path) -> int:
    """The workload with ``ts`` (item_time) and ``seq`` (row number), one record per batch."""
    cols = generate_columns(WorkloadSpec(n_rows=setup.tuples, n_keys=setup.keys, seed=setup.seed))
    table = pa.table(
        {
            "ts": cols["item_time"],
            "seq": np.arange(setup.tuples, dtype=np.int64),
            "item_id": cols["item_id"],
            "item_price": cols["item_price"],
        }
    )
    with StreamLog.open(path, writable=True, create=True, fsync="never") as log:
        for b in table.to_batches(max_chunksize=setup.batch):
            log.append(b)
            log.commit()
    return int(table.nbytes)


def run_until_crash(
    setup: Setup, policy: PolicyConfig, up_dir: Path, out_dir: Path
) -> tuple[VectorOperator, int, float]:
    """Process the whole upstream, one committed output record per batch; no seal."""
    clock = clock_for(setup)
    op = operator(setup, policy, clock)
    g_check = 0
    t0 = time.perf_counter()
    with (
        StreamLog.open(up_dir) as up,
        StreamLog.open(out_dir, writable=True, create=True, fsync="never") as out,
    ):
        for b in up.read_forward():
            clock.tick()
            res = op.process(b)
            g_check += int(np.count_nonzero(res.column("type").to_numpy() == 3))
            out.append(res)
            out.commit()
    return op, g_check, time.perf_counter() - t0


def logical(state: Any) -> tuple[Any, ...]:
    wins = {wid: replace(w, tau2=0, fp_seq=0) for wid, w in state.windows.items()}
    return state.n_open, state.t_now, wins


def pure_scan_s(out_dir: Path, batches: int) -> float:
    """EC reconstruction alone (records already decoded in memory): best of 3."""
    with StreamLog.open(out_dir) as out:
        it = out.read_backward()
        records = [b for _, b in zip(range(batches), it, strict=False)]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        reconstruct(records)
        best = min(best, time.perf_counter() - t0)
    return best


def one(setup: Setup, experiment: str, target: str, policy: PolicyConfig, work: Path) -> Result:
    up_dir, out_dir = work / "up", work / f"out-{experiment}-{target}"
    live, g_check, run_s = run_until_crash(setup, policy, up_dir, out_dir)
    clock = clock_for(setup)
    fresh = operator(setup, policy, clock)
    rec = recover_partition(out_dir, up_dir, fresh, fsync="never")
    ex = rec.explain
    # Correctness, untimed: continue the recovered operator to the crash point.
    with StreamLog.open(up_dir) as up, rec.output_log:
        for b in up.read_forward(after_seq=rec.t_c):
            clock.tick()
            fresh.process(b)
    verified = logical(fresh.state_at()) == logical(live.state_at())
    pure_s = pure_scan_s(out_dir, 0 if ex.extent is None else ex.extent.batches)
    shutil.rmtree(out_dir)
    phase = {p.name: p.measured_s or 0.0 for p in ex.phases}
    cpu = {p.name: p.cpu_s or 0.0 for p in ex.phases}
    return Result(
        experiment=experiment,
        target=target,
        g_check=g_check,
        run_s=run_s,
        n_c=ex.n_c or 0,
        extent=ex.extent_records,
        replay_length=ex.replay_length,
        reconcile_s=phase["reconcile"],
        scan_s=phase["scan"],
        scan_cpu=cpu["scan"],
        scan_rate=ex.extent_records / cpu["scan"] if cpu["scan"] else 0.0,
        pure_rate=ex.extent_records / pure_s if pure_s else 0.0,
        load_s=phase["load"],
        replay_tuples=ex.replay.tuples,
        replay_bytes=ex.replay.bytes,
        replay_applied=ex.replay.applied,
        replay_s=phase["replay"],
        replay_cpu=cpu["replay"],
        total_s=ex.measured_s,
        total_cpu=ex.cpu_s,
        estimated_s=ex.estimated_s,
        verified=verified,
    )


def configs(setup: Setup) -> list[tuple[str, str, PolicyConfig]]:
    base = PolicyConfig(mode="targets", ci_ms=5.0, cp_ms=100.0)
    out = [("Q", f"{m}x", replace(base, q=f"{m}x", u=UNBOUNDED)) for m in Q_MULTS]
    for u in U_VALUES:
        scaled = int(u * setup.u_scale)
        out.append(("U", f"{scaled:,}", replace(base, q=UNBOUNDED, u=scaled)))
    return out


def markdown(setup: Setup, results: list[Result]) -> str:
    head = (
        f"Recovery, {setup.keys:,} keys, count window {setup.window}, crash after "
        f"{setup.tuples:,} tuples (batches of {setup.batch}); times: wall (CPU)\n\n"
        "| exp | target | G_check | N_c | extent q | scan s | scan rec/s (CPU) "
        "| pure rec/s | load s | replay tuples (applied) | replay MB | replay s "
        "| scan+replay s | total s | est s | ok |\n"
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n"
    )
    rows = [
        f"| {r.experiment} | {r.target} | {r.g_check:,} | {r.n_c:,} | {r.extent:,} "
        f"| {r.scan_s:.3f} ({r.scan_cpu:.3f}) | {r.scan_rate / 1e6:.1f} M "
        f"| {r.pure_rate / 1e6:.1f} M | {r.load_s:.3f} "
        f"| {r.replay_tuples:,} ({r.replay_applied:,}) | {r.replay_bytes / 1e6:.1f} "
        f"| {r.replay_s:.3f} ({r.replay_cpu:.3f}) "
        f"| {r.scan_s + r.replay_s:.3f} ({r.scan_cpu + r.replay_cpu:.3f}) "
        f"| {r.total_s:.3f} ({r.total_cpu:.3f}) | {r.estimated_s:.3f} "
        f"| {'yes' if r.verified else 'NO'} |"
        for r in results
    ]
    return head + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20k keys, 400k tuples, U scaled")
    p.add_argument("--keys", type=int, default=None)
    p.add_argument("--tuples", type=int, default=None, help="crash point (input tuples)")
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--batch", type=int, default=1000, help="input tuples per record")
    p.add_argument("--batch-ms", type=float, default=10.0, help="model time per batch")
    p.add_argument("--row-us", type=float, default=1.0, help="model time per output row")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--only", choices=["Q", "U"], default=None)
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: tmp)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args(argv)
    keys = a.keys or (20_000 if a.quick else 100_000)
    tuples = a.tuples or (400_000 if a.quick else 2_000_000)
    setup = Setup(keys, tuples, a.window, a.batch, a.batch_ms, a.row_us, a.seed, keys / 100_000)
    work = Path(tempfile.mkdtemp(prefix="cec-recovery-bench-", dir=a.dir))
    try:
        t0 = time.perf_counter()
        nbytes = write_upstream(setup, work / "up")
        print(f"upstream: {tuples:,} tuples, {nbytes / 1e6:.0f} MB (Arrow), "
              f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)  # fmt: skip
        results = []
        for experiment, target, policy in configs(setup):
            if a.only and experiment != a.only:
                continue
            r = one(setup, experiment, target, policy, work)
            print(f"{experiment}={target}: run {r.run_s:.1f}s, recovery {r.total_s:.3f}s",
                  file=sys.stderr)  # fmt: skip
            results.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(setup, results))
    if a.json:
        a.json.write_text(
            json.dumps({"setup": asdict(setup), "results": [asdict(r) for r in results]}, indent=2)
        )
    return 0 if all(r.verified for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
