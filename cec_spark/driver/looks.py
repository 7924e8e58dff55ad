"""A look at a run's files that costs a ``stat`` when nothing changed; the upstream logs'.

What tells a reader a file changed without opening it (:func:`file_signature`: inode,
size, mtime), when an unchanged signature may be trusted (:func:`is_settled`: not
modified within :data:`RACY_S`; a file is read again at least every :data:`RECHECK_S`
anyway, an NFS attribute cache may hide a change that long), and the cache entry of a
read (:class:`Cached`). With them :class:`UpstreamPositions` answers the progress view's
questions about the upstream logs (committed end, last token's late rows and
watermark, the event time an operator reached), one snapshot per partition and look,
none while the log's ``stat`` says nothing was committed. The view
(:mod:`cec_spark.driver.progress`) reads the tasks' state files the same way.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cec.ingest_token import decode_token
from cec_spark.report.watermark import reached
from cec_spark.rundir.layout import RunLayout
from storage_log.entry import Snapshot
from storage_log.log import StreamLog
from storage_log.segment import segment_path

RECHECK_S = 10.0  # a file read again at least this often, its stat unchanged or not
RACY_S = 1.0  # a file modified this recently is not trusted to be unchanged

Signature = tuple[int, ...]


def file_signature(path: Path) -> Signature | None:
    """What says a file changed without opening it: inode (a replace by rename is a new
    one), size and mtime; None: missing or unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def is_settled(*sigs: Signature | None) -> bool:
    """Every file modified more than :data:`RACY_S` ago (a change within the mtime's
    granularity would keep its signature: one that recent is looked at again)."""
    now = time.time()
    return all(s is not None and now - s[-1] / 1e9 > RACY_S for s in sigs)


@dataclass
class Cached:
    sig: Any  # the signature taken before the read
    value: Any
    at: float  # monotonic time of the read
    settled: bool
    tick: int  # the look it belongs to



