"""Window specifications: count-based and time-based, tumbling and sliding; sessions.

Pure logic, no I/O (the bytewax way): a frozen spec, and the arithmetic that says
which windows a tuple belongs to.

**Count windows** (``CountWindow(size=S, slide=L)``, ``1 <= L <= S``, ``L`` defaults to
``S``) are per key. A tuple of key ``k`` opens a new window iff ``k`` has no open window
or ``k``'s newest open window already holds exactly ``L`` tuples, so windows open at the
key's ordinals 0, L, 2L, ... (``L == S`` is tumbling). A window closes when it holds
``S`` tuples. Its id is ``(key, win_start)`` with ``win_start = tau1`` = the input
``seq`` of the opening tuple; ``win_end = -1``. A window of size 1 opens and closes on
the same tuple (``G_open`` then ``R``).

**Time windows** (``TimeWindow(size_us=S, slide_us=L)``, ``1 <= L <= S``) are the
half-open intervals ``[m*L, m*L + S)`` (integer ``m``, microseconds) that contain the
tuple's ``ts``; per key, a window opens when its first tuple of that key arrives. All
open time windows (any key) with ``win_end <= ts(p)`` close before tuple ``p`` is
applied. Sizes are given as ints (microseconds) or strings such as ``"10s"``,
``"500ms"``, ``"250us"``, ``"2m"``, ``"1h"`` (:mod:`cec.durations`).

**Session windows** (``SessionWindow(gap_us=G)``) are per key: a tuple of key ``k``
opens a session when ``k`` has none open, else joins ``k``'s open session. A session
holds ``[win_start, win_end]`` with ``win_start`` its first tuple's ``ts`` (it never
changes: input is in ts order) and ``win_end = last_ts + G`` (its last tuple's ``ts``
plus the gap, moved by every tuple it takes). Spark's ``session_window`` convention,
checked against Spark 4: sessions that touch merge, so a tuple at exactly
``last_ts + G`` *joins* the session (events at 0 s, 10 s, 20 s with a 10 s gap are one
session ``[0 s, 30 s)``). So an open session closes before tuple ``p`` (any key) is
applied iff ``win_end < ts(p)`` (strictly, unlike a time window's ``win_end <= ts``),
and a key has at most one session open. Its id is ``(key, win_start)``.

A watermark ``W`` (event time has reached ``W`` without a tuple; docs/ARCHITECTURE.md
"Watermarks") closes what a tuple at ``ts = W`` would close first: time windows with
``win_end <= W``, sessions with ``win_end < W``; count windows never close on event
time.

A window is also what a spec's ``[aggregate].window`` parses into
(:attr:`cec.spec.AggregateSpec.window`): every kind answers ``kind``, ``size`` and
``slide`` (tuples for a count window, microseconds for a time window; a session's gap
for both) and ``tumbling`` (False for sessions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from cec.durations import parse_duration
from cec.errors import InputRangeError, SpecError

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

__all__ = ["INT64_MAX", "INT64_MIN", "CountWindow", "SessionWindow", "TimeWindow",
           "WindowSpec", "count_window", "gap_of", "parse_duration", "session_window",
           "time_window", "window_spec"]


@dataclass(frozen=True)
class CountWindow:
    """Count-based windows of ``size`` tuples per key, a new one every ``slide`` tuples."""

    size: int
    slide: int

    def __post_init__(self) -> None:
        for name, v in (("size", self.size), ("slide", self.slide)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"count window {name} must be an int >= 1, got {v!r}")
        if self.slide > self.size:
            raise SpecError(f"count window slide {self.slide} exceeds its size {self.size}")

    @property
    def kind(self) -> Literal["count"]:
        return "count"

    @property
    def tumbling(self) -> bool:
        return self.slide == self.size

    @property
    def max_open_per_key(self) -> int:
        """The most windows one key can have open at once: ceil(size / slide)."""
        return -(-self.size // self.slide)


@dataclass(frozen=True)
class TimeWindow:
    """Time-based windows ``[m*slide_us, m*slide_us + size_us)`` per key."""

    size_us: int
    slide_us: int

    def __post_init__(self) -> None:
        for name, v in (("size", self.size_us), ("slide", self.slide_us)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"time window {name} must be >= 1 microsecond, got {v!r}")
        if self.slide_us > self.size_us:
            raise SpecError(
                f"time window slide {self.slide_us}us exceeds its size {self.size_us}us"
            )

    @property
    def kind(self) -> Literal["time"]:
        return "time"

    @property
    def size(self) -> int:
        """The size in microseconds (``size_us``)."""
        return self.size_us

    @property
    def slide(self) -> int:
        """The slide in microseconds (``slide_us``)."""
        return self.slide_us

    @property
    def tumbling(self) -> bool:
        return self.slide_us == self.size_us

    @property
    def max_open_per_key(self) -> int:
        """The most windows containing one instant: ceil(size / slide)."""
        return -(-self.size_us // self.slide_us)

    @property
    def ts_range(self) -> tuple[int, int]:
        """The timestamps whose every window ``[start, start + size)`` lies in int64.

        The newest window of ``ts`` starts at ``floor(ts / slide) * slide`` and must end
        by ``2^63 - 1``; the oldest starts after ``ts - size``, which must not
        underflow ``-2^63``.
        """
        hi = ((INT64_MAX - self.size_us) // self.slide_us) * self.slide_us \
            + self.slide_us - 1
        return INT64_MIN + self.size_us, min(hi, INT64_MAX)

    def check_ts(self, ts: npt.NDArray[np.int64], seq: npt.NDArray[np.int64]) -> None:
        """InputRangeError for the first tuple outside :attr:`ts_range` (``ts`` ascends)."""
        if not len(ts):
            return
        lo, hi = self.ts_range
        if lo <= int(ts[0]) and int(ts[-1]) <= hi:
            return
        i = int(np.flatnonzero((ts < lo) | (ts > hi))[0])
        raise InputRangeError(
            f"input tuple at position (ts={int(ts[i])}, seq={int(seq[i])}): a time window "
            f"of size {self.size_us} us and slide {self.slide_us} us over it would "
            f"{'end after' if int(ts[i]) > hi else 'start before'} the int64 range of "
            f"timestamps; timestamps must lie in [{lo}, {hi}]")

    def starts_containing(self, ts: int) -> list[int]:
        """Starts of the windows that contain ``ts``, ascending."""
        lo = (ts - self.size_us) // self.slide_us + 1
        hi = ts // self.slide_us
        return [m * self.slide_us for m in range(lo, hi + 1)]


@dataclass(frozen=True)
class SessionWindow:
    """Session windows per key: a session closes once event time passes its last
    tuple's ``ts`` plus ``gap_us`` (see the module docstring for ties)."""

    gap_us: int

    def __post_init__(self) -> None:
        v = self.gap_us
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"session window gap must be >= 1 microsecond, got {v!r}")

    @property
    def kind(self) -> Literal["session"]:
        return "session"

    @property
    def size(self) -> int:
        """The gap in microseconds (a session has no fixed size)."""
        return self.gap_us

    @property
    def slide(self) -> int:
        """The gap in microseconds (sessions do not slide)."""
        return self.gap_us

    @property
    def tumbling(self) -> bool:
        return False

    @property
    def max_open_per_key(self) -> int:
        """One: a key's tuples all join its one open session."""
        return 1

    @property
    def ts_range(self) -> tuple[int, int]:
        """The timestamps whose session end ``ts + gap`` lies below the end-of-stream
        watermark ``2^63 - 1`` (so ``finish`` closes every session)."""
        return INT64_MIN, INT64_MAX - self.gap_us - 1

    def check_ts(self, ts: npt.NDArray[np.int64], seq: npt.NDArray[np.int64]) -> None:
        """InputRangeError for the first tuple outside :attr:`ts_range` (``ts`` ascends)."""
        if not len(ts):
            return
        hi = self.ts_range[1]
        if int(ts[-1]) <= hi:
            return
        i = int(np.flatnonzero(ts > hi)[0])
        raise InputRangeError(
            f"input tuple at position (ts={int(ts[i])}, seq={int(seq[i])}): a session "
            f"window with gap {self.gap_us} us over it would end after the int64 range "
            f"of timestamps; timestamps must be <= {hi}")


