"""Watermarks, case by case: what closes (time ``<=``, session ``<``, count never), the
no-op, the input-order errors, reconstruction mode after ``load_ec``."""

from __future__ import annotations

from typing import Any

import pytest

from cec.errors import InputOrderError
from cec.operator import OperatorConfig, ReferenceOperator, VectorOperator, ec_from_output
from cec.policy import PolicyConfig
from cec.records import END_OF_STREAM_TS, G_OPEN, R
from cec.windows import CountWindow, SessionWindow, TimeWindow, WindowSpec

from .helpers import batch, rows

IMPLS = [ReferenceOperator, VectorOperator]
COLS = ("type", "ts", "t_now", "n_open", "key", "win_start", "win_end", "cnt", "value")


def make(impl: Any, window: WindowSpec, mode: str = "none") -> Any:
    return impl(OperatorConfig(window=window, function="sum",
                               policy=PolicyConfig(mode=mode)))


def snapshot(op: Any) -> tuple[Any, ...]:
    return (op.state_at(), op.t_now, op.next_out_seq, op.current_watermark, op.q, op.u)


@pytest.mark.parametrize("impl", IMPLS)
def test_time_windows_close_when_their_end_is_reached(impl: Any) -> None:
    op = make(impl, TimeWindow(10, 10))
    op.process(batch([(3, 0, 1, 1.0), (12, 1, 2, 2.0)]))  # closes key 1's [0, 10)
    assert op.watermark(19, 1).num_rows == 0  # key 2's [10, 20) ends at 20
    assert op.current_watermark == 19
    out = op.watermark(20, 1)
    assert rows(out, *COLS) == [(R, 20, 1, 0, 2, 10, 20, 1, 2.0)]
    assert op.n_open == 0 and op.t_now == 1
    assert op.finish().num_rows == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_a_session_closes_only_once_event_time_is_past_its_end(impl: Any) -> None:
    op = make(impl, SessionWindow(5))
    op.process(batch([(10, 0, 1, 1.0)]))  # session [10, 15]
    assert op.watermark(15, 0).num_rows == 0  # a tuple at 15 would still join it
    assert op.process(batch([(15, 1, 1, 2.0)])).num_rows == 0  # and does: now [10, 20]
    out = op.watermark(21, 1)
    assert rows(out, *COLS) == [(R, 21, 1, 0, 1, 10, 20, 2, 3.0)]


@pytest.mark.parametrize("impl", IMPLS)
def test_count_windows_never_close_on_a_watermark(impl: Any) -> None:
    op = make(impl, CountWindow(3, 3))
    op.process(batch([(1, 0, 1, 1.0), (2, 1, 1, 1.0)]))
    before = op.state_at()
    assert op.watermark(1_000_000, 1).num_rows == 0
    assert op.state_at() == before and op.current_watermark == 1_000_000
    assert op.finish().num_rows == 0  # count windows stay open at the end, as before
    assert op.n_open == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_closes_in_tuple_order_then_the_background_step(impl: Any) -> None:
    """Several windows close: ordered (win_end, tau1, win_start), N counted down; the
    background step follows with G_check rows at ts = W, t_now = the seq."""
    op = impl(OperatorConfig(window=TimeWindow(10, 5), function="sum",
                             policy=PolicyConfig(mode="targets", q=0, u=0)))
    op.process(batch([(7, 0, 1, 1.0), (8, 1, 2, 1.0)]))  # [0, 10), [5, 15) each key
    out = op.watermark(14, 1)  # the [0, 10) ones close, [5, 15) stay
    got = rows(out, "type", "ts", "t_now", "n_open", "key", "win_start")
    closes = [r for r in got if r[0] == R]
    assert closes == [(R, 14, 1, 3, 1, 0), (R, 14, 1, 2, 2, 0)]
    assert got[: len(closes)] == closes
    assert all(r[1:3] == (14, 1) for r in got[len(closes):])  # G_check rows, if any


@pytest.mark.parametrize("impl", IMPLS)
def test_a_watermark_not_above_the_event_time_seen_is_a_no_op(impl: Any) -> None:
    op = make(impl, TimeWindow(10, 10), mode="targets")
    op.process(batch([(3, 0, 1, 1.0), (9, 1, 2, 1.0)]))
    before = snapshot(op)
    for w, seq in ((9, 1), (4, 1), (-100, 0), (9, 0)):  # the last: a re-read token
        assert op.watermark(w, seq).num_rows == 0
        assert snapshot(op) == before
    assert op.watermark(12, 1).num_rows > 0
    after = snapshot(op)
    assert op.watermark(12, 1).num_rows == 0  # delivered again: nothing changes
    assert snapshot(op) == after


