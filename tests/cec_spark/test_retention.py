"""Output retention (issue 17 item 11): the pure choice of what to trim."""

from __future__ import annotations

from cec_spark.rundir.retention import Lagged, retention_before

# (base_seq, bytes, mtime): five segments of 100 bytes written at t = 10, 20, ..., 50
SEGS = [(0, 100, 10.0), (40, 100, 20.0), (80, 100, 30.0), (120, 100, 40.0),
        (160, 100, 50.0)]


def test_nothing_without_a_policy_or_with_an_unknown_floor() -> None:
    assert retention_before(SEGS, keep_bytes=None, keep_s=None, now=60, floors=[]) is None
    assert retention_before(SEGS, keep_bytes=150, keep_s=None, now=60,
                            floors=[None]) is None
    assert retention_before([], keep_bytes=150, keep_s=None, now=60, floors=[]) is None


def test_by_size_keeps_the_newest_segments_that_fit() -> None:
    assert retention_before(SEGS, keep_bytes=250, keep_s=None, now=60, floors=[]) == 120
    assert retention_before(SEGS, keep_bytes=10, keep_s=None, now=60, floors=[]) == 160
    assert retention_before(SEGS, keep_bytes=10_000, keep_s=None, now=60,
                            floors=[]) is None


def test_by_age_drops_segments_last_written_before_the_horizon() -> None:
    assert retention_before(SEGS, keep_bytes=None, keep_s=25, now=60, floors=[]) == 120
    assert retention_before(SEGS, keep_bytes=None, keep_s=1, now=60, floors=[]) == 160
    assert retention_before(SEGS, keep_bytes=None, keep_s=100, now=60, floors=[]) is None


def test_either_policy_trims_but_no_floor_is_passed() -> None:
    # size wants 120, age wants 80: the larger wins
    assert retention_before(SEGS, keep_bytes=250, keep_s=35, now=60, floors=[]) == 120
    # the recovery extent starts at 90, a consumer acknowledged up to 59 (floor 60)
    assert retention_before(SEGS, keep_bytes=10, keep_s=None, now=60,
                            floors=[90, 60]) == 60
    assert retention_before(SEGS, keep_bytes=10, keep_s=None, now=60,
                            floors=[0]) is None


def test_lagged_is_the_newest_value_at_least_lag_old() -> None:
    lag = Lagged(10.0)
    assert lag.value(0.0) is None
    lag.note(1.0, 5)
    lag.note(6.0, 9)
    assert lag.value(10.0) is None
    assert lag.value(11.0) == 5
    assert lag.value(100.0) == 9
    assert Lagged(0.0, start=3).value(0.0) == 3
