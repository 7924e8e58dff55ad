"""The LMDB index of a log: a rebuildable cache over the segments (see LogIndex).

The values it stores (:class:`Entry`, :class:`Committed`, :class:`Snapshot`) and their
byte encoding are defined in :mod:`storage_log.entry` and re-exported here.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from storage_log.entry import COMMITTED, EMPTY, Committed, Entry, Snapshot

__all__ = ["EMPTY", "FORMAT", "MAP_SIZE", "Committed", "Entry", "IndexCorrupt", "LogIndex",
           "Snapshot", "acquire_env", "key_i64", "key_ts_seq", "release_env"]

FORMAT = 3  # 1: three named databases (see _P_META for why they went); 2: no epochs
MAP_SIZE = 1 << 30  # initial map; doubled when full (about 5 M records per GiB)

_KEY = struct.Struct(">Q")
_KEY2 = struct.Struct(">QQ")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_BIAS = 1 << 63


def key_i64(v: int) -> bytes:
    return _KEY.pack(v + _BIAS)


def key_ts_seq(ts: int, seq: int) -> bytes:
    return _KEY2.pack(ts + _BIAS, seq + _BIAS)


class IndexCorrupt(Exception):
    """The environment cannot be used; the caller rebuilds it from the segments.

    Internal, so not a :class:`~storage_log.errors.CecError`: the index is a cache and
    its callers (``reconcile``, ``scan``) catch this and rebuild it or walk the segments.
    Only a fresh index that LMDB cannot open at all lets it through: an environment
    problem, exit status 1 like any unexpected failure."""


# The three keyspaces share LMDB's main database under one-byte prefixes. Named
# databases would need ``Environment.open_db``, and py-lmdb (3.0) runs ``open_db``
# without a transaction as a *write* transaction begun with the GIL held: a thread
# blocked there on LMDB's writer mutex holds the GIL, while the thread that owns the
# mutex waits for the GIL to finish its own transaction — a deadlock between any
# two threads of a process (issue 14; reproduced by tests/storage_log/test_threads.py).
# With prefixes a reader only ever begins read-only transactions, which never touch
# the writer mutex, and a writer begins its write transactions through
# ``Environment.begin(write=True)``, which waits for the mutex with the GIL released.
_P_META = b"m"
_P_SEQ = b"s"
_P_TS = b"t"


def _seq_key(last_seq: int) -> bytes:
    return _P_SEQ + key_i64(last_seq)


def _ts_key(last_ts: int, last_seq: int) -> bytes:
    return _P_TS + key_ts_seq(last_ts, last_seq)


def _meta_key(name: bytes) -> bytes:
    return _P_META + name


class _EnvCache:
    """The environments open in this process: (environment, main db, reference count)."""

    def __init__(self) -> None:
        self.envs: dict[str, tuple[lmdb.Environment, Any, int]] = {}
        self.lock = threading.Lock()

    def forget(self) -> None:
        self.envs = {}
        self.lock = threading.Lock()


_cache = _EnvCache()

if hasattr(os, "register_at_fork"):
    # an LMDB environment must not be used across fork: a child opens its own
    os.register_at_fork(after_in_child=_cache.forget)


def acquire_env(path: Path, *, create: bool) -> tuple[lmdb.Environment, Any]:
    """The process's environment at ``path`` and its main database handle."""
    key = os.path.realpath(path)
    with _cache.lock:
        envs = _cache.envs
        if key in envs:
            env, main, n = envs[key]
            envs[key] = (env, main, n + 1)
            return env, main
        if not create and not (path / "data.mdb").exists():
            raise FileNotFoundError(path / "data.mdb")
        try:
            env = lmdb.open(str(path), subdir=True, create=create, max_dbs=0,
                            map_size=MAP_SIZE, sync=False, metasync=False,
                            readahead=False, max_readers=256)
        except lmdb.Error as exc:
            raise IndexCorrupt(f"cannot open LMDB environment {path}: {exc}") from exc
        try:
            main = env.open_db(None)  # the main database: a read-only transaction
        except lmdb.Error as exc:
            env.close()
            raise IndexCorrupt(f"cannot open LMDB environment {path}: {exc}") from exc
        envs[key] = (env, main, 1)
        return env, main


def release_env(path: Path, env: lmdb.Environment) -> None:
    key = os.path.realpath(path)
    with _cache.lock:
        envs = _cache.envs
        held = envs.get(key)
        if held is None or held[0] is not env:
            env.close()
            return
        if held[2] > 1:
            envs[key] = (env, held[1], held[2] - 1)
            return
        del envs[key]
        env.close()


