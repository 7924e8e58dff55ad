"""Reconcile: the writer's open step (the paper's recovery step 1), like Kafka's LogLoader.

The segments are the truth. A commit is in the segments when a frame with the COMMIT
flag is durable; everything after the last such frame was never visible to a reader
(readers stop at the committed end kept in LMDB, which moves only after the
segments are durable), so it is cut. The walk:

0. Read the epoch chain (:mod:`storage_log.epoch`): only its segments, each up to its
   fence, hold the log's data. An index whose committed end is not on the chain (a
   newer writer took the log over since it was built) is rebuilt.
1. Start at the committed end recorded in LMDB (or at byte 0 of the first segment
   when the index is missing, unusable, or ``repair`` is asked for: a full scan).
   Before that, check the frame that ends at the committed end: it must be valid
   and carry the COMMIT flag. If not, the committed part of the log is damaged:
   :class:`CorruptLogError` (segment, offset, invariant), unless ``repair``.
2. Walk the frames forward, validating each (magics, lengths, checksum, positions
   strictly after the previous record, the segment name, schema before data).
   Every COMMIT frame moves the commit point; DATA frames become index entries,
   TOKEN/SEAL frames update the token and the sealed flag.
3. At the first bad byte (or the end), cut the log at the last commit point:
   truncate that segment, delete the segments after it, and report the bytes cut.
   Only a torn tail is cut: a bad frame at the end of the chain's last segment that
   the bytes show to be an interrupted write (:func:`storage_log.scan.tail_is_torn`).
   A bad frame in any other segment, or a damaged complete frame, is corruption
   before the tail: :class:`CorruptLogError`, unless ``repair``.
4. Drop index entries past the commit point, add the new ones, and store the
   committed end, schema, token and sealed flag in one LMDB transaction.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from storage_log.cache import (
    ID_FILE,
    cache_name,
    ensure_log_id,
    note_origin,
    prune_daily,
    renew_log_id,
)
from storage_log.cache import index_root as cache_root
from storage_log.durable import fsync_dir
from storage_log.entry import EMPTY, Committed, Snapshot
from storage_log.epoch import Chain, read_chain, take_epoch, write_rebuilt
from storage_log.errors import CorruptLogError
from storage_log.faults import armed, crash_point
from storage_log.framing import FLAG_COMMIT, FrameError, decode_schema
from storage_log.index import IndexCorrupt, LogIndex
from storage_log.lock import WriterLock
from storage_log.segment import (
    SegmentReader,
    read_trim_marker,
    segment_path,
    sid_epoch,
)
from storage_log.sidefile import remove_side
from storage_log.walk import WalkResult, walk


@dataclass
class ReconcileReport:
    """What a writable open did to make the log consistent."""

    bytes_cut: int = 0
    cut_at: tuple[str, int] | None = None  # (segment file, byte offset) of the cut
    cut_reason: str | None = None  # the invariant that failed first, if any
    segments_removed: list[str] = field(default_factory=list)
    records_indexed: int = 0  # committed records that were not in the index
    entries_dropped: int = 0  # index entries past the committed end
    rebuilt: bool = False  # the LMDB environment was (re)built from the segments
    rebuild_reason: str | None = None
    files_rebuilt: list[str] = field(default_factory=list)  # damaged small files put back


@dataclass
class TailState:
    """The committed state after reconcile, as the writer continues from it."""

    committed: Committed
    schema: pa.Schema | None
    schema_bytes: bytes | None
    token: bytes | None
    sealed: bool
    first_seq: int | None
    segments: list[int]


def corrupt(path: Path, offset: int, invariant: str) -> CorruptLogError:
    return CorruptLogError(
        f"corrupt log segment {path} at byte {offset}: {invariant}. The damage lies "
        "before the committed end; a writable open with repair=True (cec recover "
        "--from-log RUN --repair) truncates it there, losing the records from that byte on"
    )


def open_for_writing(directory: Path, *, repair: bool, index_root: str | os.PathLike[str] | None
                     ) -> tuple[WriterLock, LogIndex, ReconcileReport, TailState]:
    """A writable open: the writer lock, this host's index of the log reconciled with
    its segments, what that did, and the log's state. Releases what it took on failure."""
    lock = WriterLock(directory)
    try:
        report = ReconcileReport()
        try:
            ident = ensure_log_id(directory)
        except CorruptLogError as exc:
            ident = renew_log_id(directory)
            report.files_rebuilt.append(f"{directory / ID_FILE} replaced by a new id (it "
                                        f"names the log's index caches only): {exc}")
        root = cache_root(index_root)
        index_dir = root / cache_name(directory, ident)
        index = open_index(index_dir, report, force_rebuild=repair)
        note_origin(index_dir, directory)
        prune_daily(root)  # the indexes of logs that are gone (storage_log.cache)
        try:
            state = reconcile(directory, index, report, repair=repair)
        except BaseException:
            index.close()
            raise
    except BaseException:
        lock.release()
        raise
    return lock, index, report, state


