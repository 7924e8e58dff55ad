"""``cec recover``'s step 3 in the driver (:mod:`cec_spark.recover.partitions`), without
Spark: each partition's logs opened writable (reconciled) one after the other on a local
file system and in threads on a shared one, the upstream logs' ends noted for the
catch-up from those opens, the same either way."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cec_spark.recover import partitions
from cec_spark.recover.partitions import (
    PARALLEL,
    Recovery,
    in_parallel,
    reconcile_workers,
    recover_partitions,
)
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file
from storage_log.log import StreamLog
from tests.cec_spark.test_watermark_view import T0, _rows, _run_dir, _token


def _recovery(layout: RunLayout) -> Recovery:
    spec, settings = read_run_file(layout)
    return Recovery(layout, spec, settings, dry_run=False, repair=False)


def test_in_parallel_keeps_the_order_and_uses_threads_only_when_asked() -> None:
    def where(p: int) -> tuple[int, str]:
        return p, threading.current_thread().name

    one = in_parallel(where, 5, 1)
    assert [p for p, _ in one] == list(range(5))
    assert {name for _, name in one} == {threading.current_thread().name}
    many = in_parallel(where, 5, 3)
    assert [p for p, _ in many] == list(range(5))
    assert all(name.startswith("cec-recover") for _, name in many)


def test_the_workers_follow_the_file_system(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitions, "needs_sync", lambda path: True)  # NFS, FUSE, ...
    assert reconcile_workers(tmp_path) == PARALLEL
    monkeypatch.setattr(partitions, "needs_sync", lambda path: False)  # ext4, tmpfs, ...
    assert reconcile_workers(tmp_path) == 1


@pytest.mark.parametrize("shared", [False, True], ids=["local", "shared"])
def test_the_catch_up_is_each_upstream_logs_end(tmp_path: Path, shared: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitions, "needs_sync", lambda path: shared)
    layout = _run_dir(tmp_path, partitions=3)
    with StreamLog.open(layout.upstream(0), writable=True) as log:
        log.append(_rows([0, 3, 6], [T0, T0 + 1, T0 + 2]))
        log.commit(_token(0, T0 + 2))
    with StreamLog.open(layout.upstream(1), writable=True) as log:
        log.append(_rows([1, 4], [T0, T0 + 1]))
        log.commit(_token(0, T0 + 1))
        log.append(_rows([7], [T0 + 3]))  # appended, never committed: not the end
    opened: list[str] = []
    real = partitions._recover_partition

    def recorded(run: Recovery, p: int) -> object:
        opened.append(threading.current_thread().name)
        return real(run, p)

    monkeypatch.setattr(partitions, "_recover_partition", recorded)
    run = _recovery(layout)
    parts = recover_partitions(run)
    assert run.catch_up == {"0": 6, "1": 4, "2": None}
    assert [e.partition for e in parts] == [0, 1, 2]
    assert all(e.fresh_start for e in parts)  # no output record yet: each starts fresh
    assert all(e.reason == "nothing to recover: its output log holds no record"
               for e in parts)
    main = threading.current_thread().name
    assert (set(opened) == {main}) is not shared
