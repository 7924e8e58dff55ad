"""The LMDB index of a log: a rebuildable cache over the segments (see LogIndex)."""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import lmdb

FORMAT = 1
MAP_SIZE = 1 << 30  # initial map; doubled when full (about 5 M records per GiB)

_KEY = struct.Struct(">Q")
_KEY2 = struct.Struct(">QQ")
ENTRY = struct.Struct("<qQIqqqqI")
COMMITTED = struct.Struct("<qQqqQB")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_BIAS = 1 << 63


def key_i64(v: int) -> bytes:
    return _KEY.pack(v + _BIAS)


def key_ts_seq(ts: int, seq: int) -> bytes:
    return _KEY2.pack(ts + _BIAS, seq + _BIAS)


class Entry(NamedTuple):
    """Where one committed record lives."""

    segment: int
    offset: int
    size: int
    first_seq: int
    last_seq: int
    first_ts: int
    last_ts: int
    rows: int

    def encode(self) -> bytes:
        return ENTRY.pack(*self)

    @classmethod
    def decode(cls, data: bytes) -> Entry:
        return cls(*ENTRY.unpack(data))


@dataclass(frozen=True)
class Committed:
    """The committed end of the log."""

    segment: int
    end: int
    last_seq: int | None
    last_ts: int | None
    records: int

    def encode(self) -> bytes:
        has = self.last_seq is not None
        return COMMITTED.pack(self.segment, self.end, self.last_seq if has else -1,
                              self.last_ts if self.last_ts is not None else 0,
                              self.records, 1 if has else 0)

    @classmethod
    def decode(cls, data: bytes) -> Committed:
        seg, end, last_seq, last_ts, records, has = COMMITTED.unpack(data)
        if not has:
            return cls(seg, end, None, None, records)
        return cls(seg, end, last_seq, last_ts, records)


EMPTY = Committed(-1, 0, None, None, 0)


@dataclass(frozen=True)
class Snapshot:
    """Everything a reader needs, read in one transaction."""

    committed: Committed
    first_seq: int | None
    schema: bytes | None
    token: bytes | None
    sealed: bool
    trimmed: int | None


class IndexCorrupt(Exception):
    """The environment cannot be used; the caller rebuilds it from the segments."""


class _EnvCache:
    """The environments open in this process, with reference counts."""

    def __init__(self) -> None:
        self.envs: dict[str, tuple[lmdb.Environment, int]] = {}
        self.lock = threading.Lock()

    def forget(self) -> None:
        self.envs = {}
        self.lock = threading.Lock()


_cache = _EnvCache()

if hasattr(os, "register_at_fork"):
    # an LMDB environment must not be used across fork: a child opens its own
    os.register_at_fork(after_in_child=_cache.forget)


def acquire_env(path: Path, *, create: bool) -> lmdb.Environment:
    key = os.path.realpath(path)
    with _cache.lock:
        envs = _cache.envs
        if key in envs:
            env, n = envs[key]
            envs[key] = (env, n + 1)
            return env
        if not create and not (path / "data.mdb").exists():
            raise FileNotFoundError(path / "data.mdb")
        try:
            env = lmdb.open(str(path), subdir=True, create=create, max_dbs=4,
                            map_size=MAP_SIZE, sync=False, metasync=False,
                            readahead=False, max_readers=256)
        except lmdb.Error as exc:
            raise IndexCorrupt(f"cannot open LMDB environment {path}: {exc}") from exc
        envs[key] = (env, 1)
        return env


def release_env(path: Path, env: lmdb.Environment) -> None:
    key = os.path.realpath(path)
    with _cache.lock:
        envs = _cache.envs
        held = envs.get(key)
        if held is None or held[0] is not env:
            env.close()
            return
        if held[1] > 1:
            envs[key] = (env, held[1] - 1)
            return
        del envs[key]
        env.close()


