"""A bounded source's fingerprint: what a resumed ingest checks before it reads again.

A run that resumes (after a crash, a ``--repair`` that cut an upstream log, a bad row
fixed) reads its source again from a chunk on and must find the same rows with the same
positions up to there. Each data file's name, size and an xxh64 of its content are
stored in ``run.toml`` when the run starts; for a text file also the xxh64 of each
prefix ending at a chunk boundary (an entry with the same name and fewer bytes), made
by the planner in its one pass over the file (:func:`cec_spark.source.scan.scan_lines`).
A resumed ingest checks the part its logs' tokens say was read (:func:`check_fingerprint`
with ``read_upto``): every file before the last committed chunk's unchanged, that
file's bytes up to the chunk's end unchanged (parquet: the whole file); the rest may
differ (a bad row fixed where nothing was committed yet). The fingerprint of the source
it then reads is written to ``RUN/source_files.json`` (:func:`record`), which later
resumes check instead. A check without ``read_upto`` (``--repair``) wants every file as
it was. A completed run never reads its source, so it is not checked (it may be gone).
Stream folders are not fingerprinted: files are consumed as they appear, in name order,
and a file that sorts before one already consumed is refused by the watcher.

A run made with ``[cec] source_reports`` (a new csv, jsonl or parquet file source
without lateness settings or ``--max-tuples``) stores each file's size and modification
time instead of a digest: the planner reads no file whole. The digests are the chunks'
its tasks read (:mod:`cec_spark.source.chunk_report`), and a resume reads again only
the chunks the run read of a file whose size or time changed
(:func:`check_fingerprint`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xxhash

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.chunk_report import ReportPath, check_reported
from cec_spark.source.files import digest_range, file_digest, source_files
from cec_spark.source.types import Chunk
from storage_log.durable import write_durable


def fingerprint(spec: PipelineSpec) -> list[dict[str, Any]]:
    """``[{"file", "bytes", "xxh64"}]`` of a file source (empty for the generator and
    stream folders)."""
    src = spec.source
    if src.path is None or src.kind in ("generator", "stream-dir"):
        return []
    path = Path(src.path)
    files = source_files(path, src.kind if path.is_dir() else None)  # as plan_source
    return [{"file": str(p), "bytes": p.stat().st_size, "xxh64": file_digest(p)} for p in files]


def _whole(stored: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each file's whole-file entry (its largest), in the stored order."""
    out: dict[str, dict[str, Any]] = {}
    for f in stored:
        if f["file"] not in out or int(f["bytes"]) > int(out[f["file"]]["bytes"]):
            out[f["file"]] = f
    return out


def _prefix_digest(path: Path, n: int) -> str:
    h = xxhash.xxh64()
    digest_range(path, 0, n, h)
    return h.hexdigest()


def _changed(old: dict[str, Any], path: Path) -> str:
    size = path.stat().st_size
    return (f"{old['file']}: the source changed since the run started: {old['bytes']} "
            f"bytes (xxh64 {old['xxh64']}) then, {size} bytes (xxh64 {file_digest(path)}) now "
            "(a resumed run must read the same input)")


def check_fingerprint(spec: PipelineSpec, stored: list[dict[str, Any]], *,
                      read_upto: tuple[str, int | None] | None = None,
                      now: list[dict[str, Any]] | None = None,
                      chunks: Sequence[Chunk] = (), reports: ReportPath | None = None,
                      upto_chunk: int | None = None) -> None:
    """InputError unless the source is still what ``stored`` describes.

    ``read_upto``: the file and byte (None: the whole file, parquet) where the last
    chunk the run committed ends: only what is before it must be as it was (the caller
    then :func:`record` s the source it reads); without it, every file. ``now``: the
    fingerprint the source's plan made just now (:attr:`SourcePlan.files`), whose
    digests are used instead of reading the files again.

    A run planned by bytes stores each file's size and modification time, not a
    digest: a file with both unchanged is taken as it is (the quick check of the
    stored plan), and of a changed one, the chunks the run read up to ``upto_chunk``
    (the last it committed; None: every one it read) are read again and compared with
    their reports in ``reports`` (:func:`~cec_spark.source.chunk_report.check_reported`;
    ``chunks``: the source's plan now).
    """
    if not stored:
        return
    if any("xxh64" not in f for f in stored):
        assert reports is not None
        _check_by_chunks(spec, stored, None if read_upto is None else read_upto[0],
                         chunks, reports, upto_chunk)
        return
    whole = _whole(stored)
    if read_upto is None or read_upto[0] not in whole:
        _check_all(spec, whole)
    else:
        _check_read(spec, stored, whole, *read_upto, _Digests(now or []))


class _Digests:
    """The xxh64 of a file's first ``n`` bytes: from a fingerprint made just now when it
    has that entry, else read."""

    def __init__(self, now: list[dict[str, Any]]) -> None:
        self.known = {(f["file"], int(f["bytes"])): str(f["xxh64"]) for f in now}

    def __call__(self, path: Path, n: int | None = None) -> str:
        size = path.stat().st_size if n is None else n
        known = self.known.get((str(path), size))
        if known is not None:
            return known
        return file_digest(path) if n is None else _prefix_digest(path, n)


