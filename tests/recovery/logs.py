"""Real StreamLogs for the recovery tests: write, run an operator over them, cut copies.

A crash is simulated on the files, the way a machine loses them: a copy of the
output log's segments as they stood at a byte offset (earlier segments whole, the one
holding the offset cut there, later ones absent), without the LMDB index. Opening the
copy writable rebuilds the index from the segments and cuts the torn tail back to the
last commit point (the paper's recovery step 1).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from storage_log.log import StreamLog
from storage_log.segment import list_segments, segment_path
from tests.recovery.harness import Run, Scenario

SEGMENT_BYTES = 4096  # small segments: the scans cross segment boundaries


def write_upstream(path: Path, inputs: Sequence[pa.RecordBatch]) -> None:
    """The ingest: one committed record per input batch, then sealed."""
    with StreamLog.open(path, writable=True, create=True, fsync="never",
                        segment_bytes=SEGMENT_BYTES) as log:  # fmt: skip
        for b in inputs:
            log.append(b)
            log.commit()
        log.seal()


def log_bytes(path: Path) -> list[tuple[int, int]]:
    """(segment base, size) of every segment file, in order."""
    return [(s, segment_path(path, s).stat().st_size) for s in list_segments(path)]


@dataclass
class LoggedRun:
    run: Run
    boundaries: list[int]  # global byte offset of the end of every commit


def global_size(segs: list[tuple[int, int]]) -> int:
    return sum(size for _, size in segs)


def run_logged(scn: Scenario, up_dir: Path, out_dir: Path, keep_states: bool = True) -> LoggedRun:
    """Failure-free run over the upstream log: one output record per input batch."""
    op = scn.operator()
    inputs, outs, states = [], [], []
    boundaries = []
    with (
        StreamLog.open(up_dir) as up,
        StreamLog.open(
            out_dir, writable=True, create=True, fsync="never", segment_bytes=SEGMENT_BYTES
        ) as out,
    ):
        for b in up.read_forward():
            inputs.append(b)
            res = op.process(b)
            outs.append(res)
            if keep_states:
                states.append(op.state_at())
            if res.num_rows:
                out.append(res)
                out.commit()
                boundaries.append(global_size(log_bytes(out_dir)))
        final = op.finish()
        if final.num_rows:
            out.append(final)
            out.commit()
            boundaries.append(global_size(log_bytes(out_dir)))
    return LoggedRun(Run(inputs, outs, final, states), boundaries)


def cut_copy(src: Path, dest: Path, offset: int) -> None:
    """Copy the segments of ``src`` as they stood at global byte ``offset`` (no index),
    with the log's identity and epoch files."""
    dest.mkdir(parents=True)
    shutil.copytree(src / "epochs", dest / "epochs")
    shutil.copyfile(src / "log.id", dest / "log.id")
    pos = 0
    for base, size in log_bytes(src):
        if pos >= offset:
            break
        keep = min(size, offset - pos)
        shutil.copyfile(segment_path(src, base), segment_path(dest, base))
        if keep < size:
            with open(segment_path(dest, base), "r+b") as f:
                f.truncate(keep)
                os.fsync(f.fileno())
        pos += size


def read_all(path: Path) -> list[pa.RecordBatch]:
    with StreamLog.open(path) as log:
        return list(log.read_forward())
