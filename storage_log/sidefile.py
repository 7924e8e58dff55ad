"""Index side-files of complete segments: a new host loads them instead of scanning.

The LMDB index lives in a per-host cache (never on the shared file system), so a host
that never saw a log has to walk its segments to find the records. Once a segment is
complete and every record in it committed (its writer has committed in a later
segment), the writer puts ``SEGMENT.seg.idx`` next to it: the segment's records
(offset, size, positions) and what a walk learns from it (the schema, the last
token, the seal, where the log ended before it), JSON with an xxh64 checksum line.
A walk trusts a side-file only when its checksum holds and it describes exactly the
bytes the chain holds of that segment; anything else (no side-file, a stale one
after a repair cut the segment, a damaged one) is walked as before. So a side-file
can make an open faster, never different.
"""

from __future__ import annotations

import base64
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from storage_log.durable import write_durable
from storage_log.entry import Entry
from storage_log.segment import segment_path

SUFFIX = ".idx"
VERSION = 1


def side_path(directory: Path, sid: int) -> Path:
    p = segment_path(directory, sid)
    return p.with_name(p.name + SUFFIX)


@dataclass(frozen=True)
class SideFile:
    """What a walk of one complete segment would have found."""

    sid: int
    size: int  # the segment's size: every byte of it is committed records/controls
    link: int  # where the log ended before the segment (its SCHEMA frame's last_seq)
    entries: tuple[Entry, ...]
    last_seq: int | None  # the last record's seq in the segment, else the link's
    last_ts: int | None
    token: bytes | None  # the last TOKEN frame in the segment
    sealed: bool
    schema: bytes  # the log's schema (the segment's SCHEMA frame payload)


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def write_side(directory: Path, side: SideFile) -> None:
    """Write the side-file of a complete segment (atomically: a temp file renamed)."""
    body = json.dumps({
        "v": VERSION, "sid": side.sid, "bytes": side.size, "link": side.link,
        "entries": [list(e) for e in side.entries], "last_seq": side.last_seq,
        "last_ts": side.last_ts, "token": _b64(side.token), "sealed": side.sealed,
        "schema": _b64(side.schema)}, separators=(",", ":"))
    text = f"{body}\n{xxhash.xxh64_hexdigest(body.encode())}\n"
    # no fsync: a lost side-file only costs a walk of its segment
    write_durable(side_path(directory, side.sid), text, sync=False)


def read_side(directory: Path, sid: int, size: int) -> SideFile | None:
    """The side-file of segment ``sid`` if it is intact and describes its ``size``
    bytes exactly, else None (the caller walks the segment)."""
    try:
        text = side_path(directory, sid).read_text(encoding="utf-8")
        body, digest = text.rstrip("\n").rsplit("\n", 1)
        if xxhash.xxh64_hexdigest(body.encode()) != digest:
            return None
        raw = json.loads(body)
        if raw["v"] != VERSION or raw["sid"] != sid or raw["bytes"] != size:
            return None
        return SideFile(
            sid, int(raw["bytes"]), int(raw["link"]),
            tuple(Entry(*(int(x) for x in e)) for e in raw["entries"]),
            None if raw["last_seq"] is None else int(raw["last_seq"]),
            None if raw["last_ts"] is None else int(raw["last_ts"]),
            None if raw["token"] is None else base64.b64decode(raw["token"]),
            bool(raw["sealed"]), base64.b64decode(raw["schema"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_side(directory: Path, sid: int) -> None:
    side_path(directory, sid).unlink(missing_ok=True)


@dataclass
class _Draft:
    """What a writer committed into one of its segments so far."""

    link: int
    entries: list[Entry] = field(default_factory=list)
    token: bytes | None = None
    sealed: bool = False


class SideDrafts:
    """A writer's account of what it committed into each of its segments; once a
    segment is complete and committed (the commit point moved past it), its side-file
    is written (best effort: a side-file is an optimisation only)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._drafts: dict[int, _Draft] = {}

    def start(self, sid: int, link: int) -> None:
        """A segment of this writer begins; the log ended at seq ``link`` before it."""
        self._drafts[sid] = _Draft(link)

    def note(self, written: list[Entry], token: bytes | None, seal: bool, *, active: int,
             current: int, closed: dict[int, int], schema_bytes: bytes) -> None:
        """A commit: ``written`` entries, ``token`` and ``seal`` went into the segments
        up to ``active``; the commit point is in segment ``current``; ``closed`` maps
        the segments this writer finished to their final sizes."""
        drafts = self._drafts
        for e in written:
            draft = drafts.get(e.segment)
            if draft is not None:
                draft.entries.append(e)
        draft = drafts.get(active)
        if draft is not None:
            if token is not None:
                draft.token = bytes(token)
            draft.sealed = draft.sealed or seal
        for sid in [s for s in drafts if s < current and s in closed]:
            d = drafts.pop(sid)
            last = d.entries[-1] if d.entries else None
            with contextlib.suppress(OSError):  # a side-file is an optimisation only
                write_side(self.directory, SideFile(
                    sid, closed[sid], d.link, tuple(d.entries),
                    last.last_seq if last else None, last.last_ts if last else None,
                    d.token, d.sealed, schema_bytes))
