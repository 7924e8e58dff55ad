from __future__ import annotations

import pytest

from cec.durations import parse_duration_us
from cec.errors import SpecError
from cec.policy import PolicyConfig
from cec.windows import (
    CountWindow,
    TimeWindow,
    count_window,
    parse_duration,
    time_window,
    window_spec,
)


def test_parse_duration() -> None:
    assert parse_duration("10s") == 10_000_000
    assert parse_duration("500ms") == 500_000
    assert parse_duration("250us") == 250
    assert parse_duration("2m") == 120_000_000
    assert parse_duration(42) == 42
    # Spark's window() interval syntax and compound forms, exactly
    assert parse_duration("10 seconds") == parse_duration("10 SECONDS") == 10_000_000
    assert parse_duration("1m30s") == parse_duration("1 minute 30 seconds") == 90_000_000
    assert parse_duration("1.5s") == 1_500_000 and parse_duration("0.1s") == 100_000
    assert parse_duration("2 hours") == 7_200_000_000 and parse_duration("1 day") == 86_400 * 10**6
    assert parse_duration("1 week") == 7 * 86_400 * 10**6
    assert parse_duration("250 microseconds") == parse_duration("250µs") == 250
    for bad in ("ten seconds", "10", True, 1.5, "0.5us", "10 fortnights", "s", "",
                "10s garbage", "1..5s", "-5s"):
        with pytest.raises(SpecError):
            parse_duration(bad)  # type: ignore[arg-type]
    assert parse_duration_us("0s") is None and parse_duration_us(-3) is None


def test_both_kinds_answer_kind_size_slide() -> None:
    """A window is also what a spec's [aggregate].window parses into (one type)."""
    c, t = CountWindow(10, 5), TimeWindow(10_000_000, 10_000_000)
    assert (c.kind, c.size, c.slide, c.tumbling) == ("count", 10, 5, False)
    assert (t.kind, t.size, t.slide, t.tumbling) == ("time", 10_000_000, 10_000_000, True)
    assert window_spec(c.kind, c.size, c.slide) == c
    assert window_spec(t.kind, t.size, t.slide) == t


def test_specs_validate() -> None:
    assert count_window(10) == CountWindow(10, 10)
    assert time_window("10s", "5s") == TimeWindow(10_000_000, 5_000_000)
    for bad in (lambda: count_window(0), lambda: count_window(3, 4),
                lambda: time_window("1s", "2s"), lambda: count_window(2, 0)):
        with pytest.raises(SpecError):
            bad()


def test_starts_containing() -> None:
    w = TimeWindow(10, 5)
    assert w.starts_containing(0) == [-5, 0]
    assert w.starts_containing(7) == [0, 5]
    assert TimeWindow(10, 3).starts_containing(9) == [0, 3, 6, 9]
    assert TimeWindow(10, 10).starts_containing(-1) == [-10]


def test_policy_q_target() -> None:
    assert PolicyConfig(q="2x").q_target(50) == 100
    assert PolicyConfig(q=7).q_target(50) == 7
    with pytest.raises(SpecError):
        PolicyConfig(q="two")
    with pytest.raises(SpecError):
        PolicyConfig(mode="sometimes")  # type: ignore[arg-type]
