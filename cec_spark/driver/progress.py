"""The live progress display of a run (rich, on stderr).

Per partition: input position and tuples/s, open windows ``N``, extent ``q`` and replay
length ``u``, ``G_check``/s, results, the predicted recovery time (with the
objective in the title when ``[checkpoint].rto`` is set; an objective the measured costs
cannot meet is said in the caption) and the watermarks: the ingest's (the upstream log's
last token) and how far the operator's (the event time it reached: the last W it applied
or its last tuple's time) is behind it (:mod:`cec_spark.report.watermark`), so that a
window still open is explained. The view also measures this command's start-up
(:class:`cec_spark.run.rto.StartupMeter`), the fixed cost of the recovery-time model.
Positions come from the upstream logs' committed ``last_seq`` (a reader kept open) and
from the tasks' ``state/pNNNN.json`` counters; rates are differences between looks.

**What a look costs** (the driver's share of the control plane, docs/CLUSTER.md): on a
terminal the view looks at the run's files every :data:`BUSY_LOOK_S` while something
moved and every :data:`LOOK_S` while nothing did, whatever the main loop's tick; without
a live table (a pipe, a log file, no display) only when the metrics file or the plain
line is due (every :data:`cec_spark.run.metrics.EVERY_S`); a state file is read
(and parsed) again only when a ``stat`` says it changed (:class:`StateFiles`), an upstream
log is looked at (a snapshot: listings and opens) only when a ``stat`` of its folder or
of its active segment says it changed (:class:`UpstreamPositions`), and one look serves
the table, the plain line, the metrics file and the driver's stall watch. A file whose
``stat`` is unchanged is still read again every :data:`RECHECK_S` (an NFS attribute
cache may hide a change that long), and one modified within :data:`RACY_S` is not
trusted to be unchanged (a change within the clock's granularity keeps its mtime).

On a terminal the table is redrawn in place (rich ``Live``). Anywhere else (a pipe, a
log file, CI) a live table would print nothing until the end, so the view prints one
plain line every :data:`PLAIN_EVERY_S` seconds instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from cec.ingest_token import decode_token
from cec_spark.ingest.query import IngestProgress
from cec_spark.report.watermark import behind_s, duration, event_time, reached
from cec_spark.run import metrics
from cec_spark.run.rto import StartupMeter
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.drivers import StandbyView, latest_driver, standby_view
from cec_spark.rundir.layout import RunLayout
from storage_log.entry import Snapshot
from storage_log.log import StreamLog
from storage_log.segment import segment_path

PLAIN_EVERY_S = 10.0
LOOK_S = 1.0  # the view looks at the run's files this often while nothing changes
BUSY_LOOK_S = 0.5  # and this often while something does (the driver loop's tick)
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


def _settled(*sigs: Signature | None) -> bool:
    """Every file modified more than :data:`RACY_S` ago (a change within the mtime's
    granularity would keep its signature: one that recent is looked at again)."""
    now = time.time()
    return all(s is not None and now - s[-1] / 1e9 > RACY_S for s in sigs)


@dataclass
class _Cached:
    sig: Any  # the signature taken before the read
    value: Any
    at: float  # monotonic time of the read
    settled: bool
    tick: int  # the look it belongs to


class StateFiles:
    """The operator tasks' ``state/pNNNN.json``, each read and parsed again only when
    its signature (:func:`file_signature`, one ``stat``) changed, and at most once per
    look (:meth:`tick`). ``read``: the reader (a test counts its calls)."""

    def __init__(self, layout: RunLayout, partitions: int, *,
                 read: Callable[[Path], dict[str, Any]] = read_advisory) -> None:
        self.layout, self.partitions, self._read = layout, partitions, read
        self._cache: dict[int, _Cached] = {}
        self._tick = 0
        self.changed = False  # a file changed since the last tick

    def tick(self) -> None:
        """A new look: the next :meth:`get` of each partition checks its file again."""
        self._tick += 1
        self.changed = False

    def get(self, p: int) -> dict[str, Any]:
        c = self._cache.get(p)
        if c is not None and c.tick == self._tick:
            return c.value  # type: ignore[no-any-return]
        path = self.layout.state_file(p)
        sig = file_signature(path)
        now = time.monotonic()
        if c is not None and sig == c.sig and c.settled and now - c.at < RECHECK_S:
            c.tick = self._tick
            return c.value  # type: ignore[no-any-return]
        value = {} if sig is None else self._read(path)
        if c is None or value != c.value:
            self.changed = True
        self._cache[p] = _Cached(sig, value, now, _settled(sig), self._tick)
        return value

    def all(self) -> list[dict[str, Any]]:
        return [self.get(p) for p in range(self.partitions)]


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
        self._looks: dict[int, _Cached] = {}  # p: its last snapshot (value)
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
        settled = snap is not None and _settled(sig[0]) and (
            _settled(sig[1]) if snap.committed.segment >= 0 else sig[1] is None)
        self._looks[p] = _Cached(sig, snap, now, settled, self._tick)
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


def watermark_cell(ingest_us: int | None, operator_us: int | None) -> str:
    """The table's watermark column: the ingest's W as a time of day (UTC) and, when
    the operator's is behind it, by how much: ``05:07:24.100, op 0.2 s behind``."""
    if ingest_us is None:
        return "-" if operator_us is None else f"op {event_time(operator_us, date=False)}"
    lag = behind_s(ingest_us, operator_us)
    text = event_time(ingest_us, date=False)
    if operator_us is None:
        return f"{text}, op none"
    return f"{text}, op {duration(lag)} behind" if lag else text


