"""The standby's promises (issue 39 item 3), checked where they can break, on real Spark
(local master) with real processes:

* **a driver frozen alone while its tasks write.** In local mode the driver is the
  ``cec run`` Python process and its JVM (the JVM is also the executor: frozen, it can
  neither retry nor start a task); the tasks themselves are the Python workers, which run
  on and keep ingesting and writing the logs while a ``cec standby`` sees the lease
  stand still and claims driver number 2. A thread of the test reads every upstream and
  output log while that happens: record by record through the public reader (what a
  tail would see), and frame by frame from the segment files of every writer epoch
  (``storage_log.epoch``: each writer of a log takes a new epoch, its pid recorded, and
  the first epoch after the claim records the fence, the point the new writer continued
  from). Asserted: the old tasks did write during the freeze; every epoch taken after
  the claim is the standby's (none by the old driver's processes); every record of an
  old epoch that is in a log lies at or before that log's fence, and no old commit lies
  past it on disk either (on one host the new writer waits for the old one's ``flock``:
  here a zombie commit would be a bug; across hosts the epochs discard them, tests/
  on_cluster); nothing a reader saw during the takeover is taken back. An old commit
  made after the claim (the watch orders commits by its numbered polls) but before the
  fence is allowed and printed: the claim stops the old tasks at their next check of
  the driver number, and what they commit until then lies before the fence, part of
  the log (STANDBY.md, "Fencing"). Then the old driver is woken
  (SIGCONT): it stops with exit status 2 and ``DriverSupersededError``'s message, its
  lease says ``superseded``, and it writes nothing to any log (no epoch, no segment
  byte, no driver number, no STOP) while the new driver writes.
* **a standby started after the driver died** (``kill -9`` of the whole run) takes the
  run over as driver 2 and completes it.

Both exports equal an independent reference: pandas' closed count windows (10 rows per
key, average of ``item_price >= 0``) of the input rows (not cec's own failure-free run).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xxhash

from cec_spark.rundir.lease import read_lease
from storage_log.epoch import Chain, list_epochs, read_chain, read_epoch
from storage_log.errors import StorageLogError
from storage_log.framing import FLAG_COMMIT, FrameError, Kind
from storage_log.log import StreamLog
from storage_log.segment import SegmentReader, list_segments, segment_path, sid_epoch
from tests.cec_spark.helpers import (
    cec,
    read_export_csv,
    reference_count_windows,
    spec_text,
    start_cec,
    task_states,
    wait_for,
    write_items_csv,
)

pytestmark = pytest.mark.spark

ROWS = 40_000
P = 3
FILES = 40  # the stream folder's files
FIRST = 8  # dropped before the run starts
STREAM = ('kind = "stream-dir"\npath = "in"\nformat = "csv"\ntime_field = "item_time"\n'
          'poll_ms = 50')
READY = "standby: ready to take over"


@dataclass(frozen=True)
class Data:
    rows: pd.DataFrame
    reference: pd.DataFrame  # pandas: closed count windows of 10 per key


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    d = tmp_path_factory.mktemp("promises")
    df = write_items_csv(d / "items.csv", ROWS, keys=1500, seed=39)
    return Data(df, reference_count_windows(df, 10))


def _stream_spec(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    spec = tmp_path / "stream.toml"
    spec.write_text(spec_text(STREAM, partitions=P))
    return spec


def _drop(folder: Path, df: pd.DataFrame, i: int) -> None:
    """File ``i`` of the FILES the rows are cut into (renamed into place)."""
    tmp = folder / f".f{i:04d}.tmp"
    df.iloc[i * len(df) // FILES:(i + 1) * len(df) // FILES].to_csv(tmp, index=False)
    tmp.rename(folder / f"f{i:04d}.csv")


def _feed(folder: Path, df: pd.DataFrame, first: int, end: int) -> None:
    """Files ``first`` to ``end - 1``, one every 0.1 s."""
    for i in range(first, end):
        _drop(folder, df, i)
        time.sleep(0.1)


def _end(folder: Path) -> None:
    (folder / "_END").write_text("")


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's command name and parent (None: gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2:].split()
    return raw[raw.index("(") + 1:raw.rindex(")")], int(rest[1])


def _lineage(pid: int) -> list[int]:
    """``pid`` and its ancestors ([]: gone)."""
    out = []
    while pid > 1:
        st = _stat(pid)
        if st is None:
            return out
        out.append(pid)
        pid = st[1]
    return out


def _tree(root: int) -> dict[int, str]:
    """``root`` and its live descendants: pid -> command name. (The Python worker
    daemon of a Spark JVM has a process group of its own: a group is not the tree.)"""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and root in _lineage(int(name)):
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st[0]
    return out


def _export_equals_pandas(run: Path, tmp: Path, ref: pd.DataFrame) -> None:
    """Every window of the run's export equals pandas': key, bounds, count, and the
    average (to 1e-9 relative: pandas sums in another order)."""
    out = tmp / "export.csv"
    cec(["export", str(run), "--out", str(out)], check=True)
    got = read_export_csv(out)
    cols = ["key", "window_start", "window_end", "count"]
    assert len(got) == len(ref) > 0
    assert got[cols].values.tolist() == ref[cols].values.tolist()
    assert np.allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-9,
                       atol=0.0), (got["value"] - ref["value"]).abs().max()


def _logs(run: Path) -> dict[str, Path]:
    return {f"{kind}/p{p:04d}": run / kind / f"p{p:04d}"
            for kind in ("upstream", "output") for p in range(P)}


# -- the logs, read while the takeover happens -----------------------------------------


@dataclass
class Epoch:
    number: int
    pid: int
    created: float  # the epoch file's wall clock time
    lineage: list[int]  # the writer and its ancestors when the watch first saw it
    fence_seq: int | None  # the last seq of the older chain it continued from


@dataclass
class Frame:
    """A DATA frame found in a segment file, and when its commit was first seen."""

    sid: int
    offset: int
    first_seq: int
    last_seq: int
    committed_poll: int | None = None  # the watch's poll that first saw its commit


@dataclass
class Seen:
    """A record the public reader returned during the run."""

    last_seq: int
    digest: str
    poll: int


@dataclass
class LogView:
    epochs: dict[int, Epoch] = field(default_factory=dict)
    walked: dict[int, int] = field(default_factory=dict)  # segment id -> bytes walked
    frames: list[Frame] = field(default_factory=list)
    uncommitted: dict[int, list[Frame]] = field(default_factory=dict)
    reader: StreamLog | None = None
    read_to: int | None = None
    seen: dict[int, Seen] = field(default_factory=dict)  # first seq -> record


def _digest(batch: pa.RecordBatch) -> str:
    return xxhash.xxh64_hexdigest(repr(batch.to_pydict()).encode())


class LogWatch(threading.Thread):
    """Reads every log of the run every few ms until stopped: the epochs (and their
    writers' lineage, while they live), every DATA frame of every segment file (with
    the poll that first saw its commit), and, through the public reader, every
    committed record (with its content).

    Polls are numbered; poll ``k`` looks at the claim (``drivers/00000002``) first, then
    at every log. A frame first seen in poll ``k`` was not there when poll ``k - 1``
    walked its segment: so it was committed after the claim if poll ``k - 1`` already
    saw the claim, and after an event the test marked during poll ``m`` if ``k >= m + 2``.
    """

    def __init__(self, run: Path) -> None:
        super().__init__(daemon=True)
        self.root = run
        self.views = {name: LogView() for name in _logs(run)}
        self.halt = threading.Event()
        self.errors: list[str] = []
        self.polls = 0  # the index of the poll under way
        self.claim_poll: int | None = None  # the first poll that saw driver number 2

    def run(self) -> None:
        while not self.halt.is_set():
            self._poll_all()
            self.halt.wait(0.02)
        self._poll_all()  # what was committed since the last look
        for view in self.views.values():
            if view.reader is not None:
                view.reader.close()

    def _poll_all(self) -> None:
        if self.claim_poll is None and (self.root / "drivers" / "00000002").exists():
            self.claim_poll = self.polls
        for name, path in _logs(self.root).items():
            try:
                self._poll(self.views[name], path)
            except Exception as exc:  # every failure is reported
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        self.polls += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(60)
        assert not self.is_alive()

    def _poll(self, view: LogView, path: Path) -> None:
        if not (path / "log.id").exists() and not (path / "epochs").exists():
            return
        for e in list_epochs(path):
            if e not in view.epochs:
                info = read_epoch(path, e)
                view.epochs[e] = Epoch(e, info.pid, info.created, _lineage(info.pid),
                                       None if info.fence is None else info.fence.last_seq)
        self._read(view, path)  # the reader first: its records' frames are walked below
        for sid in list_segments(path):
            self._walk(view, path, sid)

    def _read(self, view: LogView, path: Path) -> None:
        if view.reader is None:
            try:
                view.reader = StreamLog.open(path, threads=0)
            except StorageLogError:
                return
        for batch in view.reader.read_forward(after_seq=view.read_to):
            seqs = batch.column("seq")
            first, last = seqs[0].as_py(), seqs[-1].as_py()
            # upstream seqs are the source's rows, a partition holds some: gaps; an
            # output log's seqs are dense
            assert view.read_to is None or first == view.read_to + 1 or (
                "upstream" in str(path) and first > view.read_to), (view.read_to, first)
            view.seen[first] = Seen(last, _digest(batch), self.polls)
            view.read_to = last

    def _walk(self, view: LogView, path: Path, sid: int) -> None:
        start = view.walked.get(sid, 0)
        try:
            with SegmentReader(segment_path(path, sid)) as seg:
                size = seg.size()
                for _, _, info in seg.forward(start, size):
                    if info.kind == Kind.DATA:
                        view.uncommitted.setdefault(sid, []).append(
                            Frame(sid, info.offset, info.first_seq, info.last_seq))
                    if info.flags & FLAG_COMMIT:
                        for frame in view.uncommitted.pop(sid, []):
                            frame.committed_poll = self.polls
                            view.frames.append(frame)
                    view.walked[sid] = info.end
        except FileNotFoundError:  # trimmed
            view.walked[sid] = 1 << 62
        except FrameError:  # a frame being written: read again at the next poll
            pass


def _final_records(path: Path) -> dict[int, tuple[int, str]]:
    with StreamLog.open(path, threads=0) as log:
        if log.first_seq is None:
            return {}
        return {b.column("seq")[0].as_py(): (b.column("seq")[-1].as_py(), _digest(b))
                for b in log.read_forward(after_seq=log.first_seq - 1)}


def _frame_epoch(view: LogView, chain: Chain, path: Path, first: int, last: int) -> int:
    """The epoch of the frame holding records ``first..last`` on the log's chain."""
    on = set(chain.segments)
    hits = {sid_epoch(f.sid) for f in view.frames
            if f.first_seq == first and f.last_seq == last and f.sid in on
            and (f.sid not in chain.limits or f.offset < chain.limits[f.sid])}
    assert len(hits) == 1, (path, first, last, hits)
    return hits.pop()