class LogIndex:
    """The LMDB index and metadata of one log.

    Layout of the environment (directory ``index/`` of the log, three named databases):

    ``seq``   key: ``last_seq`` of a DATA record as 8 bytes big-endian offset binary
              (``v + 2**63``, so keys sort like the signed values); value: ENTRY.
    ``ts``    key: (``last_ts``, ``last_seq``) in the same encoding (16 bytes); value: ENTRY.
              ``set_range`` on either answers "the first record ending at or after x".
    ``meta``  ``format`` (uint32), ``committed`` (COMMITTED), ``schema`` (IPC schema
              message), ``token`` (the last commit token; absent = None), ``sealed``
              (present = sealed), ``trimmed`` (int64 last seq dropped by trim).

    ENTRY (little-endian, 52 bytes): segment base int64, frame offset uint64, frame size
    uint32, first_seq, last_seq, first_ts, last_ts int64, rows uint32.

    COMMITTED (little-endian, 41 bytes): segment base int64, end offset uint64, last_seq
    int64, last_ts int64, records uint64, has_data uint8 — the committed end of the log.

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

    Thread safety: LMDB transactions are per call; one writer at a time (the log's
    writer lock guarantees that across processes).
    """

    def __init__(self, path: Path, *, create: bool) -> None:
        self.path = path
        if create:
            path.mkdir(parents=True, exist_ok=True)
        self.env = acquire_env(path, create=create)
        try:
            self._seq = self.env.open_db(b"seq", create=create)
            self._ts = self.env.open_db(b"ts", create=create)
            self._meta = self.env.open_db(b"meta", create=create)
            with self.env.begin(db=self._meta) as txn:
                fmt = txn.get(b"format")
                raw = txn.get(b"committed")
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
        meta = self._meta
        raw = txn.get(b"committed", db=meta)
        committed = Committed.decode(raw) if raw is not None else EMPTY
        first_seq = None
        with txn.cursor(db=self._seq) as cur:
            if cur.first():
                first_seq = Entry.decode(cur.value()).first_seq
        trimmed_raw = txn.get(b"trimmed", db=meta)
        return Snapshot(
            committed=committed,
            first_seq=first_seq,
            schema=txn.get(b"schema", db=meta),
            token=txn.get(b"token", db=meta),
            sealed=txn.get(b"sealed", db=meta) is not None,
            trimmed=_I64.unpack(trimmed_raw)[0] if trimmed_raw is not None else None,
        )

    def locate(self, *, after_seq: int | None = None, from_ts: int | None = None,
               at_seq: int | None = None) -> tuple[Snapshot, Entry | None]:
        """A snapshot and the first record ending after ``after_seq`` / at or after
        ``from_ts`` / at or after ``at_seq`` (None if there is none), one transaction."""
        with self._begin() as txn:
            snap = self._snapshot(txn)
            if after_seq is not None:
                db, key = self._seq, key_i64(after_seq + 1) if after_seq < (1 << 63) - 1 else None
            elif at_seq is not None:
                db, key = self._seq, key_i64(at_seq)
            elif from_ts is not None:
                db, key = self._ts, key_ts_seq(from_ts, -(1 << 63))
            else:
                db, key = self._seq, b""
            if key is None:
                return snap, None
            with txn.cursor(db=db) as cur:
                if not cur.set_range(key):
                    return snap, None
                return snap, Entry.decode(cur.value())

    def last_entry(self) -> Entry | None:
        with self.env.begin(db=self._seq) as txn, txn.cursor() as cur:
            return Entry.decode(cur.value()) if cur.last() else None

    def entries(self) -> Iterator[Entry]:
        with self.env.begin(db=self._seq) as txn, txn.cursor() as cur:
            for _, v in cur:
                yield Entry.decode(v)

    def ts_keys(self) -> list[bytes]:
        with self.env.begin(db=self._ts) as txn, txn.cursor() as cur:
            return [bytes(k) for k in cur.iternext(keys=True, values=False)]

    # -- writes -----------------------------------------------------------------

    def commit(self, entries: list[Entry], committed: Committed, *,
               schema: bytes | None = None, token: bytes | None = None,
               sealed: bool = False) -> None:
        """Add index entries and move the committed end, in one transaction."""
        while True:
            try:
                self._commit(entries, committed, schema, token, sealed)
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def _commit(self, entries: list[Entry], committed: Committed, schema: bytes | None,
                token: bytes | None, sealed: bool) -> None:
        with self.env.begin(write=True) as txn:
            self._put(txn, entries, committed, schema, token, sealed)

    def _put(self, txn: Any, entries: list[Entry], committed: Committed, schema: bytes | None,
             token: bytes | None, sealed: bool) -> None:
        for e in entries:
            v = e.encode()
            txn.put(key_i64(e.last_seq), v, db=self._seq)
            txn.put(key_ts_seq(e.last_ts, e.last_seq), v, db=self._ts)
        meta = self._meta
        txn.put(b"committed", committed.encode(), db=meta)
        if schema is not None:
            txn.put(b"schema", schema, db=meta)
        if token is not None:
            txn.put(b"token", token, db=meta)
        if sealed:
            txn.put(b"sealed", b"\x01", db=meta)

    def drop_after(self, last_seq: int | None) -> int:
        """Delete entries of records ending after ``last_seq`` (all if None)."""
        n = 0
        with self.env.begin(write=True) as txn:
            with txn.cursor(db=self._seq) as cur:
                start = key_i64(last_seq + 1) if last_seq is not None else b""
                victims = []
                if cur.set_range(start):
                    victims = [Entry.decode(v) for _, v in cur]
            for e in victims:
                txn.delete(key_i64(e.last_seq), db=self._seq)
                txn.delete(key_ts_seq(e.last_ts, e.last_seq), db=self._ts)
                n += 1
        return n

    def drop_before(self, seq: int) -> int:
        """Delete entries of records ending before ``seq``; record the trimmed seq."""
        with self.env.begin(write=True) as txn:
            with txn.cursor(db=self._seq) as cur:
                victims = []
                for _, v in cur:
                    e = Entry.decode(v)
                    if e.last_seq >= seq:
                        break
                    victims.append(e)
            for e in victims:
                txn.delete(key_i64(e.last_seq), db=self._seq)
                txn.delete(key_ts_seq(e.last_ts, e.last_seq), db=self._ts)
            if victims:
                txn.put(b"trimmed", _I64.pack(victims[-1].last_seq), db=self._meta)
        return len(victims)

    def reset(self, entries: list[Entry], committed: Committed, *, schema: bytes | None,
              token: bytes | None, sealed: bool, trimmed: int | None = None) -> None:
        """Replace everything with a rebuilt index, in one transaction; stores the
        ``format`` key last, which marks the index complete."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    txn.drop(self._seq, delete=False)
                    txn.drop(self._ts, delete=False)
                    txn.drop(self._meta, delete=False)
                    self._put(txn, entries, committed, schema, token, sealed)
                    if trimmed is not None:
                        txn.put(b"trimmed", _I64.pack(trimmed), db=self._meta)
                    txn.put(b"format", _U32.pack(FORMAT), db=self._meta)
                self.fresh = False
                return
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    def sync(self) -> None:
        self.env.sync(True)
