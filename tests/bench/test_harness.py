"""bench/harness.py: the benchmarks' one way to run, watch, time out and kill a process,
judge the machine quiet, alternate sides, record the commit and compare outputs. Real
child processes (Python, no Spark), each a second or two."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from bench import harness as h
from bench.harness import Watch


def test_status_names_how_a_run_ended() -> None:
    assert h.status_of(0, False, "") == "ok"
    assert h.status_of(None, True, "") == "timeout"
    assert h.status_of(1, False, "java.lang.OutOfMemoryError: Java heap space") == \
        "out of memory"
    assert h.status_of(1, False, "MemoryError") == "out of memory"
    assert h.status_of(-signal.SIGKILL, False, "") == "out of memory"  # the OOM killer
    assert h.status_of(2, False, "Traceback: ValueError") == "failed (exit 2)"


def test_measured_then_adds_time_and_keeps_the_larger_peaks() -> None:
    a = h.Measured(10.0, 15.0, "ok", 0, 1.0, 2.0, {"driver": 5.0, "jvm": 10.0}, 100,
                   {"driver": 40, "jvm": 60}, ["2g"])
    b = h.Measured(2.0, 1.5, "ok", 0, 2.0, 2.5, {"driver": 1.5}, 70, {"driver": 70})
    both = a.then(b)
    assert (both.wall_s, both.cpu_s, both.status, both.load_start, both.load_end) == \
        (12.0, 16.5, "ok", 1.0, 2.5)
    assert both.cpu_kind == {"driver": 6.5, "jvm": 10.0}
    assert (both.peak_rss_total, both.peak_rss_kind) == (100, {"driver": 70, "jvm": 60})
    bad = h.Measured(1.0, 1.0, "timeout", None, 1.0, 1.0).then(b)
    assert bad.status == "timeout"


def test_watch_keeps_the_peak_per_kind_and_of_the_whole_tree() -> None:
    w = Watch(root=1)
    w.record_rss([("driver", 100), ("py-worker", 50), ("py-worker", 30), ("jvm", 500)])
    w.record_rss([("driver", 90), ("py-worker", 200), ("jvm", 400)])
    w.record_rss([("driver", 120)])
    assert w.peak_rss_kind == {"driver": 120, "py-worker": 200, "jvm": 500}
    assert w.peak_rss_total == 690  # the first look's sum; no look summed 120 + 200 + 500
    assert w.looks == 3


CHILD = """
import subprocess, sys, time
big = bytearray(160 * 2**20)  # resident: every page written
for i in range(0, len(big), 4096):
    big[i] = 1
kid = subprocess.Popen([sys.executable, "-c",
    "b = bytearray(80 * 2**20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\n"
    "import time; time.sleep(1.2)"])
kid.wait()
sys.stderr.write(sys.argv[1])
sys.exit(int(sys.argv[2]))
"""


def test_measure_reads_a_real_process_tree(tmp_path: Path) -> None:
    m = h.measure([sys.executable, "-c", CHILD, "", "0"], tmp_path / "a.log", timeout=60)
    assert m.status == "ok" and m.code == 0
    assert m.peak_rss_kind["driver"] >= 160 * 2**20  # the root, alive all along
    assert m.peak_rss_kind["other"] >= 80 * 2**20  # its child, another python
    assert m.peak_rss_total >= 240 * 2**20  # both at once
    assert m.wall_s >= 1.2 and m.cpu_s > 0 and set(m.cpu_kind) == {"driver", "other"}
    assert m.peak_pss_kind == {}  # not asked for
    run = h.Run([sys.executable, "-c", CHILD, "", "0"], tmp_path / "p.log", watch=True,
                pss=frozenset({"driver", "other"}))
    with_pss = run.wait(60, "the child's end")
    assert with_pss.status == "ok"
    # each process's own pages (none shared here but the interpreter's): about its RSS
    assert with_pss.peak_pss_kind["driver"] >= 150 * 2**20
    assert with_pss.peak_pss_kind["other"] >= 75 * 2**20
    only = h.Run([sys.executable, "-c", CHILD, "", "0"], tmp_path / "q.log", watch=True,
                 pss=frozenset({"other"})).wait(60, "the child's end")
    assert set(only.peak_pss_kind) == {"other"}, only.peak_pss_kind  # the kinds asked for

    oom = h.measure([sys.executable, "-c", CHILD, "java.lang.OutOfMemoryError", "1"],
                    tmp_path / "b.log", timeout=60)
    assert (oom.status, oom.code) == ("out of memory", 1)
    late = h.measure([sys.executable, "-c", "import time; time.sleep(30)"],
                     tmp_path / "c.log", timeout=0.5)
    assert late.status == "timeout" and late.wall_s < 10


FORKED = """
import os, time
big = bytearray(120 * 2**20)
for i in range(0, len(big), 4096):
    big[i] = 1