#: a window spec: the one type of the core and of a pipeline spec
WindowSpec = CountWindow | TimeWindow | SessionWindow


def count_window(size: int, slide: int | None = None) -> CountWindow:
    """A count window spec; ``slide`` defaults to ``size`` (tumbling)."""
    return CountWindow(size=size, slide=size if slide is None else slide)


def time_window(size: int | str, slide: int | str | None = None) -> TimeWindow:
    """A time window spec from durations; ``slide`` defaults to ``size`` (tumbling)."""
    s = parse_duration(size)
    return TimeWindow(size_us=s, slide_us=s if slide is None else parse_duration(slide))


def session_window(gap: int | str) -> SessionWindow:
    """A session window spec from its gap (a duration)."""
    return SessionWindow(gap_us=parse_duration(gap))


def window_spec(kind: str, size: int | str, slide: int | str | None = None) -> WindowSpec:
    """A spec from its kind ("count", "time" or "session": ``size`` is then the gap,
    and a slide is refused), size and optional slide."""
    if kind == "count":
        if not isinstance(size, int) or not (slide is None or isinstance(slide, int)):
            raise SpecError(f"count window size/slide must be ints, got {size!r}/{slide!r}")
        return count_window(size, slide)
    if kind == "time":
        return time_window(size, slide)
    if kind == "session":
        if slide is not None:
            raise SpecError("a session window has a gap, not a slide")
        return session_window(size)
    raise SpecError(f"window kind must be 'count', 'time' or 'session', got {kind!r}")


def gap_of(window: WindowSpec) -> int | None:
    """A session window's gap in microseconds; None for count and time windows."""
    return window.gap_us if isinstance(window, SessionWindow) else None
