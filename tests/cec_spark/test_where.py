"""``[filter].where`` compiled by Spark and evaluated on Arrow (cec_spark.ingest.where):
hand-built trees without Spark, then the rows Spark's ``df.filter`` keeps against ours."""

from __future__ import annotations

import itertools
import math
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cec.errors import SpecError
from cec_spark.errors import InputError
from cec_spark.ingest.where import CompiledWhere, _like_regex, compile_where, evaluate

NAN = float("nan")


def col(name: str, t: str) -> dict[str, Any]:
    return {"op": "col", "name": name, "type": t}


def lit(t: str, v: Any) -> dict[str, Any]:
    return {"op": "lit", "type": t, "value": v}


def node(op: str, *args: dict[str, Any], t: str = "boolean", **kw: Any) -> dict[str, Any]:
    return {"op": op, "type": t, "args": list(args), **kw}


def kept(tree: dict[str, Any], batch: pa.RecordBatch) -> list[int]:
    mask = evaluate(tree, batch)
    assert isinstance(mask, pa.BooleanArray) and mask.null_count == 0
    return [i for i, k in enumerate(mask.to_pylist()) if k]


BATCH = pa.record_batch({
    "a": pa.array([1, None, 3, -(2**63), 0, 6], pa.int64()),
    "z": pa.array([0, 0, 1, -1, None, 2], pa.int64()),
    "d": pa.array([1.0, NAN, None, -0.0, 2.5, -math.inf]),
    "s": pa.array(["ab", None, "a%b", "x\ny", "", "a_b"]),
    "b": pa.array([True, None, False, True, None, False]),
})


# --------------------------------------------------------------------------- no Spark


def test_doubles_compare_as_spark_nan_largest_and_equal_to_itself() -> None:
    d = col("d", "double")
    assert kept(node("cmp", d, lit("double", "1.0"), fn="gt"), BATCH) == [1, 4]
    assert kept(node("cmp", d, lit("double", "nan"), fn="eq"), BATCH) == [1]
    assert kept(node("cmp", d, lit("double", "nan"), fn="lt"), BATCH) == [0, 3, 4, 5]
    assert kept(node("cmp", d, lit("double", "0.0"), fn="eq"), BATCH) == [3]  # -0.0
    assert kept(node("cmp", d, lit("double", None), fn="eqns"), BATCH) == [2]
    assert kept(node("isnan", d), BATCH) == [1]


def test_three_valued_logic_and_in_with_null() -> None:
    b, a = col("b", "boolean"), col("a", "bigint")
    assert kept(node("not", b), BATCH) == [2, 5]
    assert kept(node("or", b, node("isnull", b)), BATCH) == [0, 1, 3, 4]
    assert kept(node("not", node("and", b, node("cmp", a, lit("bigint", 2), fn="gt"))),
                BATCH) == [0, 2, 3, 4, 5]  # NULL AND NULL is NULL: row 1 goes
    in_null = node("in", a, lit("bigint", 3), lit("bigint", None))
    assert kept(in_null, BATCH) == [2]
    assert kept(node("not", in_null), BATCH) == []  # a NOT IN (3, NULL) is never TRUE
    assert kept(node("not", node("in", a, lit("bigint", 3), lit("bigint", 6))),
                BATCH) == [0, 3, 4]