class LogIndex:
    """The LMDB index and metadata of one log.

    Layout of the environment (directory ``index/`` of the log): one database, LMDB's
    main one, holding three keyspaces under a one-byte prefix (no named databases:
    see the comment above ``_P_META``):

    ``s`` + key  key: ``last_seq`` of a DATA record as 8 bytes big-endian offset binary
                 (``v + 2**63``, so keys sort like the signed values); value: ENTRY.
    ``t`` + key  key: (``last_ts``, ``last_seq``) in the same encoding (16 bytes);
                 value: ENTRY. ``set_range`` on either answers "the first record ending
                 at or after x".
    ``m`` + name ``format`` (uint32), ``committed`` (COMMITTED), ``schema`` (IPC schema
                 message), ``token`` (the last commit token; absent = None), ``sealed``
                 (present = sealed), ``trimmed`` (int64 last seq dropped by trim).

    ENTRY (little-endian, 56 bytes): segment base int64, frame offset uint64, frame size
    uint32, first_seq, last_seq, first_ts, last_ts int64, rows uint32, segment epoch
    uint32.

    COMMITTED (little-endian, 45 bytes): segment base int64, end offset uint64, last_seq
    int64, last_ts int64, records uint64, has_data uint8, segment epoch uint32 — the
    committed end of the log.

    The environment lives in a directory of the host's own cache, not beside the
    segments (LMDB must not live on a shared file system): see
    :func:`storage_log.cache.index_path`.

    Only committed DATA records are indexed, and the index, the committed end and the
    token change together in one write transaction after the segments are durable, so
    any reader transaction sees a consistent committed prefix. The environment runs
    without its own fsync (``sync=False, metasync=False``): the segments hold every
    commit (the COMMIT flag and TOKEN frames), so a lost or stale index is rebuilt or
    reconciled from them on the next writable open.

    The map starts at 1 GiB and doubles when full; readers in other processes adopt
    the new size on their next transaction.

    LMDB forbids opening one environment twice in a process, so environments are shared
    per path with a reference count (:func:`acquire_env` / :func:`release_env`).

    Thread safety: every method runs its own transaction, begun and ended inside the
    call (a ``with`` block: an exception aborts it). Reads are read-only transactions
    and never take LMDB's writer mutex, so no reader can block a writer; writes wait
    for that mutex with the GIL released. One writer at a time (the log's writer lock
    guarantees that across processes).
    """

    def __init__(self, path: Path, *, create: bool) -> None:
        self.path = path
        if create:
            path.mkdir(parents=True, exist_ok=True)
        self.env, self._main = acquire_env(path, create=create)
        try:
            with self.env.begin() as txn:
                fmt = txn.get(_meta_key(b"format"))
                raw = txn.get(_meta_key(b"committed"))
                alien = fmt is None and _has_foreign_keys(txn)
            if alien:  # an index of an older layout (named databases): not ours to edit
                raise IndexCorrupt(f"{path}: index of an older layout")
            #: a new (or half-built) environment: no ``format`` key until :meth:`reset`
            #: has stored a complete index, so readers never trust it before that
            self.fresh = fmt is None
            if fmt is None and not create:
                raise IndexCorrupt(f"{path}: index incomplete (never finished building)")
            if fmt is not None and _U32.unpack(fmt)[0] != FORMAT:
                raise IndexCorrupt(f"{path}: unknown index format {_U32.unpack(fmt)[0]}")
            if fmt is not None and (raw is None or len(raw) != COMMITTED.size):
                raise IndexCorrupt(f"{path}: committed end missing or malformed")
        except (lmdb.Error, struct.error) as exc:
            self.close()
            raise IndexCorrupt(f"{path}: {exc}") from exc
        except IndexCorrupt:
            self.close()
            raise

    def close(self) -> None:
        env = getattr(self, "env", None)
        if env is not None:
            release_env(self.path, env)
            self.env = None  # type: ignore[assignment]

    # -- reads ------------------------------------------------------------------

    def _begin(self) -> Any:
        """A read transaction; adopts a map grown by the writer in another process."""
        try:
            return self.env.begin()
        except lmdb.MapResizedError:
            self.env.set_mapsize(0)
            return self.env.begin()

    def snapshot(self) -> Snapshot:
        with self._begin() as txn:
            return self._snapshot(txn)

    def _snapshot(self, txn: Any) -> Snapshot:
        raw = txn.get(_meta_key(b"committed"))
        committed = Committed.decode(raw) if raw is not None else EMPTY
        first = _first(txn, _P_SEQ, _P_SEQ)
        trimmed_raw = txn.get(_meta_key(b"trimmed"))
        return Snapshot(
            committed=committed,
            first_seq=first.first_seq if first is not None else None,
            schema=txn.get(_meta_key(b"schema")),
            token=txn.get(_meta_key(b"token")),
            sealed=txn.get(_meta_key(b"sealed")) is not None,
            trimmed=_I64.unpack(trimmed_raw)[0] if trimmed_raw is not None else None,
        )

    def locate(self, *, after_seq: int | None = None, from_ts: int | None = None,
               at_seq: int | None = None) -> tuple[Snapshot, Entry | None]:
        """A snapshot and the first record ending after ``after_seq`` / at or after
        ``from_ts`` / at or after ``at_seq`` (None if there is none), one transaction."""
        with self._begin() as txn:
            snap = self._snapshot(txn)
            if after_seq is not None:
                if after_seq >= (1 << 63) - 1:
                    return snap, None
                return snap, _first(txn, _seq_key(after_seq + 1), _P_SEQ)
            if at_seq is not None:
                return snap, _first(txn, _seq_key(at_seq), _P_SEQ)
            if from_ts is not None:
                return snap, _first(txn, _ts_key(from_ts, -(1 << 63)), _P_TS)
            return snap, _first(txn, _P_SEQ, _P_SEQ)

    def last_entry(self) -> Entry | None:
        with self._begin() as txn, txn.cursor() as cur:
            found = cur.prev() if cur.set_range(_P_TS) else cur.last()
            if not found or not bytes(cur.key()).startswith(_P_SEQ):
                return None
            return Entry.decode(cur.value())

    def entries(self) -> Iterator[Entry]:
        with self._begin() as txn:
            yield from _scan(txn, _P_SEQ, _P_SEQ)

    def ts_keys(self) -> list[bytes]:
        """The keys of the ``ts`` keyspace, without their prefix."""
        with self._begin() as txn, txn.cursor() as cur:
            keys = []
            if cur.set_range(_P_TS):
                for k in cur.iternext(keys=True, values=False):
                    if not bytes(k).startswith(_P_TS):
                        break
                    keys.append(bytes(k)[1:])
            return keys

    # -- writes -----------------------------------------------------------------

    def commit(self, entries: list[Entry], committed: Committed, *,
               schema: bytes | None = None, token: bytes | None = None,
               sealed: bool = False) -> None:
        """Add index entries and move the committed end, in one transaction."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    _put(txn, entries, committed, schema, token, sealed)
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def drop_after(self, last_seq: int | None) -> int:
        """Delete entries of records ending after ``last_seq`` (all if None)."""
        with self.env.begin(write=True) as txn:
            start = _seq_key(last_seq + 1) if last_seq is not None else _P_SEQ
            victims = list(_scan(txn, start, _P_SEQ))
            for e in victims:
                txn.delete(_seq_key(e.last_seq))
                txn.delete(_ts_key(e.last_ts, e.last_seq))
        return len(victims)

    def drop_before(self, seq: int) -> int:
        """Delete entries of records ending before ``seq``; record the trimmed seq."""
        with self.env.begin(write=True) as txn:
            victims = []
            for e in _scan(txn, _P_SEQ, _P_SEQ):
                if e.last_seq >= seq:
                    break
                victims.append(e)
            for e in victims:
                txn.delete(_seq_key(e.last_seq))
                txn.delete(_ts_key(e.last_ts, e.last_seq))
            if victims:
                txn.put(_meta_key(b"trimmed"), _I64.pack(victims[-1].last_seq))
        return len(victims)

    def reset(self, entries: list[Entry], committed: Committed, *, schema: bytes | None,
              token: bytes | None, sealed: bool, trimmed: int | None = None) -> None:
        """Replace everything with a rebuilt index, in one transaction; stores the
        ``format`` key last, which marks the index complete."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    txn.drop(self._main, delete=False)
                    _put(txn, entries, committed, schema, token, sealed)
                    if trimmed is not None:
                        txn.put(_meta_key(b"trimmed"), _I64.pack(trimmed))
                    txn.put(_meta_key(b"format"), _U32.pack(FORMAT))
                self.fresh = False
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def sync(self) -> None:
        self.env.sync(True)


