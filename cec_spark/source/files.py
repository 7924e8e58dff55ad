"""A file source's files as files: which they are, their format, their digest.

:func:`source_files` lists a file or folder source's data files in name order (hidden
and ``_`` files left out), :func:`file_format` tells a file's format from its name
(or the declared ``[source].format``), :func:`file_digest` is the xxh64 of a
file's bytes (the source fingerprint's, :mod:`cec_spark.source.fingerprint`) and
:func:`digest_range` feeds a part of them to a digest. Nothing
here parses a row.
"""

from __future__ import annotations

from pathlib import Path

import xxhash

from cec_spark.errors import InputError
from cec_spark.source.types import EXTENSIONS

SCAN_BLOCK = 16 << 20  # the bytes a pass over a file reads at a time
Hasher = xxhash.xxh64 | xxhash.xxh3_64


def file_digest(path: Path) -> str:
    """The xxh64 of a file's bytes, hex (the source fingerprint's digest)."""
    h = xxhash.xxh64()
    with path.open("rb") as fh:
        while block := fh.read(SCAN_BLOCK):
            h.update(block)
    return h.hexdigest()


def digest_range(path: Path | str, start: int, stop: int, h: Hasher) -> int:
    """Feed bytes ``[start, stop)`` of a file to ``h`` (an xxhash hasher), block by
    block; the bytes fed (fewer: the file ends before ``stop``)."""
    done = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        while done < stop - start and (block := fh.read(min(SCAN_BLOCK, stop - start - done))):
            h.update(block)
            done += len(block)
    return done


def source_files(path: Path, fmt: str | None) -> list[Path]:
    """The data files of a file or folder source, in name order."""
    if path.is_file():
        return [path]
    if not path.exists():
        raise InputError(f"{path}: [source].path: no such file or directory")
    files = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith((".", "_")) or not entry.is_file():
            continue
        if fmt is not None and not entry.name.lower().endswith(EXTENSIONS[fmt]):
            continue
        files.append(entry)
    return files


def file_format(path: Path, declared: str | None) -> str:
    if declared is not None:
        return declared
    for fmt, exts in EXTENSIONS.items():
        if path.name.lower().endswith(exts):
            return fmt
    raise InputError(f"{path.name}: unknown file type (expected .csv, .jsonl or .parquet; "
                     "or set [source].format)")