if os.fork() == 0:  # the child shares every page of big with its parent (copy on write)
    time.sleep(1.5)
    os._exit(0)
os.wait()
"""


def test_pss_counts_a_page_shared_by_a_fork_once(tmp_path: Path) -> None:
    m = h.Run([sys.executable, "-c", FORKED], tmp_path / "f.log", watch=True,
              pss=frozenset({"driver", "other"})).wait(60, "the fork's end")
    assert m.status == "ok"
    # both processes are "driver"-rooted: the root and its forked child ("other")
    rss = m.peak_rss_kind["driver"] + m.peak_rss_kind.get("other", 0)
    pss = m.peak_pss_kind["driver"] + m.peak_pss_kind.get("other", 0)
    assert rss >= 230 * 2**20  # RSS counts the shared 120 MiB in each process
    assert pss >= 120 * 2**20 and rss - pss >= 100 * 2**20  # Pss counts them once


def test_measure_counts_the_cpu_of_other_processes(tmp_path: Path) -> None:
    busy = [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"]
    other = subprocess.Popen(busy)  # another process, busy for 3 s on a core of its own
    try:
        m = h.measure([sys.executable, "-c", "import time; time.sleep(1.5)"],
                      tmp_path / "a.log", timeout=60)
    finally:
        other.wait(10)
    assert m.others_cpu_s is not None and m.cpu_s < 0.5
    assert m.others_cpu_s >= 0.5 * m.wall_s  # the spinning process, not the sleeper


def test_a_timeout_kills_the_whole_group_and_says_what_it_waited_for(tmp_path: Path) -> None:
    pidfile = tmp_path / "kid.pid"
    parent = ("import subprocess, sys, time\n"
              "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(kid.pid))\n"
              "time.sleep(60)\n")
    run = h.Run([sys.executable, "-c", parent], tmp_path / "a.log")
    assert run.wait_for(lambda: pidfile.exists() and pidfile.read_text() != "",
                        "the child's pid", timeout=60)
    kid = int(pidfile.read_text())
    assert h.alive(kid)
    with pytest.raises(h.Failed, match=r"timed out after 0\.5 s waiting for the sleepers' end"):
        run.check(0.5, "the sleepers' end")
    assert run.result is not None and run.result.status == "timeout"
    assert run.result.waited_for == "the sleepers' end"
    assert not h.group_alive(run.pid) and not h.alive(kid)  # the grandchild too


def test_kill_when_and_wait_for(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    run = h.Run([sys.executable, "-c", f"import time, pathlib; pathlib.Path({str(flag)!r})"
                 ".write_text('x'); time.sleep(60)"], tmp_path / "a.log")
    m = run.kill_when(flag.exists, "the flag", timeout=60)
    assert m.status == "killed" and not h.group_alive(run.pid)
    quick = h.Run([sys.executable, "-c", "pass"], tmp_path / "b.log")
    with pytest.raises(h.Failed, match="the process ended before a flag that never comes"):
        quick.kill_when(lambda: False, "a flag that never comes", timeout=60)
    assert quick.result is not None and quick.result.code == 0
    late = h.Run([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "c.log")
    with pytest.raises(h.Failed, match=r"timed out after 0\.3 s waiting for nothing"):
        late.wait_for(lambda: False, "nothing", timeout=0.3)
    assert not h.group_alive(late.pid)


def test_unwatched_runs_take_the_cpu_from_rusage(tmp_path: Path) -> None:
    spin = ("import time\nb = bytearray(64 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
            "t = time.process_time()\nwhile time.process_time() - t < 0.3: pass")
    m = h.measure([sys.executable, "-c", spin], tmp_path / "a.log", timeout=60, watch=False)
    assert m.ok and m.cpu_kind.keys() == {"tree"} and m.cpu_s >= 0.3
    assert m.peak_rss_total >= 64 * 2**20 and m.peak_rss_kind == {"tree": m.peak_rss_total}
    bad = h.measure([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path / "b.log",
                    timeout=60, watch=False)
    assert (bad.status, bad.code) == ("failed (exit 3)", 3)
    with pytest.raises(h.Failed, match="failed \\(exit 3\\); see"):
        h.checked([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path / "b.log")
    out = tmp_path / "out.txt"
    h.checked([sys.executable, "-c", "print('to stdout')"], tmp_path / "c.log", stdout=out)
    assert out.read_text() == "to stdout\n"


def test_the_watch_keeps_a_process_whose_parent_ended(tmp_path: Path) -> None:
    """A standby outlives the driver that started it: re-parented away from the tree,
    it is still watched (by pid and start time), its CPU counted to the end."""
    pidfile, go = tmp_path / "orphan.pid", tmp_path / "go"
    # 0.5 s of CPU (however long that takes), then idle for the last looks
    spin = ("import time\nt = time.process_time()\n"
            "while time.process_time() - t < 0.5: pass\ntime.sleep(0.3)")
    parent = ("import os, subprocess, sys, time\n"
              f"kid = subprocess.Popen([sys.executable, '-c', {spin!r}])\n"
              f"open({str(pidfile)!r} + '.tmp', 'w').write(str(kid.pid))\n"
              f"os.rename({str(pidfile)!r} + '.tmp', {str(pidfile)!r})\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n")
    root = subprocess.Popen([sys.executable, "-c", parent])
    w = Watch(root.pid)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (
            pidfile.exists() and int(pidfile.read_text()) in w.procs):
        w.look()
        time.sleep(0.02)
    orphan = int(pidfile.read_text())
    before = w.procs[orphan].cpu  # seen under its parent, barely started
    go.write_text("")
    root.wait(60)
    while h.alive(orphan) and time.monotonic() < deadline:
        w.look()  # its parent has ended: not under the root any more
        time.sleep(0.05)
    assert before < 0.5 <= w.procs[orphan].cpu


def test_others_is_the_machines_cpu_less_the_trees(tmp_path: Path) -> None:
    # 0.5 s of CPU, however long that takes on a loaded machine
    spin = [sys.executable, "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"]
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with h.Others(root=sleeper.pid, every=0.1) as o:
            subprocess.run(spin, check=True, timeout=600)  # not of the sleeper's tree
    finally:
        sleeper.kill()
        sleeper.wait(60)
    spent = o.cpu_s()
    assert spent is not None and spent >= 0.5  # the spinner, seen as another's
    cores = o.cores()
    assert cores is not None and cores > 0
    assert h.quiet(0.3) is False and h.quiet(0.1) is True and h.quiet(None) is None
    with h.Others(every=0.1) as own:  # this process's tree: the spinner is ours
        subprocess.run(spin, check=True, timeout=600)
    assert own.watch.cpu_s() - own.base >= 0.3  # (its last look may miss its last ticks)


def test_alternation_rotates_or_reverses_and_ratios_pair_by_pair() -> None:
    order: list[str] = []

    def side(name: str, scale: int) -> Callable[[int], int]:
        def go(i: int) -> int:
            order.append(f"{name}{i}")
            return scale * i
        return go

    res = h.alternate(4, side("a", 1), side("b", 10))
    assert order == ["a0", "b0", "b1", "a1", "a2", "b2", "b3", "a3"]  # fair_spark's
    assert res == [[0, 1, 2, 3], [0, 10, 20, 30]]
    assert [h.rotation("xyz", i) for i in range(4)] == [
        ["x", "y", "z"], ["y", "z", "x"], ["z", "x", "y"], ["x", "y", "z"]]
    seen: list[str] = []
    h.alternate(2, *(lambda i, c=c: seen.append(c) for c in "abcd"), reverse=True)
    assert seen == list("abcddcba")  # standby_bench's part 1
    assert h.ratios([2.0, 9.0, 1.0], [1.0, 3.0, 0.0]) == [2.0, 3.0]
    assert h.summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}


def test_commit_and_dirty_flag(tmp_path: Path) -> None:
    c = h.commit()
    assert len(c["commit"]) >= 7 and isinstance(c["dirty"], bool)
    assert h.commit(tmp_path) == {"commit": "?", "dirty": None}  # not a git tree
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        if args[0] == "add":
            (tmp_path / "f.py").write_text("x = 1\n")
            (tmp_path / "bench" / "results").mkdir(parents=True)
            (tmp_path / "bench" / "results" / "r.json").write_text("{}")
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env=env)
    assert h.commit(tmp_path)["dirty"] is False
    (tmp_path / "bench" / "results" / "r.json").write_text('{"a": 1}')
    assert h.commit(tmp_path)["dirty"] is False  # results written by the run itself
    (tmp_path / "f.py").write_text("x = 2\n")
    assert h.commit(tmp_path)["dirty"] is True


def test_compare_names_what_differs_in_any_columns() -> None:
    a = pa.table({"k": ["x", "y"], "n": pa.array([1, 2], pa.int32()), "v": [0.5, 1.5]})
    assert h.compare(a, a) is None
    assert h.compare(a, a.set_column(2, "v", pa.array([0.5, 1.5 * (1 + 1e-12)]))) is None
    msg = h.compare(a, a.set_column(0, "k", pa.array(["x", "z"])), ("A", "B"), rows="rows")
    assert msg is not None and msg.startswith("row 1: A") and "1 rows differ in k" in msg
    msg = h.compare(a, a.set_column(2, "v", pa.array([0.5, 1.6])))
    assert msg is not None and "values differ in v" in msg
    assert h.compare(a, a.slice(0, 1), rows="rows") == "cec has 2 rows, spark 1"
    assert "columns" in (h.compare(a, a.select(["k", "v", "n"])) or "")


def test_stat_reads_past_a_comm_with_spaces_and_parens() -> None:
    fields = ["S", "1", "100", "777", "0", "-1", "4194304", "10", "0", "0", "0",
              str(25 * h.CLK), str(17 * h.CLK), "8", "2", "20", "0", "1", "0", "5"]
    st = h.parse_stat("123 (py (x) thon) " + " ".join(fields) + " 2998272 363")
    assert (st.comm, st.state, st.ppid, st.session, st.start) == ("py (x) thon", "S", 1,
                                                                   777, 5)
    assert st.cpu_s == pytest.approx(42.0)
    me = h.stat(os.getpid())
    assert me is not None and me.ppid == os.getppid() and h.alive(os.getpid())


def test_byte_compiled_writes_every_package_and_fails_on_bad_source(tmp_path: Path) -> None:
    for pkg in h.PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "mod.py").write_text("X = 1\n")
    h.byte_compiled(tmp_path)
    for pkg in h.PACKAGES:
        assert len(list((tmp_path / pkg / "__pycache__").glob("mod.*.pyc"))) == 1, pkg
    (tmp_path / "cec" / "bad.py").write_text("def (:\n")
    with pytest.raises(subprocess.CalledProcessError):
        h.byte_compiled(tmp_path)



def test_a_process_seen_as_java_before_it_execs_python_is_taken_again(tmp_path: Path) -> None:
    """The JVM forks the Python worker daemon, which then execs: a look between the fork
    and the exec sees a java process. Once it runs Python it is a daemon, and what it
    forks are its workers (once, every worker was taken for a daemon)."""
    java = tmp_path / "java"
    java.symlink_to("/bin/sh")  # a process named java until it execs
    go, forked = tmp_path / "go", tmp_path / "forked"
    daemon = ("import os, time\n"
              "if os.fork() == 0:\n"
              f"    open({str(forked)!r}, 'w').close()\n"
              "time.sleep(60)\n")
    script = (f"while [ ! -e {go} ]; do sleep 0.01; done; "
              f"exec {sys.executable} -c {shlex.quote(daemon)} pyspark.daemon")
    root = subprocess.Popen([sys.executable, "-c",
                             "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()",
                             str(java), "-c", script], start_new_session=True)
    try:
        w = Watch(root.pid)
        deadline = time.monotonic() + 60
        jvm: list[int] = []
        while time.monotonic() < deadline and not jvm:
            w.look()
            jvm = [pid for pid, p in w.procs.items() if p.kind == "jvm"]
            time.sleep(0.02)
        assert len(jvm) == 1 and h.stat(jvm[0]).comm == "java"  # type: ignore[union-attr]
        go.write_text("")
        kinds: dict[int, str] = {}
        while time.monotonic() < deadline and not (forked.exists() and len(kinds) == 2):
            w.look()
            kinds = {pid: p.kind for pid, p in w.procs.items() if p.kind.startswith("py-")}
            time.sleep(0.02)
        assert kinds.pop(jvm[0]) == "py-daemon"
        assert list(kinds.values()) == ["py-worker"]
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait(10)
