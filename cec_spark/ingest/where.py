"""``[filter].where`` compiled once, by Spark, into a tree that Python evaluates on Arrow.

Today the filter runs inside each ingest job's Spark query (:func:`cec_spark.ingest.query.
upstream_frame`). A long-lived ingest task that reads new files itself, with no Spark job
per poll, needs the same filter with exactly Spark SQL's semantics but without Spark:

- on the driver, :func:`compile_where` lets Spark parse and analyse the condition over the
  source's columns (an empty DataFrame with the source's schema, ``.filter(where)``, the
  analysed plan's ``Filter`` condition) and turns the Catalyst expression, read through
  py4j, into a small tree of plain dicts and lists (:class:`CompiledWhere`, JSON: it
  reaches executors as text, never pickled). Every subtree without a column (literals,
  ``CAST('NaN' AS DOUBLE)``, ``1 + 2``) is evaluated by Spark itself and becomes a
  literal. What the evaluator cannot reproduce exactly is refused here, as a
  :class:`~cec.errors.SpecError` (exit 2) naming ``[filter].where``, the expression and
  the unsupported part;
- in a task, :func:`evaluate` (no Spark import: pyarrow and numpy) gives the rows the
  filter keeps of an Arrow batch: ``batch.filter(evaluate(tree, batch))``.

How the streaming ingest uses it: at start (before any write) ``compile_where(spark,
spec.where, schema)`` with the schema the source frame has (``_SPARK_TYPES`` in
:mod:`cec_spark.ingest.query`), a refusal ending the start with exit 2; the tree goes to
the ingest task as ``compiled.to_json()``; the task keeps ``CompiledWhere.from_json(text)``
and calls ``compiled.keep(batch)`` on every batch it reads before the key partition.

The semantics reproduced (those of Spark 4's analysed plan; its type coercion has already
put every ``Cast`` in the tree):

- SQL's three-valued logic: AND/OR (Kleene), NOT, IS [NOT] NULL, ``<=>``, IN (a null in
  the list makes a non-match NULL), a row is kept only where the condition is TRUE;
- doubles compare as Spark does: NaN = NaN is true and NaN is larger than every other
  value, -0.0 = 0.0; ``isnan``;
- ``+ - * / % div`` and unary minus: integers wrap on overflow without ANSI mode and are
  an error with it; ``/`` and ``%`` by zero are NULL without ANSI mode and an error with
  it (:class:`~cec_spark.errors.InputError` naming the row, raised only for a row Spark
  evaluates the operation for: the right side of ``AND``/``OR`` only where the left does
  not decide, the other operand of an arithmetic or comparison only where the first is
  not NULL, as Spark's evaluation does); decimals add, subtract and multiply exactly
  (when the result type needs no precision loss);
- casts between boolean, int, bigint, double and (exact) decimal, in the cast's own mode
  (ANSI: an out-of-range value is an error; legacy: Java's conversion; TRY: NULL);
- string comparisons (UTF-8 bytes, the default collation only), ``LIKE`` with a literal
  pattern (and escape), ``startswith``/``endswith``/``contains`` with a literal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import SpecError
from cec_spark.errors import InputError

Tree = dict[str, Any]

SUPPORTED = ("column references, literals, = <> < <= > >= <=>, AND, OR, NOT, IS [NOT] NULL, "
             "IN, BETWEEN, + - * / % div and unary minus, CAST between boolean, int, bigint, "
             "double and decimal, isnan, LIKE, startswith, endswith, contains")

# Spark's type names (DataType.simpleString) of values the evaluator computes with
_ARROW = {"boolean": pa.bool_(), "int": pa.int32(), "bigint": pa.int64(),
          "double": pa.float64(), "string": pa.string()}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)$")
_NUMERIC = ("int", "bigint", "double")

_COMPARE = {"EqualTo": "eq", "EqualNullSafe": "eqns", "LessThan": "lt",
            "LessThanOrEqual": "le", "GreaterThan": "gt", "GreaterThanOrEqual": "ge"}
_ARITH = {"Add": "add", "Subtract": "sub", "Multiply": "mul", "Divide": "div",
          "Remainder": "mod", "IntegralDivide": "idiv"}
_STRPRED = {"StartsWith": "startswith", "EndsWith": "endswith", "Contains": "contains"}
_UNARY = {"Not": "not", "IsNull": "isnull", "IsNotNull": "isnotnull", "IsNaN": "isnan"}


def _arrow_type(t: str) -> pa.DataType:
    m = _DECIMAL.match(t)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    return _ARROW[t]


def _supported_type(t: str) -> bool:
    return t in _ARROW or _DECIMAL.match(t) is not None


def _decimal(t: str) -> tuple[int, int] | None:
    m = _DECIMAL.match(t)
    return (int(m.group(1)), int(m.group(2))) if m else None


# --------------------------------------------------------------------------- driver


@dataclass(frozen=True)
class CompiledWhere:
    """A ``[filter].where`` condition compiled by Spark (:func:`compile_where`)."""

    where: str
    tree: Tree
    columns: tuple[str, ...]  # the source columns the condition reads

    def to_json(self) -> str:
        return json.dumps({"where": self.where, "tree": self.tree,
                           "columns": list(self.columns)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CompiledWhere:
        doc = json.loads(text)
        return cls(str(doc["where"]), doc["tree"], tuple(doc["columns"]))

    def keep(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """The rows of ``batch`` Spark's filter keeps (:func:`evaluate`)."""
        return evaluate(self.tree, batch, self.where)


