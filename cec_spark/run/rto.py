"""The recovery-time objective at run time: measuring what a recovery costs here.

``[checkpoint] rto`` (or ``cec run pipeline --rto``) asks for a recovery time; the pure
model and the targets it sets are :mod:`cec.policy`'s (``fixed + q / ec_rate +
u / replay_rate``). This module measures the three numbers and hands them over:

* **fixed cost** (process start → an operator task beginning its recovery): the
  driver's progress view (:class:`StartupMeter`) takes this process's start time from
  ``/proc`` and the tasks' ``recover_started_at``; it writes the run's value to
  ``RUN/state/rto.json`` (which the tasks read) and keeps the last
  :data:`KEEP_SAMPLES` start-ups of ``cec recover`` and of ``cec run`` of this machine
  in ``$CEC_CACHE_DIR/startup.json`` (default ``~/.cache/cec``). The prediction uses the
  slowest recent ``cec recover`` start-up (else the slower of the run start-up and
  :data:`cec.policy.DEFAULT_FIXED_S`); the floor below which an objective is refused at
  start is the quickest recent start-up of either command (else
  :data:`cec.policy.DEFAULT_FLOOR_S`).
* **EC-load and replay rates**: every real recovery of a task times its phases
  (extent records read back and reconstructed plus the EC load, per second; input
  positions replayed per second); with an objective the running task also measures them
  itself (:class:`RtoTask`): now and then it recovers a fresh operator from its own
  committed logs, read-only, exactly as a restart would (at most ~5 % of its time:
  the next probe waits 20 times the last one's duration, at least
  :data:`PROBE_GAP_S`). The measured rates go into the task's state file, so a later
  recovery (and ``cec inspect extent``) predicts with them.

Every ``RETUNE_S`` the task recomputes ``Q`` and ``U`` (:func:`cec.policy.rto_targets`)
and the background pacing (:func:`cec.policy.rto_pacing`) and hands them to the
operator; an objective the measured costs cannot meet is reported in the state
(``feasible: false`` and why), which the progress view prints.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cec.errors import SpecError
from cec.policy import (
    DEFAULT_FIXED_S,
    DEFAULT_FLOOR_S,
    DEFAULT_TAKEOVER_FLOOR_S,
    DEFAULT_TAKEOVER_S,
    RTO_SAFETY,
    RateSample,
    RecoveryRates,
    merge_rates,
    rto_pacing,
    rto_targets,
)
from cec.spec import PipelineSpec
from cec_spark.run.jvm_archive import cache_dir
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.layout import RunLayout
from recovery.partition import recover_from_logs
from storage_log.log import StreamLog

if TYPE_CHECKING:
    from cec_spark.run.counters import TaskCounters

MACHINE_FILE = "startup.json"  # in the cache directory
KEEP_SAMPLES = 10
RECENT = 5  # samples the fixed cost and the floor are taken from
RETUNE_S = 2.0
PROBE_FIRST_S = 3.0  # after the first input, before the first probe (x 1-4, by partition)
PROBE_GAP_S = 15.0
PROBE_DUTY = 20.0  # the next probe waits this many times the last one's duration
SAMPLES_KEPT = 8  # rate samples a task keeps in its state


# --------------------------------------------------------------------------- start-up

def process_started_at() -> float:
    """Wall-clock time this process started (Linux ``/proc``; else the import of this
    module, which misses the interpreter's own start, ~0.1 s)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime
        hz = os.sysconf("SC_CLK_TCK")
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) + ticks / hz
    except (OSError, ValueError, IndexError):
        pass
    return _IMPORTED


_IMPORTED = time.time()
_MEASURE = [False]


def measure_startup() -> None:
    """This process is the ``cec`` command itself (not a test or a program embedding
    cec, which started long before its run): its start-up is a sample of the fixed cost."""
    _MEASURE[0] = True


def machine_file() -> Path:
    return cache_dir() / MACHINE_FILE


def read_machine() -> dict[str, list[dict[str, Any]]]:
    raw = read_advisory(machine_file())
    return {k: [s for s in v if isinstance(s, dict) and isinstance(s.get("s"), int | float)]
            for k, v in raw.items() if k in ("run", "recover", "takeover")
            and isinstance(v, list)}


