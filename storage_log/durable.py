"""The durable write: a small file replaced (or created) whole, never torn.

Every small file that a log or a run directory keeps (an epoch file, ``log.id``, the
trim marker, an index side-file, ``run.toml`` and its backup, ``generations.toml``, a
driver's number, a consumer's acknowledgements) is written the same way:

1. the bytes go to a temporary file in the same directory, named after the target,
   this host and this process (two hosts on a shared file system never share one);
2. that file is fsync'ed;
3. it is renamed over the target (``os.replace``), or, with ``exclusive``, hard-linked
   to it, which fails with :class:`FileExistsError` when the target exists (of two
   writers racing for one name exactly one wins);
4. the directory is fsync'ed, so the new name survives a crash.

A crash at any point leaves the old file or the new one, never a part of either.
``sync=False`` skips both fsyncs (the rename stays atomic): for files whose loss only
costs time (an index side-file: a lost one costs a walk of its segment).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["commit_file", "fsync_dir", "temp_path", "write_durable"]


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (created, renamed, deleted files) durable."""
    _fsync(directory)


def temp_path(path: Path) -> Path:
    """The hidden temporary name of ``path`` for this host and process."""
    return path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")


def _fsync(path: Path) -> None:
    """fsync a file or a directory by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_file(tmp: Path, path: Path, *, exclusive: bool = False, sync: bool = True) -> None:
    """Steps 2 to 4 for a temporary file already written (by a library that writes a
    file itself, such as parquet): ``tmp`` becomes ``path``; ``tmp`` is gone after,
    whatever happens. ``exclusive``: FileExistsError if ``path`` exists."""
    try:
        if sync:
            _fsync(tmp)
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if sync:
        fsync_dir(path.parent)


def write_durable(path: Path, data: bytes | str, *, exclusive: bool = False,
                  sync: bool = True) -> None:
    """Write ``data`` (text as UTF-8) as the whole content of ``path``, durably and
    atomically (see the module docstring)."""
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    commit_file(tmp, path, exclusive=exclusive, sync=sync)
