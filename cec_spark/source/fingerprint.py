"""A bounded source's fingerprint: what a resumed ingest checks before it reads again.

A run that resumes (after a crash, a ``--repair`` that cut an upstream log) reads
its source again from a chunk on and must find the same rows with the same
positions. Each data file's name, size and an xxh64 of its content are stored in
``run.toml`` when the run starts; a resume that needs the source refuses one that
differs (InputError, exit 2, naming the file and what changed). A completed run
never reads its source, so it is not checked (it may be gone). Stream folders are
not fingerprinted: files are consumed as they appear, in name order, and a file that
sorts before one already consumed is refused by the watcher.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xxhash

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.check import source_files

CHUNK = 8 << 20


def _digest(path: Path) -> str:
    h = xxhash.xxh64()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def fingerprint(spec: PipelineSpec) -> list[dict[str, Any]]:
    """``[{"file", "bytes", "xxh64"}]`` of a file source (empty for the generator and
    stream folders)."""
    src = spec.source
    if src.path is None or src.kind in ("generator", "stream-dir"):
        return []
    path = Path(src.path)
    files = source_files(path, src.kind if path.is_dir() else None)  # as plan_source
    return [{"file": str(p), "bytes": p.stat().st_size, "xxh64": _digest(p)} for p in files]


def check_fingerprint(spec: PipelineSpec, stored: list[dict[str, Any]]) -> None:
    """InputError unless the source is still what ``stored`` describes."""
    if not stored:
        return
    try:
        now = {f["file"]: f for f in fingerprint(spec)}
    except (OSError, InputError) as exc:
        raise InputError(f"{spec.source.path}: the source cannot be read again: {exc}") \
            from exc
    for old in stored:
        new = now.pop(old["file"], None)
        if new is None:
            raise InputError(f"{old['file']}: the source changed since the run started: "
                             "the file is gone (a resumed run must read the same input)")
        if new["bytes"] != old["bytes"] or new["xxh64"] != old["xxh64"]:
            raise InputError(f"{old['file']}: the source changed since the run started: "
                             f"{old['bytes']} bytes (xxh64 {old['xxh64']}) then, "
                             f"{new['bytes']} bytes (xxh64 {new['xxh64']}) now (a resumed "
                             "run must read the same input)")
    if now:
        raise InputError(f"{next(iter(now))}: the source changed since the run started: "
                         "a file was added (a resumed run must read the same input)")
