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
- in a task, :func:`~cec_spark.ingest.where_eval.evaluate` (no Spark import:
  pyarrow and numpy; the tree's format is there) gives the rows the
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
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from cec.errors import SpecError
from cec_spark.ingest.where_eval import (
    NUMERIC,
    Tree,
    arrow_type,
    decimal_type,
    evaluate,
    supported_type,
)

__all__ = ["SUPPORTED", "CompiledWhere", "compile_where", "evaluate"]

SUPPORTED = ("column references, literals, = <> < <= > >= <=>, AND, OR, NOT, IS [NOT] NULL, "
             "IN, BETWEEN, + - * / % div and unary minus, CAST between boolean, int, bigint, "
             "double and decimal, isnan, LIKE, startswith, endswith, contains")

_COMPARE = {"EqualTo": "eq", "EqualNullSafe": "eqns", "LessThan": "lt",
            "LessThanOrEqual": "le", "GreaterThan": "gt", "GreaterThanOrEqual": "ge"}
_ARITH = {"Add": "add", "Subtract": "sub", "Multiply": "mul", "Divide": "div",
          "Remainder": "mod", "IntegralDivide": "idiv"}
_STRPRED = {"StartsWith": "startswith", "EndsWith": "endswith", "Contains": "contains"}
_UNARY = {"Not": "not", "IsNull": "isnull", "IsNotNull": "isnotnull", "IsNaN": "isnan"}


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

    def keep(self, batch: pa.RecordBatch | pa.Table) -> pa.BooleanArray:
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

    _HANDLERS: ClassVar[dict[str, _Handler]]  # set below the class: class name → method

    def compile(self, e: Any) -> Tree:
        cls = str(e.getClass().getSimpleName())
        t = str(e.dataType().simpleString())
        if cls not in ("CommonExpressionRef", "With") and e.foldable():
            return self._fold(e, cls, t)
        if not supported_type(t):
            raise _Refused(f"{self._sql(e)} has type {t}: not supported by the streaming "
                           "ingest (its types: boolean, int, bigint, double, string, decimal)")
        kids = [e.children().apply(i) for i in range(e.children().size())]
        handler = self._HANDLERS.get(cls)
        if handler is None:
            raise _Refused(f"{cls} ({self._sql(e)}) is not supported by the streaming ingest "
                           f"(supported: {SUPPORTED})")
        return handler(self, e, cls, t, kids)

    def _column(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        name = str(e.name())
        self.columns.add(name)
        return {"op": "col", "name": name, "type": t}

    def _with(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        """BETWEEN is With(its input once; >= AND <=): the input's tree at each ref."""
        for d in kids[1:]:
            self.common[int(d.id().id())] = self.compile(d.child())
        return self.compile(kids[0])

    def _ref(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        return self.common[int(e.id().id())]

    def _generic(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        """Comparisons, AND, OR, IN and the unary predicates: operands as they are."""
        if cls in _COMPARE or cls == "In":
            self._same_types(e, kids)
        op = {"And": "and", "Or": "or", "In": "in", **_UNARY}.get(cls, "cmp")
        node: Tree = {"op": op, "type": t, "args": [self.compile(k) for k in kids]}
        if op == "cmp":
            node["fn"] = _COMPARE[cls]
        return node

    def _neg(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        return {"op": "neg", "type": t, "ansi": bool(e.failOnError()),
                "args": [self.compile(kids[0])]}

    def _strpred(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        pattern = self._literal_string(e, kids[1])
        return {"op": "strpred", "fn": _STRPRED[cls], "type": t, "pattern": pattern,
                "args": [self._string(kids[0])]}

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
        if not (supported_type(t) or t in ("date", "timestamp", "float", "smallint",
                                            "tinyint")):
            raise _Refused(f"{self._sql(e)} is a literal of type {t}: not supported by the "
                           "streaming ingest")
        if v is None:
            value: Any = None
        elif t in ("double", "float"):
            value = repr(float(v))
        elif t == "string":
            value = str(v.toString())
        elif decimal_type(t):  # py4j hands a java.math.BigDecimal over as a Python Decimal
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
        dec = [decimal_type(x) for x in types]
        if dec[0] or dec[1]:
            if fn not in ("add", "sub", "mul") or not (dec[0] and dec[1]):
                raise _Refused(f"{self._sql(e)}: decimal {cls} is not supported by the "
                               "streaming ingest (decimal + - * only)")
            empty = [pa.array([], arrow_type(x)) for x in types]
            got = {"add": pc.add, "sub": pc.subtract, "mul": pc.multiply}[fn](*empty).type
            if got != arrow_type(t):
                raise _Refused(f"{self._sql(e)}: Spark's result type {t} loses precision "
                               "(not supported by the streaming ingest)")
        elif t not in NUMERIC or types != [t, t]:
            raise _Refused(f"{self._sql(e)}: {cls} of {types} giving {t} is not supported")
        return {"op": "arith", "fn": fn, "type": t, "ansi": mode == "ANSI",
                "args": [self.compile(k) for k in kids]}

    def _cast(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        child = kids[0]
        src = str(child.dataType().simpleString())
        mode = str(e.evalMode().toString())
        ok = src == t or (src in (*NUMERIC, "boolean") and t in (*NUMERIC, "boolean"))
        sd, td = decimal_type(src), decimal_type(t)
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

    def _like(self, e: Any, cls: str, t: str, kids: list[Any]) -> Tree:
        pattern = self._literal_string(e, kids[1])
        escape = str(e.escapeChar())
        regex = None if pattern is None else _like_regex(pattern, escape)
        if regex is None and pattern is not None:
            raise _Refused(f"{self._sql(e)}: the pattern {pattern!r} is invalid in Spark "
                           f"(escape character {escape!r})")
        return {"op": "like", "type": "boolean", "regex": regex,
                "args": [self._string(kids[0])]}



_Handler = Callable[[_Compiler, Any, str, str, list[Any]], Tree]
_Compiler._HANDLERS = {
    "AttributeReference": _Compiler._column, "Between": _Compiler._with,
    "With": _Compiler._with, "CommonExpressionRef": _Compiler._ref,
    "And": _Compiler._generic, "Or": _Compiler._generic, "In": _Compiler._generic,
    **dict.fromkeys([*_COMPARE, *_UNARY], _Compiler._generic),
    **dict.fromkeys(_ARITH, _Compiler._arith), **dict.fromkeys(_STRPRED, _Compiler._strpred),
    "UnaryMinus": _Compiler._neg, "Cast": _Compiler._cast, "Like": _Compiler._like,
}

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
