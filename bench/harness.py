"""What every benchmark does the same way: run a process, watch it, time it out, judge
the machine quiet, alternate the sides, record the commit, compare the outputs.

* :func:`measure` / :class:`Run`: a command in its own session (process group), its
  standard error (and output, unless given a file) appended to a log; optionally watched
  (:class:`Watch`: ``/proc`` of its process tree every 0.2 s, CPU seconds and peak
  resident memory per process kind: ``driver`` (the root), ``jvm``, ``py-daemon``,
  ``py-worker``, ``other``); a timeout SIGKILLs the whole group and says what it waited
  for; the result is a :class:`Measured`. Unwatched, the CPU is the root's and its
  waited-for descendants' (``wait4``'s rusage): nothing samples ``/proc`` while it runs.
* :func:`busy_cpu_s`, :class:`Others`, :func:`quiet`: a machine is quiet when *other*
  processes used little CPU: the CPU the whole machine spent busy (``/proc/stat``) less
  this benchmark's own (its process and its process tree), over the span measured. The
  1-minute load average is recorded beside results (:func:`load`) but judges nothing: a
  Spark run alone lifts it to 3-4.5 on 2 cores, and the next run starts with it.
* :func:`alternate`: sides A, B, ... in turn, ``rounds`` times, the order rotated (or
  reversed) every round so that a drift of the machine hits every side alike;
  :func:`ratios` pair by pair.
* :func:`commit`: the git commit and whether the tree had uncommitted changes (the
  results and BENCHMARKS.md aside), recorded with every result.
* :func:`compare`: two outputs (tables of the same columns, sorted alike) equal, floating
  columns to 1e-9 relative; else what differs first.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
CLK = os.sysconf("SC_CLK_TCK")
OTHERS_LIMIT = 0.25  # cores other processes may use on average during a quiet span
GROUP_EXIT_S = 15.0  # how long what the root left running may take to exit
OOM = re.compile(r"OutOfMemoryError|Java heap space|GC overhead limit exceeded|"
                 r"MemoryError|Cannot allocate memory|insufficient memory for the Java")
T = TypeVar("T")


# ----------------------------------------------------------------------------- the code

PACKAGES = ("cec", "cec_spark", "cli", "recovery", "storage_log")


def byte_compiled(*trees: Path | None) -> None:
    """Every side's modules byte-compiled before anything is timed, as an installed
    package is (pip compiles what it installs; ``make`` compiles the tree, see the
    Makefile). A cec process imports about 150 of them (the driver, the Python worker
    daemon, ``cec export`` each): without their ``.pyc`` (an edit, a fresh clone, or
    ``PYTHONDONTWRITEBYTECODE`` in the environment, as on this project's machines)
    each compiles them again, 0.3 s a process, on the way to the first row. ``None``
    is this tree. A failure to compile is the benchmark's error, as any command's."""
    for tree in trees:
        cwd = REPO if tree is None else tree
        subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=cwd,
                       check=True, stdout=subprocess.DEVNULL, timeout=600)


# ----------------------------------------------------------------------------- the machine

def load() -> float:
    """The 1-minute load average, rounded (recorded beside results; judges nothing)."""
    return round(os.getloadavg()[0], 2)


def commit(repo: Path = REPO) -> dict[str, Any]:
    """``{"commit": short hash, "dirty": bool}``: dirty when tracked files other than
    bench/results and BENCHMARKS.md differ from the commit ("?" and None outside git)."""
    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                               text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    sha = git("rev-parse", "--short", "HEAD")
    if sha is None:
        return {"commit": "?", "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 ":(exclude)bench/results", ":(exclude)BENCHMARKS.md")
    return {"commit": sha, "dirty": None if status is None else bool(status)}


def memory_gib() -> float:
    """The machine's memory (``MemTotal`` of /proc/meminfo) in GiB, to 0.1 (nan if
    unreadable)."""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return round(kb / 2**20, 1)


def commit_text(res: dict[str, Any]) -> str:
    """A result's commit as a report names it (said when the tree had other changes)."""
    return f"{res.get('commit')}" + (" (with uncommitted changes)" if res.get("dirty") else "")


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``; all but
    idle and iowait), None where it cannot be read."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / CLK


def self_cpu_s() -> float:
    """This process's own CPU seconds (every thread, not its children)."""
    t = os.times()
    return t.user + t.system


