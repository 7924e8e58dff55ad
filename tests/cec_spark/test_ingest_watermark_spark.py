"""The ingest's watermarks with real Spark, real files, a real ``cec run`` (issue 37).

A stream folder, P = 2, both ingest paths (the long-lived task, alone and as two tasks
each owning one log; the per-poll jobs, which late = "drop" needs): after a file whose
keys all belong to partition 0, partition 1's upstream log still commits the file's
last time as its watermark (a token with no row); with ``idle_close = "1s"`` an idle
folder's logs get a watermark the wall clock advanced past the last row; a file after
that (later times) is ingested as before, and the export equals the pandas reference;
so it does after a kill -9 while idle and ``cec recover``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cec.ingest_token import decode_token
from cec_spark.rundir.run_file import KEY_GROUPS
from recovery.rescale import partitions_of
from storage_log.log import StreamLog
from tests.cec_spark.helpers import (
    cec,
    read_export_csv,
    reference_count_windows,
    spec_text,
    start_cec,
    wait_for,
    write_items_csv,
)

pytestmark = pytest.mark.spark

P = 2


def _spec(tmp_path: Path, extra_run: str, extra_source: str = "") -> Path:
    (tmp_path / "in").mkdir()
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text('kind = "stream-dir"\npath = "in"\nformat = "csv"\n'
                              'time_field = "item_time"\npoll_ms = 50\nidle_close = "1s"\n'
                              + extra_source, partitions=P, extra_run=extra_run))
    return spec


def _drop(folder: Path, df: pd.DataFrame, i: int) -> None:
    tmp = folder / f".f{i:04d}.tmp"
    df.to_csv(tmp, index=False)
    tmp.rename(folder / f"f{i:04d}.csv")


def _logs(run: Path) -> list[tuple[int | None, int | None]]:
    """Each upstream log's (last seq, committed watermark); (None, None) while absent."""
    out: list[tuple[int | None, int | None]] = []
    for p in range(P):
        try:
            with StreamLog.open(run / "upstream" / f"p{p:04d}") as log:
                tok = decode_token(log.last_token())
                out.append((log.last_seq, None if tok is None else tok.watermark))
        except Exception:  # not created yet
            out.append((None, None))
    return out


# the per-poll jobs: late = "drop" (rows in time order here: none is late, so the same
# export) is what the long-lived task does not do
@pytest.mark.parametrize(("extra_run", "extra_source"),
                         [("", ""), ("ingest_tasks = 2", ""), ("", 'late = "drop"')],
                         ids=["long-lived", "two-long-lived", "per-poll"])
def test_quiet_and_idle_logs_get_watermarks_and_the_export_is_exact(
        tmp_path: Path, extra_run: str, extra_source: str) -> None:
    spec = _spec(tmp_path, extra_run, extra_source)
    folder, run = tmp_path / "in", tmp_path / "run"
    df = write_items_csv(tmp_path / "all.csv", 6_000, keys=40, seed=5, negative=False)
    first, second, third = df.iloc[:2_000], df.iloc[2_000:4_000], df.iloc[4_000:].copy()
    part = partitions_of(second.item_id.tolist(), P, KEY_GROUPS)
    second = second[part == 0]  # only partition 0's keys: partition 1 is quiet
    third["item_time"] += 3_600_000_000  # an hour later: past any idle watermark
    _drop(folder, first, 0)
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log")
    try:
        first_end = int(first.item_time.iloc[-1])
        wait_for(lambda: all(w is not None and w >= first_end for _, w in _logs(run)), 180,
                 "the first file's watermark on both logs")
        quiet_seq = _logs(run)[1][0]
        _drop(folder, second, 1)
        second_end = int(second.item_time.iloc[-1])
        # the quiet log: no new row, the second file's last time as its watermark
        wait_for(lambda: all(w is not None and w >= second_end for _, w in _logs(run)), 60,
                 "the second file's watermark on both logs")
        assert _logs(run)[1][0] == quiet_seq
        # idle: the watermark moves on with the wall clock, past the last row's time
        t0 = time.monotonic()
        wait_for(lambda: all(w is not None and w > second_end + 1_500_000
                             for _, w in _logs(run)), 60, "an idle watermark")
        assert time.monotonic() - t0 < 60
        _drop(folder, third, 2)
        (folder / "_END").touch()
        assert proc.wait(180) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    said = (tmp_path / "run.log").read_text(errors="replace")
    assert ("one Spark job per poll" in said) == bool(extra_source), said[-2000:]
    ends = _logs(run)
    assert all(w == int(third.item_time.iloc[-1]) for _, w in ends), ends
    cec(["export", str(run), "--out", str(tmp_path / "out.csv")], check=True)
    got = read_export_csv(tmp_path / "out.csv")
    ref = reference_count_windows(pd.concat([first, second, third]), 10)
    cols = ["key", "window_start", "window_end", "count"]
    assert len(got) > 0 and got[cols].values.tolist() == ref[cols].values.tolist()
    assert np.allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9, atol=0.0)


def test_kill9_while_idle_then_recover_is_exact(tmp_path: Path) -> None:
    """kill -9 of the whole run once an idle watermark is committed, a file after it,
    ``cec recover``: the resumed ingest starts from the logs' watermarks (it never goes
    back) and the export equals the pandas reference."""
    spec = _spec(tmp_path, "")
    folder, run = tmp_path / "in", tmp_path / "run"
    df = write_items_csv(tmp_path / "all.csv", 4_000, keys=40, seed=8, negative=False)
    first, later = df.iloc[:2_000], df.iloc[2_000:].copy()
    later["item_time"] += 3_600_000_000
    _drop(folder, first, 0)
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                     tmp_path / "run.log")
    try:
        end = int(first.item_time.iloc[-1])
        wait_for(lambda: all(w is not None and w > end + 1_000_000 for _, w in _logs(run)),
                 180, "an idle watermark")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    idle = [w for _, w in _logs(run)]
    _drop(folder, later, 1)
    (folder / "_END").touch()
    rec = cec(["recover", "--from-log", str(run), "--json"], check=True)
    assert json.loads(rec.stdout)["resumed"]["completed"], rec.stdout
    ends = _logs(run)
    assert all(w is not None and i is not None and w >= i
               for (_, w), i in zip(ends, idle, strict=True)), (ends, idle)
    cec(["export", str(run), "--out", str(tmp_path / "out.csv")], check=True)
    got = read_export_csv(tmp_path / "out.csv")
    ref = reference_count_windows(pd.concat([first, later]), 10)
    cols = ["key", "window_start", "window_end", "count"]
    assert len(got) > 0 and got[cols].values.tolist() == ref[cols].values.tolist()
    assert np.allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9, atol=0.0)