def test_arithmetic_wraps_or_raises_only_where_spark_evaluates() -> None:
    a, z = col("a", "bigint"), col("z", "bigint")
    div = node("arith", a, z, t="bigint", fn="idiv", ansi=False)
    assert kept(node("cmp", div, lit("bigint", -(2**63)), fn="eq"), BATCH) == [3]  # wraps
    assert kept(node("isnull", div), BATCH) == [0, 1, 4]  # by zero: NULL without ANSI
    ansi = node("arith", node("cast", a, t="double", mode="ansi"),
                node("cast", z, t="double", mode="ansi"), t="double", fn="div", ansi=True)
    with pytest.raises(InputError, match=r"row 0 .*DIVIDE_BY_ZERO"):
        evaluate(node("cmp", ansi, lit("double", "1.0"), fn="gt"), BATCH)
    # z <> 0 AND a / z > 1: the division is not evaluated where z = 0
    guarded = node("and", node("cmp", node("not", node("cmp", z, lit("bigint", 0), fn="eq"))
                                , lit("boolean", True), fn="eq"),
                   node("cmp", ansi, lit("double", "1.0"), fn="gt"))
    assert kept(guarded, BATCH) == [2, 3, 5]
    # a NULL dividend: Spark's Divide returns NULL before it checks the divisor's zero
    null_div = node("and", node("isnull", a), node("cmp", ansi, lit("double", "1.0"),
                                                   fn="gt"))
    assert kept(null_div, BATCH) == []
    neg = node("neg", a, t="bigint", ansi=True)
    with pytest.raises(InputError, match="ARITHMETIC_OVERFLOW"):
        evaluate(node("cmp", neg, lit("bigint", 0), fn="gt"), BATCH)
    add = node("arith", a, lit("bigint", -1), t="bigint", fn="add", ansi=True)
    with pytest.raises(InputError, match=r"row 3 .*ARITHMETIC_OVERFLOW"):
        evaluate(node("cmp", add, lit("bigint", 0), fn="gt"), BATCH)
    mod = node("arith", a, lit("bigint", -2), t="bigint", fn="mod", ansi=True)
    assert kept(node("cmp", mod, lit("bigint", 1), fn="eq"), BATCH) == [0, 2]  # Java's %


def test_casts_follow_their_mode() -> None:
    d = col("d", "double")
    legacy = node("cast", d, t="bigint", mode="legacy")  # Java's (long): NaN 0, saturated
    assert kept(node("cmp", legacy, lit("bigint", 0), fn="eq"), BATCH) == [1, 3]
    assert kept(node("cmp", legacy, lit("bigint", -(2**63)), fn="eq"), BATCH) == [5]
    tried = node("cast", d, t="int", mode="try")
    assert kept(node("isnull", tried), BATCH) == [1, 2, 5]
    with pytest.raises(InputError, match=r"row 1 .*CAST_OVERFLOW"):
        evaluate(node("isnull", node("cast", d, t="int", mode="ansi")), BATCH)


def test_strings_like_and_predicates() -> None:
    s = col("s", "string")
    like = node("like", s, regex=_like_regex("a%", "\\"))
    assert kept(like, BATCH) == [0, 2, 5]
    assert kept(node("like", s, regex=_like_regex("a\\_b", "\\")), BATCH) == [5]
    assert kept(node("like", s, regex=_like_regex("x_y", "\\")), BATCH) == [3]  # . matches \n
    assert kept(node("like", s, regex=_like_regex("%", "\\")), BATCH) == [0, 2, 3, 4, 5]
    assert _like_regex("a\\", "\\") is None and _like_regex("\\a", "\\") is None
    assert _like_regex("a.b(", "\\") == "(?s)\\Aa\\x{2e}b\\x{28}\\z"
    assert kept(node("strpred", s, fn="contains", pattern="%"), BATCH) == [2]
    assert kept(node("strpred", s, fn="startswith", pattern=""), BATCH) == [0, 2, 3, 4, 5]
    assert kept(node("cmp", s, lit("string", "b"), fn="lt"), BATCH) == [0, 2, 4, 5]


def test_compiled_where_round_trips_as_json_and_checks_columns() -> None:
    tree = node("cmp", col("a", "bigint"), lit("bigint", 2), fn="gt")
    cw = CompiledWhere("a > 2", tree, ("a",))
    again = CompiledWhere.from_json(cw.to_json())
    assert again == cw and again.keep(BATCH).to_pylist() == [False, False, True, False,
                                                             False, True]
    with pytest.raises(InputError, match="no column 'q'"):
        evaluate(node("isnull", col("q", "bigint")), BATCH)
    with pytest.raises(InputError, match="column 'd' is double"):
        evaluate(node("isnull", col("d", "bigint")), BATCH)


# --------------------------------------------------------------------------- Spark

SCHEMA = "id BIGINT, a BIGINT, z BIGINT, big BIGINT, d DOUBLE, s STRING, b BOOLEAN"
ARROW = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("z", pa.int64()),
                   ("big", pa.int64()), ("d", pa.float64()), ("s", pa.string()),
                   ("b", pa.bool_())])


