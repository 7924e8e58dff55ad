"""The control plane's idle cost (issue 38 item 6, docs/CLUSTER.md "Control-plane cost"):
the operator task's tail backs off while its partition is quiet and takes one snapshot
of the upstream log per look; an idle task or ingest writes its state file only when it
changed and lists ``RUN/drivers`` every ``FENCE_LOOK_S``; a standby lists it as often;
a lease beat is synced on a file system another host reads. No timing assertions: the
clocks are fed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from cec_spark.ingest import stream as stream_mod
from cec_spark.run import task as task_mod
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import FENCE_LOOK_S, Lease, fs_type, needs_sync, read_lease
from cec_spark.standby import watch as watch_mod
from storage_log.log import StreamLog


def test_the_idle_wait_keeps_a_busy_tail_fast_and_backs_off_to_a_bound() -> None:
    w = task_mod.idle_wait
    assert w(0.0) == w(task_mod.TAIL_SLOW_AFTER_S - 0.01) == task_mod.TAIL_POLL_S
    waits = [w(s) for s in (2.0, 3.0, 5.0, 8.0, 10.0, 60.0, 3600.0)]
    assert waits == sorted(waits)  # the longer the quiet, the longer the wait
    assert waits[0] >= task_mod.TAIL_SLOW_S
    assert waits[-1] == waits[-2] == task_mod.TAIL_IDLE_S  # bounded
    assert w(4.0) == pytest.approx(4.0 * task_mod.TAIL_IDLE_SHARE)


def _batch(first: int, n: int) -> pa.RecordBatch:
    seq = pa.array(range(first, first + n), pa.int64())
    return pa.RecordBatch.from_arrays([seq, seq, pa.array([1.0] * n)],
                                      names=["ts", "seq", "value"])


def test_an_idle_look_takes_one_snapshot_and_the_tail_ends_at_the_seal(tmp_path: Path) -> None:
    """Records then the seal, read by ``_tail_watched`` with a watch that never sleeps:
    everything delivered once, a None after each look that found something, the end
    at the seal; each empty look took one snapshot of the log (before: two)."""
    path = tmp_path / "up"
    with StreamLog.open(path, writable=True, create=True) as w:
        w.append(_batch(0, 5))
        w.commit()
        w.append(_batch(5, 5))
        w.commit()
    layout = RunLayout(tmp_path / "run")
    idles: list[int] = []
    snaps, looks = [0], [0]
    waits: list[float] = []

    class Watch:
        def wait(self, timeout: float) -> bool:
            waits.append(timeout)
            if len(waits) == 3:  # the writer seals while the tail waits
                with StreamLog.open(path, writable=True) as w2:
                    w2.append(_batch(10, 2))
                    w2.commit()
                    w2.seal()
            return False

    with StreamLog.open(path, threads=0) as up:
        inner = up.follow

        def follow(**kw: Any) -> Any:
            f = inner(**kw)
            snapshot = f.snapshot

            def counted() -> Any:
                snaps[0] += 1
                return snapshot()

            look = f.look

            def counted_look() -> Any:
                looks[0] += 1
                return look()

            f.snapshot, f.look = counted, counted_look
            return f

        up.follow = follow  # type: ignore[method-assign]
        items = list(task_mod._tail_watched(up, None, layout, lambda: idles.append(1),
                                            Watch()))  # type: ignore[arg-type]
    rows = [i for i in items if isinstance(i, pa.RecordBatch)]
    assert [r.column("seq").to_pylist() for r in rows] == [list(range(5)), list(range(5, 10)),
                                                           [10, 11]]
    assert items.count(None) == 2  # after the first look's records, and the last's
    assert len(waits) == 3 and all(t == task_mod.TAIL_POLL_S for t in waits)
    # looks: the first (records) and its empty follow-up, one after each wait (the
    # third finding the new records) and its follow-up, and the one that sees the
    # seal: one snapshot each (the tail took a second one after every empty look)
    assert looks[0] == 8 and snaps[0] == looks[0], (looks, snaps)


def _clock(now: list[float]) -> SimpleNamespace:
    """A module's ``time`` whose monotonic clock is fed (the rest is the real one)."""
    return SimpleNamespace(monotonic=lambda: now[0], time=time.time,
                           perf_counter=time.perf_counter)


class _Op:
    current_watermark = None


class _Counters(SimpleNamespace):
    def observe(self, op: Any, ras: Any) -> None:
        self.replay_after_seq = ras

    def to_dict(self) -> dict[str, Any]:
        return {"in_batches": self.in_batches}


