"""``cec tail`` on real Spark, real files and real kills (issue 28's tests).

One stream-folder run, followed by two tails in processes of their own:

* tail A, ``--consumer a`` appending to a file, started before the run exists (it says
  it waits), killed -9 midway and started again;
* tail B, ``--from-start``, started midway;

while the run is killed -9 as a whole and resumed by ``cec recover``. The folder starts
empty. At the end (the stream ended with ``_END``) both tails end by themselves, and
each one's lines are exactly ``cec export``'s rows: every result once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.cec_spark.helpers import REPO, cec, spec_text, start_cec, wait_for, write_items_csv

pytestmark = pytest.mark.spark

P = 2


def _tail(run: Path, out: Path, err: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "cli.app", "tail", str(run), *args],
                            stdout=out.open("ab"), stderr=err.open("ab"), cwd=REPO,
                            start_new_session=True)


def _lines(path: Path) -> Counter[tuple[object, ...]]:
    return Counter(tuple(json.loads(line).values()) for line in path.read_text().splitlines())


def _export(run: Path, tmp: Path) -> Counter[tuple[object, ...]]:
    """``cec export``'s rows (parquet: the exact doubles), bounds as the tail prints them."""
    cec(["export", str(run), "--out", str(tmp / "export.parquet"), "--format", "parquet"],
        check=True)
    table = pq.read_table(tmp / "export.parquet")
    for col in ("window_start", "window_end"):
        i = table.column_names.index(col)
        table = table.set_column(i, col, pc.strftime(table.column(i),
                                                     format="%Y-%m-%dT%H:%M:%SZ"))
    return Counter(tuple(r.values()) for r in table.to_pylist())


def _publish(folder: Path, df: pd.DataFrame, name: str) -> None:
    df.to_csv(folder / f".{name}.tmp", index=False)
    (folder / f".{name}.tmp").rename(folder / f"{name}.csv")


def _results(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_tails_across_kills_of_the_run_and_of_themselves_print_every_result_once(
        tmp_path: Path) -> None:
    folder, run = tmp_path / "in", tmp_path / "run"
    folder.mkdir()
    df = write_items_csv(tmp_path / "all.csv", 24_000, keys=60, seed=3)
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text('kind = "stream-dir"\npath = "in"\ntime_field = "item_time"\n'
                              "poll_ms = 50", partitions=P))
    a_out, a_err = tmp_path / "a.jsonl", tmp_path / "a.err"
    tail_a = _tail(run, a_out, a_err, "--consumer", "a")
    wait_for(lambda: "waiting for a run to start" in a_err.read_text(), 60,
             "tail A to say it waits for the run")
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                     tmp_path / "run.log")
    parts = [df.iloc[i:i + 3_000] for i in range(0, len(df), 3_000)]
    for i, part in enumerate(parts[:3]):
        _publish(folder, part, f"f-{i:03d}")
    wait_for(lambda: _results(a_out) > 50, 240, "tail A to print results")

    os.killpg(tail_a.pid, signal.SIGKILL)  # the tail itself, midway
    tail_a.wait(30)
    b_out, b_err = tmp_path / "b.jsonl", tmp_path / "b.err"
    tail_b = _tail(run, b_out, b_err, "--from-start")
    tail_a = _tail(run, a_out, a_err, "--consumer", "a")
    for i, part in enumerate(parts[3:5], start=3):
        _publish(folder, part, f"f-{i:03d}")
    printed = _results(a_out)
    wait_for(lambda: _results(a_out) > printed, 120, "tail A to go on after its kill")

    os.killpg(proc.pid, signal.SIGKILL)  # the whole run, midway
    proc.wait(30)
    for i, part in enumerate(parts[5:], start=5):
        _publish(folder, part, f"f-{i:03d}")
    (folder / "_END").touch()
    cec(["recover", "--from-log", str(run)], check=True, timeout=600)

    assert tail_a.wait(120) == 0, a_err.read_text()[-2000:]
    assert tail_b.wait(120) == 0, b_err.read_text()[-2000:]
    want = _export(run, tmp_path)
    assert sum(want.values()) > 1000
    assert _lines(a_out) == want
    assert _lines(b_out) == want