def quiet(others_cores: float | None, limit: float = OTHERS_LIMIT) -> bool | None:
    """Whether a span was quiet: other processes used at most ``limit`` cores on average
    (None: not measured)."""
    return None if others_cores is None else others_cores <= limit


# ----------------------------------------------------------------------------- /proc

@dataclass(frozen=True)
class Stat:
    """What ``/proc/PID/stat`` (or ``/proc/PID/task/TID/stat``) says of a process."""

    comm: str
    state: str
    ppid: int
    session: int
    start: int  # clock ticks after boot: with the pid, names one process
    cpu_s: float  # user + system


def parse_stat(raw: str) -> Stat:
    """One ``stat`` line (the command name may hold spaces and parentheses)."""
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2:].split()
    # state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime
    return Stat(comm, rest[0], int(rest[1]), int(rest[3]), int(rest[19]),
                (int(rest[11]) + int(rest[12])) / CLK)


def stat(pid: int | str, tid: int | str | None = None) -> Stat | None:
    """A process's (or thread's) :class:`Stat`; None if it is gone."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        return parse_stat(Path(path).read_text())
    except (OSError, ValueError, IndexError):
        return None


def _proc_bytes(path: str, field: str) -> int:
    """The ``field: N kB`` line of a /proc file in bytes; 0 if the file cannot be read
    (the process is gone) or has no such line."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(field):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) > 1 and parts[1].isdigit() else 0
    return 0


def rss(pid: int | str) -> int:
    """Resident memory of a process in bytes (``VmRSS`` of /proc/PID/status); 0 if it is
    gone or a zombie (no ``VmRSS`` line)."""
    return _proc_bytes(f"/proc/{pid}/status", "VmRSS:")


def pss(pid: int | str) -> int:
    """Proportional set size of a process in bytes (``Pss`` of /proc/PID/smaps_rollup:
    each resident page divided by the processes that map it, so a sum over processes
    counts a page once); 0 if it is gone or the kernel has no smaps_rollup."""
    return _proc_bytes(f"/proc/{pid}/smaps_rollup", "Pss:")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (it need not be this process's child)."""
    st = stat(pid)
    return st is not None and st.state != "Z"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_group(pgid: int, timeout: float = 60) -> None:
    """SIGKILL the process group ``pgid`` (one this benchmark started in its own session)
    and wait up to ``timeout`` s for its leader to be gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    wait_gone(pgid, timeout)


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait for ``pid`` to end (or be a zombie); False on timeout."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def kind_of(cmd: str, parent_kind: str | None) -> str:
    """A process's kind by its command line (and its parent's kind)."""
    if "py-spy" in cmd:
        return "py-spy"
    if "java" in cmd.split(" ", maxsplit=1)[0] or "org.apache.spark" in cmd:
        return "jvm"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd:
        return "py-worker" if parent_kind in ("py-daemon", "py-worker") else "py-daemon"
    # cec's worker daemon names pyspark.worker; the zygote of a local run (which becomes
    # that daemon and forks the workers, cec_spark/driver/zygote.py) is one too
    if "pyspark.worker" in cmd or "cec_spark.driver.zygote" in cmd:
        return "py-worker"
    return "other"


_THREAD_KINDS = [("task threads", "Executor task"), ("GC", "GC"), ("GC", "G1"),
                 ("JIT compiler", "Compiler"), ("python runner", "stdout writer"),
                 ("python runner", "Python"), ("python runner", "pyspark")]


def thread_kind(name: str) -> str:
    for kind, needle in _THREAD_KINDS:
        if needle in name:
            return kind
    return "other threads"


@dataclass
class Proc:
    pid: int
    kind: str
    cmd: str
    first_seen: float
    last_seen: float
    start: int = 0  # its start time in clock ticks (with the pid, one process)
    comm: str = ""  # its executable's name when its kind was taken
    cpu: float = 0.0
    rss: int = 0  # bytes resident at the last look
    peak_rss: int = 0  # the most bytes resident at any look


def _peaks_by_kind(sample: list[tuple[str, int]], peaks: dict[str, int]) -> int:
    """One look's (kind, bytes) per process summed per kind into ``peaks`` (each kind's
    largest sum so far); the look's sum over every kind."""
    by_kind: dict[str, int] = collections.defaultdict(int)
    for kind, n in sample:
        by_kind[kind] += n
    for kind, total in by_kind.items():
        if total > peaks.get(kind, -1):
            peaks[kind] = total
    return sum(by_kind.values())


