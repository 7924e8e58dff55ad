"""The result of EC reconstruction: the eventual checkpoint and its extent metrics.

Plain frozen data; :mod:`recovery.ec` builds it. :class:`Footprint` and
:class:`ExtentMetrics` are also what ``cec recover`` and ``cec inspect extent`` report
(``--json`` is ``dataclasses.asdict``; ``docs/JSON.md`` is generated from the docstring
under each field).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from cec import records

TYPE_R = records.R
TYPE_G_OPEN = records.G_OPEN
TYPE_G_CHECK = records.G_CHECK
TYPE_G_OPEN_R = records.G_OPEN_R  # a G_open and its R in one row (cec.records)

#: The row types of an output log (an input stream's ``data`` is not one).
TYPE_NAMES = {t: records.TYPE_NAMES[t]
              for t in (TYPE_R, TYPE_G_OPEN, TYPE_G_CHECK, TYPE_G_OPEN_R)}

#: How many of the oldest footprints the extent metrics list.
OLDEST_LISTED = 5


#: pydantic (``cli/schema.py``, for ``docs/JSON.md``; never at run time) reads the
#: docstring under each field of the classes that set it as ``__pydantic_config__``.
JSON_DOCS: dict[str, Any] = {"use_attribute_docstrings": True}


@dataclass(frozen=True)
class Footprint:
    """One open window's newest checkpoint row in the eventual checkpoint."""

    __pydantic_config__ = JSON_DOCS
    key: int | str
    """The window's key."""
    win_start: int
    """The window's start, as the output log's win_start column holds it."""
    kind: str
    """G_open or G_check."""
    t_w: int
    """Input position of the footprint row (its t_now)."""
    out_seq: int
    """Output position of the footprint row."""
    age: int
    """t_c - t_w, in input positions (input tuples when seq is dense)."""


@dataclass(frozen=True)
class ExtentMetrics:
    """What the backward scan of the output log went through."""

    __pydantic_config__ = JSON_DOCS
    records: int
    """The extent q: output rows from the oldest footprint up to and including the
    last row (last_out_seq - oldest out_seq + 1; 1 for N_c = 0)."""
    batches: int
    """Log records (stream events) decoded."""
    bytes: int
    """Their in-memory (Arrow) size, bytes, rows decoded past the stop point inside
    the last record included."""
    windows_found: int
    """Open windows found (N_c)."""
    g_open_found: int
    """G_open rows found."""
    g_check_found: int
    """G_check rows found."""
    closed_skipped: int
    """Footprints of windows already closed, skipped."""
    replay_length: int
    """The replay length u = t_c - replay_after_seq (the paper's T), input positions."""
    oldest: tuple[Footprint, ...] = ()
    """The oldest footprints, oldest first."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ExtentMetrics:
        """The metrics from their JSON (``dataclasses.asdict``)."""
        return cls(**{**raw, "oldest": tuple(Footprint(**f) for f in raw.get("oldest", ()))})


@dataclass(frozen=True)
class EventualCheckpoint:
    """The EC at output position ``last_out_seq`` (input position ``t_c``).

    ``table`` holds the ``N_c`` footprint rows (G_open/G_check, the log's own schema),
    in output order (ascending ``seq``). ``replay_after_seq`` (the paper's ``T``) is the
    replay start: the upstream must replay every input tuple with ``seq > T``.
    """

    table: pa.Table
    n_c: int
    t_c: int
    t_c_ts: int
    replay_after_seq: int
    last_out_seq: int
    extent: ExtentMetrics = field(repr=False)

    @property
    def next_out_seq(self) -> int:
        return self.last_out_seq + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_c": self.n_c,
            "t_c": self.t_c,
            "t_c_ts": self.t_c_ts,
            "replay_after_seq": self.replay_after_seq,
            "last_out_seq": self.last_out_seq,
            "next_out_seq": self.next_out_seq,
            "extent": asdict(self.extent),
        }


@dataclass(frozen=True)
class NothingToRecover:
    """The scanned log holds no output row (at or before the requested position).

    The operator never emitted anything, so it never had an open window: recovery is
    a fresh start from the beginning of the input. ``schema`` is the log's schema if
    any record (even an empty one) was seen.
    """

    reason: str
    schema: pa.Schema | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"nothing_to_recover": True, "reason": self.reason}


Reconstruction = EventualCheckpoint | NothingToRecover
