"""The recovery-time objective at start-up, in the driver: what a restart costs here.

``[checkpoint] rto`` (or ``cec run pipeline --rto``) asks for a recovery time; the pure
model and the targets it sets are :mod:`cec.policy`'s (``fixed + q / ec_rate +
u / replay_rate``). The two rates are measured by the operator tasks
(:mod:`cec_spark.run.rto_task`); this module measures the **fixed cost** (process start
→ an operator task beginning its recovery) and checks an objective against it:

* the driver's progress view (:class:`StartupMeter`) takes this process's start time
  from ``/proc`` and the tasks' ``recover_started_at``; it writes the run's value to
  ``RUN/state/rto.json`` (:attr:`RunLayout.rto_file`, which the tasks read) and keeps
  the last :data:`KEEP_SAMPLES` start-ups of ``cec recover`` and of ``cec run`` of this
  machine in ``$CEC_CACHE_DIR/startup.json`` (default ``~/.cache/cec``). The prediction
  uses the slowest recent ``cec recover`` start-up (else the slower of the run start-up
  and :data:`cec.policy.DEFAULT_FIXED_S`); the floor below which an objective is
  refused at start is the quickest recent start-up of either command (else
  :data:`cec.policy.DEFAULT_FLOOR_S`).
* with a warm standby the fixed cost is a takeover's (:func:`takeover_cost`,
  :func:`takeover_floor`), measured by ``cec standby``.

``RUN/state/rto.json`` (advisory JSON): ``fixed_s``, ``fixed_measured``, ``fixed_how``,
``standby_ready``, ``startup_run_s`` / ``startup_recover_s`` once measured, and
``catch_up`` (per partition, the upstream log's end when ``cec recover`` began).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cec.errors import SpecError
from cec.policy import (
    DEFAULT_FIXED_S,
    DEFAULT_FLOOR_S,
    DEFAULT_TAKEOVER_FLOOR_S,
    DEFAULT_TAKEOVER_S,
    RTO_SAFETY,
)
from cec.spec import PipelineSpec
from cec_spark.run.jvm_archive import cache_dir
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.layout import RunLayout

MACHINE_FILE = "startup.json"  # in the cache directory
KEEP_SAMPLES = 10
RECENT = 5  # samples the fixed cost and the floor are taken from


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


# ------------------------------------------------------------------------- rto.json

def read_run(layout: RunLayout) -> dict[str, Any]:
    """The run's ``RUN/state/rto.json`` (module docstring; ``{}`` before any)."""
    return read_advisory(layout.rto_file)


def write_run(layout: RunLayout, data: dict[str, Any]) -> None:
    """Replace the run's ``RUN/state/rto.json``."""
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
