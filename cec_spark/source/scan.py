"""A text file's bytes without parsing them: its chunk boundaries and one line of a chunk.

:func:`line_starts` cuts a file by bytes (a run planned by bytes): a chunk every so
many bytes, at the next line start, found by reading a few bytes there.

:func:`scan_lines` is one pass over a csv or jsonl file: the offset of every
``chunk_rows``-th line start, the number of lines and, asked, the xxh64 of each prefix
ending at a chunk boundary and of the whole file (the fingerprint a resumed ingest
checks, :mod:`cec_spark.source.fingerprint`), numpy's work per byte and none per line.
:func:`nth_line` reads one line of a chunk (its last, read backwards: a chunk's
watermark) without reading the rest. The planner of text files
(:mod:`cec_spark.source.check`) cuts its chunks with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np
import xxhash

from cec_spark.source.files import SCAN_BLOCK
from cec_spark.source.read import ends_with_newline


class Scan(NamedTuple):
    offsets: list[int]  # every chunk's first byte (the first: the first data line)
    lines: int  # the data lines of the file
    size: int
    digests: list[tuple[int, str]]  # (bytes, xxh64 of the file's first bytes): at each
    #                                 chunk boundary, then the whole file's; [] unasked


def scan_lines(path: Path, begin: int, every: int, *, digest: bool) -> Scan:
    """One pass over a text file: the offset of every ``every``-th line start from
    ``begin``, the lines, and (``digest``) the xxh64 of the whole file and of each
    prefix ending at a chunk boundary (:mod:`cec_spark.source.fingerprint`: a resumed
    ingest checks the part it read): numpy's work per byte, none per line."""
    size = path.stat().st_size
    offsets, lines, pos = [begin], 0, 0
    h = xxhash.xxh64() if digest else None
    digests: list[tuple[int, str]] = []
    with path.open("rb") as fh:
        while block := fh.read(SCAN_BLOCK):
            ends, n = _boundaries(block, max(0, begin - pos), lines, every)
            done = 0
            for e in ends:
                if pos + e >= size:
                    continue
                offsets.append(pos + e)
                if h is not None:
                    h.update(block[done:e])
                    done = e
                    digests.append((pos + e, h.hexdigest()))
            if h is not None:
                h.update(block[done:] if done else block)
            lines += n
            pos += len(block)
    if size > begin and not ends_with_newline(path, size):
        lines += 1
    if h is not None:
        digests.append((size, h.hexdigest()))
    return Scan(offsets, lines, size, digests)


def _boundaries(block: bytes, skip: int, lines: int, every: int) -> tuple[list[int], int]:
    """The offsets in ``block`` just after each newline that ends line ``k * every``
    (counting the ``lines`` before the block; newlines before ``skip`` are not lines'),
    and the block's newlines. The newlines' positions are made only for a block that
    holds such a line."""
    eq = np.frombuffer(block, dtype=np.uint8)[skip:] == 10
    n = int(np.count_nonzero(eq))
    want = (lines // every + 1) * every  # the next line number ending a chunk
    if lines + n < want:
        return [], n
    nl = np.flatnonzero(eq)[want - lines - 1::every] + skip + 1
    return nl.tolist(), n


def nth_line(path: Path, start: int, stop: int, n: int, lines: int) -> bytes:
    """The bytes of line ``n`` (1-based) of the chunk ``[start, stop)`` of ``lines``
    lines: the last one read backwards from ``stop`` (a few bytes), another (a cut at
    ``max_rows``) found by reading the chunk; b"" for ``n`` 0."""
    if n <= 0:
        return b""
    with path.open("rb") as fh:
        if n < lines:
            fh.seek(start)
            data = fh.read(stop - start)
            at = 0
            for _ in range(n - 1):
                at = data.index(b"\n", at) + 1
            end = data.find(b"\n", at)
            return data[at:end if end >= 0 else len(data)]
        back = 4096
        while True:
            lo = max(start, stop - back)
            fh.seek(lo)
            data = fh.read(stop - lo).rstrip(b"\n")
            nl = data.rfind(b"\n")
            if nl >= 0 or lo == start:
                return data[nl + 1:]
            back *= 4


def line_starts(path: Path, begin: int, size: int, every: int) -> list[int]:
    """A text file's chunk boundaries by bytes: ``begin`` (its first data line), then the
    first line start at or after each ``begin + k * every`` (a line that starts exactly
    there starts a chunk), each found by reading a few bytes from there, none twice;
    the boundaries below ``size``. The cost is the chunks', not the file's: what makes
    a plan by bytes (:mod:`cec_spark.source.check`) cost its files, not its rows."""
    out = [begin]
    with path.open("rb") as fh:
        for target in range(begin + every, size, every):
            if target <= out[-1]:
                continue  # a line longer than ``every`` reached past this target
            at = _next_line_start(fh, target, size)
            if at < size and at > out[-1]:
                out.append(at)
    return out


def _next_line_start(fh: BinaryIO, target: int, size: int) -> int:
    """The first line start at or after ``target`` (> 0): just after the first newline
    at or after byte ``target - 1``; ``size`` when there is none."""
    pos, want = target - 1, 4096
    while pos < size:
        fh.seek(pos)
        block = fh.read(want)
        if not block:
            break
        nl = block.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(block)
        want = min(want * 4, 1 << 20)
    return size