def record_startup(kind: str, seconds: float) -> None:
    """Keep a measured start-up of this machine (advisory: a failure is ignored)."""
    data = read_machine()
    samples = data.setdefault(kind, [])
    samples.append({"s": round(seconds, 3), "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "load": round(os.getloadavg()[0], 2)})
    data[kind] = samples[-KEEP_SAMPLES:]
    path = machine_file()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
    write_advisory(path, dict(data))


@dataclass(frozen=True)
class Fixed:
    """The fixed cost of a restart the prediction uses, and how it was found."""

    seconds: float
    measured: bool
    how: str


def fixed_cost(machine: dict[str, list[dict[str, Any]]] | None = None) -> Fixed:
    """The slowest of the last :data:`RECENT` measured ``cec recover`` start-ups; without
    one the slower of ``cec run``'s and the documented default (conservative)."""
    machine = read_machine() if machine is None else machine
    rec = [float(s["s"]) for s in machine.get("recover", [])[-RECENT:]]
    if rec:
        return Fixed(max(rec), True, f"the slowest of the last {len(rec)} 'cec recover' "
                     f"start-ups measured on this machine ({machine_file()})")
    run = [float(s["s"]) for s in machine.get("run", [])[-RECENT:]]
    if run and max(run) > DEFAULT_FIXED_S:
        return Fixed(max(run), True, f"the slowest of the last {len(run)} 'cec run' "
                     f"start-ups measured on this machine ({machine_file()}); no 'cec "
                     "recover' measured yet")
    return Fixed(DEFAULT_FIXED_S, False, "cec's documented default (no 'cec recover' "
                 "start-up measured on this machine yet)")


def takeover_cost(machine: dict[str, list[dict[str, Any]]] | None = None) -> Fixed:
    """A recovery's fixed cost with a warm standby: the slowest of the last
    :data:`RECENT` takeovers measured on this machine (a death detected to the operator
    tasks beginning their recovery, ``cec standby``), or the documented default."""
    machine = read_machine() if machine is None else machine
    took = [float(s["s"]) for s in machine.get("takeover", [])[-RECENT:]]
    if took:
        return Fixed(max(took), True, f"the slowest of the last {len(took)} standby "
                     f"takeovers measured on this machine ({machine_file()})")
    return Fixed(DEFAULT_TAKEOVER_S, False, "cec's documented takeover cost (no standby "
                 "takeover measured on this machine yet)")


def takeover_floor(machine: dict[str, list[dict[str, Any]]] | None = None
                   ) -> tuple[float, str]:
    """The objective no takeover here can meet: the quickest takeover kept, or
    :data:`cec.policy.DEFAULT_TAKEOVER_FLOOR_S`."""
    machine = read_machine() if machine is None else machine
    took = [float(s["s"]) for s in machine.get("takeover", [])]
    if took:
        return min(took), (f"the quickest of the last {len(took)} standby takeovers "
                           f"measured on this machine, {machine_file()}")
    return DEFAULT_TAKEOVER_FLOOR_S, "cec's documented takeover floor"


def floor(machine: dict[str, list[dict[str, Any]]] | None = None) -> tuple[float, str]:
    """The objective no recovery here can meet: the quickest of the start-ups kept for
    this machine (the last :data:`KEEP_SAMPLES` of ``cec recover`` and of ``cec run``: the
    same process, Spark and task starts, so every run updates it; a loaded machine's
    slow start-ups do not raise it while a quiet one's is kept), or
    :data:`cec.policy.DEFAULT_FLOOR_S`."""
    machine = read_machine() if machine is None else machine
    seen = [float(s["s"]) for kind in ("recover", "run") for s in machine.get(kind, [])]
    if seen:
        return min(seen), (f"the quickest of the last {len(seen)} start-ups of 'cec recover' "
                           "and 'cec run' (process start to the operator tasks starting) "
                           f"measured on this machine, {machine_file()}")
    return DEFAULT_FLOOR_S, ("cec's documented floor: the quickest 'cec recover' start-up "
                             "(process start to the operator tasks recovering) seen on an "
                             "idle 2-core machine; none measured on this one yet")


def check_objective(spec: PipelineSpec, *, resume: bool = False,
                    standby: bool = False) -> str | None:
    """At start: SpecError (exit 2) for an objective below the floor (a new run only: a
    recovery is never refused); a warning to print when the fixed cost alone leaves no
    room for the objective; else None. ``standby``: the run will have a warm standby
    (``--standby``), so the floor and the fixed cost are a takeover's, not a restart's;
    the progress view then says whenever no standby is ready."""
    rto = spec.checkpoint.rto_s
    if rto is None:
        return None
    low, how = takeover_floor() if standby else floor()
    if rto < low:
        msg = (f"[checkpoint].rto = {rto:g} s is below the floor of {low:.1f} s, {how}: "
               f"no recovery here can be that quick; ask for at least {low * 1.5:.0f} s")
        if not resume:
            raise SpecError(f"{spec.origin}: {msg}")
        return msg
    fx = takeover_cost() if standby else fixed_cost()
    if rto * RTO_SAFETY <= fx.seconds:
        return (f"[checkpoint].rto = {rto:g} s may not be met: a "
                f"{'takeover' if standby else 'restart'}'s fixed cost is "
                f"{fx.seconds:.1f} s ({fx.how}), and the prediction keeps "
                f"{int(100 * (1 - RTO_SAFETY))} % of the objective as margin; the "
                "tightest Q and U are used and the progress view shows the prediction")
    return None


# ------------------------------------------------------------------------- run file

def read_run(layout: RunLayout) -> dict[str, Any]:
    return read_advisory(layout.rto_file)


def write_run(layout: RunLayout, data: dict[str, Any]) -> None:
    write_advisory(layout.rto_file, data)


class StartupMeter:
    """In the driver: measures this command's start-up once every task has begun (or
    finished) its recovery, and keeps the fixed cost in ``RUN/state/rto.json``."""

    def __init__(self, layout: RunLayout, partitions: int) -> None:
        self.layout = layout
        self.partitions = partitions
        self.started = process_started_at()
        self.done = False
        self.standby_ready = False
        fx = fixed_cost()
        self.data: dict[str, Any] = {
            **read_run(layout), "fixed_s": fx.seconds,
            "fixed_measured": fx.measured, "fixed_how": fx.how, "standby_ready": False}
        write_run(layout, self.data)

    def _fixed(self) -> Fixed:
        return takeover_cost() if self.standby_ready else fixed_cost()

    def standby(self, ready: bool) -> bool:
        """A warm standby is (or is no longer) ready to take the run over: the fixed
        cost the tasks predict with is then a takeover's (else a restart's). True when
        that changed."""
        if ready == self.standby_ready:
            return False
        self.standby_ready = ready
        fx = self._fixed()
        self.data.update({"fixed_s": fx.seconds, "fixed_measured": fx.measured,
                          "fixed_how": fx.how, "standby_ready": ready})
        write_run(self.layout, self.data)
        return True

    def check(self, states: list[dict[str, Any]]) -> float | None:
        """The start-up (s) once measurable (then recorded, once); else None."""
        if self.done or not _MEASURE[0] or len(states) < self.partitions:
            return None
        begun = [st.get("recover_started_at") for st in states]
        if not all(isinstance(b, int | float) and b >= self.started for b in begun):
            return None
        if not all(st.get("recovered_at") for st in states):
            return None
        self.done = True
        startup = max(float(b) for b in begun if b is not None) - self.started
        kind = "recover" if any(st.get("recovered") for st in states) else "run"
        record_startup(kind, startup)
        fx = self._fixed()
        self.data.update({f"startup_{kind}_s": round(startup, 3), "fixed_s": fx.seconds,
                          "fixed_measured": fx.measured, "fixed_how": fx.how})
        write_run(self.layout, self.data)
        return startup


# ----------------------------------------------------------------------------- task

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
        self._resumed_at = explain.resume_after_seq
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
