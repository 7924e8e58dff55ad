"""The executor side of ``[filter].where`` (:mod:`cec_spark.ingest.where`): a compiled
tree evaluated on an Arrow batch with Spark SQL's semantics, with pyarrow and numpy only
(no Spark import), so that a task that reads the source itself filters as Spark would.

The tree (plain dicts and lists, as JSON) has one node per Catalyst expression, each with
``op``, ``type`` (Spark's type name: boolean, int, bigint, double, string, decimal(p,s))
and its operands in ``args``:

==========  =====================================================================
``col``     a source column, ``name``
``lit``     a value (``value``; a double as its ``repr``, a decimal as its text)
``cmp``     ``fn``: eq, eqns (``<=>``), lt, le, gt, ge
``and``     ``or``, ``not``, ``isnull``, ``isnotnull``, ``isnan``, ``in`` (value, items)
``arith``   ``fn``: add, sub, mul, div, mod, idiv; ``ansi``: errors instead of NULL/wrap
``neg``     unary minus (``ansi``)
``cast``    to ``type``, ``mode``: ansi, legacy or try
``like``    ``regex``: the pattern as an anchored RE2 expression (None: NULL)
``strpred`` ``fn``: startswith, endswith, contains, with ``pattern``
==========  =====================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cec_spark.errors import FilterRowError, InputError
from cec_spark.source.types import SEQ

__all__ = ["ARROW", "NUMERIC", "Tree", "arrow_type", "decimal_type", "evaluate",
           "supported_type"]

Tree = dict[str, Any]

# Spark's type names (DataType.simpleString) of values the evaluator computes with
ARROW = {"boolean": pa.bool_(), "int": pa.int32(), "bigint": pa.int64(),
         "double": pa.float64(), "string": pa.string()}
DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)$")
NUMERIC = ("int", "bigint", "double")


def arrow_type(t: str) -> pa.DataType:
    m = DECIMAL.match(t)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    return ARROW[t]


def supported_type(t: str) -> bool:
    return t in ARROW or DECIMAL.match(t) is not None


def decimal_type(t: str) -> tuple[int, int] | None:
    m = DECIMAL.match(t)
    return (int(m.group(1)), int(m.group(2))) if m else None


def evaluate(tree: Tree, batch: pa.RecordBatch | pa.Table, where: str = "") -> pa.BooleanArray:
    """The rows of ``batch`` the condition keeps (TRUE; FALSE and NULL drop), without
    nulls. An ANSI error of Spark's (division by zero, overflow) is an
    :class:`~cec_spark.errors.InputError` naming the row and ``where``. A Table (columns
    of several chunks) is evaluated as one batch: its rows counted from its start."""
    if isinstance(batch, pa.Table):
        batch = pa.RecordBatch.from_arrays([c.combine_chunks() for c in batch.columns],
                                           schema=batch.schema)
    ev = _Evaluator(batch, where)
    out = ev.run(tree, np.ones(batch.num_rows, dtype=bool))
    if out.type == pa.null():
        return pa.array(np.zeros(batch.num_rows, dtype=bool))
    result = pc.fill_null(out, False)
    assert isinstance(result, pa.BooleanArray)
    return result


def _valid(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _split(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls filled, validity) as numpy arrays."""
    if arr.type == pa.null():
        return np.zeros(len(arr), dtype=bool), np.zeros(len(arr), dtype=bool)
    valid = _valid(arr)
    fill: Any = False if arr.type == pa.bool_() else 0
    values = pc.fill_null(arr, pa.scalar(fill, arr.type)).to_numpy(zero_copy_only=False)
    return np.asarray(values), valid


def _join(values: np.ndarray, valid: np.ndarray, t: pa.DataType) -> pa.Array:
    return pa.array(values, type=t, mask=~valid)


_INT_BOUNDS = {"int": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1)}


