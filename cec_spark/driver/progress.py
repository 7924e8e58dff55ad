"""The live progress display of a run (rich, on stderr): when it looks, and what at.

This module decides when the view looks at the run's files and what a look feeds (the
table, the plain line, the metrics file, the notes), and reads the tasks' state files
(:class:`StateFiles`); the upstream logs and the ``stat`` checks are
:mod:`cec_spark.driver.looks`', the table's and the plain line's text
:mod:`cec_spark.driver.display`'s.

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
cache may hide a change that long), and one modified within
:data:`~cec_spark.driver.looks.RACY_S` is not
trusted to be unchanged (a change within the clock's granularity keeps its mtime).

On a terminal the table is redrawn in place (rich ``Live``). Anywhere else (a pipe, a
log file, CI) a live table would print nothing until the end, so the view prints one
plain line every :data:`PLAIN_EVERY_S` seconds instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from cec_spark.driver.display import (
    partition_row,
    plain_line,
    plain_watermark,
    progress_table,
    standby_words,
    title_text,
)
from cec_spark.driver.looks import RECHECK_S, Cached, UpstreamPositions, file_signature, is_settled
from cec_spark.ingest.query import IngestProgress
from cec_spark.run import metrics
from cec_spark.run.rto import StartupMeter
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.drivers import StandbyView, latest_driver, standby_view
from cec_spark.rundir.layout import RunLayout

PLAIN_EVERY_S = 10.0
LOOK_S = 1.0  # the view looks at the run's files this often while nothing changes
BUSY_LOOK_S = 0.5  # and this often while something does (the driver loop's tick)


class StateFiles:
    """The operator tasks' ``state/pNNNN.json``, each read and parsed again only when
    its signature (:func:`file_signature`, one ``stat``) changed, and at most once per
    look (:meth:`tick`). ``read``: the reader (a test counts its calls)."""

    def __init__(self, layout: RunLayout, partitions: int, *,
                 read: Callable[[Path], dict[str, Any]] = read_advisory) -> None:
        self.layout, self.partitions, self._read = layout, partitions, read
        self._cache: dict[int, Cached] = {}
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
        self._cache[p] = Cached(sig, value, now, is_settled(sig), self._tick)
        return value

    def all(self) -> list[dict[str, Any]]:
        return [self.get(p) for p in range(self.partitions)]


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
        states = self.states.all()
        late = sum(self.upstream.late(p) for p in range(self.partitions))
        marks = plain_watermark([self.upstream.watermark(p) for p in range(self.partitions)],
                                [self.upstream.operator(p, st)
                                 for p, st in enumerate(states)])
        self.console.print(plain_line(self.last_plain - self.started, self.ingest,
                                      self.partitions, states, late, marks),
                           highlight=False, soft_wrap=True)

    def render(self) -> Table:
        """The live table, as of the last look (:mod:`cec_spark.driver.display`)."""
        elapsed = time.monotonic() - self.started
        states = self.states.all()
        late = sum(self.upstream.late(p) for p in range(self.partitions))
        title = title_text(self.layout.root, elapsed, self.ingest, states, late,
                           standby_words(self.standbys_ready, self.standby_hot))
        rows = [partition_row(p, states[p], self.upstream.get(p),
                              self.rates.get(p, (0.0, 0.0)), self.upstream.watermark(p),
                              self.upstream.operator(p, states[p]))
                for p in range(self.partitions)]
        return progress_table(title, self.notes, rows)