def _first(txn: Any, start: bytes, prefix: bytes) -> Entry | None:
    """The first entry at or after key ``start`` whose key has ``prefix``."""
    with txn.cursor() as cur:
        if not cur.set_range(start) or not bytes(cur.key()).startswith(prefix):
            return None
        return Entry.decode(cur.value())


def _scan(txn: Any, start: bytes, prefix: bytes) -> Iterator[Entry]:
    """The entries from key ``start`` on, while their key has ``prefix``."""
    with txn.cursor() as cur:
        if not cur.set_range(start):
            return
        for k, v in cur:
            if not bytes(k).startswith(prefix):
                return
            yield Entry.decode(v)


def _put(txn: Any, entries: list[Entry], committed: Committed, schema: bytes | None,
         token: bytes | None, sealed: bool) -> None:
    for e in entries:
        v = e.encode()
        txn.put(_seq_key(e.last_seq), v)
        txn.put(_ts_key(e.last_ts, e.last_seq), v)
    txn.put(_meta_key(b"committed"), committed.encode())
    if schema is not None:
        txn.put(_meta_key(b"schema"), schema)
    if token is not None:
        txn.put(_meta_key(b"token"), token)
    if sealed:
        txn.put(_meta_key(b"sealed"), b"\x01")


def _has_foreign_keys(txn: Any) -> bool:
    """Whether the main database holds the named databases of index format 1."""
    with txn.cursor() as cur:
        return any(cur.set_key(name) for name in (b"meta", b"seq", b"ts"))