@dataclass
class Watch:
    """A process tree as seen every ``every`` seconds (each process's CPU kept at its last
    looked-at value, also after it ended).

    The tree: ``root`` and its descendants, and every process seen in it before (one
    whose parent ended is re-parented away from the tree but is still watched, by pid
    and start time). Memory: at each look, every live process's ``VmRSS``; kept are, per
    kind, the peak over the looks of the sum over that kind's processes
    (:attr:`peak_rss_kind`) and the peak of the whole tree's sum (:attr:`peak_rss_total`),
    in bytes. RSS counts pages shared between processes (a forked worker's pages shared
    with its daemon, mapped libraries) in each of them, so a sum over processes can
    exceed the memory really used; a peak, or a process, shorter than ``every`` can be
    missed. For the kinds in ``pss`` also each process's ``Pss`` (:func:`pss`), whose sum
    counts a shared page once (:attr:`peak_pss_kind`; a read walks the process's page
    tables: 6 ms for 300 MiB resident, measured beside a CI run, so only the kinds
    asked for). ``jvm_threads`` (with ``threads=True``): every JVM thread's name and
    CPU."""

    root: int
    every: float = 0.2
    threads: bool = False
    procs: dict[int, Proc] = field(default_factory=dict)
    gone: list[Proc] = field(default_factory=list)  # pids taken by a new process since
    jvm_threads: dict[int, tuple[str, float]] = field(default_factory=dict)
    on_new: Callable[[Proc], None] | None = None  # called with each new Proc
    stop: threading.Event = field(default_factory=threading.Event)
    peak_rss_kind: dict[str, int] = field(default_factory=dict)
    peak_rss_total: int = 0
    #: the kinds whose ``Pss`` is read: per kind, the peak over the looks of its sum
    pss: frozenset[str] = frozenset()
    peak_pss_kind: dict[str, int] = field(default_factory=dict)
    looks: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record_rss(self, sample: list[tuple[str, int]]) -> None:
        """One look's (kind, bytes) per live process into the peaks (no I/O)."""
        total = _peaks_by_kind(sample, self.peak_rss_kind)
        self.peak_rss_total = max(self.peak_rss_total, total)
        self.looks += 1

    def record_pss(self, sample: list[tuple[str, int]]) -> None:
        """One look's (kind, Pss bytes) per live process into :attr:`peak_pss_kind`."""
        _peaks_by_kind(sample, self.peak_pss_kind)

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds per process kind (each process at its last looked-at value)."""
        out: dict[str, float] = collections.defaultdict(float)
        with self.lock:
            for p in [*self.procs.values(), *self.gone]:
                out[p.kind] += p.cpu
        return dict(out)

    def cpu_s(self) -> float:
        return sum(self.cpu_by_kind().values())

    @staticmethod
    def _children() -> dict[int, list[int]]:
        kids: dict[int, list[int]] = collections.defaultdict(list)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = stat(entry)
                if st is not None:
                    kids[st.ppid].append(int(entry))
        return kids

    def look(self) -> None:
        now = time.time()
        kids = self._children()
        with self.lock:
            known = [(pid, None) for pid in self.procs if pid != self.root]
            todo: list[tuple[int, str | None]] = [*known, (self.root, None)]
            seen: set[int] = set()
            sample: list[tuple[str, int]] = []
            sample_pss: list[tuple[str, int]] = []
            while todo:
                pid, parent_kind = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                st = stat(pid)
                if st is None:
                    continue
                proc = self.procs.get(pid)
                if proc is not None and proc.start and st.start != proc.start:
                    self.gone.append(proc)  # the pid names another process now
                    del self.procs[pid]
                    proc = None
                    if parent_kind is None and pid != self.root:
                        continue  # reached only as a known pid: not of the tree
                if proc is None or proc.kind == "other" or st.comm != proc.comm:
                    # a process may exec: its kind (and so its forks' kinds) is taken again
                    # whenever its executable's name changed. spark-submit's shell becomes
                    # the JVM; a child the JVM forked is seen as java until it execs (the
                    # Python worker daemon). One not known yet is looked at every time
                    cmd = cmdline(pid)
                    kind = "driver" if pid == self.root else kind_of(cmd, parent_kind)
                    if proc is None or kind != proc.kind:
                        proc = Proc(pid, kind, cmd, now if proc is None else proc.first_seen,
                                    now, st.start)
                        self.procs[pid] = proc
                        if self.on_new is not None:
                            self.on_new(proc)
                    else:
                        proc.cmd = cmd or proc.cmd
                    proc.comm = st.comm
                proc.cpu, proc.last_seen = st.cpu_s, now
                if proc.kind != "py-spy":
                    proc.rss = rss(pid)
                    proc.peak_rss = max(proc.peak_rss, proc.rss)
                    sample.append((proc.kind, proc.rss))
                    if proc.kind in self.pss:
                        sample_pss.append((proc.kind, pss(pid)))
                if self.threads and proc.kind == "jvm":
                    try:
                        tids = os.listdir(f"/proc/{pid}/task")
                    except OSError:
                        tids = []
                    for tid in tids:
                        ts = stat(pid, tid)
                        if ts is not None:
                            self.jvm_threads[int(tid)] = (ts.comm, ts.cpu_s)
                if proc.kind != "py-spy":
                    todo.extend((k, proc.kind) for k in kids.get(pid, []))
            if sample:
                self.record_rss(sample)
            if sample_pss:
                self.record_pss(sample_pss)

    def loop(self) -> None:
        while not self.stop.is_set():
            self.look()
            self.stop.wait(self.every)

    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self.loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join()
        self.look()  # a last look: what ran between the loop's last look and now


class Others:
    """The CPU other processes used over a span (``with Others() as o: ...;
    o.cores()``): the machine's busy CPU (``/proc/stat``) less this process's and its
    process tree's (watched every 0.5 s: a process of the tree shorter than that, or its
    last half second, counts as another's, which only ever judges a span less quiet)."""

    def __init__(self, root: int | None = None, every: float = 0.5) -> None:
        self.watch = Watch(os.getpid() if root is None else root, every=every)
        self.t0 = 0.0
        self.busy0: float | None = None
        self.t1: float | None = None
        self.busy1: float | None = None

    def __enter__(self) -> Others:
        self.watch.look()
        self.base = self.watch.cpu_s()
        self.self0 = self_cpu_s() if self.watch.root != os.getpid() else 0.0
        self.busy0 = busy_cpu_s()
        self.t0 = time.monotonic()
        self.watch.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watch.__exit__()
        self.busy1 = busy_cpu_s()
        self.t1 = time.monotonic()

    def cpu_s(self) -> float | None:
        """Other processes' CPU seconds over the span (so far, if it has not ended)."""
        busy1 = self.busy1 if self.t1 is not None else busy_cpu_s()
        if self.busy0 is None or busy1 is None:
            return None
        own = self.watch.cpu_s() - self.base
        if self.watch.root != os.getpid():
            own += self_cpu_s() - self.self0
        return max(0.0, busy1 - self.busy0 - own)

    def cores(self) -> float | None:
        """Other processes' CPU over the span, in cores on average."""
        cpu = self.cpu_s()
        span = (self.t1 if self.t1 is not None else time.monotonic()) - self.t0
        return None if cpu is None or span <= 0 else round(cpu / span, 3)


