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