def _rows(n: int = 300) -> list[tuple[Any, ...]]:
    rng = random.Random(11)

    def maybe(v: Any, p: float = 0.1) -> Any:
        return None if rng.random() < p else v

    rows = []
    for i in range(n):
        d = rng.choice([rng.gauss(0, 3), rng.gauss(0, 3), rng.uniform(-100, 100), NAN,
                        math.inf, -math.inf, -0.0, 0.0, 1.0, 0.5])
        rows.append((i, maybe(rng.randrange(0, 60)), maybe(rng.randrange(-3, 4)),
                     maybe(rng.choice([2**63 - 1, -(2**63), 2**62, 3 * 2**61, -5, 7])),
                     maybe(d), maybe(rng.choice(["ab", "b", "a%b", "x\ny", "a_b", "", "é",
                                                 "zz", "A", "ba"])),
                     maybe(rng.random() < 0.5, 0.2)))
    rows[0] = (0, None, 0, 1, 1.0, "ab", True)  # a NULL dividend over a zero divisor
    return rows


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("cec-where-test")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    yield session
    session.stop()


@pytest.fixture(scope="module")
def table(spark: Any) -> tuple[Any, pa.RecordBatch]:
    rows = _rows()
    # not cached: an InMemoryRelation's batch statistics prune the batches of d = NaN;
    # one partition: one task per condition of the union (_spark_ids_all); checkpointed
    # (a plain RDD of the rows, no statistics): each condition of the union read the
    # rows again from Python (a Python worker per task: 12 s for 31 conditions, 1.6 s
    # checkpointed, at load 30)
    df = spark.createDataFrame(rows, SCHEMA).coalesce(1).localCheckpoint()
    batch = pa.RecordBatch.from_pylist([dict(zip(ARROW.names, r, strict=True)) for r in rows],
                                       schema=ARROW)
    return df, batch


# the rows Spark keeps (ANSI on, PySpark 4's default) == the rows evaluate keeps
AGREE = [
    "a > 10", "a >= 1.5", "a <> 7", "a <=> null", "a < 2 or a is null",
    "d > 0.5", "d = 'NaN'", "d < 'NaN'", "d >= 0", "d = 0", "d <=> -0.0", "d > a",
    "a between 5 and 50", "d between -1 and 1", "not (a between 5 and 50)",
    "a in (1, 2, 3, 40)", "a in (1, null)", "a not in (1, null)", "a not in (1, 2)",
    "d in (0.0, cast('NaN' as double), 1)", "s = 'ab'", "s <> 'ab'", "s < 'b'", "s >= 'a_b'",
    "s like 'a%'", "s like '_b'", "s like '%\\\\_%'", "s not like '%a%'", "s like 'x%y'",
    "s like '%#%%' escape '#'",
    "startswith(s, 'a')", "endswith(s, 'b')", "contains(s, '%')",
    "b", "not b", "b is null", "b = true or a > 50", "b and d > 0", "b or d is null",
    "a is not null and d is null", "a + z > 20", "a - z * 2 < 0", "-a > -10", "a % 7 = 3",
    "a % -3 = 0", "z <> 0 and a / z > 1", "z <> 0 and a % z = 0", "z <> 0 and a div z = 2",
    "d * 2 + 1 > a / 3", "d between -100 and 100 and cast(d as int) = 0",
    "cast(a as double) / 4 > 2.5", "a * 1.5 > 20", "a > 1.5 + 2", "a + 1.25 > 10.5",
    "isnan(d) or d > 1", "(a > 5 or d < 0) and not (s is null)", "1 = 1",
    "a = null", "cast(b as int) + a > 30", "a is null and a / z > 0", "-d < 0",
    "d % 2 > 1", "z <> 0 and d / z < -1", "z <> 0 and (a / z > 1 or a / z < -1)",
]

LEGACY = ["a / z > 1", "a % z = 0", "a div z = 1", "big + big > 0", "-big > 0",
          "cast(d as bigint) = 0", "cast(d as int) > 5", "cast(big as int) < 0",
          "big * 3 < 0", "big div -1 < 0", "d / z > 0"]

# Spark's job fails (ANSI errors); so does evaluate, with the same error class
FAIL = [("a / z > 1", "DIVIDE_BY_ZERO"), ("big + 1 > 0", "ARITHMETIC_OVERFLOW"),
        ("cast(d as bigint) > 0", "CAST_OVERFLOW"), ("-big > 0", "ARITHMETIC_OVERFLOW"),
        ("big * 3 < 0", "ARITHMETIC_OVERFLOW")]

