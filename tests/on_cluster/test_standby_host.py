"""A standby on another "host" (issue 27): ``cec standby`` in its own mount and pid
namespaces, seeing the run directory through its own ``bindfs`` mount (its own page
cache and ``flock`` domain, as a host sees an NFS export; its own pids). It can judge
the driver by the lease's beat alone: the driver's lock is invisible to it and its
pids mean nothing there. The driver of a stream-folder run, the first half of its rows
processed, is killed with SIGKILL; the standby takes the run over after the lease stood
still, the rest of the rows arrive, and the export equals the failure-free run's over
the same rows (a CSV file).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cec_spark.helpers import REPO, cec, spec_text, start_cec, wait_for, write_items_csv
from tests.on_cluster.standalone import missing_tools

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

ROWS = 60_000
P = 2
SOURCE = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"\nchunk_rows = 5000'


def _standby_on_another_host(shared: Path, run: Path, log: Path) -> subprocess.Popen[bytes]:
    """``cec standby`` in new mount and pid namespaces with ``shared`` seen through its
    own bindfs mount."""
    script = (
        "set -e\n"
        f'bindfs -f "{shared}" "{shared}" &\n'
        "i=0\n"
        f'until grep -q " {shared} fuse" /proc/self/mounts; do\n'
        '  i=$((i+1)); [ $i -lt 100 ] || { echo "bindfs did not mount"; exit 1; }\n'
        "  sleep 0.1\n"
        "done\n"
        f'cd "{REPO}"\n'
        f'"{sys.executable}" -m cli.app standby --from-log "{run}"\n')
    return subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--mount-proc",
                             "--propagation", "private", "sh", "-c", script],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_standby_on_another_host_takes_over_by_the_lease_alone(tmp_path: Path) -> None:
    why = missing_tools()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the cluster tests must run in CI: {why}")
        pytest.skip(why)
    shared = tmp_path / "shared"
    shared.mkdir()
    df = write_items_csv(shared / "items.csv", ROWS, keys=2000, seed=5)
    ref_spec = shared / "items.toml"
    ref_spec.write_text(spec_text(SOURCE, partitions=P))
    cec(["run", "pipeline", str(ref_spec), "--log-dir", str(shared / "ref")], check=True)
    cec(["export", str(shared / "ref"), "--out", str(tmp_path / "ref.csv")], check=True)
    shutil.rmtree(shared / "ref")
    # the run reads the same rows from a stream folder, the second half given after the
    # takeover: it cannot finish before the kill however long the standby takes to warm
    # (on a loaded machine the run of a 120 k-row file had ended first, once)
    live = shared / "live"
    live.mkdir()
    df.iloc[:ROWS // 2].to_csv(live / "f-000.csv", index=False)
    spec = shared / "live.toml"
    spec.write_text(spec_text(f'kind = "stream-dir"\npath = "{live}"\nformat = "csv"\n'
                              'time_field = "item_time"\npoll_ms = 50', partitions=P))

    run = shared / "run"
    standby = _standby_on_another_host(shared, run, tmp_path / "standby.log")
    driver = None
    try:
        wait_for(lambda: "waiting for the run" in _text(tmp_path / "standby.log"), 120,
                 "the standby to wait for the run")
        driver = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                           tmp_path / "run.log")
        wait_for(lambda: "standby: ready to take over" in _text(tmp_path / "standby.log"),
                 240, "the standby to be ready")
        wait_for(lambda: any(json.loads(p.read_text() or "{}").get("in_tuples", 0)
                             for p in (run / "state").glob("p*.json")) or
                 driver.poll() is not None, 240, "the first processed batch")
        assert driver.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
        os.killpg(driver.pid, signal.SIGKILL)
        killed = time.monotonic()
        driver.wait(30)
        wait_for((run / "drivers" / "00000002").exists, 60, "the standby to take over")
        took = time.monotonic() - killed
        df.iloc[ROWS // 2:].to_csv(live / ".f-001.tmp", index=False)
        (live / ".f-001.tmp").rename(live / "f-001.csv")
        (live / "_END").touch()
        code = standby.wait(300)
        said = _text(tmp_path / "standby.log")
        assert code == 0, said[-3000:]
        # its own flock domain and pid namespace: only the beat could tell
        assert "stood still" in said, said[-3000:]
        assert took >= 1.5, took
    finally:
        for proc in (standby, driver):
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
    cec(["export", str(run), "--out", str(tmp_path / "got.csv")], check=True)
    assert (tmp_path / "got.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()
