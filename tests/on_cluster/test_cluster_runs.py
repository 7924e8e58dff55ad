"""cec on a real Spark standalone cluster (issue 15): 3 Workers on 127.0.0.1, each its own
"host" (mount namespace, a FUSE view of the shared directory with its own page cache and
lock domain, its own index cache; see tests/on_cluster/standalone.py).

The source is a stream folder that the test fills while the run goes on; ``_END`` ends
the stream. Each fault comes as the run works on rows: once the files so far are
ingested and processed, several more are fed at once and the fault follows as soon as
the upstream logs grow; where it landed is read at once from the upstream logs' last
rows and the task state files (mid-ingest: not every fed row committed upstream;
mid-operator: a partition's upstream ahead of what its task reported processed).
Every run's export must equal the independent pandas computation of the same windows.
Between Workers ``flock`` fences nothing (each has its own lock domain, as on NFS):
only writer epochs keep the logs exact when a frozen executor wakes up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cec_spark.helpers import (
    REPO,
    read_export_csv,
    reference_count_windows,
    spec_text,
    wait_for,
)
from tests.cec_spark.test_rescale import behind, upstream_last_seqs
from tests.on_cluster.standalone import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]

P = 4
FILES = 12
# 120k rows over 2,000 keys (6 count windows per key); the ingest commits every
# CHUNK_ROWS (4 commits a file): a fault lands amid several commits (was 25,000 rows a
# file: 300k rows, ~40 s more per run at load 20 for no other check)
ROWS_PER_FILE = 10_000
CHUNK_ROWS = 2_500
RUN_TIMEOUT_S = 420


def _write_stream(folder: Path) -> pd.DataFrame:
    """The whole input, as FILES csv files (not yet in the folder: see _feed)."""
    rng = np.random.default_rng(5)
    n = FILES * ROWS_PER_FILE
    df = pd.DataFrame({
        "item_id": rng.integers(0, 2000, n),
        "item_price": np.round(rng.uniform(-5.0, 100.0, n), 2),
        "item_time": 1_700_000_000_000_000 + np.cumsum(rng.integers(0, 2_000, n)),
    })
    staged = folder.parent / (folder.name + "-staged")
    staged.mkdir()
    for i in range(FILES):
        part = df.iloc[i * ROWS_PER_FILE:(i + 1) * ROWS_PER_FILE]
        part.to_csv(staged / f"part-{i:03d}.csv", index=False)
    return df


def _feed(folder: Path, upto: int, *, end: bool = False) -> None:
    staged = folder.parent / (folder.name + "-staged")
    for i in range(upto):
        src = staged / f"part-{i:03d}.csv"
        if src.exists():
            tmp = folder / f".part-{i:03d}.tmp"
            tmp.write_bytes(src.read_bytes())
            os.replace(tmp, folder / src.name)  # files appear whole
            src.unlink()
    if end:
        (folder / "_END").touch()


def _setup(d: Path) -> tuple[Path, pd.DataFrame]:
    stream = d / "stream"
    stream.mkdir()
    df = _write_stream(stream)
    _feed(stream, 1)  # the first file fixes the column types
    spec = d / "stream.toml"
    spec.write_text(spec_text(f'kind = "stream-dir"\npath = "{stream}"\n'
                              f'time_field = "item_time"\npoll_ms = 200\n'
                              f'chunk_rows = {CHUNK_ROWS}', partitions=P))
    return spec, df


def _cec(cluster: Cluster, *args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "cli.app", *args], cwd=cwd or REPO,
                            env={**cluster.env(), "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen[str], timeout: float = RUN_TIMEOUT_S) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} hung ({timeout} s):\n{out[-2000:]}\n{err[-5000:]}")
    return proc.returncode, out + err


def _state(run: Path, p: int) -> dict[str, object]:
    try:
        raw = json.loads((run / "state" / f"p{p:04d}.json").read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _wait(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _export_is_exact(cluster: Cluster, run: Path, df: pd.DataFrame) -> None:
    out = run.parent / "export.csv"
    code, text = _finish(_cec(cluster, "export", str(run), "--out", str(out)))
    assert code == 0, text[-3000:]
    got = read_export_csv(out)
    ref = reference_count_windows(df, 10)
    cols = ["key", "window_start", "window_end", "count"]
    assert got[cols].values.tolist() == ref[cols].values.tolist()
    assert np.allclose(got["value"].to_numpy(), ref["value"].to_numpy())


def _verify_clean(cluster: Cluster, run: Path) -> None:
    code, text = _finish(_cec(cluster, "inspect", "log", str(run), "--verify", "--json"))
    assert code == 0, text[-3000:]
    logs = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]["logs"]  # LogReport
    assert len(logs) == 2 * P and all(log["verify"]["ok"] for log in logs), text[-3000:]


def test_failure_free_run_on_three_workers(cluster: Cluster, shared_dir: Path) -> None:
    spec, df = _setup(shared_dir)
    _feed(spec.parent / "stream", FILES, end=True)
    run = shared_dir / "run"
    code, text = _finish(_cec(cluster, "run", "pipeline", str(spec), "--log-dir", str(run),
                              "--master", cluster.url, "--json"))
    assert code == 0, text[-5000:]
    _export_is_exact(cluster, run, df)
    _verify_clean(cluster, run)


def _running(run: Path) -> bool:
    return all(int(_state(run, p).get("in_tuples", 0) or 0) > 0 for p in range(P))


def _last_row(df: pd.DataFrame, files: int) -> int:
    """The seq of the last row the filter keeps among files 0..files-1."""
    return int(np.flatnonzero(df.item_price.to_numpy()[:files * ROWS_PER_FILE] >= 0)[-1])


def _upstream_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in (run / "upstream").rglob("*.seg"))


def _feed_busy(run: Path, stream: Path, df: pd.DataFrame, have: int, upto: int) -> int:
    """Once files 0..have-1 are ingested (the upstream's last row is theirs) and every
    partition processed input, feed the files up to ``upto`` at once and return as soon
    as the upstream logs grow (polled every ms): the fault that follows lands in the
    work on them. Returns the last row of files 0..have-1."""
    before = _last_row(df, have)
    _wait(lambda: _running(run) and max(upstream_last_seqs(run, P)) == before, 180,
          f"files 0-{have - 1} ingested and every partition processing")
    idle = _upstream_bytes(run)
    _feed(stream, upto)
    deadline = time.monotonic() + 120
    while _upstream_bytes(run) == idle:
        assert time.monotonic() < deadline, "the ingest wrote nothing in 120 s"
        time.sleep(0.001)
    return before


def _mid_work(run: Path, before: int, last: int) -> str:
    """Where a fault that came as the upstream logs grew past row ``before`` landed,
    read at once (the rest of the cluster goes on: the rows only grow): either not
    every row up to ``last`` is committed upstream (mid-ingest) or a partition's
    upstream is ahead of what its task reported processed (mid-operator);
    AssertionError if neither (the run was idle)."""
    landed, late = max(upstream_last_seqs(run, P)), behind(run, P)
    assert before <= landed and (landed < last or late), (before, landed, last, late)
    return (f"{'mid-ingest' if landed < last else 'mid-operator'} (upstream at row "
            f"{landed} of {before + 1}..{last}, partitions {late} behind it)")


def test_sigkill_of_a_worker_then_exact(cluster: Cluster, shared_dir: Path) -> None:
    spec, df = _setup(shared_dir)
    stream = spec.parent / "stream"
    _feed(stream, FILES // 2)
    run = shared_dir / "run"
    proc = _cec(cluster, "run", "pipeline", str(spec), "--log-dir", str(run),
                "--master", cluster.url)
    before = _feed_busy(run, stream, df, FILES // 2, FILES)
    pid = int(_state(run, 0)["pid"])  # type: ignore[call-overload]
    victim = cluster.worker_of(pid)
    cluster.kill_worker(victim)
    landed = _mid_work(run, before, _last_row(df, FILES))
    cluster.add_worker(3)  # a replacement host joins
    _feed(stream, FILES, end=True)
    code, text = _finish(proc)
    if code != 0:  # the run gave up: recovery on the same cluster resumes it
        code, text = _finish(_cec(cluster, "recover", "--from-log", str(run)))
    assert code == 0, text[-5000:]
    _export_is_exact(cluster, run, df)
    _verify_clean(cluster, run)
    print(f"partition 0's host killed {landed}")


def test_frozen_executor_wakes_up_fenced(cluster: Cluster, shared_dir: Path) -> None:
    """SIGSTOP a Worker (as the run works on fed rows: asserted) until Spark declares
    its executor lost and retries its task on another "host", then SIGCONT it while
    the retry writes: the zombie's writes are
    fenced off by epochs (its own flock domain would not stop it)."""
    spec, df = _setup(shared_dir)
    stream = spec.parent / "stream"
    _feed(stream, FILES // 2)
    run = shared_dir / "run"
    proc = _cec(cluster, "run", "pipeline", str(spec), "--log-dir", str(run),
                "--master", cluster.url)
    before = _feed_busy(run, stream, df, FILES // 2, FILES * 3 // 4)
    pid = int(_state(run, 0)["pid"])  # type: ignore[call-overload]
    frozen = cluster.worker_of(pid)
    cluster.freeze_worker(frozen, signal.SIGSTOP)
    try:
        landed = _mid_work(run, before, _last_row(df, FILES * 3 // 4))
        _wait(lambda: _state(run, 0).get("pid") not in (None, pid), 180,
              "partition 0's task to be retried on another worker")
    finally:
        cluster.freeze_worker(frozen, signal.SIGCONT)  # the zombie wakes up
    _feed(stream, FILES, end=True)
    code, text = _finish(proc)
    if code != 0:
        code, text = _finish(_cec(cluster, "recover", "--from-log", str(run)))
    assert code == 0, text[-5000:]
    epochs = sorted((run / "output" / "p0000" / "epochs").iterdir())
    assert len(epochs) >= 2, "the retry took a new epoch"
    _export_is_exact(cluster, run, df)
    _verify_clean(cluster, run)
    print(f"partition 0's host frozen {landed}")


def _live(cluster: Cluster) -> list[object]:
    return [w for w in cluster.workers if w.proc.poll() is None]


def test_too_few_slots_exit_2_with_the_numbers(cluster: Cluster, shared_dir: Path) -> None:
    spec, _ = _setup(shared_dir)
    # the run waits executor_wait_s (30 s by default) for executors beyond the 9 slots
    # the master granted, and the granted ones however long they take to register
    # (run/slots.py): 5 s is the same verdict with the same numbers, 25 s sooner
    spec.write_text(spec.read_text().replace("[run]", "[run]\nexecutor_wait_s = 5"))
    run = shared_dir / "run"
    slots = 3 * len(_live(cluster))
    code, text = _finish(_cec(cluster, "run", "pipeline", str(spec), "--log-dir", str(run),
                              "--master", cluster.url, "--partitions", str(slots)),
                         timeout=120)
    assert code == 2, text[-3000:]
    assert f"needs {slots + 1} Spark task slots" in text and f"has {slots}:" in text, text
    # refused before any task ran (no timing assertion: a loaded CI machine is slow)
    assert "Lost task" not in text and "TaskSetManager" not in text, text[-3000:]
    assert not (run / "run.toml").exists(), "a run that never started leaves no run"


def test_run_directory_or_source_the_workers_cannot_see(cluster: Cluster,
                                                        shared_dir: Path) -> None:
    """The driver's working directory is private to it (the Workers mount a tmpfs over
    it): a relative --log-dir there, a source there, or a rescale onto the cluster of a
    run made there on local Spark, is named in an exit 2."""
    spec, _ = _setup(shared_dir)
    own = cluster.private / "driver-cwd"
    own.mkdir()
    code, text = _finish(_cec(cluster, "run", "pipeline", str(spec), "--log-dir", "run",
                              "--master", cluster.url, cwd=own), timeout=180)
    assert code == 2, text[-3000:]
    assert f"cannot see the run directory {own / 'run'}" in text, text[-3000:]
    assert "host " in text
    assert not (own / "run" / "run.toml").exists()

    # a source only the driver sees
    private_stream = cluster.private / "stream"
    private_stream.mkdir()
    (private_stream / "part-000.csv").write_bytes(
        next((shared_dir / "stream").iterdir()).read_bytes())
    bad = shared_dir / "private-source.toml"
    bad.write_text(spec.read_text().replace(str(shared_dir / "stream"), str(private_stream)))
    code, text = _finish(_cec(cluster, "run", "pipeline", str(bad), "--log-dir",
                              str(shared_dir / "run2"), "--master", cluster.url),
                         timeout=180)
    assert code == 2, text[-3000:]
    assert f"cannot see the source {private_stream}" in text, text[-3000:]

    # a run made in the driver's private directory on local Spark, killed, then rescaled
    # onto the cluster: refused before the rescale's tasks would write (issue 38: the
    # rescale runs in tasks), naming the directory
    local_run = own / "local-run"
    proc = _cec(cluster, "run", "pipeline", str(spec), "--log-dir", str(local_run))
    try:
        wait_for(lambda: proc.poll() is not None or any(
            int(_state(local_run, p).get("in_tuples", 0) or 0)  # type: ignore[call-overload]
            for p in range(P)), 180, "the local run to process its first rows")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        _finish(proc)
    code, text = _finish(_cec(cluster, "recover", "--from-log", str(local_run),
                              "--partitions", str(P - 1), "--master", cluster.url),
                         timeout=180)
    assert code == 2, text[-3000:]
    assert f"cannot see the run directory {local_run}" in text, text[-3000:]
    assert not (local_run / "handover").exists()
    assert not (local_run / "output" / "g0001").exists()


def test_slots_lost_mid_run_exit_5_then_recover_exact(cluster: Cluster,
                                                      shared_dir: Path) -> None:
    """Two of three Workers die (as the run works on fed rows: asserted) and do not
    come back: the run says it waits, gives up
    after [run].slot_timeout_s with exit 5; `cec recover` on the restored cluster ends
    exact."""
    spec, df = _setup(shared_dir)
    spec.write_text(spec.read_text().replace("[run]", "[run]\nslot_timeout_s = 8"))
    stream = spec.parent / "stream"
    _feed(stream, FILES // 2)
    run = shared_dir / "run"
    proc = _cec(cluster, "run", "pipeline", str(spec), "--log-dir", str(run),
                "--master", cluster.url)
    before = _feed_busy(run, stream, df, FILES // 2, FILES)
    live = _live(cluster)
    for w in live[:-1]:
        cluster.kill_worker(w)  # type: ignore[arg-type]
    landed = _mid_work(run, before, _last_row(df, FILES))
    code, text = _finish(proc, timeout=240)
    assert code == 5, text[-5000:]
    assert "task slots left" in text and "resume with 'cec recover" in text, text[-3000:]
    for _ in live[:-1]:
        cluster.add_worker(3)
    cluster.wait_workers(len(live))
    _feed(stream, FILES, end=True)
    code, text = _finish(_cec(cluster, "recover", "--from-log", str(run), "--master",
                              cluster.url))
    assert code == 0, text[-5000:]
    _export_is_exact(cluster, run, df)
    _verify_clean(cluster, run)
    print(f"two hosts killed {landed}")


def test_worker_lost_during_recovery(cluster: Cluster, shared_dir: Path) -> None:
    """The driver is killed (-9, whole process group) as the run works on fed rows
    (asserted); `cec recover` starts on the cluster and a Worker is SIGKILLed as the
    recovery ingests the rest, fed at once (asserted): the recovery (or the next one,
    if it gave up) ends exact."""
    spec, df = _setup(shared_dir)
    stream = spec.parent / "stream"
    _feed(stream, FILES // 3)
    run = shared_dir / "run"
    proc = _cec(cluster, "run", "pipeline", str(spec), "--log-dir", str(run),
                "--master", cluster.url)
    first = _feed_busy(run, stream, df, FILES // 3, FILES * 2 // 3)
    os.killpg(proc.pid, signal.SIGKILL)
    driver_kill = _mid_work(run, first, _last_row(df, FILES * 2 // 3))
    proc.communicate()
    before = {p: _state(run, p).get("pid") for p in range(P)}
    rec = _cec(cluster, "recover", "--from-log", str(run), "--master", cluster.url)
    _wait(lambda: any(_state(run, p).get("pid") not in (None, before[p])
                      and int(_state(run, p).get("in_tuples", 0) or 0) > 0
                      for p in range(P)), 240, "the recovery's tasks to process input")
    moved = next(p for p in range(P) if _state(run, p).get("pid") not in (None, before[p]))
    victim = cluster.worker_of(int(_state(run, moved)["pid"]))  # type: ignore[call-overload]
    idle = _upstream_bytes(run)
    _feed(stream, FILES)  # the rest at once: the host dies as the recovery ingests
    deadline = time.monotonic() + 120
    while _upstream_bytes(run) == idle:
        assert time.monotonic() < deadline, "the recovery's ingest wrote nothing in 120 s"
        time.sleep(0.001)
    cluster.kill_worker(victim)
    worker_kill = _mid_work(run, -1, _last_row(df, FILES))
    cluster.add_worker(3)
    _feed(stream, FILES, end=True)
    code, text = _finish(rec)
    if code != 0:
        code, text = _finish(_cec(cluster, "recover", "--from-log", str(run)))
    assert code == 0, text[-5000:]
    _export_is_exact(cluster, run, df)
    _verify_clean(cluster, run)
    print(f"the driver killed {driver_kill}; a host killed in the recovery {worker_kill}")
