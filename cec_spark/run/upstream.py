"""An operator task's tail of its upstream log: when it looks, and how long it sleeps.

:func:`upstream_tail` yields the upstream records after a position and the ingest's
commit tokens among them, and None whenever a look found nothing more at once (the
task commits then), until the log is sealed and read or ``STOP``. A write in the
log's folder wakes it (the ingest's commit, on this host: :class:`CommitWatch`);
otherwise it looks again after :func:`idle_wait`, the longer the partition stays quiet
the longer; a look reuses the follower's own snapshot to tell a sealed and read log
(:class:`_LookSnapshot`), and ``on_idle`` (the task's idle report) is called every
:data:`TAIL_TIMEOUT_S` without input. The loop that consumes it is
:mod:`cec_spark.run.task`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from cec_spark.rundir.layout import RunLayout
from storage_log.follow import CommitToken
from storage_log.notify import CommitWatch

TAIL_TIMEOUT_S = 0.25  # idle this long: report state, check the driver (on_idle)
# How often the task looks for new upstream commits when nothing wakes it: a write in
# the upstream log's directory wakes it at once on the writer's host (a commit ends with
# that write: storage_log.notify.CommitWatch, inotify), so this is the poll for a writer
# on another host of a shared file system, or where inotify is missing. A look costs
# ~1 ms of CPU and ~17 file-system calls (two directory listings, two opens of the
# active segment: the log's snapshot); every 15 ms a commit is seen within 15 ms, after
# TAIL_SLOW_AFTER_S without input every TAIL_SLOW_S, and the longer the partition stays
# quiet the longer the wait, TAIL_IDLE_SHARE of its quiet time up to TAIL_IDLE_S (issue
# 16 item 4, issue 38 item 6: :func:`idle_wait`; docs/CLUSTER.md "Control-plane cost").
TAIL_POLL_S = 0.015
TAIL_SLOW_S = 0.05
TAIL_SLOW_AFTER_S = 2.0
TAIL_IDLE_SHARE = 0.025  # at 2 s quiet: 50 ms, as before; 0.5 s from 20 s on
TAIL_IDLE_S = 0.5


def _sealed(log: Any) -> bool:
    return bool(log.sealed)


def idle_wait(quiet_s: float) -> float:
    """How long the tail sleeps when nothing wakes it, after ``quiet_s`` seconds without
    input: :data:`TAIL_POLL_S` while input came within :data:`TAIL_SLOW_AFTER_S`, then
    :data:`TAIL_IDLE_SHARE` of the quiet time, between :data:`TAIL_SLOW_S` and
    :data:`TAIL_IDLE_S`. So a busy partition is looked at as often as before, and a
    quiet one, where only a writer on another host is not seen at once (inotify sees
    this host's), sees its next commit within 2.5 % of its quiet time, 0.5 s at most."""
    if quiet_s < TAIL_SLOW_AFTER_S:
        return TAIL_POLL_S
    return min(TAIL_IDLE_S, max(TAIL_SLOW_S, quiet_s * TAIL_IDLE_SHARE))


class _LookSnapshot:
    """The snapshot a :class:`~storage_log.follow.Follower`'s look took (None: the look
    took none through :attr:`Follower.snapshot`, e.g. its first, by an index lookup):
    whether the log is sealed and its last seq, without a second snapshot (half of an
    idle look's file-system calls)."""

    def __init__(self, follower: Any) -> None:
        self.last: Any = None
        inner = follower.snapshot

        def snapshot() -> Any:
            self.last = inner()
            return self.last

        follower.snapshot = snapshot


def _read_to_seal(up: Any, snap: Any, last: int | None) -> bool:
    """After an empty look that ended at ``last``: the log is sealed and read to its end.
    The look's own snapshot (``snap``) says so without another one (a sealed log gets no
    more commits, so the look read it to its end); a look that took none: ask the log."""
    if snap is None:
        if not _sealed(up):
            return False
        last_seq = up.last_seq
    elif not snap.sealed:
        return False
    else:
        last_seq = snap.committed.last_seq
    return last_seq is None or (last is not None and last >= last_seq)


def upstream_tail(up: Any, after: int | None, layout: RunLayout, on_idle: Callable[[], None]
          ) -> Iterator[pa.RecordBatch | CommitToken | None]:
    """Upstream records after ``after`` and the commit tokens among them (a token at
    ``after`` first: ``StreamLog.follow``), until the log is sealed and read, or STOP;
    None after what one look found (nothing more is there at once).

    Looks when a write in the log's directory wakes it (the ingest's commit, on this
    host), else after :func:`idle_wait` (:data:`TAIL_POLL_S` while input flows, longer
    the longer none came); ``on_idle`` is called whenever nothing new came for
    :data:`TAIL_TIMEOUT_S`. Each look reads on from where the last one ended: a quiet
    partition's token-only commits are read once each.
    """
    with CommitWatch([Path(up.path)], fallback_s=TAIL_IDLE_S) as watch:
        yield from upstream_tail_watched(up, after, layout, on_idle, watch)


def upstream_tail_watched(up: Any, after: int | None, layout: RunLayout,
                  on_idle: Callable[[], None], watch: CommitWatch
                  ) -> Iterator[pa.RecordBatch | CommitToken | None]:
    follower = up.follow(after_seq=after)
    looked = _LookSnapshot(follower)
    got_at = reported_at = time.monotonic()
    while True:
        got = came = False
        while True:  # one look, more while commits come
            came = False
            looked.last = None
            for item in follower.look():
                if not isinstance(item, CommitToken) and item.num_rows == 0:
                    continue
                came = True
                yield item
                if layout.stop_file.exists():
                    return
            if not came:
                break
            got = True
        if got:
            yield None  # the look found no more: what was processed is committed now
        if layout.stop_file.exists():
            return
        if not got and _read_to_seal(up, looked.last, follower.after_seq):
            return
        now = time.monotonic()
        if got:
            got_at = reported_at = now
            continue
        if now - reported_at >= TAIL_TIMEOUT_S:
            on_idle()
            reported_at = now
        watch.wait(idle_wait(now - got_at))