def plain_watermark(ingest: list[int | None], operator: list[int | None]) -> str:
    """The plain line's watermark part: the least ingest watermark over the partitions
    (the partition whose windows wait longest) and the largest operator lag; empty when
    no partition has one."""
    known = [(w, p) for p, w in enumerate(ingest) if w is not None]
    if not known:
        return ""
    least, p = min(known)
    lags = [lag for lag in (behind_s(i, o) for i, o in zip(ingest, operator, strict=False))
            if lag is not None]
    text = f"  watermark {event_time(least)}"
    if len(ingest) > 1:
        text += f" (ingest, least: partition {p})"
    else:
        text += " (ingest)"
    if lags and max(lags) > 0:
        text += f", operators up to {duration(max(lags))} behind"
    elif lags:
        text += ", operators caught up"
    return text


UNITS = ("", "k", "M", "G", "T", "P", "E")


def _fixed(x: float) -> str:
    """``x`` (>= 0) to 3 significant digits and at most 2 decimals, trailing zeros cut."""
    text = f"{x:.{2 if x < 10 else 1 if x < 100 else 0}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def compact(n: float) -> str:
    """A count or rate in 3 significant digits and a unit: 950, 0.25, 12.3k, 4.56M, 1.5G.

    The value is rounded first and the unit chosen after, so that 999_999 is ``1M``
    (not ``1e+03k``); beyond the largest unit (E, 10^18) the digits grow: ``1,500E``."""
    if not math.isfinite(n):
        return str(n)
    sign, size = ("-" if n < 0 else ""), abs(n)
    for power, unit in enumerate(UNITS):
        scaled = size / 1000**power
        text = _fixed(scaled)
        if float(text) < 1000:
            return "0" if text == "0" else f"{sign}{text}{unit}"
    return f"{sign}{size / 1000 ** (len(UNITS) - 1):,.0f}{UNITS[-1]}"