def open_index(path: Path, report: ReconcileReport, *, force_rebuild: bool) -> LogIndex:
    """Open the index at ``path`` (this host's cache) for writing, recreating it if it is
    missing or unusable.

    ``report.rebuilt`` tells the caller to rebuild it from the segments; a usable
    environment is rebuilt in place (one transaction), so readers that have it open
    keep working.
    """
    if not (path / "data.mdb").exists():
        report.rebuilt, report.rebuild_reason = True, "index missing"
        shutil.rmtree(path, ignore_errors=True)
    try:
        index = LogIndex(path, create=True)
        index.env.reader_check()  # free reader slots of dead processes
    except IndexCorrupt as exc:
        report.rebuilt, report.rebuild_reason = True, f"index unusable: {exc}"
        shutil.rmtree(path, ignore_errors=True)
        index = LogIndex(path, create=True)
    if force_rebuild and not report.rebuilt:  # rebuilt in place: open readers stay valid
        report.rebuilt, report.rebuild_reason = True, "repair requested"
    if index.fresh and not report.rebuilt:
        report.rebuilt, report.rebuild_reason = True, "index never finished building"
    return index


def reconcile(directory: Path, index: LogIndex, report: ReconcileReport, *,
              repair: bool) -> TailState:
    """Steps 0 to 4 of the module docstring; what the writer continues from."""
    chain = read_chain(directory, rebuild=repair)
    _put_back_epochs(directory, chain, report)
    snap = index.snapshot()
    start = _start_point(directory, index, chain, snap, report, repair=repair)
    start_seg = start.committed.segment if start.committed.segment >= 0 else None
    walked = [s for s in chain.segments if start_seg is None or s >= start_seg]
    res = walk(directory, walked, start.committed, schema_bytes=start.schema_bytes,
               token=start.token, sealed=start.sealed, limits=chain.limits,
               sides=not repair)  # a repair reads every frame
    _refuse_damage(directory, res, chain.segments, repair=repair)
    # A repair cuts committed data: first a new epoch fences the log at the cut, so
    # that the fences of later epochs (which name the old, longer ends) no longer count
    # and a crash during the cut leaves a valid chain.
    if repair and res.bad is not None:
        take_epoch(directory, res.point)
    if armed("log.during_reconcile") and (res.point != start.committed
                                          or _past(directory, walked, res.point)):
        crash_point("log.during_reconcile")  # a crash here: the next open does it again
    _cut(directory, walked, res, report)
    _store_index(directory, index, snap, res, report, full=start.full)
    schema = decode_schema(res.schema_bytes) if res.schema_bytes is not None else None
    return TailState(res.point, schema, res.schema_bytes, res.token, res.sealed,
                     index.snapshot().first_seq,
                     [s for s in chain.segments if s <= res.point.segment])


def _put_back_epochs(directory: Path, chain: Chain, report: ReconcileReport) -> None:
    """Write back the epoch files that :func:`read_chain` rebuilt (a repair)."""
    for _, (problem, info) in sorted(chain.rebuilt.items()):
        path = write_rebuilt(directory, info)
        fence = info.fence
        where = "nothing before it" if fence is None else (
            f"{segment_path(directory, fence.segment).name} byte {fence.end}, seq "
            f"{fence.last_seq}")
        report.files_rebuilt.append(f"{path} rebuilt from the segments (fence: {where}); "
                                     f"it was: {problem}")


@dataclass
class _Start:
    """Where the walk of reconcile starts, and what the log held up to there."""

    committed: Committed
    schema_bytes: bytes | None
    token: bytes | None
    sealed: bool
    full: bool  # from the start of the log: the index is rebuilt


def _start_point(directory: Path, index: LogIndex, chain: Chain, snap: Snapshot,
                 report: ReconcileReport, *, repair: bool) -> _Start:
    """Step 1: the index's committed end if it can be trusted, else the log's start
    (``report.rebuilt`` says why); CorruptLogError for damage at the committed end."""
    committed = snap.committed
    full = report.rebuilt
    if not full and not repair:
        _check_end_segment(directory, chain, committed)
    if not full and not chain.holds(committed):
        full = True
        report.rebuilt, report.rebuild_reason = True, ("the index ends past the log's "
                                                       "epoch chain (another writer took "
                                                       "the log over since)")
    if not full and committed.segment >= 0:
        problem = _commit_point_problem(directory, index, committed)
        if problem is not None:
            seg_path, offset, invariant = problem
            if seg_path != "index" and not repair:
                raise corrupt(Path(seg_path), offset, invariant)
            full = True
            report.rebuilt = True
            report.rebuild_reason = invariant if seg_path == "index" else f"repair: {invariant}"
    if full:
        return _Start(EMPTY, None, None, False, True)
    return _Start(committed, snap.schema, snap.token, snap.sealed, False)


def _check_end_segment(directory: Path, chain: Chain, committed: Committed) -> None:
    """CorruptLogError if the segment holding the index's committed end is gone while
    no newer writer took the log over (its segment is of the newest epoch)."""
    if committed.segment >= 0 and committed.segment not in chain.segments \
            and sid_epoch(committed.segment) == chain.epoch \
            and (committed.last_seq or 0) > (read_trim_marker(directory) or -1):
        raise corrupt(segment_path(directory, committed.segment), 0,
                      f"the segment holding the committed end (seq {committed.last_seq}) "
                      "is missing")


