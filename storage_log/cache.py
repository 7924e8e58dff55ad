"""Where a host keeps its LMDB index of a log: a local cache keyed by the log's id.

LMDB must not live on a shared file system (its lock file and memory map are per
host), and the segments may. So a log directory holds its identity, ``LOG/log.id``
(``cec-log <32 hex digits>``, created once, exclusively, by the log's first writer),
and every host keeps the index of that log in its own cache directory::

    <index root>/<log id>-<path hash>/      LMDB environment (storage_log.index.LogIndex)

The path hash (of the log directory's real path) keeps apart the indexes of copies
of one log on one host (``cp -r RUN RUN2`` copies ``log.id``): each copy is indexed
from its own segments.

The index root is, in order: the ``index_root`` argument of
:meth:`storage_log.log.StreamLog.open`, the environment variable ``CEC_INDEX_DIR``,
``$XDG_CACHE_HOME/cec/index``, ``~/.cache/cec/index``. A missing, stale or foreign
index is always safe: the writer rebuilds or extends it from the segments, readers
continue it in memory (:class:`storage_log.scan.ScanIndex`); it is never trusted
over the segments.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import time
import uuid
from pathlib import Path

from storage_log.durable import write_durable
from storage_log.errors import CorruptLogError

ID_FILE = "log.id"
_PREFIX = "cec-log "


def index_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("CEC_INDEX_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME")
    return (Path(cache) if cache else Path.home() / ".cache") / "cec" / "index"


def read_log_id(directory: Path) -> str | None:
    """The log's id, None if it has none yet."""
    path = directory / ID_FILE
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptLogError(f"log id file {path} at byte 0: unreadable ({exc})") from exc
    ident = text.strip().removeprefix(_PREFIX)
    if not text.startswith(_PREFIX) or len(ident) != 32 or any(
            c not in "0123456789abcdef" for c in ident):
        raise CorruptLogError(f"log id file {path} at byte 0: expected 'cec-log <32 hex "
                              "digits>'; a writable open gives the log a new one")
    return ident


def renew_log_id(directory: Path) -> str:
    """Replace a damaged ``log.id`` with a new id (durably). Nothing is lost: the id
    only names the log's index in each host's cache, and an index that no host has
    yet is built from the segments."""
    new = uuid.uuid4().hex
    write_durable(directory / ID_FILE, f"{_PREFIX}{new}\n")
    return new


def ensure_log_id(directory: Path) -> str:
    """The log's id, created (exclusively: one of racing writers wins) if absent."""
    ident = read_log_id(directory)
    if ident is not None:
        return ident
    new = uuid.uuid4().hex
    with contextlib.suppress(FileExistsError):  # another writer made it first
        write_durable(directory / ID_FILE, f"{_PREFIX}{new}\n", exclusive=True)
    ident = read_log_id(directory)
    assert ident is not None
    return ident


def index_path(directory: Path, root: str | os.PathLike[str] | None = None) -> Path | None:
    """This host's index directory of the log in ``directory`` (None: no id yet, or
    a damaged one: a reader walks the segments, a writer gives the log a new id)."""
    try:
        ident = read_log_id(directory)
    except CorruptLogError:
        return None
    return None if ident is None else index_root(root) / cache_name(directory, ident)


def cache_name(directory: Path, ident: str) -> str:
    """The name of the log's index directory in a host's cache."""
    where = hashlib.blake2b(os.path.realpath(directory).encode(), digest_size=6).hexdigest()
    return f"{ident}-{where}"


# --- pruning: the indexes of logs that are gone ------------------------------------
#
# A run directory deleted by its user leaves its logs' indexes in every host's cache
# (about 80 KB each for a small log, one per log and path): thousands of them after a
# few weeks of runs and tests. Each index records the log it is of (ORIGIN, the log
# directory's real path); once a day per cache root, the first writer to open a log
# removes, on a thread of its own, every index whose log is no longer there: the path
# holds no log of that id any more (deleted, moved, replaced), or the index is older
# than LEGACY_AGE_S and has no ORIGIN (made before it was recorded). Removing an index
# is always safe (a writer rebuilds it from the segments, a reader walks them); the
# thread renames one out of the way before it deletes it, so a process that stops
# halfway leaves a TRASH directory, which the next pass deletes.

ORIGIN = "origin"
STAMP = ".pruned"
TRASH = ".trash-"
PRUNE_EVERY_S = 24 * 3600.0
LEGACY_AGE_S = 30 * 24 * 3600.0


def note_origin(index_dir: Path, directory: Path) -> None:
    """Record in ``index_dir`` the log it indexes (once; best effort: without it the
    index is pruned only by age)."""
    path = index_dir / ORIGIN
    want = os.path.realpath(directory)
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.read_text(encoding="utf-8") == want:
            return
    tmp = index_dir / f"{ORIGIN}.{os.getpid()}.tmp"
    try:
        tmp.write_text(want, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def orphaned(index_dir: Path, *, now: float) -> bool:
    """Whether ``index_dir`` (``<log id>-<path hash>`` in a cache root) indexes a log
    that is gone from its path. An unreadable path or log id keeps the index."""
    ident, _, where = index_dir.name.partition("-")
    if len(ident) != 32 or len(where) != 12:
        return False  # not one of ours
    try:
        origin = (index_dir / ORIGIN).read_text(encoding="utf-8")
    except FileNotFoundError:
        try:
            return now - (index_dir / "data.mdb").stat().st_mtime > LEGACY_AGE_S
        except OSError:
            return False
    except (OSError, UnicodeDecodeError):
        return False
    log = Path(origin)
    try:
        found = read_log_id(log)
    except CorruptLogError:
        return False  # damaged, or not ours to read: its writer renews it
    return found != ident or cache_name(log, ident) != index_dir.name


def prune(root: Path, *, now: float | None = None) -> list[str]:
    """Remove the indexes in ``root`` whose logs are gone (:func:`orphaned`), and what
    an earlier pass left halfway; the names removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return removed
    for entry in entries:
        path = Path(entry.path)
        if entry.name.startswith(TRASH):
            shutil.rmtree(path, ignore_errors=True)
            continue
        if not entry.is_dir(follow_symlinks=False) or not orphaned(path, now=now):
            continue
        trash = root / f"{TRASH}{entry.name}"
        try:
            os.rename(path, trash)
        except OSError:
            continue
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(entry.name)
    return removed


_PRUNING: list[threading.Thread] = []


def prune_daily(root: Path) -> threading.Thread | None:
    """Start :func:`prune` of ``root`` on a daemon thread if no process did in the last
    :data:`PRUNE_EVERY_S` (``root/.pruned``'s time; the thread, or None)."""
    stamp = root / STAMP
    try:
        if time.time() - stamp.stat().st_mtime < PRUNE_EVERY_S:
            return None
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        stamp.touch()
    except OSError:
        return None
    thread = threading.Thread(target=prune, args=(root,), name="cec-index-prune",
                              daemon=True)
    _PRUNING[:] = [thread]
    thread.start()
    return thread