@pytest.mark.parametrize("impl", IMPLS)
def test_a_tuple_below_the_watermark_is_an_order_error(impl: Any) -> None:
    op = make(impl, TimeWindow(10, 10))
    op.process(batch([(3, 0, 1, 1.0)]))
    op.watermark(20, 0)
    before = snapshot(op)
    with pytest.raises(InputOrderError, match=r"\(ts=19, seq=1\).*watermark W=20"):
        op.process(batch([(19, 1, 1, 1.0)]))
    assert snapshot(op) == before
    assert op.process(batch([(20, 1, 1, 1.0)])).num_rows == 0  # at W: in order


@pytest.mark.parametrize("impl", IMPLS)
def test_watermark_and_seq_order_errors(impl: Any) -> None:
    op = make(impl, TimeWindow(10, 10))
    op.watermark(20, 5)  # the log's last seq is 5: tuples follow it
    with pytest.raises(InputOrderError, match=r"seq=5.*watermark W=20 \(after seq 5\)"):
        op.process(batch([(25, 5, 1, 1.0)]))
    op.process(batch([(25, 6, 1, 1.0), (26, 9, 1, 1.0)]))
    before = snapshot(op)
    with pytest.raises(InputOrderError, match=r"W=40 after seq 8 .* seq 9"):
        op.watermark(40, 8)  # it cannot come before the tuple at seq 9
    assert snapshot(op) == before


def _crashed_run(impl: Any) -> tuple[Any, list[Any], list[Any]]:
    """Time windows [0, 100): key 1 opens at seq 0, a watermark 50 after seq 0, key 2 opens
    at seq 1. Returns a fresh operator loaded from the EC after seq 1 (T = 0, t_c = 1,
    t_c_ts = 60), the run's outputs after seq 1 and the rest of the input."""
    first = make(impl, TimeWindow(100, 100), mode="open-only")
    outs = [first.process(batch([(1, 0, 1, 1.0)])), first.watermark(50, 0),
            first.process(batch([(60, 1, 2, 2.0)]))]
    state = first.state_at()
    second = make(impl, TimeWindow(100, 100), mode="open-only")
    second.load_ec(ec_from_output(outs, state), t_c=1, t_c_ts=60,
                   next_out_seq=state.next_out_seq)
    rest = [first.watermark(70, 1), first.watermark(100, 1), first.finish()]
    return second, outs, rest


@pytest.mark.parametrize("impl", IMPLS)
def test_replayed_watermarks_up_to_t_c_are_consumed(impl: Any) -> None:
    second, _, rest = _crashed_run(impl)
    loaded = snapshot(second)
    # the replay after T = 0: the watermark after seq 0, then the tuple at seq 1
    assert second.watermark(50, 0).num_rows == 0
    assert second.process(batch([(60, 1, 2, 2.0)])).num_rows == 0
    assert second.watermark(60, 1).num_rows == 0  # (1, 60) <= (t_c, t_c_ts): consumed
    assert snapshot(second)[:3] == loaded[:3]
    # above (t_c, t_c_ts): processed as in the run that did not crash
    got = [second.watermark(70, 1), second.watermark(100, 1), second.finish()]
    assert [rows(o) for o in got] == [rows(o) for o in rest]
    assert [r[:2] for r in rows(got[1], "type", "ts")] == [(R, 100), (R, 100)]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_watermark_above_t_c_ends_reconstruction_mode(impl: Any) -> None:
    second, _, _ = _crashed_run(impl)
    second.watermark(50, 0)
    second.process(batch([(60, 1, 2, 2.0)]))
    out = second.watermark(100, 1)  # (1, 100) > (1, 60)
    assert rows(out, "type", "ts", "t_now", "key") == [(R, 100, 1, 1), (R, 100, 1, 2)]
    assert second.t_now == 1 and second.current_watermark == 100
    # reconstruction mode is over: a tuple now opens a window (G_open)
    opened = second.process(batch([(120, 2, 1, 1.0)]))
    assert rows(opened, "type", "ts", "t_now") == [(G_OPEN, 120, 2)]
    assert rows(second.finish(), "type", "ts") == [(R, END_OF_STREAM_TS)]


def test_the_reference_asserts_a_consumed_watermark_closes_no_ec_window() -> None:
    second, _, _ = _crashed_run(ReferenceOperator)
    # (0, 200) <= (1, 60) in (seq, ts) order, yet it would close both EC windows: no
    # consistent replay holds it (the tuple at seq 1 has ts 60 < 200)
    with pytest.raises(AssertionError, match="EC window"):
        second.watermark(200, 0)