REFUSED = [("upper(s) = 'X'", "Upper"), ("s = 5", "Cast from string to bigint"),
           ("a * 1.5 / 2 > 1", "decimal Divide"), ("rand() > 0.5", "Rand"),
           ("1/0 > 0", "DIVIDE_BY_ZERO"), ("nope > 1", "not a valid Spark SQL condition"),
           ("coalesce(a, 0) > 1", "Coalesce"), ("null", "FILTER_NOT_BOOLEAN"),
           ("cast(d as string) = '1'", "Cast from double to string")]


def _spark_ids(df: Any, where: str) -> list[int]:
    return sorted(r["id"] for r in df.filter(where).select("id").collect())


def _spark_ids_all(df: Any, wheres: list[str]) -> dict[str, list[int]]:
    """The rows ``df.filter(w)`` keeps for each of ``wheres``, in one Spark job (a union
    of the filters: one job per condition took 2 s each on a loaded machine)."""
    from functools import reduce

    from pyspark.sql import functions as F

    parts = [df.filter(w).select(F.lit(i).alias("w"), "id") for i, w in enumerate(wheres)]
    got: dict[str, list[int]] = {w: [] for w in wheres}
    for r in reduce(lambda x, y: x.unionAll(y), parts).collect():
        got[wheres[r["w"]]].append(r["id"])
    return {w: sorted(ids) for w, ids in got.items()}


_COMPILED: dict[tuple[str, str, str], CompiledWhere] = {}


def _compiled(spark: Any, where: str, schema: str = SCHEMA) -> CompiledWhere:
    """``where`` compiled once per schema and ANSI mode (through its JSON, as a task gets
    it): the tests evaluate the same condition on batches of several shapes."""
    key = (where, schema, spark.conf.get("spark.sql.ansi.enabled"))
    if key not in _COMPILED:
        _COMPILED[key] = CompiledWhere.from_json(compile_where(spark, where, schema).to_json())
    return _COMPILED[key]


def _our_ids(spark: Any, batch: pa.RecordBatch | pa.Table, where: str,
             schema: str = SCHEMA) -> list[int]:
    compiled = _compiled(spark, where, schema)
    # the id column filtered (pyarrow 26 filters no batch with a string_view column)
    return sorted(batch.column("id").filter(compiled.keep(batch)).to_pylist())


@pytest.fixture(scope="module")
def agree_want(table: tuple[Any, Any]) -> dict[str, list[int]]:
    """The rows Spark keeps for each of AGREE (ANSI on), one Spark job for the module."""
    return _spark_ids_all(table[0], AGREE)


@pytest.mark.spark
def test_spark_and_evaluate_keep_the_same_rows(spark: Any, table: tuple[Any, Any],
                                               agree_want: dict[str, list[int]]) -> None:
    df, batch = table
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    want = agree_want
    for where in AGREE:
        assert _our_ids(spark, batch, where) == want[where], where
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        want = _spark_ids_all(df, LEGACY)
        for where in LEGACY:
            assert _our_ids(spark, batch, where) == want[where], where
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")
    for where, error in FAIL:
        with pytest.raises(Exception, match=error):
            _spark_ids(df, where)
        with pytest.raises(InputError, match=error):
            _our_ids(spark, batch, where)


@pytest.mark.spark
def test_unsupported_conditions_are_refused_naming_the_part(spark: Any) -> None:
    for where, part in REFUSED:
        with pytest.raises(SpecError, match=r"\[filter\].where") as err:
            compile_where(spark, where, SCHEMA, origin="spec.toml")
        assert part in str(err.value) and repr(where) in str(err.value), str(err.value)
        assert err.value.exit_code == 2 and err.value.field == ("filter", "where")
        assert str(err.value).startswith("spec.toml: [filter].where: ")


# ------------------------------------------------- Spark: the references widened (issue 39)


