"""``cec export``'s two threads (the runs' sorts and writes, the file's writes): the
rows stay in order and an error on a thread is raised to the caller, never lost."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cec_spark.read.export import ResultFile, empty_results, write_all
from cec_spark.read.sorted_runs import SortedRuns


def results(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 10_000, n)) * 1_000_000
    return pa.table({"key": pa.array(rng.integers(0, 50, n), pa.int64()),
                     "window_start": pa.array(start, pa.int64()),
                     "window_end": pa.array(start + 10_000_000, pa.int64()),
                     "count": pa.array(rng.integers(1, 9, n), pa.int64()),
                     "value": pa.array(rng.random(n)),
                     "tau1": pa.array(np.arange(n), pa.int64())})


def no_cec_threads() -> bool:
    return not any(t.name.startswith("cec-export") for t in threading.enumerate())


def test_runs_sorted_on_a_thread_come_back_in_the_whole_order(tmp_path: Path) -> None:
    rows = results(1_000, 1)
    runs = SortedRuns(tmp_path / "spill", sort_rows=64, block_rows=16, step_rows=50)
    for s in range(0, rows.num_rows, 37):
        runs.add(rows.slice(s, 37))
    assert runs.spilled >= 10
    got = pa.concat_tables(list(runs.sorted()))
    want = rows.sort_by([("key", "ascending"), ("window_start", "ascending"),
                         ("window_end", "ascending"), ("tau1", "ascending")])
    assert got.equals(want)
    assert len(list((tmp_path / "spill").iterdir())) == runs.spilled
    assert no_cec_threads()


def test_a_run_the_thread_cannot_write_is_raised_and_the_thread_ends(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    runs = SortedRuns(blocker / "spill", sort_rows=10)
    with pytest.raises(OSError):  # raised by the next spill or the sorted rows
        for s in range(0, 100, 7):
            runs.add(results(100, 2).slice(s, 7))
        list(runs.sorted())
    runs.close()  # the failed run was raised once; closing again neither raises nor waits
    assert no_cec_threads()


def test_a_file_write_that_fails_on_the_thread_is_raised_by_close(tmp_path: Path) -> None:
    out = tmp_path / "missing-dir" / "r.parquet"
    file = ResultFile(out, "parquet", "exclusive")
    with pytest.raises(OSError):
        write_all(file, [results(300, 3).sort_by("key")], empty_results(pa.int64()))
    assert not out.exists()
    assert no_cec_threads()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_file_written_on_a_thread_holds_every_table_in_order(tmp_path: Path,
                                                                 fmt: str) -> None:
    rows = results(500, 4).sort_by("key")
    out = tmp_path / f"r.{fmt}"
    file = ResultFile(out, fmt, "exclusive")
    write_all(file, [rows.slice(s, 45) for s in range(0, 500, 45)], empty_results(pa.int64()))
    assert file.rows == 500
    if fmt == "parquet":
        back = pq.read_table(out)
        assert back.column("value").to_pylist() == rows.column("value").to_pylist()
    else:
        lines = out.read_text().splitlines()
        assert len(lines) == 501
        assert [float(x.split(",")[-1]) for x in lines[1:]] == \
            pytest.approx(rows.column("value").to_pylist())
    assert no_cec_threads()
