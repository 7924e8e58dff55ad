"""The ingest's commit token: what an upstream log's last commit says of the ingest.

The ingest commits every upstream log after each chunk it completes with a token
(``storage_log``: an opaque ``bytes`` value kept with the commit, the last one read back
by ``StreamLog.last_token()``). The token is UTF-8 JSON, one object, its keys in this
order (``json.dumps`` with its default separators, so ``encode_token`` writes the
bytes the ingest has always written)::

    {"chunk": 12, "next_seq": 4000000, "seq_end": 3999990, "late": 10, "wm": 1795756044435420}
    {"chunk": 12, ..., "late": 10, "wm": 1795756044502000, "cw": 1795756044435420}
    {"chunk": 12, ..., "wm": 1795756044502000, "cw": 1795756044435420, "row": 4524288}
    {"chunk": 12, ..., "cw": 1795756044435420, "row": 4524288, "rl": 13}

==============  ========================================================================
``chunk``       the last source chunk whose rows the log holds (``Chunk.index``): a
                resumed ingest goes on with the chunk after the oldest one of the logs
                (from the row ``row`` says within it, below)
``next_seq``    the source rows read through that chunk (``Chunk.next_seq``: the first
                source row of the next chunk); a resumed ingest checks its source has
                that many rows up to there
``seq_end``     the seq after the last row that chunk emitted (``Chunk.emit_end``; with
                ``allowed_lateness`` rows are renumbered, so it differs from
                ``next_seq``): every row of the log's partition below it is committed.
                Absent in tokens from before late rows: decoded as ``next_seq``
``late``        late rows of this log's partition dropped so far (committed with the
                rows, so the count is exact after a crash). Absent: 0
``wm``          the watermark W, int64 µs: every row with ``ts < W`` has been released
                to the logs, so no row the log receives after this commit has a
                ``ts`` below W. Non-decreasing along a log. Absent (``None``): no
                watermark (a token from before watermarks, or a writer without one);
                written only when set
``cw``          only in a commit within the chunk after ``chunk`` (``wm`` is then the
                time of the last row received, and the log may hold some rows of that
                chunk): the watermark at ``chunk``'s end, which a new log that starts
                after ``chunk`` (a rescale's generation) takes as its ``wm``. Absent:
                ``wm`` is that watermark
``row``         only in a commit within the chunks after ``chunk``: the source row up to
                which (exclusive) the log holds every row of its partition but the late
                ones (the writer had received the rows below it, in ``seq`` order), so
                a resumed ingest starts reading at the smallest ``row`` of the logs,
                not at the start of the chunk (:func:`~cec_spark.ingest.logs.
                resume_point`). Written only where a seq is a source row (not with
                ``allowed_lateness``/``late = "drop"``, whose rows are renumbered and
                held across chunks). Absent: ``next_seq`` (the chunk granularity of
                the tokens from before it)
``rl``          with ``row``: the late rows of the log's partition dropped below
                ``row`` (a resumed writer counts those at or above it), written when it
                differs from ``late`` (which stays the count below ``seq_end``: a
                rescale's cut is a chunk's end). Absent: ``late``
==============  ========================================================================

A watermark sits after the log's last committed record: a commit may carry a new token
and no new row (a TOKEN frame), which is how a log that got no row in a chunk still
learns the new W. Pure: no I/O, no Spark (``cec`` layer, below ``recovery``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["IngestToken", "decode_token", "encode_token"]


@dataclass(frozen=True)
class IngestToken:
    """One upstream log commit's token (fields: the module's table)."""

    chunk: int
    next_seq: int
    seq_end: int
    late: int = 0
    watermark: int | None = None
    chunk_watermark: int | None = None  # ``cw``
    row: int | None = None  # ``row``
    row_late: int | None = None  # ``rl`` (with ``row``)

    @property
    def holds_below(self) -> int:
        """The source row below which the log holds every row of its partition (but the
        late ones): ``row`` if set, else ``next_seq`` (the chunk's end)."""
        return self.next_seq if self.row is None else max(self.row, self.next_seq)

    @property
    def late_through(self) -> tuple[int, int]:
        """``(n, s)``: the log's partition dropped ``n`` late rows below seq ``s``:
        ``(rl, row)`` with ``row`` (``rl`` absent: ``late``), else ``(late, seq_end)``."""
        if self.row is None:
            return self.late, self.seq_end
        return (self.late if self.row_late is None else self.row_late), self.row

    @property
    def at_chunk_end(self) -> int | None:
        """The watermark at the end of ``chunk``: ``cw`` if set, else ``wm``."""
        return self.watermark if self.chunk_watermark is None else self.chunk_watermark


def encode_token(t: IngestToken) -> bytes:
    """The token's bytes (the module's format; ``wm``, ``cw``, ``row`` only when set,
    ``rl`` only with ``row`` and when it differs from ``late``)."""
    fields: dict[str, int] = {"chunk": t.chunk, "next_seq": t.next_seq,
                              "seq_end": t.seq_end, "late": t.late}
    if t.watermark is not None:
        fields["wm"] = t.watermark
    if t.chunk_watermark is not None:
        fields["cw"] = t.chunk_watermark
    if t.row is not None:
        fields["row"] = t.row
        if t.row_late is not None and t.row_late != t.late:
            fields["rl"] = t.row_late
    return json.dumps(fields).encode()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def decode_token(raw: bytes | None) -> IngestToken | None:
    """The token in ``raw``; None for no token or one that is not an ingest token
    (unreadable, not an object, ``chunk`` or ``next_seq`` missing or not an integer)."""
    if not raw:
        return None
    try:
        got = json.loads(raw.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(got, dict):
        return None
    chunk, next_seq = _int(got.get("chunk")), _int(got.get("next_seq"))
    if chunk is None or next_seq is None:
        return None
    seq_end, row = _int(got.get("seq_end")), _int(got.get("row"))
    return IngestToken(chunk, next_seq, next_seq if seq_end is None else seq_end,
                       _int(got.get("late")) or 0, _int(got.get("wm")), _int(got.get("cw")),
                       row, None if row is None else _int(got.get("rl")))