@pytest.mark.spark
def test_every_batch_shape_keeps_what_spark_keeps(spark: Any, table: tuple[Any, Any],
                                                 agree_want: dict[str, list[int]]) -> None:
    """The 300 rows as large_string and string_view strings, cut into record batches of
    1, 0, 96 and 203 rows, and as a Table of chunked columns: every AGREE condition keeps
    Spark's rows; an empty batch keeps none and fails for no FAIL condition."""
    _, batch = table
    s = batch.schema.get_field_index("s")
    variants: dict[str, pa.RecordBatch | pa.Table] = {
        "large_string": batch.set_column(s, "s", batch.column(s).cast(pa.large_string()))}
    if hasattr(pa, "string_view"):
        variants["string_view"] = batch.set_column(s, "s",
                                                   batch.column(s).cast(pa.string_view()))
    cuts = [0, 1, 1, 97, 300]
    pieces = [batch.slice(lo, hi - lo) for lo, hi in itertools.pairwise(cuts)]
    variants["chunked table"] = pa.Table.from_batches(pieces)
    assert variants["chunked table"].column("id").num_chunks == 4
    empty = batch.slice(0, 0)
    for where in AGREE:
        for name, v in variants.items():
            assert _our_ids(spark, v, where) == agree_want[where], (where, name)
        ids = [i for p in pieces for i in _our_ids(spark, p, where)]
        assert sorted(ids) == agree_want[where], (where, "record batches")
        assert _our_ids(spark, empty, where) == [], where
    for where, _ in FAIL:
        assert _our_ids(spark, empty, where) == [], where


WIDE_SCHEMA = "id BIGINT, i INT, a BIGINT, m DECIMAL(10,2), n DECIMAL(4,1)"
WIDE_ARROW = pa.schema([("id", pa.int64()), ("i", pa.int32()), ("a", pa.int64()),
                        ("m", pa.decimal128(10, 2)), ("n", pa.decimal128(4, 1))])


def _wide_rows(n: int = 120) -> list[tuple[Any, ...]]:
    from decimal import Decimal

    rng = random.Random(5)

    def maybe(v: Any, p: float = 0.15) -> Any:
        return None if rng.random() < p else v

    return [(k, maybe(rng.choice([2**31 - 1, -(2**31), 0, 1, -7, 40, 3, 2**30])),
             maybe(rng.choice([0, 5, -3, 2**40, 7, 40])),
             maybe(Decimal(rng.choice(["0.10", "-1.25", "99999999.99", "0.00", "3.33",
                                       "-0.01", "1.50"]))),
             maybe(Decimal(rng.choice(["0.1", "-2.5", "999.9", "0.0", "1.5"]))))
            for k in range(n)]


# int (pa.int32) and decimal columns, with nulls; ANSI on, then off
WIDE = ["i > 10", "i = a", "i in (1, 40, null)", "i not in (1, 40)", "i between -10 and 10",
        "i % 3 = 1", "i div 2 > 3", "i / 2 > 3", "cast(i as bigint) + 1 > 0", "i <=> null",
        "i < a", "i < 100 and i + 1 > 0", "i > -10 and -i < 0",
        "m > 1.5", "m = 0.1", "m + m > 3", "m - 1 < 0", "m * m > 1", "m between -1 and 1",
        "m in (0.10, 3.33)", "m is null", "m > i", "m + m + m = 0.30", "-m > 0",
        "cast(i as decimal(12,2)) > m", "m * 2 > 1", "n + m > 1", "n * n > 2", "m = n",
        "m <=> n", "m > 0 and i > 0"]
WIDE_LEGACY = ["i + 1 > 0", "i * 2 > 0", "-i < 0", "cast(a as int) > 0", "i - 1 > 0"]
# Spark fails the job and so does evaluate; the row is compared (test_the_failing_row...)
WIDE_FAIL = [("i + 1 > 0", "ARITHMETIC_OVERFLOW"), ("-i < 0", "ARITHMETIC_OVERFLOW"),
             ("i * 2 > 0", "ARITHMETIC_OVERFLOW"), ("cast(a as int) > 0", "CAST_OVERFLOW")]


@pytest.fixture(scope="module")
def wide(spark: Any) -> tuple[list[tuple[Any, ...]], Any, pa.RecordBatch]:
    rows = _wide_rows()
    df = spark.createDataFrame(rows, WIDE_SCHEMA).coalesce(1).localCheckpoint()  # as table's
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(WIDE_ARROW.names, r, strict=True)) for r in rows], schema=WIDE_ARROW)
    return rows, df, batch


