"""Hand-computed outputs of each window kind, for every implementation."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from cec.errors import InputOrderError, InputRangeError, SpecError, UsageError
from cec.operator import OperatorConfig, ReferenceOperator, ec_from_output
from cec.policy import PolicyConfig
from cec.records import (
    END_OF_STREAM_TS,
    G_CHECK,
    G_OPEN,
    G_OPEN_R,
    R,
    logical_rows,
    output_schema,
    tuple_counts,
)
from cec.window_state import logged_for
from cec.windows import count_window, time_window
from recovery.ec import reconstruct

from .helpers import FakeClock, batch, rows

IMPLS: list[Any] = [ReferenceOperator]
try:
    from cec.operator import VectorOperator

    IMPLS.append(VectorOperator)
except ImportError:  # pragma: no cover - before the vectorized operator lands
    pass

impls = pytest.mark.parametrize("impl", IMPLS, ids=lambda c: c.__name__)
COLS = ("type", "t_now", "n_open", "key", "win_start", "cnt", "value")


def cfg(window: Any, function: str = "sum", mode: str = "open-only", record_format: int = 2,
        **kw: Any) -> OperatorConfig:
    pol = PolicyConfig(mode=mode, **kw)  # type: ignore[arg-type]
    return OperatorConfig(window=window, function=function, policy=pol, clock=FakeClock(),
                          record_format=record_format)


@impls
def test_count_tumbling(impl: Any) -> None:
    op = impl(cfg(count_window(2)))
    out = op.process(batch([(0, 0, 1, 1), (1, 1, 2, 2), (2, 2, 1, 3), (3, 3, 1, 4)]))
    assert out.schema == output_schema("int64", logged_for("sum", "count"))
    assert "min" not in out.schema.names and "first_ts" in out.schema.names  # format 2
    assert rows(out, *COLS) == [
        (G_OPEN, 0, 1, 1, 0, 1, 1.0),
        (G_OPEN, 1, 2, 2, 1, 1, 2.0),
        (R, 2, 1, 1, 0, 2, 4.0),
        (G_OPEN, 3, 2, 1, 3, 1, 4.0),
    ]
    assert rows(out, "seq", "ts", "win_end") == [(i, i, -1) for i in range(4)]
    assert op.n_open == 2 and op.t_now == 3 and op.next_out_seq == 4


@impls
def test_count_sliding(impl: Any) -> None:
    op = impl(cfg(count_window(4, 2)))
    out = op.process(batch([(s, s, 7, s + 1) for s in range(6)]))
    assert rows(out, *COLS) == [
        (G_OPEN, 0, 1, 7, 0, 1, 1.0),
        (G_OPEN, 2, 2, 7, 2, 1, 3.0),
        (R, 3, 1, 7, 0, 4, 10.0),
        (G_OPEN, 4, 2, 7, 4, 1, 5.0),
        (R, 5, 1, 7, 2, 4, 18.0),
    ]
    st = op.state_at()
    assert set(st.windows) == {(7, 4)}
    assert st.windows[7, 4].cnt == 2 and st.windows[7, 4].tau2 == 4


@impls
def test_count_close_and_open_same_tuple(impl: Any) -> None:
    op = impl(cfg(count_window(3, 2), function="max"))
    out = op.process(batch([(s, 10 + s, 1, s) for s in range(3)]))
    # seq 12: the window of seq 10 closes (R) before the new one opens (G_open)
    assert rows(out, *COLS) == [
        (G_OPEN, 10, 1, 1, 10, 1, 0.0),
        (R, 12, 0, 1, 10, 3, 2.0),
        (G_OPEN, 12, 1, 1, 12, 1, 2.0),
    ]


@impls
@pytest.mark.parametrize("mode", ["none", "open-only"])
def test_count_size_one(impl: Any, mode: str) -> None:
    op = impl(cfg(count_window(1), function="avg", mode=mode, record_format=1))
    out = op.process(batch([(0, 0, 1, 5), (0, 1, 2, 6)]))
    cols = ("seq", *COLS, "tau1", "sum", "min", "max", "first_ts", "last_ts")
    if mode == "none":
        assert rows(out, *cols) == [(0, R, 0, 0, 1, 0, 1, 5.0, 0, 5.0, 5.0, 5.0, 0, 0),
                                    (1, R, 1, 0, 2, 1, 1, 6.0, 1, 6.0, 6.0, 6.0, 0, 0)]
        assert op.next_out_seq == 2
    else:
        # stored: one G_open+R row per tuple, holding output positions 0-1 and 2-3
        assert rows(out, *cols) == [
            (1, G_OPEN_R, 0, 0, 1, 0, 1, 5.0, 0, 5.0, 5.0, 5.0, 0, 0),
            (3, G_OPEN_R, 1, 0, 2, 1, 1, 6.0, 1, 6.0, 6.0, 6.0, 0, 0),
        ]
        assert op.next_out_seq == 4
        # written out: the G_open (N + 1, state after the opening tuple), then the R
        assert rows(logical_rows(out), *cols) == [
            (0, G_OPEN, 0, 1, 1, 0, 1, 5.0, 0, 5.0, 5.0, 5.0, 0, 0),
            (1, R, 0, 0, 1, 0, 1, 5.0, 0, 5.0, 5.0, 5.0, 0, 0),
            (2, G_OPEN, 1, 1, 2, 1, 1, 6.0, 1, 6.0, 6.0, 6.0, 0, 0),
            (3, R, 1, 0, 2, 1, 1, 6.0, 1, 6.0, 6.0, 6.0, 0, 0),
        ]
        assert tuple_counts(out.column("type").to_numpy()) == (2, 2, 0)
    assert op.n_open == 0


@impls
def test_time_sliding_and_finish(impl: Any) -> None:
    op = impl(cfg(time_window(10, 5), function="count"))
    out = op.process(batch([(0, 0, 1, 1), (6, 1, 2, 2), (10, 2, 1, 3), (16, 3, 1, 4)]))
    assert rows(out, "type", "ts", "t_now", "n_open", "key", "win_start", "win_end", "cnt") == [
        (G_OPEN, 0, 0, 1, 1, -5, 5, 1),
        (G_OPEN, 0, 0, 2, 1, 0, 10, 1),
        (R, 6, 1, 1, 1, -5, 5, 1),
        (G_OPEN, 6, 1, 2, 2, 0, 10, 1),
        (G_OPEN, 6, 1, 3, 2, 5, 15, 1),
        (R, 10, 2, 2, 1, 0, 10, 1),  # (win_end, tau1): key 1 opened first
        (R, 10, 2, 1, 2, 0, 10, 1),
        (G_OPEN, 10, 2, 2, 1, 5, 15, 1),
        (G_OPEN, 10, 2, 3, 1, 10, 20, 1),
        (R, 16, 3, 2, 2, 5, 15, 1),
        (R, 16, 3, 1, 1, 5, 15, 1),
        (G_OPEN, 16, 3, 2, 1, 15, 25, 1),
    ]
    fin = op.finish()
    eos = END_OF_STREAM_TS  # flush rows: the end-of-stream watermark, after every input
    assert rows(fin, "type", "ts", "t_now", "n_open", "win_start", "cnt", "value") == [
        (R, eos, 3, 1, 10, 2, 2.0),
        (R, eos, 3, 0, 15, 1, 1.0),
    ]
    assert op.n_open == 0
    # issue 17 item 14: the EC as of the last input's ts still holds the 2 open windows
    log = [out, fin]
    newest_first = [b for b in reversed(log)]
    assert reconstruct(newest_first, at_ts=16).n_c == 2
    assert reconstruct(newest_first, at_ts=eos).n_c == 0
    assert reconstruct(newest_first).n_c == 0


@impls
def test_finish_keeps_count_windows(impl: Any) -> None:
    op = impl(cfg(count_window(5)))
    op.process(batch([(0, 0, 1, 1), (1, 1, 2, 1)]))
    assert op.finish().num_rows == 0
    assert op.n_open == 2


@impls
def test_targets_u(impl: Any) -> None:
    op = impl(cfg(count_window(100), mode="targets", q=10**9, u=2))
    out = op.process(batch([(s, s, 1, 1) for s in range(4)]))
    assert rows(out, "type", "seq", "t_now", "n_open", "cnt") == [
        (G_OPEN, 0, 0, 1, 1),
        (G_CHECK, 1, 3, 1, 4),
    ]
    st = op.state_at()
    assert st.windows[1, 0].tau2 == 3 and st.windows[1, 0].fp_seq == 1
    assert op.u == 0 and op.q == 1


@impls
def test_targets_each_window_once_per_step(impl: Any) -> None:
    op = impl(cfg(count_window(100), mode="targets", q=0))
    out = op.process(batch([(0, 0, 1, 1), (1, 1, 2, 1), (2, 2, 1, 1)]))
    assert rows(out, "type", "seq", "t_now", "key", "cnt") == [
        (G_OPEN, 0, 0, 1, 1),
        (G_OPEN, 1, 1, 2, 1),
        (G_CHECK, 2, 2, 1, 2),
        (G_CHECK, 3, 2, 2, 1),
    ]


@impls
def test_targets_no_budget(impl: Any) -> None:
    op = impl(cfg(count_window(100), mode="targets", q=0, ci_ms=0.0))
    out = op.process(batch([(0, 0, 1, 1), (1, 1, 2, 1)]))
    assert set(rows(out, "type")) == {(G_OPEN,)}


@impls
def test_order_errors(impl: Any) -> None:
    op = impl(cfg(count_window(2)))
    with pytest.raises(InputOrderError, match=r"ts=1, seq=1"):
        op.process(batch([(0, 2, 1, 1), (1, 1, 1, 1)]))
    op = impl(cfg(count_window(2)))
    with pytest.raises(InputOrderError, match=r"ts=4, seq=9"):
        op.process(batch([(5, 8, 1, 1), (4, 9, 1, 1)]))
    op = impl(cfg(count_window(2)))
    op.process(batch([(5, 8, 1, 1)]))
    with pytest.raises(InputOrderError, match=r"seq=8"):
        op.process(batch([(6, 8, 1, 1)]))
    with pytest.raises(UsageError):
        op.process(batch([(6, 9, 1, float("nan"))]))


@impls
def test_string_keys_and_column_names(impl: Any) -> None:
    c = OperatorConfig(
        window=count_window(2), function="min", key_column="item", value_column="price",
        key_type="string", policy=PolicyConfig(mode="open-only"),
    )
    b = batch([(0, 0, "a", 3), (1, 1, "b", 2), (2, 2, "a", 1)], key_type="string")
    b = b.rename_columns(["ts", "seq", "item", "price"])
    out = impl(c).process(b)
    assert out.schema == output_schema("string", c.logged)
    assert rows(out, "type", "key", "value") == [
        (G_OPEN, "a", 3.0),
        (G_OPEN, "b", 2.0),
        (R, "a", 1.0),
    ]


@impls
def test_load_ec_by_hand(impl: Any) -> None:
    c = cfg(count_window(3), mode="open-only")
    first = impl(c)
    inp = [(s, s, s % 2, s) for s in range(8)]
    outs = [first.process(batch(inp[:5]))]
    st = first.state_at()
    ec = ec_from_output(outs, st)
    outs.append(first.process(batch(inp[5:])))
    t_min = min(w.tau2 for w in st.windows.values())
    second = impl(c)
    second.load_ec(ec, t_c=4, t_c_ts=4, next_out_seq=st.next_out_seq)
    assert second.n_open == st.n_open
    assert second.process(batch([r for r in inp[:5] if r[1] > t_min])).num_rows == 0
    assert second.state_at() == st
    assert rows(second.process(batch(inp[5:]))) == rows(outs[1])
    assert second.state_at() == first.state_at()


@impls
def test_load_ec_needs_fresh_operator(impl: Any) -> None:
    op = impl(cfg(count_window(3)))
    op.process(batch([(0, 0, 1, 1)]))
    with pytest.raises(UsageError):
        op.load_ec(pa.Table.from_batches([], schema=output_schema("int64")),
                   t_c=0, t_c_ts=0, next_out_seq=1)


@impls
def test_replay_order_after_load_ec(impl: Any) -> None:
    c = cfg(count_window(5))
    first = impl(c)
    out = first.process(batch([(10, 1, 1, 1), (20, 2, 2, 1), (30, 3, 1, 1)]))
    st = first.state_at()
    ec = ec_from_output([out], st)

    def fresh() -> Any:
        op = impl(c)
        op.load_ec(ec, t_c=3, t_c_ts=30, next_out_seq=st.next_out_seq)
        return op

    with pytest.raises(InputOrderError, match="seq=1"):  # T = 1: replay starts after it
        fresh().process(batch([(10, 1, 1, 1)]))
    with pytest.raises(InputOrderError, match=r"ts=25, seq=4"):  # after t_c, ts >= t_c_ts
        fresh().process(batch([(20, 2, 2, 1), (30, 3, 1, 1), (25, 4, 1, 1)]))
    op = fresh()
    assert op.process(batch([(20, 2, 2, 1), (30, 3, 1, 1), (31, 4, 3, 1)])).num_rows == 1
    assert op.n_open == 3 and op.t_now == 4


def test_config_validates() -> None:
    with pytest.raises(SpecError):
        OperatorConfig(window=count_window(2), function="median")
    with pytest.raises(SpecError):
        OperatorConfig(window=count_window(2), key_type="float")
    with pytest.raises(SpecError):
        OperatorConfig(window=count_window(2), key_column="v", value_column="v")


@impls
@pytest.mark.parametrize(("size", "slide"), [(10, 10), (10, 3), (7, 7)])
def test_time_windows_at_the_ends_of_int64(impl: Any, size: int, slide: int) -> None:
    """Issue 17 item 12: a window of a tuple near INT64_MAX would end past it (and wrap
    negative): InputRangeError naming the tuple; at the bound, every window is exact."""
    win = time_window(size, slide)
    lo, hi = win.ts_range
    op = impl(cfg(win, mode="open-only"))
    op.process(batch([(hi - 1, 0, 1, 1), (hi, 1, 1, 2)]))
    closed = op.finish()  # every window still open closes: R rows with their ends
    r = [(s, e) for t, s, e in zip(closed.column("type").to_pylist(),
                                    closed.column("win_start").to_pylist(),
                                    closed.column("win_end").to_pylist(), strict=True)
         if t == R]
    assert r and all(e == s + size and s <= hi < e <= (1 << 63) - 1 for s, e in r[-1:])
    assert all(s < e for s, e in r)
    op = impl(cfg(win, mode="open-only"))
    op.process(batch([(hi - 1, 0, 1, 1), (hi, 1, 1, 2)]))
    with pytest.raises(InputRangeError, match=rf"\(ts={hi + 1}, seq=2\).*end after"):
        op.process(batch([(hi + 1, 2, 1, 3)]))
    op2 = impl(cfg(win, mode="open-only"))
    with pytest.raises(InputRangeError, match=rf"\(ts={lo - 1}, seq=5\).*start before"):
        op2.process(batch([(lo - 1, 5, 1, 1)]))
    assert hi + size > (1 << 63) - 1 - slide  # the bound is tight: the next slide overflows