# ----------------------------------------------------------------------------- processes

@dataclass
class Measured:
    """One process tree's run, as :class:`Run` saw it."""

    wall_s: float
    cpu_s: float
    status: str  # ok, timeout, out of memory, failed (exit N), killed
    code: int | None
    load_start: float
    load_end: float
    cpu_kind: dict[str, float] = field(default_factory=dict)
    peak_rss_total: int = 0
    peak_rss_kind: dict[str, int] = field(default_factory=dict)
    jvm_xmx: list[str] = field(default_factory=list)
    others_cpu_s: float | None = None  # the machine's CPU seconds less ours
    waited_for: str = ""  # what a timeout waited for
    peak_pss_kind: dict[str, int] = field(default_factory=dict)  # Run(pss=...) only

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def others_cores(self) -> float | None:
        return (None if self.others_cpu_s is None or not self.wall_s
                else round(self.others_cpu_s / self.wall_s, 3))

    def then(self, other: Measured) -> Measured:
        """This process followed by ``other`` (cec's run then its export)."""
        kinds = dict(self.peak_rss_kind)
        for k, v in other.peak_rss_kind.items():
            kinds[k] = max(kinds.get(k, 0), v)
        cpu = dict(self.cpu_kind)
        for k, c in other.cpu_kind.items():
            cpu[k] = cpu.get(k, 0.0) + c
        first_bad = self.status != "ok"
        return Measured(self.wall_s + other.wall_s, self.cpu_s + other.cpu_s,
                        self.status if first_bad else other.status,
                        self.code if first_bad else other.code,
                        self.load_start, other.load_end, cpu,
                        max(self.peak_rss_total, other.peak_rss_total), kinds,
                        self.jvm_xmx + other.jvm_xmx,
                        None if self.others_cpu_s is None or other.others_cpu_s is None
                        else self.others_cpu_s + other.others_cpu_s,
                        self.waited_for if first_bad else other.waited_for,
                        {k: max(self.peak_pss_kind.get(k, 0), other.peak_pss_kind.get(k, 0))
                         for k in {*self.peak_pss_kind, *other.peak_pss_kind}})