class _Refused(Exception):
    """A part of the condition the evaluator cannot reproduce: becomes a SpecError."""


def _refuse(origin: str | None, where: str, problem: str) -> SpecError:
    problem = f"{where!r}: {problem}"
    place = "[filter].where"
    return SpecError(f"{origin}: {place}: {problem}" if origin else f"{place}: {problem}",
                     field=("filter", "where"), problem=problem)


def compile_where(spark: Any, where: str, schema: Any, *,
                  origin: str | None = None) -> CompiledWhere:
    """Spark's analysis of ``where`` over ``schema`` (a ``StructType`` or a DDL string)
    as a :class:`CompiledWhere`; a SpecError naming ``[filter].where`` (and ``origin``,
    the spec's file, if given) for a condition Spark refuses or the evaluator cannot
    reproduce."""
    # the executor side (evaluate) imports no Spark
    from pyspark.errors import AnalysisException, ParseException  # noqa: PLC0415

    df = spark.createDataFrame([], schema)
    try:
        plan = df.filter(where)._jdf.queryExecution().analyzed()
    except (AnalysisException, ParseException) as exc:
        first = str(exc).strip().splitlines()[0]
        raise _refuse(origin, where, "not a valid Spark SQL condition over the source's "
                      f"columns: {first}") from exc
    if plan.getClass().getSimpleName() != "Filter":
        raise _refuse(origin, where, f"Spark analyses it into a {plan.getClass().getSimpleName()}"
                      ", not a Filter: not supported by the streaming ingest")
    compiler = _Compiler(spark)
    try:
        tree = compiler.compile(plan.condition())
    except _Refused as exc:
        raise _refuse(origin, where, str(exc)) from None
    if tree["type"] not in ("boolean", "null"):
        raise _refuse(origin, where, f"a {tree['type']} condition, not a boolean")
    return CompiledWhere(where, tree, tuple(sorted(compiler.columns)))