# -- the tests ---------------------------------------------------------------------------


def _not_the_standbys(run: Path, standby: int) -> dict[str, tuple[int, int]]:
    """What the old driver could have written into the logs and the run's registry:
    every epoch taken by a process outside the standby's tree and every segment of
    such an epoch, the driver numbers (not the old driver's own lease), STOP.
    Path -> (mtime ns, size)."""
    paths = [*(run / "drivers").glob("0*[0-9]"), run / "STOP"]
    for path in _logs(run).values():
        theirs = {e for e in list_epochs(path)
                  if standby not in _lineage(read_epoch(path, e).pid)}
        paths += [path / "epochs" / f"{e:08d}" for e in theirs]
        paths += [segment_path(path, sid) for sid in list_segments(path)
                  if sid_epoch(sid) in theirs]
    out = {}
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            st = path.stat()
            out[str(path.relative_to(run))] = (st.st_mtime_ns, st.st_size)
    return out


def test_a_driver_frozen_alone_is_fenced_while_its_tasks_write_and_stops_when_woken(
        data: Data, tmp_path: Path) -> None:
    spec = _stream_spec(tmp_path)
    folder = tmp_path / "in"
    for i in range(FIRST):
        _drop(folder, data.rows, i)
    run = tmp_path / "run"
    # the standby starts first (it waits for the run): both warm up at once
    standby = start_cec(["standby", "--from-log", str(run)], tmp_path / "sb.log")
    driver = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                       tmp_path / "run.log")
    watch = LogWatch(run)
    frozen: set[int] = set()
    try:
        wait_for(lambda: READY in _text(tmp_path / "sb.log") or standby.poll() is not None,
                 240, "the standby to be ready")
        assert standby.poll() is None, _text(tmp_path / "sb.log")[-3000:]
        wait_for(lambda: (all("pid" in s for s in task_states(run, P)) and
                          any(int(s.get("in_tuples", 0) or 0) > 0  # type: ignore[call-overload]
                              for s in task_states(run, P))) or driver.poll() is not None,
                 240, "every task to run and the first processed batch")
        assert driver.poll() is None, _text(tmp_path / "run.log")[-3000:]
        watch.start()
        # the driver alone: the cec run process and its JVM; not its Python workers
        members = _tree(driver.pid)
        frozen = {driver.pid} | {pid for pid, comm in members.items() if comm == "java"}
        workers = set(members) - frozen
        assert len(frozen) == 2 and workers, members
        tasks = {int(s["pid"]) for s in task_states(run, P)}  # type: ignore[call-overload]
        assert tasks <= workers, (tasks, members)  # every operator task runs on
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        froze_poll = watch.polls
        # the tasks keep ingesting and writing: a file every 0.1 s, through the claim
        # and the takeover, for the old tasks and then the new ones
        feeder = threading.Thread(target=_feed, args=(folder, data.rows, FIRST, FILES - 4))
        feeder.start()
        claim_file = run / "drivers" / "00000002"
        wait_for(claim_file.exists, 60, "the standby to claim driver number 2")
        claim = json.loads(claim_file.read_text())
        assert claim["pid"] == standby.pid, claim
        # the new driver's tasks have recovered (their state files name their pids)
        wait_for(lambda: all(st.get("recovered_at", 0) and  # type: ignore[call-overload]
                             standby.pid in _lineage(int(st["pid"]))  # type: ignore[call-overload]
                             for st in task_states(run, P)) or standby.poll() is not None,
                 240, "the standby's tasks to recover")
        assert standby.poll() is None, _text(tmp_path / "sb.log")[-3000:]
        feeder.join(120)
        assert not feeder.is_alive()
        # wake the old driver: it stops, writes nothing
        old_pids = set(_tree(driver.pid)) | set(members)
        before = _not_the_standbys(run, standby.pid)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        for j in range(FILES - 4, FILES):  # the new driver writes while the old one wakes
            _drop(folder, data.rows, j)
        code = driver.wait(120)
        said = _text(tmp_path / "run.log")
        assert code == 2, said[-3000:]
        assert "another driver (number 2" in said and "this one (number 1) stops" in said, \
            said[-3000:]
        lease = read_lease(run / "drivers" / "00000001.live")
        assert lease is not None and lease.get("ended") == "superseded", lease
        after = _not_the_standbys(run, standby.pid)
        assert after == before, {k: (before.get(k), after.get(k))
                                 for k in set(before) | set(after)
                                 if before.get(k) != after.get(k)}
        _end(folder)
        code = standby.wait(300)
        sb = _text(tmp_path / "sb.log")
        assert code == 0, sb[-3000:]
        assert "stood still" in sb and "taking the run over as driver 2" in sb, sb[-3000:]
        lease = read_lease(run / "drivers" / "00000002.live")
        assert lease is not None and lease.get("ended") == "completed", lease
        assert not (run / "drivers" / "00000003").exists()
    finally:
        watch.halt.set()
        leftovers = _tree(driver.pid) if driver.poll() is None else {}
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        _kill_group(driver)
        _kill_group(standby)
        for pid in leftovers:  # the old Python workers (their daemon's own group)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    watch.stop()
    assert not watch.errors, watch.errors[:5]
    late = _check_logs(run, watch, float(claim["started"]), froze_poll, old_pids,
                       driver.pid, standby.pid)
    _export_equals_pandas(run, tmp_path, data.reference)
    # Old commits made after the claim but before each log's fence (the old tasks'
    # next check of the driver number) are part of the logs, by STANDBY.md's fencing:
    # the new writer continues from them and the export above is exact. Said, not failed.
    print(f"old commits after the claim, before the fence (log, segment, byte, seqs): "
          f"{late or 'none'}")


