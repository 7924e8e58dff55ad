"""The recovery-time objective in a running operator task (on an executor): the rates
a recovery costs here, and the retuning they drive.

The model (``fixed + q / ec_rate + u / replay_rate``, :mod:`cec.policy`) takes its fixed
cost from ``RUN/state/rto.json`` (the driver's, :mod:`cec_spark.run.rto`) and its two
rates from measurements:

* every real recovery of a task times its phases (extent records read back and
  reconstructed plus the EC load, per second; input positions replayed per second);
* with an objective the running task also measures them itself (:class:`RtoTask`): now
  and then it recovers a fresh operator from its own committed logs, read-only, exactly
  as a restart would (at most ~5 % of its time: the next probe waits
  :data:`PROBE_DUTY` times the last one's duration, at least :data:`PROBE_GAP_S`).

The measured rates go into the task's state file, so a later recovery (and ``cec
inspect extent``) predicts with them. Every :data:`RETUNE_S` the task recomputes ``Q``
and ``U`` (:func:`cec.policy.rto_targets`) and the background pacing
(:func:`cec.policy.rto_pacing`) and hands them to the operator; an objective the
measured costs cannot meet is reported in the state (``feasible: false`` and why),
which the progress view prints.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cec.policy import RateSample, RecoveryRates, merge_rates, rto_pacing, rto_targets
from cec.spec import PipelineSpec
from cec_spark.run.rto import read_run
from cec_spark.rundir.layout import RunLayout
from recovery.partition import recover_from_logs
from storage_log.log import StreamLog

if TYPE_CHECKING:
    from cec_spark.run.counters import TaskCounters

__all__ = ["RtoTask"]

RETUNE_S = 2.0
PROBE_FIRST_S = 3.0  # after the first input, before the first probe (x 1-4, by partition)
PROBE_GAP_S = 15.0
PROBE_DUTY = 20.0  # the next probe waits this many times the last one's duration
SAMPLES_KEPT = 8  # rate samples a task keeps in its state


@dataclass
class RtoTask:
    """One operator task's side of the objective (module docstring)."""

    layout: RunLayout
    p: int
    spec: PipelineSpec
    make_operator: Callable[[], Any]
    previous: dict[str, Any]  # the task's state file as the last task left it
    clock: Callable[[], float] = time.monotonic
    rates: RecoveryRates = field(init=False)
    samples: list[dict[str, Any]] = field(init=False)
    catch_up_to: int | None = None
    caught_up_at: float | None = None
    ci_ms: float = field(init=False)
    _next_retune: float = 0.0
    _next_probe: float | None = None
    _resumed_at: int | None = None
    _info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        old = self.previous.get("rto") if isinstance(self.previous.get("rto"), dict) else {}
        self.samples = [s for s in (old or {}).get("samples", []) if isinstance(s, dict)]
        self.rates = self._with_samples(RecoveryRates.from_dict((old or {}).get("rates")))
        self.ci_ms = self.spec.checkpoint.ci_ms
        self._load_fixed()

    @property
    def objective_s(self) -> float | None:
        return self.spec.checkpoint.rto_s

    def _with_samples(self, rates: RecoveryRates) -> RecoveryRates:
        return merge_rates(rates, [RateSample(int(s["ec_records"]), float(s["ec_s"]),
                                              int(s["replay_positions"]), float(s["replay_s"]))
                                   for s in self.samples
                                   if all(k in s for k in ("ec_records", "ec_s",
                                                           "replay_positions", "replay_s"))])

    def _load_fixed(self) -> None:
        run = read_run(self.layout)
        fx = run.get("fixed_s")
        if isinstance(fx, int | float) and fx > 0:
            measured = set(self.rates.measured) - {"fixed"}
            if run.get("fixed_measured"):
                measured.add("fixed")
            self.rates = RecoveryRates(float(fx), self.rates.ec_records_per_s,
                                       self.rates.replay_positions_per_s,
                                       tuple(m for m in ("fixed", "ec", "replay")
                                             if m in measured))

    def sample(self, kind: str, explain: Any) -> None:
        """Keep the rates a recovery (``kind`` "recovery") or a probe measured."""
        if explain.fresh_start:
            return
        ph = {p.name: p.measured_s or 0.0 for p in explain.phases}
        self.samples.append({"kind": kind, "at": time.time(),
                             "ec_records": explain.extent_records,
                             "ec_s": ph.get("scan", 0.0) + ph.get("load", 0.0),
                             "replay_positions": explain.replay_length,
                             "replay_s": ph.get("replay", 0.0)})
        self.samples = self.samples[-SAMPLES_KEPT:]
        self.rates = self._with_samples(self.rates)

    def recovered(self, explain: Any, counters: TaskCounters) -> None:
        """After the task's recovery: keep its measured rates; the position to catch up
        to is the upstream log's end when ``cec recover`` began (``catch_up`` in
        ``RUN/state/rto.json``, noted by the driver before any Spark job)."""
        self.sample("recovery", explain)
        target = read_run(self.layout).get("catch_up", {})
        up = target.get(str(self.p)) if isinstance(target, dict) else None
        self.catch_up_to = int(up) if isinstance(up, int) and not explain.fresh_start else None
        self._resumed_at = explain.t_c
        self.note_caught_up(counters)

    def note_caught_up(self, counters: TaskCounters, *, finished: bool = False) -> bool:
        """True once, when the task has processed again everything its upstream log held
        when ``cec recover`` began (``counters.caught_up_at``, wall clock), or
        ``finished``: its input has ended (a sealed output, or the sealed upstream read
        to its end; the last input positions may have written no output row, so ``t_c``
        can stay below the log's end)."""
        if finished or self.reached(counters):
            self.caught_up_at = counters.caught_up_at = time.time()
            return True
        return False

    def reached(self, counters: TaskCounters) -> bool:
        """Whether the task has now processed what :meth:`note_caught_up` waits for
        (and has not noted it yet); notes nothing."""
        if self.caught_up_at is not None:
            return False
        seen = counters.in_last_seq if counters.in_last_seq is not None else self._resumed_at
        return self.catch_up_to is None or (seen is not None and seen >= self.catch_up_to)

    def probe(self) -> None:
        """Recover a fresh operator from this task's committed logs, read-only, and keep
        the rates it measured (the same code a restart runs)."""
        t0 = self.clock()
        with StreamLog.open(self.layout.output(self.p)) as out, \
                StreamLog.open(self.layout.upstream(self.p)) as up:
            rec = recover_from_logs(out, up, self.make_operator(),
                                    upstream_after=self.layout.cut)
        self.sample("probe", rec.explain)
        took = self.clock() - t0
        self._next_probe = self.clock() + max(PROBE_GAP_S, PROBE_DUTY * took)

    def tick(self, op: Any, counters: TaskCounters) -> dict[str, Any]:
        """At a state report: retune the operator (with an objective) and say what the
        prediction is; the dict goes into the task's state as ``rto``."""
        now = self.clock()
        if now < self._next_retune and self._info:
            return self._info
        self._next_retune = now + RETUNE_S
        self._load_fixed()
        objective = self.objective_s
        first = counters.first_input_at
        running_s = 0.0 if first is None else time.time() - first
        if objective is not None and op.q > 0:
            first_at = PROBE_FIRST_S * (1 + self.p % 4)  # partitions not all at once
            due = (self._next_probe is None and running_s >= first_at) or \
                  (self._next_probe is not None and now >= self._next_probe)
            if due:
                with contextlib.suppress(Exception):  # a probe is advisory
                    self.probe()
        info: dict[str, Any] = {"objective_s": objective,
                                "predicted_s": round(self.rates.predict_s(op.q, op.u), 3),
                                "rates": self.rates.to_dict(), "samples": self.samples}
        if objective is not None:
            targets = rto_targets(objective, self.rates, op.n_open)
            cp = self.spec.checkpoint
            self.ci_ms = rto_pacing(self.ci_ms, cp.ci_ms, cp.cp_ms, op.q, op.u, targets)
            op.retarget(q=targets.q, u=targets.u, ci_ms=self.ci_ms)
            info.update(q_target=targets.q, u_target=targets.u, ci_ms=self.ci_ms,
                        feasible=targets.feasible, note=targets.note,
                        predicted_at_targets_s=round(targets.predicted_s, 3))
        self._info = info
        return info