class Failed(RuntimeError):
    """A measured process that did not end well (its status, command and log named)."""


def status_of(code: int | None, timed_out: bool, log_text: str) -> str:
    """ok, timeout, out of memory or failed (exit N), from how the process ended."""
    if timed_out:
        return "timeout"
    if code == 0:
        return "ok"
    if OOM.search(log_text) or code == -signal.SIGKILL:
        return "out of memory"
    return f"failed (exit {code})"


def _tail(log: Path, limit: int = 4_000_000) -> str:
    try:
        with log.open("rb") as fh:
            fh.seek(max(0, log.stat().st_size - limit))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def default_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


class Run:
    """``cmd`` started in its own session: standard error appended to ``log``, standard
    output to ``stdout`` (truncated, or appended to with ``stdout_append``), to a pipe
    (``stdout_pipe``: :attr:`stdout`) or to the log. ``watch``: its tree watched
    (:class:`Watch`, ``on_new`` called with each new process; ``pss``: the kinds whose
    processes' ``Pss`` is read too). End it with :meth:`wait`,
    :meth:`kill` or :meth:`kill_when`; each leaves no process of its group behind."""

    def __init__(self, cmd: Sequence[str], log: Path, *, stdout: Path | None = None,
                 env: dict[str, str] | None = None, cwd: Path = REPO, watch: bool = False,
                 on_new: Callable[[Proc], None] | None = None, threads: bool = False,
                 stdout_pipe: bool = False, stdout_append: bool = False,
                 pss: frozenset[str] = frozenset()) -> None:
        self.cmd = [str(x) for x in cmd]
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._files: list[IO[bytes]] = [log.open("ab")]
        if stdout is not None:
            self._files.append(stdout.open("ab" if stdout_append else "wb"))
        out: IO[bytes] | int = (subprocess.PIPE if stdout_pipe else self._files[-1])
        self.load_start = load()
        self.busy0 = busy_cpu_s()
        self.self0 = self_cpu_s()
        self.t0 = time.perf_counter()
        self.started_at = time.time()
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=self._files[0], cwd=cwd,
                                     start_new_session=True,
                                     env=env if env is not None else default_env())
        self.pid = self.proc.pid
        self.watch: Watch | None = None
        if watch:
            self.watch = Watch(self.pid, on_new=on_new, threads=threads,
                               pss=pss).__enter__()
        self.result: Measured | None = None
        # a thread blocks in wait4 for the root: its exit is timed when it happens, and
        # its rusage (the root and the descendants it waited for) kept
        self._done = threading.Event()
        self._exit_t: float | None = None
        self._code: int | None = None
        self._rusage_cpu: float | None = None
        self._rusage_peak = 0
        threading.Thread(target=self._reaper, daemon=True).start()

    def _reaper(self) -> None:
        try:
            _, status, ru = os.wait4(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere: no code, no rusage
            self._exit_t = time.perf_counter()
            self._done.set()
            return
        self._exit_t = time.perf_counter()
        self._rusage_cpu = ru.ru_utime + ru.ru_stime
        self._rusage_peak = ru.ru_maxrss * 1024  # the largest single process's peak
        self._code = self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._done.set()

    @property
    def stdout(self) -> IO[bytes] | None:
        return self.proc.stdout

    def poll(self) -> int | None:
        """The exit code once the root has exited (None before)."""
        return self._code if self._done.is_set() else None

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float) -> bool:
        """Poll ``cond`` every 50 ms: True once it holds, False if the process ended
        first (and ``cond`` still does not hold). On timeout the group is killed and
        :class:`Failed` says what it waited for."""
        deadline = time.monotonic() + timeout
        while not cond():
            if self.poll() is not None:
                return cond()
            if time.monotonic() > deadline:
                self._end(None, timed_out=True, what=what)
                raise Failed(f"{self.name} timed out after {timeout:g} s waiting for "
                             f"{what}; see {self.log}")
            time.sleep(0.05)
        return True

    def kill_when(self, cond: Callable[[], bool], what: str, timeout: float) -> Measured:
        """SIGKILL the group once ``cond`` holds; :class:`Failed` if the process ended
        before ("the process ended before WHAT") or the timeout passed."""
        if not self.wait_for(cond, what, timeout):
            m = self._end(self.proc.returncode, timed_out=False, what=what)
            raise Failed(f"the process ended before {what} ({m.status}); see {self.log}")
        return self.kill()

    def kill(self) -> Measured:
        """SIGKILL the whole group now (status ``killed``)."""
        if self.result is not None:
            return self.result
        self.killed_at = time.time()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        m = self._end(self._reap(60), timed_out=False, what="")
        m.status = "killed"
        return m

    def wait(self, timeout: float, what: str = "its exit") -> Measured:
        """Wait for the exit (never raises for how it ended; :meth:`check` does)."""
        done = self._done.wait(timeout)
        return self._end(self.poll(), timed_out=not done, what=what)

    def check(self, timeout: float, what: str = "its exit") -> Measured:
        """:meth:`wait`, then :class:`Failed` unless it exited 0."""
        m = self.wait(timeout, what)
        if not m.ok:
            raise Failed(failure(self.cmd, m, self.log, timeout))
        return m

    @property
    def name(self) -> str:
        return command_name(self.cmd)

    def _reap(self, timeout: float) -> int | None:
        self._done.wait(timeout)
        return self.poll()

    def _end(self, code: int | None, *, timed_out: bool, what: str) -> Measured:
        if self.result is not None:
            return self.result
        wall = (self._exit_t if self._exit_t is not None else time.perf_counter()) - self.t0
        if timed_out:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            code = self._reap(60)
            code = None
        if self.watch is not None:
            self.watch.__exit__()
        # whatever the root left running (a JVM exiting) may not run into the next run
        deadline = time.monotonic() + GROUP_EXIT_S
        while group_alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if group_alive(self.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        for fh in self._files:
            fh.close()
        tail = _tail(self.log) if code not in (0, None) else ""
        if self.watch is not None:
            w = self.watch
            cpu = w.cpu_by_kind()
            xmx = sorted({m for p in w.procs.values()  # not spark-class's launcher (128m)
                          if p.kind == "jvm" and "org.apache.spark.launcher.Main" not in p.cmd
                          for m in re.findall(r"-Xmx(\S+)", p.cmd)})
            peak, kinds = w.peak_rss_total, dict(w.peak_rss_kind)
            pss_kinds = dict(w.peak_pss_kind)
        else:
            cpu = {"tree": self._rusage_cpu} if self._rusage_cpu is not None else {}
            peak = self._rusage_peak
            xmx, kinds = [], ({"tree": peak} if peak else {})
            pss_kinds = {}
        busy1 = busy_cpu_s()
        others = None if self.busy0 is None or busy1 is None else round(
            max(0.0, busy1 - self.busy0 - sum(cpu.values())
                - (self_cpu_s() - self.self0)), 2)
        self.result = Measured(round(wall, 3), round(sum(cpu.values()), 2),
                               status_of(code, timed_out, tail), code, self.load_start,
                               load(), {k: round(v, 2) for k, v in cpu.items()}, peak,
                               kinds, xmx, others, what if timed_out else "", pss_kinds)
        return self.result


def command_name(cmd: Sequence[str]) -> str:
    """A command short enough for a message (a program given with -c shown as -c ...)."""
    words = [str(x) for x in cmd[:6]]
    words = [w if len(w) <= 60 and "\n" not in w else w.splitlines()[0][:40] + " ..."
             for w in words]
    return " ".join(words) + (" ..." if len(cmd) > 6 else "")


def failure(cmd: Sequence[str], m: Measured, log: Path, timeout: float) -> str:
    name = command_name(cmd)
    if m.status == "timeout":
        return (f"{name} timed out after {timeout:g} s waiting for {m.waited_for}; "
                f"see {log}")
    return f"{name}: {m.status}; see {log}"


def measure(cmd: Sequence[str], log: Path, *, timeout: float, stdout: Path | None = None,
            env: dict[str, str] | None = None, cwd: Path = REPO, watch: bool = True,
            what: str = "its exit") -> Measured:
    """Run ``cmd`` to its end (:class:`Run`), watched unless ``watch`` is False; never
    raises for how it ended (``status``; :func:`checked` raises)."""
    return Run(cmd, log, stdout=stdout, env=env, cwd=cwd, watch=watch).wait(timeout, what)


def checked(cmd: Sequence[str], log: Path, *, timeout: float = 1800,
            stdout: Path | None = None, env: dict[str, str] | None = None,
            cwd: Path = REPO, watch: bool = False, what: str = "its exit") -> Measured:
    """:func:`measure` (unwatched by default), :class:`Failed` unless it exited 0."""
    run = Run(cmd, log, stdout=stdout, env=env, cwd=cwd, watch=watch)
    return run.check(timeout, what)


# ----------------------------------------------------------------------------- a cec run

def task_states(run: Path) -> list[dict[str, Any]]:
    """A cec run's task state files (``RUN/state/pNNNN.json``) in partition order; one
    being replaced or unreadable at that moment is left out."""
    out = []
    for f in sorted((run / "state").glob("p*.json")):
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads(f.read_text())
            if isinstance(raw, dict):
                out.append(raw)
    return out


# ----------------------------------------------------------------------------- alternation

def rotation(sides: Sequence[T], round_i: int) -> list[T]:
    """Round i's order: ``sides`` rotated left by i (two sides: A B, B A, A B, ...)."""
    if not sides:
        return []
    k = round_i % len(sides)
    return [*sides[k:], *sides[:k]]


def order(sides: Sequence[T], round_i: int, reverse: bool = False) -> list[T]:
    """Round i's order: rotated (:func:`rotation`), or with ``reverse`` the same order
    forwards in even rounds and backwards in odd ones."""
    if reverse:
        return list(sides) if round_i % 2 == 0 else list(sides)[::-1]
    return rotation(sides, round_i)


def alternate(rounds: int, *sides: Callable[[int], T], reverse: bool = False
              ) -> list[list[T]]:
    """Every side once per round, ``rounds`` rounds, in :func:`order`; each side is
    called with the round's number. Returns each side's results, round by round."""
    out: list[list[T]] = [[] for _ in sides]
    for i in range(rounds):
        for s in order(range(len(sides)), i, reverse):
            out[s].append(sides[s](i))
    return out


def ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """``num[i] / den[i]`` pair by pair (round by round; pairs with a zero left out)."""
    return [a / b for a, b in zip(num, den, strict=True) if b]


def summary(xs: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 2), "min": round(min(xs), 2),
            "max": round(max(xs), 2), "n": len(xs)}