def _check_logs(run: Path, watch: LogWatch, claim: float, froze_poll: int,
                old_pids: set[int], old_root: int, new_root: int
                ) -> list[tuple[str, str, int, int, int]]:
    """The promises, log by log, from what the watch read while it happened."""
    assert watch.claim_poll is not None
    written_frozen = 0  # old commits written after the freeze
    late: list[tuple[str, str, int, int, int]] = []  # old commits after the claim
    zombies = []  # old commits on disk past the fence (in no log)
    for name, path in _logs(run).items():
        view = watch.views[name]
        assert view.epochs, name
        new = sorted(e.number for e in view.epochs.values() if e.created >= claim)
        for e in new:  # every epoch after the claim is the standby's
            ep = view.epochs[e]
            assert ep.pid not in old_pids and old_root not in ep.lineage and \
                new_root in ep.lineage, (name, ep, new_root)
        assert new, (name, "the standby never wrote this log")
        fence = view.epochs[new[0]].fence_seq
        fence = -1 if fence is None else fence
        old = {e for e in view.epochs if e < new[0]}
        for frame in view.frames:
            if sid_epoch(frame.sid) not in old:
                continue
            assert frame.committed_poll is not None
            if frame.committed_poll >= froze_poll + 2:
                written_frozen += 1
            if frame.last_seq > fence:
                zombies.append((name, segment_path(path, frame.sid).name, frame.offset,
                                frame.first_seq, frame.last_seq))
            elif frame.committed_poll > watch.claim_poll:
                late.append((name, segment_path(path, frame.sid).name, frame.offset,
                             frame.first_seq, frame.last_seq))
        final = _final_records(path)
        chain = read_chain(path)
        for first, (last, _) in final.items():  # an old record only up to the fence
            if _frame_epoch(view, chain, path, first, last) in old:
                assert last <= fence, (name, first, last, fence)
        for first, seen in view.seen.items():  # nothing a reader saw is taken back
            if first in final or (final and first > min(final)):
                assert final.get(first) == (seen.last_seq, seen.digest), (name, first)
        assert view.seen, name
    print(f"polls={watch.polls} (freeze at {froze_poll}, claim seen at {watch.claim_poll}); "
          f"old commits after the freeze={written_frozen}, after the claim (before the "
          f"fence)={late}, past the fence (zombies)={zombies}")
    assert written_frozen > 0, "the old tasks wrote nothing while the driver was frozen"
    assert not zombies, f"old driver's commits past the new epoch's fence: {zombies}"
    return late