class _Compiler:
    """A Catalyst expression (py4j) → a tree of dicts, literal subtrees folded by Spark."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.columns: set[str] = set()
        self.common: dict[int, Tree] = {}  # With's common expressions (BETWEEN) by id

    def compile(self, e: Any) -> Tree:
        cls = str(e.getClass().getSimpleName())
        t = str(e.dataType().simpleString())
        if cls not in ("CommonExpressionRef", "With") and e.foldable():
            return self._fold(e, cls, t)
        if not _supported_type(t):
            raise _Refused(f"{self._sql(e)} has type {t}: not supported by the streaming "
                           "ingest (its types: boolean, int, bigint, double, string, decimal)")
        kids = [e.children().apply(i) for i in range(e.children().size())]
        if cls == "AttributeReference":
            name = str(e.name())
            self.columns.add(name)
            return {"op": "col", "name": name, "type": t}
        if cls in ("Between", "With"):  # BETWEEN: With(input once; >= AND <=)
            for d in kids[1:]:
                self.common[int(d.id().id())] = self.compile(d.child())
            return self.compile(kids[0])
        if cls == "CommonExpressionRef":
            return self.common[int(e.id().id())]
        if cls in _COMPARE:
            self._same_types(e, kids)
            return {"op": "cmp", "fn": _COMPARE[cls], "type": t,
                    "args": [self.compile(k) for k in kids]}
        if cls in ("And", "Or"):
            return {"op": cls.lower(), "type": t, "args": [self.compile(k) for k in kids]}
        if cls in _UNARY:
            return {"op": _UNARY[cls], "type": t, "args": [self.compile(kids[0])]}
        if cls == "In":
            self._same_types(e, kids)
            return {"op": "in", "type": t, "args": [self.compile(k) for k in kids]}
        if cls in _ARITH:
            return self._arith(e, cls, t, kids)
        if cls == "UnaryMinus":
            return {"op": "neg", "type": t, "ansi": bool(e.failOnError()),
                    "args": [self.compile(kids[0])]}
        if cls == "Cast":
            return self._cast(e, t, kids[0])
        if cls == "Like":
            return self._like(e, kids)
        if cls in _STRPRED:
            pattern = self._literal_string(e, kids[1])
            return {"op": "strpred", "fn": _STRPRED[cls], "type": t, "pattern": pattern,
                    "args": [self._string(kids[0])]}
        raise _Refused(f"{cls} ({self._sql(e)}) is not supported by the streaming ingest "
                       f"(supported: {SUPPORTED})")

    @staticmethod
    def _sql(e: Any) -> str:
        return str(e.sql())

    def _same_types(self, e: Any, kids: list[Any]) -> None:
        types = {str(k.dataType().simpleString()) for k in kids} - {"void"}
        if len(types) > 1:
            raise _Refused(f"{self._sql(e)} compares values of types {sorted(types)}")

    def _string(self, e: Any) -> Tree:
        t = str(e.dataType().simpleString())
        if t != "string":
            raise _Refused(f"{self._sql(e)} has type {t}: the streaming ingest supports only "
                           "strings of the default collation here")
        return self.compile(e)

    def _literal_string(self, e: Any, k: Any) -> str | None:
        if not k.foldable() or not k.deterministic():
            raise _Refused(f"{self._sql(e)}: the pattern must be a literal string")
        v = self._eval(k)
        return None if v is None else str(v.toString())

    def _eval(self, e: Any) -> Any:
        try:
            return e.eval(None)
        except Exception as exc:  # py4j's error: Spark's own message
            text = str(exc).strip().splitlines()
            msg = next((ln for ln in text if "Exception:" in ln), text[0] if text else "")
            raise _Refused(f"{self._sql(e)} fails in Spark: {msg.strip()}") from None

    def _fold(self, e: Any, cls: str, t: str) -> Tree:
        if not e.deterministic():
            raise _Refused(f"{cls} ({self._sql(e)}) is not deterministic: not supported by "
                           "the streaming ingest")
        v = self._eval(e)
        if t == "void":
            return {"op": "lit", "type": "null", "value": None}
        if not (_supported_type(t) or t in ("date", "timestamp", "float", "smallint",
                                            "tinyint")):
            raise _Refused(f"{self._sql(e)} is a literal of type {t}: not supported by the "
                           "streaming ingest")
        if v is None:
            value: Any = None
        elif t in ("double", "float"):
            value = repr(float(v))
        elif t == "string":
            value = str(v.toString())
        elif _decimal(t):  # py4j hands a java.math.BigDecimal over as a Python Decimal
            big = v.toJavaBigDecimal()
            value = format(big, "f") if isinstance(big, Decimal) else str(big.toPlainString())
        elif t == "boolean":
            value = bool(v)
        else:  # int, bigint, smallint, tinyint, date (days), timestamp (microseconds)
            value = int(v)
        return {"op": "lit", "type": t, "value": value}

    def _arith(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        mode = str(e.evalMode().toString())
        if mode not in ("ANSI", "LEGACY"):
            raise _Refused(f"{self._sql(e)} in eval mode {mode}: not supported")
        fn = _ARITH[cls]
        types = [str(k.dataType().simpleString()) for k in kids]
        dec = [_decimal(x) for x in types]
        if dec[0] or dec[1]:
            if fn not in ("add", "sub", "mul") or not (dec[0] and dec[1]):
                raise _Refused(f"{self._sql(e)}: decimal {cls} is not supported by the "
                               "streaming ingest (decimal + - * only)")
            empty = [pa.array([], _arrow_type(x)) for x in types]
            got = {"add": pc.add, "sub": pc.subtract, "mul": pc.multiply}[fn](*empty).type
            if got != _arrow_type(t):
                raise _Refused(f"{self._sql(e)}: Spark's result type {t} loses precision "
                               "(not supported by the streaming ingest)")
        elif t not in _NUMERIC or types != [t, t]:
            raise _Refused(f"{self._sql(e)}: {cls} of {types} giving {t} is not supported")
        return {"op": "arith", "fn": fn, "type": t, "ansi": mode == "ANSI",
                "args": [self.compile(k) for k in kids]}

    def _cast(self, e: Any, t: str, child: Any) -> Tree:
        src = str(child.dataType().simpleString())
        mode = str(e.evalMode().toString())
        ok = src == t or (src in (*_NUMERIC, "boolean") and t in (*_NUMERIC, "boolean"))
        sd, td = _decimal(src), _decimal(t)
        if td and src in ("int", "bigint"):
            ok = td[0] - td[1] >= (10 if src == "int" else 19)
        elif td and sd:
            ok = td[1] >= sd[1] and td[0] - td[1] >= sd[0] - sd[1]
        if not ok:
            raise _Refused(f"Cast from {src} to {t} ({self._sql(e)}) is not supported by "
                           "the streaming ingest (supported: between boolean, int, bigint "
                           "and double, and from int, bigint or decimal to a decimal that "
                           "holds every value)")
        if mode not in ("ANSI", "LEGACY", "TRY"):
            raise _Refused(f"{self._sql(e)} in eval mode {mode}: not supported")
        return {"op": "cast", "type": t, "mode": mode.lower(), "args": [self.compile(child)]}

    def _like(self, e: Any, kids: list[Any]) -> Tree:
        pattern = self._literal_string(e, kids[1])
        escape = str(e.escapeChar())
        regex = None if pattern is None else _like_regex(pattern, escape)
        if regex is None and pattern is not None:
            raise _Refused(f"{self._sql(e)}: the pattern {pattern!r} is invalid in Spark "
                           f"(escape character {escape!r})")
        return {"op": "like", "type": "boolean", "regex": regex,
                "args": [self._string(kids[0])]}


def _like_regex(pattern: str, escape: str) -> str | None:
    """Spark's ``StringUtils.escapeLikeRegex`` as an RE2 full match (None: Spark refuses
    the pattern)."""
    out, chars, i = [], pattern, 0
    while i < len(chars):
        c = chars[i]
        if c == escape:
            if i + 1 == len(chars):
                return None
            nxt = chars[i + 1]
            if nxt not in ("_", "%", escape):
                return None
            out.append(f"\\x{{{ord(nxt):x}}}")
            i += 2
            continue
        out.append("." if c == "_" else ".*" if c == "%" else
                   c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}")
        i += 1
    return "(?s)\\A" + "".join(out) + "\\z"


# --------------------------------------------------------------------------- executor


def evaluate(tree: Tree, batch: pa.RecordBatch, where: str = "") -> pa.BooleanArray:
    """The rows of ``batch`` the condition keeps (TRUE; FALSE and NULL drop), without
    nulls. An ANSI error of Spark's (division by zero, overflow) is an
    :class:`~cec_spark.errors.InputError` naming the row and ``where``."""
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
        """Spark's ANSI error for the first of ``rows`` (a mask) that has one."""
        hit = np.flatnonzero(rows)
        if hit.size:
            raise InputError(f"[filter].where {self.where!r}: row {int(hit[0])} of the batch: "
                             f"{what} (Spark SQL with spark.sql.ansi.enabled fails the job "
                             "here)")

    def run(self, node: Tree, live: np.ndarray) -> pa.Array:
        """``node``'s values; ``live``: the rows Spark evaluates it for (ANSI errors)."""
        op = node["op"]
        args: list[Tree] = node.get("args", [])
        if op == "col":
            return self._column(node)
        if op == "lit":
            return self._literal(node)
        if op in ("and", "or"):
            left = self.run(args[0], live)
            lv, lval = _split(left)
            decided = lval & (~lv if op == "and" else lv)
            right = self.run(args[1], live & ~decided)
            left, right = (x.cast(pa.bool_()) for x in (left, right))
            return (pc.and_kleene if op == "and" else pc.or_kleene)(left, right)
        if op == "not":
            return pc.invert(self.run(args[0], live))
        if op == "isnull":
            return self.run(args[0], live).is_null()
        if op == "isnotnull":
            return self.run(args[0], live).is_valid()
        if op == "isnan":
            v, ok = _split(self.run(args[0], live))
            return pa.array(ok & np.isnan(v.astype(np.float64)))
        if op == "cmp":
            left = self.run(args[0], live)
            right = self.run(args[1], live if node["fn"] == "eqns"
                             else live & _valid(left))
            return _compare(node["fn"], left, right)
        if op == "in":
            return self._in(args, live)
        if op == "arith":
            return self._arith(node, args, live)
        if op == "neg":
            return self._neg(node, self.run(args[0], live), live)
        if op == "cast":
            return self._cast(node, self.run(args[0], live), live)
        if op == "like":
            value = self.run(args[0], live)
            if node["regex"] is None:
                return pa.nulls(self.n, pa.bool_())
            return pc.match_substring_regex(value, pattern=node["regex"])
        if op == "strpred":
            value = self.run(args[0], live)
            if node["pattern"] is None:
                return pa.nulls(self.n, pa.bool_())
            fn: Callable[..., pa.Array] = {"startswith": pc.starts_with,
                                           "endswith": pc.ends_with,
                                           "contains": pc.match_substring}[node["fn"]]
            return fn(value, pattern=node["pattern"])
        raise ValueError(f"[filter].where: unknown operation {op!r} in the compiled tree")

    def _column(self, node: Tree) -> pa.Array:
        name, t = node["name"], node["type"]
        i = self.batch.schema.get_field_index(name)
        if i < 0:
            raise InputError(f"[filter].where {self.where!r}: the batch has no column "
                             f"{name!r} (columns: {self.batch.schema.names})")
        col = self.batch.column(i)
        want = _arrow_type(t)
        if col.type != want:
            if t == "string" and (pa.types.is_large_string(col.type)
                                  or pa.types.is_string_view(col.type)):
                return col.cast(pa.string())
            raise InputError(f"[filter].where {self.where!r}: column {name!r} is "
                             f"{col.type}, the condition was compiled for {t}")
        return col

    def _literal(self, node: Tree) -> pa.Array:
        t, v = node["type"], node["value"]
        if t == "null":
            return pa.nulls(self.n)
        if t in ("date", "timestamp", "smallint", "tinyint"):
            t = "bigint"
        elif t == "float":
            t = "double"
        at = _arrow_type(t)
        if v is None:
            return pa.nulls(self.n, at)
        value: Any = (float(v) if t == "double" else Decimal(v) if _decimal(t) else v)
        if t in _NUMERIC or t == "boolean":
            return pa.array(np.full(self.n, value, dtype=at.to_pandas_dtype()), type=at)
        return pa.array([value], type=at).take(np.zeros(self.n, dtype=np.int64))

    def _in(self, args: list[Tree], live: np.ndarray) -> pa.Array:
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
        at = _arrow_type(t)
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

    def _neg(self, node: Tree, value: pa.Array, live: np.ndarray) -> pa.Array:
        t = node["type"]
        if _decimal(t):
            return pc.negate(value)
        v, ok = _split(value)
        if node["ansi"] and t != "double":
            self.fail(live & ok & (v == _INT_BOUNDS[t][0]), f"[ARITHMETIC_OVERFLOW] {t} "
                      "overflow in unary minus")
        with np.errstate(all="ignore"):
            return _join(np.negative(v), ok, value.type)

    def _cast(self, node: Tree, value: pa.Array, live: np.ndarray) -> pa.Array:
        t, mode = node["type"], node["mode"]
        at = _arrow_type(t)
        if value.type == at:
            return value
        if value.type == pa.null():
            return pa.nulls(self.n, at)
        if pa.types.is_decimal(at):  # exact: the compiler checked the target holds all
            return value.cast(at)
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
