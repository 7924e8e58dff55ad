"""What an open window holds: the one list of its state fields.

A window's state, but for its key, is its identity (``win_start``, ``win_end``), its
footprint (``tau1``, the input position that opened it; ``tau2`` and ``fp_seq``, the
input and output positions of its latest footprint) and its partial aggregate
(``cnt``, ``sum``, ``min``, ``max``, ``first_ts``, ``last_ts``). :data:`FIELDS`
declares them once, in this order, each with its numpy type and the output-log column
that carries it in a footprint row (a ``G`` row's ``t_now`` is the window's ``tau2``,
its ``seq`` the window's ``fp_seq``). Every form of the state derives from it:

* the output log's schema, :func:`cec.records.output_schema`: ``key`` then the fields
  logged in a column of their own (:data:`LOGGED`), in this order;
* the reference operator's partial aggregate, :class:`cec.aggregates.AggState`
  (:data:`AGGREGATE`), and its output rows and EC load;
* a snapshot's window, :class:`cec.operator.state.WindowSnapshot` (``key`` then
  :data:`FIELDS`);
* the vector operator's slot arrays, :class:`cec.operator.slots.WindowSlots`
  (``key_idx`` then :data:`FIELDS`), its output rows (:mod:`cec.operator.rows`) and its
  EC load and dump (:mod:`cec.operator.ec_io`); a rescale's window columns
  (:mod:`recovery.rescale`).

The three classes spell their fields out because the type checker reads attributes
from the class; :func:`declares` checks, when the class is made, that they are
exactly these fields, in this order, of these types, so a field added here and not
there fails at import rather than in a log. Pure: no I/O.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import numpy as np

__all__ = ["AGGREGATE", "FIELDS", "LOGGED", "UNTRACKED", "StateField", "declares", "logged_for",
           "names", "tracked_for"]


class StateField(NamedTuple):
    """One field of a window's state."""

    name: str
    #: its numpy type (the Arrow type of its output column is the same width)
    dtype: type[np.int64] | type[np.float64]
    #: the output-log column that carries it in a footprint row of the window
    column: str


def _field(name: str, dtype: type[np.int64] | type[np.float64],
           column: str | None = None) -> StateField:
    return StateField(name, dtype, name if column is None else column)


IDENTITY = (_field("win_start", np.int64), _field("win_end", np.int64))
FOOTPRINT = (_field("tau1", np.int64), _field("tau2", np.int64, "t_now"),
             _field("fp_seq", np.int64, "seq"))
#: the partial aggregate (:class:`cec.aggregates.AggState`)
AGGREGATE = (_field("cnt", np.int64), _field("sum", np.float64), _field("min", np.float64),
             _field("max", np.float64), _field("first_ts", np.int64),
             _field("last_ts", np.int64))
#: every field of a window's state but its key, in the order every form keeps
FIELDS = IDENTITY + FOOTPRINT + AGGREGATE
#: the fields the output log keeps in a column of their own (after ``key``)
LOGGED = tuple(f for f in FIELDS if f.column == f.name)


#: the partial-aggregate fields each function needs (``cnt`` always: every result row
#: says how many tuples it aggregates)
_NEEDS = {"count": ("cnt",), "sum": ("cnt", "sum"), "avg": ("cnt", "sum"),
          "min": ("cnt", "min"), "max": ("cnt", "max")}
#: what a window holds in a field it does not track (the identities of sum, min, max;
#: a time window's ``first_ts``/``last_ts``, which no function reads, as 0)
UNTRACKED = {"sum": 0.0, "min": float("inf"), "max": float("-inf"), "first_ts": 0,
             "last_ts": 0}


def tracked_for(function: str, window_kind: str) -> tuple[str, ...]:
    """The partial-aggregate fields (:data:`AGGREGATE`) a window of this function and
    window kind keeps: what the function reads, and a count window's ``first_ts``/
    ``last_ts`` (its time span, which the results report). A session's ``first_ts``/
    ``last_ts`` are its ``win_start`` and ``win_end - gap``, so not kept apart.
    Raises KeyError for an unknown function."""
    need = _NEEDS[function]
    extra = ("first_ts", "last_ts") if window_kind == "count" else ()
    return tuple(f.name for f in AGGREGATE if f.name in need or f.name in extra)


def logged_for(function: str, window_kind: str) -> tuple[StateField, ...]:
    """The fields a log of record format 2 keeps in a column of their own: the window's
    identity and footprint columns of :data:`LOGGED`, then only the aggregate fields of
    :func:`tracked_for` (format 1 keeps all of :data:`LOGGED`)."""
    keep = tracked_for(function, window_kind)
    return tuple(f for f in LOGGED if f not in AGGREGATE or f.name in keep)


def names(fields: tuple[StateField, ...]) -> tuple[str, ...]:
    """The names of ``fields``, in order."""
    return tuple(f.name for f in fields)


# the annotation each form writes for a field's type: a Python value, a numpy column
_SPELLING = {"value": {np.int64: "int", np.float64: "float"},
             "array": {np.int64: "I64", np.float64: "F64"}}

C = TypeVar("C", bound=type)


def declares(fields: tuple[StateField, ...], *, first: tuple[str, ...] = (),
             form: str = "value") -> Callable[[C], C]:
    """A class decorator: the class's annotated attributes must be ``first`` (names
    of its own, e.g. ``key``) then ``fields``, in order, each annotated as ``form``
    spells its type (``int``/``float``, or ``I64``/``F64`` for numpy columns).
    Raises TypeError naming the class and the difference."""
    spell = _SPELLING[form]

    def check(cls: C) -> C:
        have = list(inspect.get_annotations(cls).items())
        if [name for name, _ in have[:len(first)]] != list(first):
            raise TypeError(f"{cls.__qualname__}: must start with {first}, not {have}")
        want = [(f.name, spell[f.dtype]) for f in fields]
        got = [(name, str(kind)) for name, kind in have[len(first):]]
        if got != want:
            raise TypeError(f"{cls.__qualname__} must declare the window-state fields "
                            f"{want} (cec.window_state.FIELDS), not {got}")
        return cls

    return check
