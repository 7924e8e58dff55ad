"""The replay from the upstream log: tuples in ``(T, t_c]`` through a loaded operator.

The operator consumes them in reconstruction mode (ARCHITECTURE §4, DESIGN §5): it
applies a tuple of key ``k`` only to EC windows of ``k`` with an older footprint and
emits nothing. :class:`ReplayFilter` drops, before the operator, the tuples that this
rule would apply to nothing; upstream records are coalesced into large batches.
The upstream must still hold the tuple at ``T`` and every tuple up to ``t_c``.

Watermarks: the upstream is read with its commit tokens (``tokens=True``), and the
watermark ``W`` of an ingest token (:mod:`cec.ingest_token`) at position ``(s, W)``
with ``T <= s < t_c`` goes to ``operator.watermark(W, s)`` at its place among the
tuples (the operator consumes it in reconstruction mode: it sits before ``t_c``).
Those at ``s >= t_c`` are the resumed run's (it reads the upstream after ``t_c``
with tokens: a token at ``t_c`` comes first). To keep the batches large, a watermark
superseded by a higher one before the next batch is handed over is not delivered:
the operator gets, at each batch boundary, the newest watermark at its exact place
(the tuples before it, it, the tuples after it). :func:`count_replay` reads no
tokens: a dry run counts what it always counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import RecoveryError
from cec.ingest_token import decode_token
from recovery.checkpoint import JSON_DOCS
from recovery.ec import EventualCheckpoint
from recovery.errors import InconsistentLogError, ReplayUnavailableError
from storage_log.errors import LogTrimmedError
from storage_log.follow import CommitToken


class UpstreamLogReader(Protocol):
    """What recovery reads from an upstream (input) log (``storage_log.StreamLog``):
    ``tokens=True`` yields its commit tokens too, in commit order between the records
    (a :class:`~storage_log.follow.CommitToken` at ``seq >= after_seq``)."""

    @property
    def first_seq(self) -> int | None: ...

    @property
    def last_seq(self) -> int | None: ...

    @overload
    def read_forward(
        self, *, after_seq: int | None = ..., from_ts: int | None = ...,
        tokens: Literal[False] = ...,
    ) -> Iterator[pa.RecordBatch]: ...

    @overload
    def read_forward(
        self, *, after_seq: int | None = ..., from_ts: int | None = ..., tokens: bool = ...
    ) -> Iterator[pa.RecordBatch | CommitToken]: ...


class RecoverableOperator(Protocol):
    """The part of ``cec.operator.AggregateOperator`` recovery drives."""

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch: ...

    def watermark(self, w: int, seq: int) -> pa.RecordBatch: ...

    def load_ec(self, ec: pa.Table, *, t_c: int, t_c_ts: int, next_out_seq: int) -> None: ...


@dataclass(frozen=True)
class ReplayStats:
    """The upstream tuples replayed after T."""

    __pydantic_config__ = JSON_DOCS
    tuples: int = 0
    """Input tuples replayed (counted exactly by a dry run)."""
    applied: int = 0
    """Of these, tuples given to the operator (the others the replay filter dropped;
    0 in a dry run, which needs no operator)."""
    batches: int = 0
    """Upstream log records read."""
    bytes: int = 0
    """Their size, bytes."""


#: Replayed tuples are handed to the operator in batches of at least this many rows.
REPLAY_BATCH_ROWS = 1 << 16


def _key_kind(t: pa.DataType, what: str) -> str:
    """``int`` or ``str``: the kinds of key a filter matches (bytes match as UTF-8)."""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t):
        return "str"
    raise InconsistentLogError(f"{what} has type {t}: keys must be integers or strings")


def _canon_keys(col: pa.Array, kind: str) -> np.ndarray[Any, Any]:
    """Keys as int64 or Python str, whatever their Arrow width or string/binary type."""
    if kind == "int":
        return np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False))
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        try:
            col = pc.cast(col, pa.large_string())
        except pa.ArrowInvalid as exc:
            raise InconsistentLogError(f"replayed keys are not UTF-8: {exc}") from exc
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)


class ReplayFilter:
    """Which replayed tuples can change the EC: those newer than a footprint of their key.

    In reconstruction mode a tuple of key ``k`` at ``seq`` is applied to the EC windows
    of ``k`` with ``t_w < seq`` and to nothing else, so a tuple whose key has no EC
    window, or whose ``seq`` is not past the oldest footprint of its key, changes
    nothing: dropping it before the operator is exact, and saves the operator the
    work (about half of the replay for uniform keys).
    """

    def __init__(self, ec: pa.Table, key_column: str) -> None:
        self.key_column = key_column
        import pandas as pd  # noqa: PLC0415 - not at import (recovery.ec says why)

        self._kind = _key_kind(ec.schema.field("key").type, "the eventual checkpoint's key")
        frame = pd.DataFrame(
            {
                "k": _canon_keys(ec.column("key").combine_chunks(), self._kind),
                "t": ec.column("t_now").to_numpy(),
            }
        )
        oldest = frame.groupby("k", sort=False)["t"].min()
        self._index = oldest.index
        self._oldest = oldest.to_numpy()

    def needed(self, batch: pa.RecordBatch) -> np.ndarray[Any, np.dtype[np.bool_]]:
        col = batch.column(self.key_column)
        kind = _key_kind(col.type, f"the replayed column {self.key_column!r}")
        if kind != self._kind:  # never match nothing silently: the tuples would be lost
            raise InconsistentLogError(
                f"the replayed column {self.key_column!r} holds {col.type} keys but the "
                f"eventual checkpoint's keys are {self._kind}s: the upstream and output "
                "logs do not belong together")
        keys = _canon_keys(col, kind)
        pos = np.asarray(self._index.get_indexer(keys))
        need = pos >= 0
        seq = batch.column("seq").to_numpy()
        need[need] = seq[need] > self._oldest[pos[need]]
        return need


def upstream_trim_before(replay_after_seq: int) -> int:
    """The ``before_seq`` (an exclusive bound, ``StreamLog.trim``) to trim an upstream log
    with when a recovery replays its tuples after ``replay_after_seq`` (T): the segment
    that holds T itself is kept, and so are the commit tokens right after T. A recovery
    whose ``t_c`` is T re-applies a watermark at ``(T, W)`` whose output the crash lost
    (ARCHITECTURE "Watermarks"); trimmed at ``T + 1``, a segment ending with the record
    T would take those tokens with it when the next segment starts at ``T + 1``. A log
    so trimmed starts at or before T, which :func:`check_upstream` accepts."""
    return replay_after_seq


def check_upstream(rec: EventualCheckpoint, upstream: UpstreamLogReader, *,
                   starts_after: int | None = None) -> None:
    """Raise ReplayUnavailableError unless the upstream holds every tuple in (T, t_c].

    ``starts_after``: the log was started to hold exactly the tuples after that seq (a
    rescaled run's generation, whose cut is its ``T`` at the handoff): when ``T`` is
    not before it, a log that is empty or starts after ``T + 1`` still holds them all.
    The log's own ``read_forward`` also refuses (``LogTrimmedError``, turned into
    ReplayUnavailableError by :func:`replay`) a position inside trimmed segments.
    """
    complete = starts_after is not None and starts_after <= rec.replay_after_seq
    if complete and rec.t_c <= rec.replay_after_seq:  # nothing to replay
        return
    first, last = upstream.first_seq, upstream.last_seq
    if rec.t_c <= rec.replay_after_seq and last is not None and last >= rec.t_c:
        # nothing to replay, and the log reached t_c: it may have been trimmed up to
        # T + 1 and hold no record after (a quiet partition whose later commits are
        # tokens only: its first_seq is None)
        return
    if first is None or last is None:
        raise ReplayUnavailableError(
            "the upstream log is empty, but recovery needs its tuples after "
            f"T={rec.replay_after_seq} up to t_c={rec.t_c}"
        )
    # T is the seq of a real input tuple: a log that starts after T was trimmed. It
    # still holds every tuple after T only if it starts at T + 1 (seqs are integers);
    # a later start may hide trimmed tuples (sparse seqs cannot tell), so it is refused.
    if first > rec.replay_after_seq + 1 and not complete:
        raise ReplayUnavailableError(
            f"the upstream log starts at seq {first}, after T={rec.replay_after_seq}: it "
            "was trimmed past "
            f"the oldest footprint (N_c={rec.n_c}, t_c={rec.t_c}); the state cannot be "
            "rebuilt from this log"
        )
    if last < rec.t_c:
        raise ReplayUnavailableError(
            f"the upstream log ends at seq {last}, before t_c={rec.t_c}: the output log "
            "holds results of input the upstream never made durable",
            short_of=rec.t_c,
        )


def replay(
    rec: EventualCheckpoint,
    upstream: UpstreamLogReader,
    operator: RecoverableOperator,
    *,
    key_column: str | None = None,
) -> ReplayStats:
    """Feed the upstream tuples in (T, t_c] to a loaded operator (reconstruction mode).

    Upstream records are coalesced into batches of at least ``REPLAY_BATCH_ROWS``
    tuples; with ``key_column`` (the input's key column) only the tuples a
    :class:`ReplayFilter` keeps reach the operator.
    """
    return _replay(rec, upstream, operator, key_column)


def count_replay(rec: EventualCheckpoint, upstream: UpstreamLogReader) -> ReplayStats:
    """What :func:`replay` would read (tuples, records, bytes), without an operator."""
    return _replay(rec, upstream, None, None)


def _feed(
    operator: RecoverableOperator,
    parts: list[pa.RecordBatch],
    keep: ReplayFilter | None,
    t_c: int,
) -> int:
    """Concatenate, filter and process replayed batches; returns the tuples applied."""
    if not parts:
        return 0
    batch = parts[0] if len(parts) == 1 else pa.concat_batches(parts)
    if keep is not None:
        batch = batch.filter(pa.array(keep.needed(batch)))
        if not batch.num_rows:
            return 0
    out = operator.process(batch)
    if out.num_rows:
        seq = batch.column("seq").to_numpy()
        raise RecoveryError(
            f"the operator emitted {out.num_rows} row(s) while replaying seq "
            f"{int(seq[0])}..{int(seq[-1])} <= t_c={t_c} in reconstruction mode (it must "
            "emit nothing there)"
        )
    return int(batch.num_rows)


def watermark_of(item: CommitToken) -> int | None:
    """The watermark an upstream commit token carries (None: not an ingest token with
    one)."""
    token = decode_token(item.token)
    return None if token is None else token.watermark


def _replayed(rec: EventualCheckpoint, upstream: UpstreamLogReader, *, tokens: bool
              ) -> Iterator[tuple[pa.RecordBatch, int] | tuple[int, int]]:
    """The upstream records in (T, t_c], each cut at t_c, with its share of bytes, and
    with ``tokens`` the watermarks ``(W, s)`` at ``T <= s < t_c`` among them, each
    above the one before.

    Raises ReplayUnavailableError unless the last record ends exactly at t_c.
    """
    last_seen: int | None = None
    last_w: int | None = None
    for item in upstream.read_forward(after_seq=rec.replay_after_seq, tokens=tokens):
        if isinstance(item, CommitToken):
            if item.seq >= rec.t_c:  # after the tuple at t_c: the resumed run's
                break
            w = watermark_of(item)
            if w is not None and (last_w is None or w > last_w):
                last_w = w
                yield w, item.seq
            continue
        batch = item
        if not batch.num_rows:
            continue
        seq = batch.column("seq").to_numpy()
        cut = int(np.searchsorted(seq, rec.t_c, side="right"))
        if cut == 0:
            break
        yield (batch if cut == batch.num_rows else batch.slice(0, cut),
               batch.get_total_buffer_size() * cut // batch.num_rows)
        last_seen = int(seq[cut - 1])
        if cut < batch.num_rows:
            break
    if last_seen != rec.t_c:
        raise ReplayUnavailableError(
            f"the upstream replay after T={rec.replay_after_seq} ended at seq {last_seen}, "
            "but the "
            f"last durable output is at t_c={rec.t_c} (the upstream lacks seq {rec.t_c})"
        )


class _Feeder:
    """Replayed tuples and watermarks to the operator: tuples in batches of at least
    ``REPLAY_BATCH_ROWS`` rows, and at each batch boundary the newest watermark not yet
    delivered, at its place (``before`` it, the watermark, ``after`` it)."""

    def __init__(self, operator: RecoverableOperator, keep: ReplayFilter | None,
                 t_c: int) -> None:
        self.operator, self.keep, self.t_c = operator, keep, t_c
        self.before: list[pa.RecordBatch] = []
        self.after: list[pa.RecordBatch] = []
        self.mark: tuple[int, int] | None = None  # (W, seq) not delivered yet
        self.rows = 0
        self.applied = 0

    def tuples(self, part: pa.RecordBatch) -> None:
        (self.before if self.mark is None else self.after).append(part)
        self.rows += part.num_rows
        if self.rows >= REPLAY_BATCH_ROWS:
            self.flush()

    def watermark(self, w: int, seq: int) -> None:
        if self.mark is not None:  # superseded: its tuples go before the newer one
            self.before += self.after
            self.after = []
        self.mark = (w, seq)

    def flush(self) -> None:
        op, keep, t_c = self.operator, self.keep, self.t_c
        self.applied += _feed(op, self.before, keep, t_c)
        if self.mark is not None:
            w, seq = self.mark
            out = op.watermark(w, seq)
            if out.num_rows:
                raise RecoveryError(
                    f"the operator emitted {out.num_rows} row(s) for the watermark {w} at "
                    f"seq {seq} < t_c={t_c} in reconstruction mode (it must emit nothing "
                    "there)")
            self.applied += _feed(op, self.after, keep, t_c)
        self.before, self.after, self.mark, self.rows = [], [], None, 0


def _replay(
    rec: EventualCheckpoint,
    upstream: UpstreamLogReader,
    operator: RecoverableOperator | None,
    key_column: str | None,
) -> ReplayStats:
    """Read (T, t_c] from the upstream; feed it to ``operator`` unless None."""
    if rec.t_c <= rec.replay_after_seq:
        return ReplayStats()
    keep = ReplayFilter(rec.table, key_column) if key_column and rec.n_c else None
    feeder = None if operator is None else _Feeder(operator, keep, rec.t_c)
    tuples = batches = nbytes = 0
    try:
        for part, size in _replayed(rec, upstream, tokens=feeder is not None):
            if isinstance(part, int):  # a watermark (W, seq)
                if feeder is not None:
                    feeder.watermark(part, size)
                continue
            tuples += part.num_rows
            batches += 1
            nbytes += size
            if feeder is not None:
                feeder.tuples(part)
    except LogTrimmedError as exc:
        raise ReplayUnavailableError(
            f"the upstream log no longer holds the tuples after T={rec.replay_after_seq}: "
            f"{exc}"
        ) from exc
    if feeder is None:
        return ReplayStats(tuples=tuples, batches=batches, bytes=nbytes)
    feeder.flush()
    return ReplayStats(tuples=tuples, applied=feeder.applied, batches=batches, bytes=nbytes)