def _check_all(spec: PipelineSpec, whole: dict[str, dict[str, Any]]) -> None:
    try:
        now = {f["file"]: f for f in fingerprint(spec)}
    except (OSError, InputError) as exc:
        raise InputError(f"{spec.source.path}: the source cannot be read again: {exc}") \
            from exc
    for old in whole.values():
        new = now.pop(old["file"], None)
        if new is None:
            raise InputError(f"{old['file']}: the source changed since the run started: "
                             "the file is gone (a resumed run must read the same input)")
        if new["bytes"] != old["bytes"] or new["xxh64"] != old["xxh64"]:
            raise InputError(_changed(old, Path(old["file"])))
    if now:
        raise InputError(f"{next(iter(now))}: the source changed since the run started: "
                         "a file was added (a resumed run must read the same input)")


def _none_added(spec: PipelineSpec, whole: dict[str, dict[str, Any]],
                upto_file: str | None) -> None:
    """InputError if the source now lists a file ``whole`` lacks at or before
    ``upto_file`` (None: anywhere), or cannot be listed."""
    assert spec.source.path is not None
    src = Path(spec.source.path)
    try:
        paths = [str(p) for p in source_files(src, spec.source.kind
                                              if src.is_dir() else None)]
    except (OSError, InputError) as exc:
        raise InputError(f"{spec.source.path}: the source cannot be read again: {exc}") \
            from exc
    added = [p for p in paths if p not in whole and (upto_file is None or p <= upto_file)]
    if added:
        raise InputError(f"{added[0]}: the source changed since the run started: a file "
                         "was added before the part already read (a resumed run must "
                         "read the same input)")


def _not_gone(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"{path}: the source changed since the run started: the "
                         "file is gone (a resumed run must read the same input)")


def _check_read(spec: PipelineSpec, stored: list[dict[str, Any]],
                whole: dict[str, dict[str, Any]], upto_file: str, upto_byte: int | None,
                digest: _Digests) -> None:
    """The files before ``upto_file`` as they were, and it up to ``upto_byte``."""
    _none_added(spec, whole, upto_file)
    for name in (f for f in whole if f <= upto_file):
        old, path = whole[name], Path(name)
        _not_gone(path)
        size = path.stat().st_size
        if size == int(old["bytes"]) and digest(path) == old["xxh64"]:
            continue
        if name != upto_file or upto_byte is None:
            raise InputError(_changed(old, path))
        prefix = [f for f in stored if f["file"] == name and int(f["bytes"]) == upto_byte]
        if not prefix or size < upto_byte or \
                digest(path, upto_byte) != prefix[0]["xxh64"]:
            raise InputError(
                f"{name}: the source changed since the run started in the part already "
                f"read (its first {upto_byte} bytes; a resumed run must read the same "
                "input up to there, and may read a fixed file after it)")


def _check_by_chunks(spec: PipelineSpec, stored: list[dict[str, Any]],
                     upto_file: str | None, chunks: Sequence[Chunk], reports: ReportPath,
                     upto_chunk: int | None) -> None:
    """:func:`check_fingerprint` of a run whose tasks report their chunks (its docstring)."""
    whole = {f["file"]: f for f in stored}
    _none_added(spec, whole, upto_file)
    changed: set[str] = set()
    for name, old in whole.items():
        if upto_file is not None and name > upto_file:
            continue
        path = Path(name)
        _not_gone(path)
        st = path.stat()
        if st.st_size == int(old["bytes"]) and st.st_mtime_ns == int(old["mtime_ns"]):
            continue
        if st.st_size != int(old["bytes"]) and (upto_file is None or name < upto_file):
            raise InputError(f"{name}: the source changed since the run started: "
                             f"{old['bytes']} bytes then, {st.st_size} now, and the run "
                             "read it whole (a resumed run must read the same input)")
        changed.add(name)
    if changed:
        check_reported(reports, chunks, changed, upto_chunk)


def stored_fingerprint(path: Path, settings_files: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """The fingerprint a resume checks: the last one :func:`record` wrote at ``path``
    (``RUN/source_files.json``, :attr:`RunLayout.source_files_file`), else the one
    ``run.toml`` holds."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return settings_files
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable ({exc}); the fingerprint of the source a "
                         "resumed run read") from exc
    if not isinstance(raw, list) or not all(
            isinstance(f, dict) and {"file", "bytes"} <= f.keys()
            and ("xxh64" in f or "mtime_ns" in f) for f in raw):
        raise InputError(f"{path}: not a list of files with bytes and xxh64 or mtime_ns")
    return raw


def record(path: Path, files: list[dict[str, Any]]) -> None:
    """Write the fingerprint of the source a resumed ingest reads from here on (after it
    passed :func:`check_fingerprint`) at ``path`` (``RUN/source_files.json``), durably,
    before any of its rows is committed."""
    write_durable(path, json.dumps(files))