class ProgressView:
    def __init__(self, layout: RunLayout, partitions: int, ingest: IngestProgress, *,
                 enabled: bool = True, objective: bool = False,
                 driver: int | None = None) -> None:
        self.layout = layout
        self.driver = driver  # superseded by a newer one: this view writes nothing
        self.objective = objective  # the run has a recovery-time objective
        self.partitions = partitions
        self.ingest = ingest
        self.enabled = enabled
        self.console = Console(stderr=True)
        self.live: Live | None = None
        self.started = time.monotonic()
        self.prev: dict[int, tuple[float, int, int]] = {}
        self.notes: list[str] = []
        self.plain = enabled and not self.console.is_terminal
        self.last_plain = self.started
        self.upstream = UpstreamPositions(layout)
        self.states = StateFiles(layout, partitions)
        self.last_look = -math.inf
        self.moving = True  # something changed at the last look: look again sooner
        self.rates: dict[int, tuple[float, float]] = {}  # p: (tuples/s, G_check/s)
        self._ingest_seen: tuple[int, int, bool] | None = None  # at the last look
        self.last_metrics = 0.0
        self.startup = StartupMeter(layout, partitions)
        self.told: set[tuple[int, str]] = set()  # (partition, note) said once
        self.standbys_ready = 0  # warm standbys ready (cec standby), at the last look
        self.standby_hot = StandbyView(0, 0, None)  # and how many are hot, how far behind

    def look(self, *, force: bool = False) -> bool:
        """Look at the run's files again when due: every :data:`BUSY_LOOK_S` while
        something moved at the last look, every :data:`LOOK_S` while nothing did
        (``force``: now). The state files are read in full, the upstream logs as they
        are asked about; the rates are taken between looks. True: it looked."""
        now = time.monotonic()
        every = BUSY_LOOK_S if self.moving else LOOK_S
        if not force and now - self.last_look < every - 0.05:  # the loop's tick jitters
            return False
        ing = self.ingest
        before = (ing.chunks_done, ing.source_rows, ing.sealed)
        upstream_moved = self.upstream.changed  # asked about since the last look
        self.last_look = now
        self.states.tick()
        self.upstream.tick()
        for p, st in enumerate(self.states.all()):
            tuples, checks = int(st.get("in_tuples", 0)), int(st.get("g_check", 0))
            t0, n0, c0 = self.prev.get(p, (self.started, 0, 0))
            dt = max(now - t0, 1e-6)
            self.rates[p] = ((tuples - n0) / dt, (checks - c0) / dt)
            self.prev[p] = (now, tuples, checks)
        self.moving = (self.states.changed or upstream_moved
                       or before != self._ingest_seen)
        self._ingest_seen = before
        return True

    def state_list(self) -> list[dict[str, Any]]:
        """Every partition's state file as of the last look (no file read when called
        again before the next one)."""
        return self.states.all()

    def write_metrics(self) -> None:
        """``RUN/metrics/cec.prom`` (:mod:`cec_spark.run.metrics`), whatever is displayed;
        nothing once a newer driver took the run (it writes them now: a superseded
        driver, woken from a freeze, must not write over them)."""
        self.last_metrics = time.monotonic()
        if not self._still_ours():
            return
        states = self.states.all()
        self._standbys()
        self._rto_notes(states)
        upstream = [self.upstream.get(p) for p in range(self.partitions)]
        metrics.write(self.layout.metrics_dir, metrics.exposition(
            str(self.layout.root), states, upstream, source_rows=self.ingest.source_rows,
            sealed=self.ingest.sealed, up_s=self.last_metrics - self.started,
            late=[self.upstream.late(p) for p in range(self.partitions)],
            standbys_ready=self.standbys_ready,
            watermarks=[self.upstream.watermark(p) for p in range(self.partitions)],
            operators=[self.upstream.operator(p, st) for p, st in enumerate(states)]),
            still_ours=self._still_ours)  # again at the last moment: a freeze between

    def _still_ours(self) -> bool:
        """No newer driver took the run (a view without a driver number: always)."""
        return self.driver is None or latest_driver(self.layout) <= self.driver

    def _standbys(self) -> None:
        """How many warm standbys are ready; the recovery-time objective's fixed cost
        follows (a takeover's with one, a restart's without); a change is said."""
        view = standby_view(self.layout, self.partitions)
        ready = view.ready
        was, self.standbys_ready = self.standbys_ready, ready
        hot_was, self.standby_hot = self.standby_hot, view
        self.startup.standby(ready > 0)
        if ready and not was:
            self.note(f"standby ready ({ready}): a failure is taken over without a restart")
        elif was and not ready:
            self.note("no standby ready any more: a failure costs a restart")
        if view.hot and not hot_was.hot:
            self.note("standby hot: its operator tasks follow the output logs "
                      f"({view.behind} records behind)")
        elif hot_was.hot and not view.hot and ready:
            self.note("the standby is not hot any more: a takeover launches its tasks")

    def _standby_words(self) -> str:
        """The title's standby part: how many are ready, hot, how far behind."""
        if not self.standbys_ready:
            return ""
        view = self.standby_hot
        hot = "" if not view.hot else (
            f", hot, {view.behind:,} records behind" if view.behind else ", hot")
        return f"  standby ready ({self.standbys_ready}{hot})"

    def __enter__(self) -> ProgressView:
        if self.enabled and not self.plain:
            self.live = Live(self.render(), console=self.console, refresh_per_second=2,
                             transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.look(force=True)  # the last frame and metrics: as the files are now
            if self.live is not None:
                self.live.update(self.render())
                self.live.__exit__(et, ev, tb)
                self.live = None
            elif self.plain:
                self._plain_line()
            self.write_metrics()
        finally:
            self.upstream.close()

    def _rto_notes(self, states: list[dict[str, Any]]) -> None:
        """Measure the start-up once it can be; say once per partition when its
        objective cannot be met (never silently unmet)."""
        took = self.startup.check(states)  # measured for every run: the model's input
        if took is not None and self.objective:  # said only where one is asked for
            self.note(f"start-up {took:.1f} s (process start to every operator task "
                      "recovering): the fixed cost of a recovery here")
        for p, st in enumerate(states):
            info = st.get("rto") if isinstance(st.get("rto"), dict) else None
            if info and info.get("feasible") is False and info.get("note"):
                key = (p, "infeasible")
                if key not in self.told:
                    self.told.add(key)
                    self.note(f"partition {p}: rto cannot be met: {info['note']}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        if self.plain:
            self.console.print(f"cec: {text}", highlight=False, soft_wrap=True)
        self.refresh(redraw=True)

    def refresh(self, *, redraw: bool = False) -> None:
        """Called by the driver loop every tick: look when due (:meth:`look`), write
        the metrics every :data:`metrics.EVERY_S`, redraw after a look (``redraw``:
        now, a note was added). Without a live table (a pipe, a log file, no display)
        nothing shows a look but the metrics and the plain line, so it looks only when
        one of them is due: every :data:`metrics.EVERY_S` instead of every
        :data:`BUSY_LOOK_S` (a look reads every state file that changed and snapshots
        every upstream log that did: P of each on a busy run)."""
        now = time.monotonic()
        metrics_due = now - self.last_metrics >= metrics.EVERY_S
        plain_due = self.plain and now - self.last_plain >= PLAIN_EVERY_S
        looked = self.look() if self.live is not None or metrics_due or plain_due \
            else False
        if metrics_due:
            self.write_metrics()
        if self.live is not None:
            if looked or redraw:
                self.live.update(self.render())
        elif plain_due:
            self._plain_line()

    def _plain_line(self) -> None:
        """One line for a pipe: elapsed, ingest, and the partitions' totals."""
        self.last_plain = time.monotonic()
        ing = self.ingest
        total = f"/{ing.chunks_total}" if ing.chunks_total is not None else ""
        states = self.states.all()
        done = sum(1 for st in states if st.get("done"))
        running = sum(1 for st in states if st and not st.get("done"))
        tuples = sum(int(st.get("in_tuples", 0)) for st in states)
        results = sum(int(st.get("r", 0)) for st in states)
        late = sum(self.upstream.late(p) for p in range(self.partitions))
        marks = plain_watermark([self.upstream.watermark(p) for p in range(self.partitions)],
                                [self.upstream.operator(p, st)
                                 for p, st in enumerate(states)])
        self.console.print(
            f"cec: {self.last_plain - self.started:.0f} s  ingest chunk {ing.chunks_done}"
            f"{total}, {ing.source_rows:,} source rows{', sealed' if ing.sealed else ''}  "
            f"partitions: {running} running, {done} done of {self.partitions}  "
            f"tuples {tuples:,}  results {results:,}"
            f"{f'  late rows dropped {late:,}' if late else ''}{marks}",
            highlight=False, soft_wrap=True)

    def render(self) -> Table:
        elapsed = time.monotonic() - self.started
        ing = self.ingest
        total = f"/{ing.chunks_total}" if ing.chunks_total is not None else ""
        states = self.states.all()
        objective = next((st["rto"].get("objective_s") for st in states
                          if isinstance(st.get("rto"), dict)
                          and st["rto"].get("objective_s")), None)
        late = sum(self.upstream.late(p) for p in range(self.partitions))
        title = (f"cec {self.layout.root}  {elapsed:6.1f}s  ingest: chunk {ing.chunks_done}"
                 f"{total}, {ing.source_rows:,} source rows"
                 f"{f', {late:,} late rows dropped' if late else ''}"
                 f"{', sealed' if ing.sealed else ''}"
                 f"{f'  rto {objective:g} s' if objective else ''}"
                 f"{self._standby_words()}")
        table = Table(title=title, title_justify="left",
                      caption=" · ".join(self.notes) or None)
        for col in ("partition", "upstream seq", "tuples", "tuples/s", "N open", "extent q",
                    "replay u", "G_check/s", "R", "recovery s", "watermark", "state"):
            table.add_column(col, justify="right" if col != "state" else "left")
        for p in range(self.partitions):
            st: dict[str, Any] = states[p]
            up = self.upstream.get(p)
            tuples = int(st.get("in_tuples", 0))
            rate, crate = self.rates.get(p, (0.0, 0.0))
            state = "done" if st.get("done") else ("recovered" if st.get("recovered")
                                                   else ("running" if st else "starting"))
            info = st.get("rto") if isinstance(st.get("rto"), dict) else {}
            pred = info.get("predicted_s") if info else None
            table.add_row(str(p), "-" if up is None else compact(up), compact(tuples),
                          compact(rate), compact(int(st.get("n_open", 0))),
                          compact(int(st.get("q", 0))), compact(int(st.get("u", 0))),
                          compact(crate), compact(int(st.get("r", 0))),
                          "-" if pred is None else f"{pred:.1f}",
                          watermark_cell(self.upstream.watermark(p),
                                         self.upstream.operator(p, st)), state)
        return table
