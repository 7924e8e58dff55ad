"""Durations: the one parser of durations, in microseconds.

A duration is an int (microseconds) or a string of one or more ``<number><unit>`` parts
that are added up: cec's short units and Spark's ``window()`` interval words alike,
``"10s"``, ``"500ms"``, ``"250us"``, ``"1m30s"``, ``"1.5s"``, ``"10 seconds"``,
``"1 minute 30 seconds"``, ``"2 hours"``, ``"1 day"``. Units: ``us``/``µs``/
``microsecond(s)``, ``ms``/``millisecond(s)``, ``s``/``sec(s)``/``second(s)``,
``m``/``min(s)``/``minute(s)``, ``h``/``hour(s)``, ``d``/``day(s)``, ``w``/``week(s)``
(case does not matter; a unit is never optional: ``"10"`` is refused, as a bare number
of seconds or of microseconds would be a guess). A decimal number is exact
(``"0.1s"`` is 100,000 µs); one that is not a whole number of microseconds is refused.
Used by the spec (``[aggregate].window``) and by :mod:`cec.windows`.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from cec.errors import SpecError

#: microseconds per unit (every spelling)
UNITS_US: dict[str, int] = {}
for _names, _us in (
    (("us", "µs", "microsecond", "microseconds"), 1),
    (("ms", "millisecond", "milliseconds"), 1_000),
    (("s", "sec", "secs", "second", "seconds"), 1_000_000),
    (("m", "min", "mins", "minute", "minutes"), 60_000_000),
    (("h", "hour", "hours"), 3_600_000_000),
    (("d", "day", "days"), 86_400_000_000),
    (("w", "week", "weeks"), 604_800_000_000),
):
    UNITS_US.update(dict.fromkeys(_names, _us))
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zµ]+)\s*")


def duration_us(value: object) -> int | None:
    """Microseconds of a duration, or None if ``value`` is not one (a bool is not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip():
        return _text_us(value.lower())
    return None


def _text_us(text: str) -> int | None:
    """``"1m30s"``, ``"10 seconds"``: the sum of its parts, None unless each part is a
    number and a unit and the sum is a whole number of microseconds."""
    pos, total = 0, Decimal(0)
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None or m.group(2) not in UNITS_US:
            return None
        try:
            total += Decimal(m.group(1)) * UNITS_US[m.group(2)]
        except InvalidOperation:
            return None
        pos = m.end()
    return int(total) if total == total.to_integral_value() else None


def parse_duration(value: int | str) -> int:
    """Microseconds of a duration; :class:`SpecError` if ``value`` is not one.

    The sign is not checked here (a window checks its own size and slide).
    """
    us = duration_us(value)
    if us is None:
        raise SpecError(f"bad duration {value!r}: use an int (microseconds) or e.g. "
                        "'10s', '500ms', '1m30s', '10 seconds'")
    return us


def parse_duration_us(value: object) -> int | None:
    """A positive duration in microseconds (``"10s"`` → 10_000_000), None otherwise."""
    us = duration_us(value)
    return us if us is not None and us > 0 else None