class _Evaluator:
    def __init__(self, batch: pa.RecordBatch, where: str) -> None:
        self.batch, self.where, self.n = batch, where, batch.num_rows

    def fail(self, rows: np.ndarray, what: str) -> None:
        """Spark's ANSI error for the first of ``rows`` (a mask) that has one: the same
        row Spark's job fails on (its rows in order). A batch of the source's rows (a
        ``SEQ`` column) names the row's seq too: its row number in the source (without
        allowed_lateness; with it, its place in the ingest's order)."""
        hit = np.flatnonzero(rows)
        if hit.size:
            k = int(hit[0])
            i = self.batch.schema.get_field_index(SEQ)
            at = None if i < 0 else int(self.batch.column(i)[k].as_py())
            seq = "" if at is None else f", seq {at}"
            raise FilterRowError(
                f"[filter].where {self.where!r}: row {k} of the batch{seq}: {what} (Spark "
                "SQL with spark.sql.ansi.enabled fails the job here)", at)

    def run(self, node: Tree, live: np.ndarray) -> pa.Array:
        """``node``'s values; ``live``: the rows Spark evaluates it for (ANSI errors)."""
        op = _OPS.get(node["op"])
        if op is None:
            raise ValueError(f"[filter].where: unknown operation {node['op']!r} in the "
                             "compiled tree")
        return op(self, node, node.get("args", []), live)

    def _logic(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        """AND/OR: the right side evaluated only where the left one does not decide."""
        left = self.run(args[0], live)
        lv, lval = _split(left)
        decided = lval & (~lv if node["op"] == "and" else lv)
        right = self.run(args[1], live & ~decided)
        left, right = (x.cast(pa.bool_()) for x in (left, right))
        return (pc.and_kleene if node["op"] == "and" else pc.or_kleene)(left, right)

    def _unary(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        value = self.run(args[0], live)
        op = node["op"]
        if op == "isnan":  # NULL is not NaN: false, never NULL
            v, ok = _split(value)
            return pa.array(ok & np.isnan(v.astype(np.float64)))
        return (pc.invert(value) if op == "not" else value.is_null() if op == "isnull"
                else value.is_valid())

    def _cmp(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        left = self.run(args[0], live)
        right = self.run(args[1], live if node["fn"] == "eqns" else live & _valid(left))
        return _compare(node["fn"], left, right)

    def _string_match(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        """LIKE (an anchored RE2 ``regex``) and startswith/endswith/contains."""
        value = self.run(args[0], live)
        pattern = node["regex"] if node["op"] == "like" else node["pattern"]
        if pattern is None:  # a NULL pattern
            return pa.nulls(self.n, pa.bool_())
        fn: Callable[..., pa.Array] = {"like": pc.match_substring_regex,
                                       "startswith": pc.starts_with, "endswith": pc.ends_with,
                                       "contains": pc.match_substring}[node.get("fn", "like")]
        return fn(value, pattern=pattern)

    def _column(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        name, t = node["name"], node["type"]
        i = self.batch.schema.get_field_index(name)
        if i < 0:
            raise InputError(f"[filter].where {self.where!r}: the batch has no column "
                             f"{name!r} (columns: {self.batch.schema.names})")
        col = self.batch.column(i)
        want = arrow_type(t)
        if col.type != want:
            if t == "string" and (pa.types.is_large_string(col.type)
                                  or pa.types.is_string_view(col.type)):
                return col.cast(pa.string())
            raise InputError(f"[filter].where {self.where!r}: column {name!r} is "
                             f"{col.type}, the condition was compiled for {t}")
        return col

    def _literal(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        t, v = node["type"], node["value"]
        if t == "null":
            return pa.nulls(self.n)
        if t in ("date", "timestamp", "smallint", "tinyint"):
            t = "bigint"
        elif t == "float":
            t = "double"
        at = arrow_type(t)
        if v is None:
            return pa.nulls(self.n, at)
        value: Any = (float(v) if t == "double" else Decimal(v) if decimal_type(t) else v)
        if t in NUMERIC or t == "boolean":
            return pa.array(np.full(self.n, value, dtype=at.to_pandas_dtype()), type=at)
        return pa.array([value], type=at).take(np.zeros(self.n, dtype=np.int64))

    def _in(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        value = self.run(args[0], live)
        vok = _valid(value)
        matched = np.zeros(self.n, dtype=bool)
        has_null = np.zeros(self.n, dtype=bool)
        for item in args[1:]:
            got = self.run(item, live & vok & ~matched)
            eq, eq_ok = _split(_compare("eq", value, got))
            has_null |= ~_valid(got)
            matched |= eq & eq_ok
        valid = vok & (matched | ~has_null)
        return _join(matched, valid, pa.bool_())

    def _arith(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        fn, t, ansi = node["fn"], node["type"], node["ansi"]
        at = arrow_type(t)
        if fn in ("div", "mod", "idiv"):  # Spark evaluates the divisor first
            right = self.run(args[1], live)
            b, bok = _split(right)
            zero = bok & (b == 0)
            left = self.run(args[0], live & bok & (ansi | ~zero))
            a, aok = _split(left)
            if ansi:
                self.fail(live & zero & aok, "[DIVIDE_BY_ZERO] Division by zero")
            ok = aok & bok & ~zero
            safe = np.where(ok, b, 1).astype(b.dtype)
            with np.errstate(all="ignore"):
                if fn == "div":
                    out = a / safe
                elif fn == "mod":
                    out = (np.fmod(a, safe) if t == "double"
                           else np.fmod(a, np.where(safe == -1, 1, safe)))
                else:  # long division truncating toward zero, MIN div -1 wraps
                    a64, b64 = a.astype(np.int64), safe.astype(np.int64)
                    minus = b64 == -1
                    bb = np.where(minus, 1, b64)
                    q = a64 // bb
                    q = q + ((q * bb != a64) & ((a64 < 0) != (bb < 0)))
                    out = np.where(minus, np.negative(a64), q)
                    if ansi:
                        self.fail(live & ok & minus & (a64 == np.iinfo(np.int64).min),
                                  "[ARITHMETIC_OVERFLOW] long overflow in div")
            return _join(np.asarray(out).astype(at.to_pandas_dtype()), ok, at)
        left = self.run(args[0], live)
        right = self.run(args[1], live & _valid(left))
        if pa.types.is_decimal(at):
            out = {"add": pc.add, "sub": pc.subtract, "mul": pc.multiply}[fn](left, right)
            return out.cast(at)
        a, aok = _split(left)
        b, bok = _split(right)
        ok = aok & bok
        with np.errstate(all="ignore"):
            out = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[fn](a, b)
        if ansi and t != "double":
            rows = live & ok
            checked = {"add": pc.add_checked, "sub": pc.subtract_checked,
                       "mul": pc.multiply_checked}[fn]
            try:
                checked(pa.array(a[rows]), pa.array(b[rows]))
            except pa.ArrowInvalid:
                wide = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[fn](
                    a.astype(object), b.astype(object))
                lo, hi = _INT_BOUNDS[t]
                self.fail(rows & np.array([not lo <= int(x) <= hi for x in wide]),
                          f"[ARITHMETIC_OVERFLOW] {t} overflow")
        return _join(out, ok, at)

    def _neg(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        t, value = node["type"], self.run(args[0], live)
        if decimal_type(t):
            return pc.negate(value)
        v, ok = _split(value)
        if node["ansi"] and t != "double":
            self.fail(live & ok & (v == _INT_BOUNDS[t][0]), f"[ARITHMETIC_OVERFLOW] {t} "
                      "overflow in unary minus")
        with np.errstate(all="ignore"):
            return _join(np.negative(v), ok, value.type)

    def _cast(self, node: Tree, args: list[Tree], live: np.ndarray) -> pa.Array:
        t, mode, value = node["type"], node["mode"], self.run(args[0], live)
        at = arrow_type(t)
        if value.type in (at, pa.null()) or pa.types.is_decimal(at):
            return value.cast(at)  # to a decimal: exact (the compiler checked it holds all)
        v, ok = _split(value)
        if t == "boolean":
            return _join(v != 0, ok, at)
        if t == "double" or value.type == pa.bool_():
            return _join(v.astype(at.to_pandas_dtype()), ok, at)
        lo, hi = _INT_BOUNDS[t]
        if value.type == pa.float64():  # Java's (long)/(int) of a double: NaN 0, saturated
            top = 2.0 ** (63 if t == "bigint" else 31)
            with np.errstate(all="ignore"):
                fits = (np.floor(v) <= float(hi)) & (np.ceil(v) >= float(lo))
                tr = np.trunc(np.where(np.isnan(v), 0.0, v))
                big, small = tr >= top, tr < -top
                ints = np.where(big, hi, np.where(small, lo, np.where(big | small, 0.0, tr)
                                                  .astype(np.int64)))
            return self._narrow(ints, ok, fits, t, at, mode, live)
        # bigint -> int
        fits = (v >= lo) & (v <= hi)
        return self._narrow(v.astype(np.int64), ok, fits, t, at, mode, live)

    def _narrow(self, ints: np.ndarray, ok: np.ndarray, fits: np.ndarray, t: str,
                at: pa.DataType, mode: str, live: np.ndarray) -> pa.Array:
        if mode == "ansi":
            self.fail(live & ok & ~fits, f"[CAST_OVERFLOW] a value out of the range of {t}")
        elif mode == "try":
            ok = ok & fits
        return _join(ints.astype(at.to_pandas_dtype()), ok, at)


def _compare(fn: str, left: pa.Array, right: pa.Array) -> pa.Array:
    """Spark's comparison ``fn`` (eq, eqns, lt, le, gt, ge): NULL if a side is NULL
    (``<=>``: never), doubles with NaN = NaN and NaN above everything."""
    if fn in ("gt", "ge"):
        fn, left, right = ("lt" if fn == "gt" else "le"), right, left
    if left.type == pa.null() and right.type != pa.null():
        left = pa.nulls(len(left), right.type)
    if right.type == pa.null() and left.type != pa.null():
        right = pa.nulls(len(right), left.type)
    if left.type == pa.null():
        eq: pa.Array = pa.nulls(len(left), pa.bool_())
        return pc.is_null(left) if fn == "eqns" else eq
    if left.type in (pa.float64(), pa.int32(), pa.int64(), pa.bool_()):
        a, aok = _split(left)
        b, bok = _split(right)
        if left.type == pa.float64():
            an, bn = np.isnan(a), np.isnan(b)
            equal = (a == b) | (an & bn)
            less = (a < b) | (~an & bn)
        else:
            equal, less = a == b, a < b
        out = {"eq": equal, "eqns": equal, "lt": less, "le": less | equal}[fn]
        if fn == "eqns":
            return pa.array(np.where(aok & bok, out, ~aok & ~bok))
        return _join(out, aok & bok, pa.bool_())
    if fn == "eqns":
        both = pc.and_(left.is_valid(), right.is_valid())
        return pc.if_else(both, pc.fill_null(pc.equal(left, right), False),
                          pc.and_(left.is_null(), right.is_null()))
    return {"eq": pc.equal, "lt": pc.less, "le": pc.less_equal}[fn](left, right)


_Op = Callable[[_Evaluator, Tree, list[Tree], np.ndarray], pa.Array]
_OPS: dict[str, _Op] = {
    "col": _Evaluator._column, "lit": _Evaluator._literal, "and": _Evaluator._logic,
    "or": _Evaluator._logic, "not": _Evaluator._unary, "isnull": _Evaluator._unary,
    "isnotnull": _Evaluator._unary, "isnan": _Evaluator._unary, "cmp": _Evaluator._cmp,
    "in": _Evaluator._in, "arith": _Evaluator._arith, "neg": _Evaluator._neg,
    "cast": _Evaluator._cast, "like": _Evaluator._string_match,
    "strpred": _Evaluator._string_match,
}