def test_a_standby_started_after_the_driver_died_takes_over(
        data: Data, tmp_path: Path) -> None:
    spec = _stream_spec(tmp_path)
    folder = tmp_path / "in"
    half = FILES // 2
    for i in range(half):
        _drop(folder, data.rows, i)
    run = tmp_path / "run"
    driver = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)],
                       tmp_path / "run.log")
    standby = None
    try:
        wait_for(lambda: any(int(s.get("out_rows", 0) or 0) > 0  # type: ignore[call-overload]
                             for s in task_states(run, P)) or driver.poll() is not None,
                 240, "the first committed output")
        assert driver.poll() is None, _text(tmp_path / "run.log")[-3000:]
        _kill_group(driver)  # the driver, its JVM, its Python workers
        driver.wait(30)
        lease = read_lease(run / "drivers" / "00000001.live")
        assert lease is not None and not lease.get("ended"), lease  # a death, not an end
        for i in range(half, FILES):
            _drop(folder, data.rows, i)
        _end(folder)
        standby = start_cec(["standby", "--from-log", str(run)], tmp_path / "sb.log")
        code = standby.wait(300)
        said = _text(tmp_path / "sb.log")
        assert code == 0, said[-3000:]
        # the lock was free when it began watching (not trusted): the pid told
        assert "driver 1: its process is gone; taking the run over as driver 2" in said, \
            said[-3000:]
        lease = read_lease(run / "drivers" / "00000002.live")
        assert lease is not None and lease.get("ended") == "completed", lease
        assert not (run / "drivers" / "00000003").exists()
    finally:
        _kill_group(driver)
        if standby is not None:
            _kill_group(standby)
    _export_equals_pandas(run, tmp_path, data.reference)