def _commit_point_problem(directory: Path, index: LogIndex, committed: Committed
                          ) -> tuple[str, int, str] | None:
    """What is wrong at the index's committed end: ``(segment path, offset,
    invariant)``, ``("index", 0, why)`` for an index that disagrees with itself, or
    None."""
    problem = _check_commit_point(directory, committed)
    if problem is None:
        last = index.last_entry()
        if (last.last_seq if last else None) != committed.last_seq:
            problem = ("index", 0, "last index entry does not match the committed end")
    return problem


def _refuse_damage(directory: Path, res: WalkResult, segments: list[int], *,
                   repair: bool) -> None:
    """Torn is not corrupt: only an interrupted write at the very end of the chain may
    be cut. Damage anywhere else, or a damaged whole frame (tail_is_torn), is
    corruption, reported whatever the index of this host says (unless ``repair``)."""
    bad = res.bad
    if bad is not None and not repair and (bad[0] != segments[-1] or not res.torn):
        raise corrupt(segment_path(directory, bad[0]), bad[1], bad[2])


def _cut(directory: Path, walked: list[int], res: WalkResult,
         report: ReconcileReport) -> None:
    """Step 3: truncate the log at the walk's last commit point."""
    point = res.point
    keep_seg = point.segment
    for seg in walked:
        path = segment_path(directory, seg)
        size = path.stat().st_size
        if seg > keep_seg:
            report.bytes_cut += size
            report.segments_removed.append(path.name)
            if report.cut_at is None:
                report.cut_at = (path.name, 0)
            path.unlink()
            remove_side(directory, seg)
        elif seg == keep_seg and size > point.end:
            report.bytes_cut += size - point.end
            report.cut_at = (path.name, point.end)
            remove_side(directory, seg)  # it described the bytes cut: never trust it
            os.truncate(path, point.end)
    if report.bytes_cut:
        report.cut_reason = res.bad[2] if res.bad is not None else "uncommitted records"
        fsync_dir(directory)


def _past(directory: Path, walked: list[int], point: Committed) -> bool:
    """Bytes past the commit point: a torn tail, or segments after it (what _cut cuts)."""
    if not walked or walked[-1] > point.segment:
        return bool(walked)
    return walked[-1] == point.segment and \
        segment_path(directory, point.segment).stat().st_size > point.end


def _store_index(directory: Path, index: LogIndex, snap: Snapshot, res: WalkResult,
                 report: ReconcileReport, *, full: bool) -> None:
    """Step 4: the index up to the commit point, in one transaction, synced."""
    report.records_indexed = len(res.entries)
    if full:
        index.reset(res.entries, res.point, schema=res.schema_bytes, token=res.token,
                    sealed=res.sealed, trimmed=read_trim_marker(directory))
    else:
        report.entries_dropped = index.drop_after(snap.committed.last_seq)
        if not report.entries_dropped and not res.entries and res.point == snap.committed \
                and (res.schema_bytes, res.token, res.sealed) == \
                (snap.schema, snap.token, snap.sealed):
            return  # the index is the log's already: nothing written, nothing to sync
        index.commit(res.entries, res.point, schema=res.schema_bytes, token=res.token,
                     sealed=res.sealed)
    index.sync()


def _check_commit_point(directory: Path, committed: Committed) -> tuple[str, int, str] | None:
    """None if the frame ending at the committed end is a valid COMMIT frame."""
    path = segment_path(directory, committed.segment)
    if not path.exists():
        return (str(path), 0, "segment holding the committed end is missing")
    try:
        with SegmentReader(path) as reader:
            size = reader.size()
            if size < committed.end:
                return (str(path), size,
                        f"segment is {size} bytes, shorter than the committed end {committed.end}")
            for _, _, info in reader.backward(committed.end, 0, 1 << 16):
                if not info.flags & FLAG_COMMIT:
                    return (str(path), info.offset, "last committed frame lacks the COMMIT flag")
                break
    except FrameError as exc:
        return (str(path), exc.offset, exc.invariant)
    return None


def first_damage(directory: Path) -> tuple[Path, int, str] | None:
    """The first damaged frame of the log's chain, read frame by frame (checksums, no
    decoding, no side-file trusted): ``(segment, byte, invariant)``, or None. A torn
    tail at the chain's very end is not damage (a writer cuts it).

    What a recovery runs when its open trusted side-files instead of reading the
    segments (a rebuilt index): damage in records the recovery did not need is still
    found, for a later replay, rescale or time travel will need them."""
    chain = read_chain(directory)
    res = walk(directory, chain.segments, EMPTY, schema_bytes=None, token=None,
               sealed=False, limits=chain.limits, sides=False)
    bad = res.bad
    if bad is None or (bad[0] == chain.segments[-1] and res.torn):
        return None
    return segment_path(directory, bad[0]), bad[1], bad[2]