class UpstreamPositions:
    """The upstream logs' committed ends, from readers kept open: each look walks only
    what was committed since (a driver on a host without the index would otherwise
    read every upstream log from its start twice a second). One snapshot per
    partition and look (:meth:`tick`) serves its position, its last token and its last
    row's time, and none is taken while a ``stat`` of the log's folder and of its
    active segment says nothing was committed (:data:`RECHECK_S`, :data:`RACY_S`)."""

    def __init__(self, layout: RunLayout) -> None:
        self.layout = layout
        self._logs: dict[int, StreamLog] = {}
        self._row_ts: dict[int, tuple[int, int | None]] = {}  # p: (seq, its time)
        self._looks: dict[int, Cached] = {}  # p: its last snapshot (value)
        self._tick = 0
        self.changed = False  # a log changed since the last tick
        self.snapshots = 0  # snapshots taken (what a look costs; tests)

    def tick(self) -> None:
        """A new look: the next question about each partition checks its log again."""
        self._tick += 1
        self.changed = False

    def _signature(self, path: Path, snap: Snapshot | None) -> tuple[Any, ...]:
        seg = None
        if snap is not None and snap.committed.segment >= 0:
            seg = file_signature(segment_path(path, snap.committed.segment))
        return (file_signature(path), seg)

    def _snapshot(self, p: int) -> Snapshot | None:
        c = self._looks.get(p)
        if c is not None and c.tick == self._tick:
            return c.value  # type: ignore[no-any-return]
        path = self.layout.upstream(p)
        old: Snapshot | None = None if c is None else c.value
        sig = self._signature(path, old)
        now = time.monotonic()
        if c is not None and old is not None and sig == c.sig and c.settled \
                and now - c.at < RECHECK_S:
            c.tick = self._tick
            return old
        snap = None
        log = self._logs.get(p)
        try:
            if log is None and sig[0] is not None:
                log = self._logs[p] = StreamLog.open(path)
            if log is not None:
                snap = log._snapshot()  # one snapshot serves the three questions
                self.snapshots += 1
        except Exception:  # a log being created, or trimmed under us: open it again
            self.close(p)
            snap = None
        if old is None or snap != old:
            self.changed = True
        if snap is not None and (old is None or old.committed.segment
                                 != snap.committed.segment):
            # the signature of the segment now active (a commit after the snapshot
            # makes it recent: not settled, looked at again)
            sig = self._signature(path, snap)
        settled = snap is not None and is_settled(sig[0]) and (
            is_settled(sig[1]) if snap.committed.segment >= 0 else sig[1] is None)
        self._looks[p] = Cached(sig, snap, now, settled, self._tick)
        return snap

    def get(self, p: int) -> int | None:
        snap = self._snapshot(p)
        return None if snap is None else snap.committed.last_seq

    def late(self, p: int) -> int:
        """Late rows dropped in partition ``p`` (its upstream log's last token)."""
        snap = self._snapshot(p)
        try:
            tok = None if snap is None or snap.token is None else decode_token(snap.token)
            return 0 if tok is None else tok.late
        except Exception:  # as in get: a log being created or trimmed
            return 0

    def watermark(self, p: int) -> int | None:
        """The ingest's watermark of partition ``p`` (its upstream log's last token)."""
        snap = self._snapshot(p)
        try:
            tok = None if snap is None or snap.token is None else decode_token(snap.token)
            return None if tok is None else tok.watermark
        except Exception:  # as in get: a log being created or trimmed
            return None

    def operator(self, p: int, state: dict[str, Any]) -> int | None:
        """The event time partition ``p``'s operator reached (:func:`reached`): the last
        W it applied or the time of its last tuple (``in_last_seq``: the log's last
        row's time when it is the last row, else its record's index entry's when it
        begins or ends one, else that row read once: :func:`_row_time`)."""
        seq = state.get("in_last_seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            return reached(applied(state), None)
        if self._row_ts.get(p, (None,))[0] != seq:
            self._row_ts[p] = (seq, self._ts_at(p, seq))
        return reached(applied(state), self._row_ts[p][1])

    def _ts_at(self, p: int, seq: int) -> int | None:
        """The time of partition ``p``'s upstream row ``seq`` (None: not in the log)."""
        snap = self._snapshot(p)
        log = self._logs.get(p)
        try:
            return None if log is None or snap is None else _row_time(log, snap, seq)
        except Exception:  # as in get: a log being created or trimmed
            return None

    def close(self, p: int | None = None) -> None:
        for q in ([p] if p is not None else list(self._logs)):
            log = self._logs.pop(q, None)
            self._looks.pop(q, None)
            if log is not None:
                with contextlib.suppress(Exception):
                    log.close()


def _row_time(log: StreamLog, snap: Snapshot, seq: int) -> int | None:
    """The time of row ``seq`` of ``log``: the log's last row's (``snap``), or, when
    ``seq`` begins or ends a record (an operator task reads whole records, so it nearly
    always does), that record's index entry's (one look-up); only a row inside a record
    is read (its record decoded). None: no such row committed."""
    if snap.committed.last_seq == seq:
        return snap.committed.last_ts
    _, entry = log._locate(after_seq=seq - 1)  # the record holding seq, if any
    if entry is None or entry.first_seq > seq:
        return None
    if seq in (entry.first_seq, entry.last_seq):
        return entry.first_ts if seq == entry.first_seq else entry.last_ts
    batch = next(iter(log.read_forward(after_seq=seq - 1)), None)
    if batch is None or not batch.num_rows or batch.column("seq")[0].as_py() != seq:
        return None
    return int(batch.column("ts")[0].as_py())


def applied(state: dict[str, Any]) -> int | None:
    """The last watermark a partition's operator applied (its state file), µs."""
    w = state.get("watermark_us")
    return w if isinstance(w, int) and not isinstance(w, bool) else None
