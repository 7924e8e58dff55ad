"""Aggregate functions through a small reducer protocol.

Every window keeps one fixed partial state, :class:`AggState` = ``(cnt, sum, min, max,
first_ts, last_ts)``, which serves count, sum, min, max and avg alike (and is what the
G rows of the output log carry). A reducer initialises that state from the opening
tuple, adds a tuple to it (merge-free: tuples are added one at a time, in input order,
so float sums are exactly reproducible) and computes its result from it; a vectorised
``result_array`` does the same over numpy columns. New functions that fit the fixed
state (e.g. range, mean of extremes) are one small class each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from cec.errors import SpecError
from cec.window_state import AGGREGATE, declares

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@declares(AGGREGATE)
@dataclass
class AggState:
    """The partial aggregate of one window (mutable; the reference operator updates it).

    Its fields are :data:`cec.window_state.AGGREGATE`, checked when the class is made.
    """

    cnt: int
    sum: float
    min: float
    max: float
    first_ts: int
    last_ts: int


def initialize(value: float, ts: int) -> AggState:
    """The state after the window's first tuple."""
    return AggState(cnt=1, sum=0.0 + value, min=value, max=value, first_ts=ts, last_ts=ts)


def add(state: AggState, value: float, ts: int) -> AggState:
    """Add one tuple to ``state`` in place (and return it)."""
    state.cnt += 1
    state.sum = state.sum + value
    state.min = min(state.min, value)
    state.max = max(state.max, value)
    state.last_ts = ts
    return state


class Reducer(Protocol):
    """An aggregate function over the fixed :class:`AggState`."""

    name: str

    def result(self, state: AggState) -> float: ...

    def result_array(self, cnt: I64, sum_: F64, min_: F64, max_: F64) -> F64: ...


class Count:
    name = "count"

    def result(self, state: AggState) -> float:
        return float(state.cnt)

    def result_array(self, cnt: I64, sum_: F64, min_: F64, max_: F64) -> F64:
        return cnt.astype(np.float64)


class Sum:
    name = "sum"

    def result(self, state: AggState) -> float:
        return state.sum

    def result_array(self, cnt: I64, sum_: F64, min_: F64, max_: F64) -> F64:
        return np.array(sum_, dtype=np.float64, copy=True)


class Min:
    name = "min"

    def result(self, state: AggState) -> float:
        return state.min

    def result_array(self, cnt: I64, sum_: F64, min_: F64, max_: F64) -> F64:
        return np.array(min_, dtype=np.float64, copy=True)


class Max:
    name = "max"

    def result(self, state: AggState) -> float:
        return state.max

    def result_array(self, cnt: I64, sum_: F64, min_: F64, max_: F64) -> F64:
        return np.array(max_, dtype=np.float64, copy=True)


class Avg:
    name = "avg"

    def result(self, state: AggState) -> float:
        return float(np.float64(state.sum) / np.float64(state.cnt))

    def result_array(self, cnt: I64, sum_: F64, min_: F64, max_: F64) -> F64:
        out: F64 = sum_ / cnt.astype(np.float64)
        return out


REDUCERS: dict[str, Reducer] = {r.name: r for r in (Count(), Sum(), Min(), Max(), Avg())}


def get_reducer(name: str) -> Reducer:
    """The reducer of an aggregate function name (count, sum, min, max, avg)."""
    try:
        return REDUCERS[name]
    except KeyError:
        raise SpecError(
            f"unknown aggregate function {name!r}; known: {', '.join(sorted(REDUCERS))}"
        ) from None