def test_an_idle_operator_task_writes_no_state_and_looks_for_drivers_every_fence_look(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    now = [100.0]
    monkeypatch.setattr(task_mod, "time", _clock(now))
    looks: list[float] = []
    writes: list[int] = []
    monkeypatch.setattr(task_mod, "check_driver", lambda layout, n: looks.append(now[0]))
    monkeypatch.setattr(task_mod, "write_advisory",
                        lambda path, data: writes.append(data["in_batches"]))
    loop = object.__new__(task_mod._PartitionLoop)
    loop.layout, loop.p, loop.driver = RunLayout(tmp_path), 0, 1
    loop.counters = _Counters(in_batches=3, replay_after_seq=7, watermark_us=None)
    loop.replay_after_seq = SimpleNamespace(value=lambda: 7)
    loop.op = _Op()
    loop.reported, loop.fenced_at = 3, now[0]
    for _ in range(12):  # 3 s of on_idle calls, 0.25 s apart
        now[0] += 0.25
        loop.report_idle()
    assert writes == []  # nothing changed: no state file written
    assert looks == [101.0, 102.0, 103.0]  # RUN/drivers every FENCE_LOOK_S
    loop.counters.in_batches = 4  # a batch processed since the last report
    now[0] += 0.25
    loop.report_idle()
    assert writes == [4] and looks[-1] == now[0]  # the driver checked before the write


def test_an_idle_ingest_writes_its_state_only_when_it_changed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    now = [50.0]
    monkeypatch.setattr(stream_mod, "time", _clock(now))
    looks: list[float] = []
    writes: list[dict[str, Any]] = []
    monkeypatch.setattr(stream_mod, "check_driver", lambda layout, n: looks.append(now[0]))
    monkeypatch.setattr(stream_mod, "write_advisory", lambda path, data: writes.append(data))
    ing = object.__new__(stream_mod._StreamIngest)
    ing.layout, ing.driver, ing.w, ing.writers = RunLayout(tmp_path), 1, 0, 1
    ing.state, ing.clock = stream_mod._State(), [0.0, 0.0, 0.0]
    ing._reported, ing._fenced, ing._written = 0.0, now[0], None
    ing.report()  # the first report writes
    assert len(writes) == 1
    for _ in range(40):  # 4 s of idle polls every 0.1 s
        now[0] += 0.1
        ing.state.polls += 1
        ing.report()
    assert len(writes) == 1  # polls alone are no change
    assert len(looks) == 1 + 4  # the first report's look, then one a FENCE_LOOK_S
    ing.state.chunks_done = 1
    now[0] += stream_mod.STATE_EVERY_S
    ing.report()
    assert len(writes) == 2 and writes[-1]["chunks_done"] == 1
    ing.report(force=True)  # forced (after a write, at the end): always written
    assert len(writes) == 3 and writes[-1]["polls"] == 40


def test_a_standby_lists_the_drivers_every_fence_look_and_reads_the_lease_every_look(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    lease = Lease(layout.driver_lease(1), {"driver": 1}, sync=False)
    try:
        now = [10.0]
        listed: list[float] = []

        def latest(_: Any) -> int:
            listed.append(now[0])
            return 1

        monkeypatch.setattr(watch_mod, "latest_driver", latest)
        dw = watch_mod.DriverWatch(layout, 1, 2.0, clock=lambda: now[0])
        for _ in range(8):  # 2 s of looks, LOOK_S apart
            assert dw.look() is None
            now[0] += watch_mod.LOOK_S
        assert listed == [10.0, 10.0 + FENCE_LOOK_S]
        monkeypatch.setattr(watch_mod, "latest_driver", lambda _: 2)
        now[0] += FENCE_LOOK_S
        verdict = dw.look()
        assert verdict is not None and verdict.kind == "newer"
    finally:
        lease.end("completed")


MOUNTINFO = "\n".join([
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
    "40 22 0:40 / /shared rw,relatime shared:20 - nfs4 srv:/export rw,vers=4.2",
    r"41 40 0:41 / /shared/my\040runs rw shared:21 - fuse.bindfs bindfs rw",
    "42 22 0:42 / /tmp rw shared:22 - tmpfs tmpfs rw",
])


@pytest.mark.parametrize(("path", "kind", "sync"), [
    ("/data/run", "ext4", False),
    ("/shared/run/drivers", "nfs4", True),
    ("/shared/my runs/r1", "fuse.bindfs", True),
    ("/sharedx/run", "ext4", False),  # a prefix of a name is not a mount point
    ("/tmp/x", "tmpfs", False),
])
def test_a_beat_is_synced_where_another_host_reads_it(path: str, kind: str, sync: bool) -> None:
    assert fs_type(Path(path), MOUNTINFO) == kind
    assert needs_sync(Path(path), MOUNTINFO) is sync


def test_a_synced_lease_fdatasyncs_each_beat(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    lease = Lease(tmp_path / "a.live", {"x": 1}, sync=True)
    lease.update(state="ready")
    lease.end("completed")
    assert len(synced) >= 3  # the first record, the update, the end
    rec = read_lease(tmp_path / "a.live")
    assert rec is not None and rec["ended"] == "completed" and rec["state"] == "ready"
    synced.clear()
    plain = Lease(tmp_path / "b.live", {"x": 1}, sync=False)
    plain.end("completed")
    assert synced == []
