"""Durations: the one parser of ``"10s"``-style durations, in microseconds.

A duration is an int (microseconds) or a string ``<digits><unit>`` with the unit one of
``us``, ``ms``, ``s``, ``m``, ``h`` (``"10s"``, ``"500ms"``, ``"250us"``, ``"2m"``,
``"1h"``; blanks around the parts are allowed, the unit is not optional). Used by the
spec (``[aggregate].window``) and by :mod:`cec.windows`.
"""

from __future__ import annotations

import re

from cec.errors import SpecError

#: microseconds per unit
UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|h)\s*$")


def duration_us(value: object) -> int | None:
    """Microseconds of a duration, or None if ``value`` is not one (a bool is not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return int(m.group(1)) * UNITS_US[m.group(2)]
    return None


def parse_duration(value: int | str) -> int:
    """Microseconds of a duration; :class:`SpecError` if ``value`` is not one.

    The sign is not checked here (a window checks its own size and slide).
    """
    us = duration_us(value)
    if us is None:
        raise SpecError(f"bad duration {value!r}: use an int (microseconds) or e.g. "
                        "'10s', '500ms'")
    return us


def parse_duration_us(value: object) -> int | None:
    """A positive duration in microseconds (``"10s"`` → 10_000_000), None otherwise."""
    us = duration_us(value)
    return us if us is not None and us > 0 else None