@pytest.mark.spark
def test_int_and_decimal_columns_keep_what_spark_keeps(
        spark: Any, wide: tuple[list[tuple[Any, ...]], Any, pa.RecordBatch]) -> None:
    _, df, batch = wide
    assert batch.schema.field("i").type == pa.int32() and batch.column("m").null_count > 0
    want = _spark_ids_all(df, WIDE)
    for where in WIDE:
        assert _our_ids(spark, batch, where, WIDE_SCHEMA) == want[where], where
    assert want["m + m + m = 0.30"] and want["i = a"]  # exact decimals; int vs bigint
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        want = _spark_ids_all(df, WIDE_LEGACY)  # int overflow wraps at 2^31
        for where in WIDE_LEGACY:
            assert _our_ids(spark, batch, where, WIDE_SCHEMA) == want[where], where
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")


def _first_row_spark_rejects(df: Any, where: str, error: str, k: int) -> None:
    """Spark's filter of rows 0..k-1 passes and of rows 0..k fails with ``error``: row k
    is the first row Spark's filter rejects (``df`` is one partition of the rows in
    order; Spark filters after a limit, never before it)."""
    assert df.rdd.getNumPartitions() == 1
    df.limit(k).filter(where).count()
    with pytest.raises(Exception, match=error):
        df.limit(k + 1).filter(where).count()