# ----------------------------------------------------------------------------- outputs

def compare(a: pa.Table, b: pa.Table, names: tuple[str, str] = ("cec", "spark"),
            rtol: float = 1e-9, rows: str = "windows") -> str | None:
    """None if ``a`` and ``b`` (the same columns, sorted alike) are equal, floating
    columns to ``rtol`` relative; else what differs first: the row counts, or the first
    row that differs and how many rows differ in that column."""
    if a.num_rows != b.num_rows:
        return f"{names[0]} has {a.num_rows} {rows}, {names[1]} {b.num_rows}"
    if a.column_names != b.column_names:
        return f"{names[0]} has the columns {a.column_names}, {names[1]} {b.column_names}"
    floats = [c for c in a.column_names if pa.types.is_floating(a.schema.field(c).type)]
    for col in [*(c for c in a.column_names if c not in floats), *floats]:
        x, y = a.column(col).to_numpy(zero_copy_only=False), \
            b.column(col).to_numpy(zero_copy_only=False)
        if col in floats:
            bad = np.flatnonzero(~np.isclose(x.astype(np.float64), y.astype(np.float64),
                                             rtol=rtol, atol=0.0))
            what = ("averages differ" if col == "avg" else f"values differ in {col}")
        else:
            bad = np.flatnonzero(x != y)
            what = f"rows differ in {col}"
        if len(bad):
            i = int(bad[0])
            return (f"row {i}: {names[0]} {a.slice(i, 1).to_pylist()} vs "
                    f"{names[1]} {b.slice(i, 1).to_pylist()} ({len(bad)} {what})")
    return None
