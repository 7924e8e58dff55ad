"""A partition's two watermarks as a person reads them (``cec inspect extent``, the
progress view).

Each partition has two (issue 37): the **ingest's** W, the ``wm`` of the last token
committed to its upstream log (every row with ``ts < W`` has been released to the
logs), and the **operator's**, the event time it has reached (:func:`reached`): the
last W its task applied (its state file's ``watermark_us``) or its last tuple's time,
whichever is larger (a tuple closes what a watermark at its time would; a watermark
not above the last tuple's time is a no-op and leaves ``watermark_us`` as it was). A
time window of the partition is closed once the operator's reaches its end; a window
still open below the ingest's W waits for the operator to read that far, one past it
waits for event time to move on. Event times are int64
microseconds since the epoch, shown in UTC to the millisecond. Pure: no I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cec.records import END_OF_STREAM_TS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def event_time(us: int, *, date: bool = True) -> str:
    """``us`` (event time, µs) as ``2026-11-27 05:07:24.100 UTC`` (``date=False``:
    ``05:07:24.100``); the end-of-stream watermark as ``end of stream``."""
    if us >= END_OF_STREAM_TS:
        return "end of stream"
    try:
        when = _EPOCH + timedelta(microseconds=us)
    except OverflowError:  # not a time a calendar holds
        return f"{us} us"
    text = f"{when:%H:%M:%S}.{when.microsecond // 1000:03d}"
    return f"{when:%Y-%m-%d} {text} UTC" if date else text


def reached(applied_us: int | None, tuple_ts: int | None) -> int | None:
    """The operator's watermark as shown: the larger of the last W it applied and the
    time of the last tuple it processed (None when neither is known)."""
    known = [v for v in (applied_us, tuple_ts) if v is not None]
    return max(known) if known else None


def behind_s(ingest_us: int | None, operator_us: int | None) -> float | None:
    """How far the operator's watermark is behind the ingest's, seconds (>= 0; None
    unless both are known)."""
    if ingest_us is None or operator_us is None:
        return None
    return max(0, ingest_us - operator_us) / 1e6


def duration(s: float) -> str:
    """A lag in seconds to the millisecond, trailing zeros cut: ``0.2 s``, ``1,234 s``."""
    text = f"{s:,.3f}".rstrip("0").rstrip(".")
    return f"{text} s"


def watermark_text(ingest_us: int | None, operator_us: int | None) -> str | None:
    """The two watermarks in one phrase: ``2026-11-27 05:07:24.100 UTC (ingest),
    operator at 05:07:23.900, 0.2 s behind``; None when neither is known."""
    if ingest_us is None and operator_us is None:
        return None
    if ingest_us is None:
        assert operator_us is not None
        return f"{event_time(operator_us)} (operator), ingest's not known"
    head = f"{event_time(ingest_us)} (ingest)"
    if operator_us is None:
        return f"{head}, operator none applied yet"
    lag = behind_s(ingest_us, operator_us)
    if not lag:
        return f"{head}, operator caught up"
    if ingest_us >= END_OF_STREAM_TS:  # the input ended: no lag to speak of
        return f"{head}, operator at {event_time(operator_us)}"
    same_day = event_time(ingest_us)[:10] == event_time(operator_us)[:10]
    return (f"{head}, operator at {event_time(operator_us, date=not same_day)}, "
            f"{duration(lag)} behind")