@pytest.mark.spark
def test_the_failing_row_is_the_one_spark_rejects(
        spark: Any, table: tuple[Any, Any],
        wide: tuple[list[tuple[Any, ...]], Any, pa.RecordBatch]) -> None:
    """An ANSI error names the row: the first row Spark's job fails on (Spark's own
    message names no row; it is found here as the shortest prefix of the rows Spark
    fails on). In a Table of several chunks the row counts from the Table's start."""
    _, wide_df, wide_batch = wide
    cases = [(*table, SCHEMA, *FAIL[0]), (*table, SCHEMA, *FAIL[2]),
             *((wide_df, wide_batch, WIDE_SCHEMA, w, e) for w, e in WIDE_FAIL[::3])]
    for df, batch, schema, where, error in cases:
        with pytest.raises(InputError, match=error) as err:
            _our_ids(spark, batch, where, schema)
        m = re.search(r"row (\d+) of the batch", str(err.value))
        assert m and repr(where) in str(err.value), str(err.value)
        k = int(m.group(1))
        assert k > 0, (where, "a row after the first: the test tells rows apart")
        _first_row_spark_rejects(df, where, error, k)
        chunked = pa.Table.from_batches([batch.slice(0, k // 2), batch.slice(k // 2)])
        with pytest.raises(InputError, match=rf"row {k} of the batch"):
            _our_ids(spark, chunked, where, schema)
        with pytest.raises(InputError, match=r"row 0 of the batch"):
            _our_ids(spark, batch.slice(k), where, schema)


# a file read through the source's own path (plan_source, read_chunk, compile_filter,
# the Projector that filters each batch) against Spark's filter of the same file
FILE_COLUMNS = [("item_time", "BIGINT", pa.int64()), ("item_id", "BIGINT", pa.int64()),
                ("item_price", "DOUBLE", pa.float64()), ("id", "BIGINT", pa.int64()),
                ("a", "BIGINT", pa.int64()), ("z", "BIGINT", pa.int64()),
                ("d", "DOUBLE", pa.float64()), ("s", "STRING", pa.string()),
                ("b", "BOOLEAN", pa.bool_())]
FILE_WHERE = ["a <=> null", "a in (1, null)", "z <> 0 and a / z > 1", "d > 0.5", "d = 'NaN'",
              "d < 'NaN'", "d = 0", "-d < 0", "s < 'b'", "s like 'a%'", "s is not null",
              "not b", "b or d is null"]


def _file_rows(n: int = 200) -> list[dict[str, Any]]:
    out = []
    for r in _rows(n):
        i, a, z, _big, d, s, b = r
        out.append({"item_time": BASE_US + 1000 * i, "item_id": i % 7, "item_price": 1.0,
                    "id": i, "a": a, "z": z, "d": d,
                    "s": None if s is None else s.replace("\n", " "), "b": b})
    return out


BASE_US = 1_700_000_000_000_000


def _write_file(path: Path, rows: list[dict[str, Any]]) -> None:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        schema = pa.schema([(n, t) for n, _, t in FILE_COLUMNS])
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=50)
        return

    def text(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return ("NaN" if math.isnan(v) else "Inf" if v == math.inf else
                    "-Inf" if v == -math.inf else repr(v))
        return str(v)

    names = [n for n, _, _ in FILE_COLUMNS]
    lines = [",".join(names)] + [",".join(text(r[n]) for n in names) for r in rows]
    path.write_text("\n".join(lines) + "\n")


_FILE_COMPILED: dict[tuple[str, Any], CompiledWhere | None] = {}


def _source_path_ids(spark: Any, path: Path, wheres: list[str], *,
                     chunked: bool = True) -> dict[str, list[int]]:
    """The ``id`` of every row the ingest's own path keeps, for each condition."""
    from dataclasses import replace

    from cec.spec import parse_spec
    from cec_spark.ingest.project import Projector, project_chunk
    from cec_spark.ingest.query import compile_filter
    from cec_spark.source.planner import plan_source
    from cec_spark.source.read import read_chunk
    from cec_spark.source.types import TimeSpec
    from tests.cec_spark.helpers import spec_text

    kind = path.suffix.lstrip(".")
    spec = parse_spec(spec_text(f'kind = "{kind}"\npath = "{path}"\ntime_field = "item_time"'
                                "\nchunk_rows = 64", where=None), origin="s.toml")
    plan = plan_source(spec)
    assert not chunked or len(plan.chunks) > 1
    per_chunk = [(c, list(read_chunk(c, plan.columns, TimeSpec.of(spec), batch_rows=40)))
                 for c in plan.chunks]
    assert not chunked or sum(len(bs) for _, bs in per_chunk) > len(plan.chunks)
    got = {}
    for where in wheres:
        spec_w = replace(spec, where=where)
        key = (where, plan.columns)
        if key not in _FILE_COMPILED:  # the same columns in both formats
            _FILE_COMPILED[key] = compile_filter(spark, spec_w, plan.columns)
        project = Projector(spec_w, None, _FILE_COMPILED[key])
        # seq is the source row number here (no lateness settings): the row's id
        # (project_chunk: as the ingest tasks call it, a failing row named in its file)
        got[where] = sorted(i for c, bs in per_chunk for b in project_chunk(project, c, bs)
                            for i in b.column("seq").to_pylist())
    return got


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_file_read_by_the_source_keeps_what_spark_keeps(spark: Any, tmp_path: Path,
                                                         fmt: str) -> None:
    """Spark's filter of the file (its rows, with nulls, NaN, inf and -0.0, in chunks of
    row groups or lines cut into 40-row batches) keeps the rows the source's own path
    keeps, but for one documented difference of the CSV reader: an empty string field is
    NULL to Spark and '' to cec (its reader has ``strings_can_be_null=False``; in CSV an
    empty string and a missing one are the same text). The reference reads parquet
    without Spark's filter pushdown: the row groups' statistics do not order NaN as
    Spark SQL does, and with pushdown ``d = 'NaN'`` keeps no row at all."""
    rows = _file_rows()
    path = tmp_path / f"items.{fmt}"
    _write_file(path, rows)
    ddl = ", ".join(f"{n} {t}" for n, t, _ in FILE_COLUMNS)
    df = (spark.read.schema(ddl).option("header", True).csv(str(path)) if fmt == "csv"
          else spark.read.parquet(str(path)))
    spark.conf.set("spark.sql.parquet.filterPushdown", "false")
    try:
        want = _spark_ids_all(df, FILE_WHERE)
    finally:
        spark.conf.unset("spark.sql.parquet.filterPushdown")
    got = _source_path_ids(spark, path, FILE_WHERE)
    empty = sorted(r["id"] for r in rows if not r["s"])  # None or ''
    assert any(r["s"] == "" for r in rows) and any(r["s"] is None for r in rows)
    for where in FILE_WHERE:
        if fmt == "csv" and where in ("s < 'b'", "s is not null"):  # '' < 'b', not NULL
            assert got[where] == sorted({*want[where], *empty}) != want[where], where
        else:
            assert got[where] == want[where], where


@pytest.fixture(scope="module")
def file_error(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[InputError, int]:
    """The source path's error for a condition Spark's filter of a parquet file fails
    on (DIVIDE_BY_ZERO), and the first row Spark rejects."""
    where = "id >= 50 and a / z > 1"
    rows = _file_rows()
    path = tmp_path_factory.mktemp("where-error") / "items.parquet"
    _write_file(path, rows)
    with pytest.raises(Exception, match="DIVIDE_BY_ZERO"):
        spark.read.parquet(str(path)).filter(where).count()
    with pytest.raises(InputError, match="DIVIDE_BY_ZERO") as err:
        _source_path_ids(spark, path, [where])
    # a / z only where id >= 50 (AND); Spark evaluates the divisor first, and a NULL
    # dividend gives NULL (as for FAIL[0] in test_the_failing_row_is_the_one_spark_rejects)
    first = next(r["id"] for r in rows if r["id"] >= 50 and r["z"] == 0 and r["a"] is not None)
    return err.value, first


@pytest.mark.spark
def test_a_file_rows_error_names_the_row_spark_rejects(
        file_error: tuple[InputError, int]) -> None:
    error, first = file_error
    assert first % 100 >= 40, "a row past the first 40-row batch: batch row != source row"
    assert f"row {first % 100 % 40} of the batch, seq {first}: [DIVIDE_BY_ZERO]" in str(error)


@pytest.mark.spark
def test_a_file_rows_error_names_the_file(file_error: tuple[InputError, int]) -> None:
    error, first = file_error
    assert f"items.parquet: row {first}: [filter].where" in str(error), str(error)


@pytest.mark.spark
def test_a_csv_rows_error_names_its_line(spark: Any, tmp_path: Path) -> None:
    """In a CSV file the failing row is named by its line (the header is line 1)."""
    rows = _file_rows()
    path = tmp_path / "items.csv"
    _write_file(path, rows)
    with pytest.raises(InputError, match="DIVIDE_BY_ZERO") as err:
        _source_path_ids(spark, path, ["id >= 50 and a / z > 1"])
    first = next(r["id"] for r in rows if r["id"] >= 50 and r["z"] == 0 and r["a"] is not None)
    assert f"items.csv: line {first + 2}: [filter].where" in str(err.value), str(err.value)


@pytest.mark.spark
def test_a_parquet_files_int_and_decimal_columns_are_bigint_and_double_to_cec(
        spark: Any, tmp_path: Path) -> None:
    """A documented difference: the source types a parquet int32 column as int64 and a
    decimal one as float64 (``cec_spark.source.file_state._type_name``), and the filter is
    compiled over those types, so a condition over them is Spark's over BIGINT and
    DOUBLE, not over the file's INT and DECIMAL: no int overflow at 2^31, inexact
    decimal sums. Spark's filter of the file fails or keeps other rows."""
    from decimal import Decimal

    import pyarrow.parquet as pq

    n = 8
    table = pa.table({"item_time": pa.array(BASE_US + np.arange(n) * 1000, pa.int64()),
                      "item_id": pa.array(np.arange(n) % 3, pa.int64()),
                      "item_price": pa.array(np.ones(n)),
                      "i": pa.array([2**31 - 1, 0, 1, -5, 7, 2**31 - 1, 3, 4], pa.int32()),
                      "m": pa.array([Decimal("0.10")] * n, pa.decimal128(10, 2))})
    path = tmp_path / "items.parquet"
    pq.write_table(table, path)
    df = spark.read.parquet(str(path))
    assert sorted(r["item_time"] - BASE_US for r in df.filter("m + m + m = 0.30")
                  .select("item_time").collect()) == list(range(0, n * 1000, 1000))
    got = _source_path_ids(spark, path, ["m + m + m = 0.30", "i + 1 > 0"], chunked=False)
    assert got["m + m + m = 0.30"] == []  # 0.1 + 0.1 + 0.1 != 0.3 in doubles
    with pytest.raises(Exception, match="ARITHMETIC_OVERFLOW"):
        df.filter("i + 1 > 0").count()
    assert got["i + 1 > 0"] == [0, 1, 2, 4, 5, 6, 7]  # 2^31 - 1 + 1 is a bigint
