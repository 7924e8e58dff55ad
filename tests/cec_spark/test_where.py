"""``[filter].where`` compiled by Spark and evaluated on Arrow (cec_spark.ingest.where):
hand-built trees without Spark, then the rows Spark's ``df.filter`` keeps against ours."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Iterator
from typing import Any

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
    # one partition: one task per condition of the union (_spark_ids_all)
    df = spark.createDataFrame(rows, SCHEMA).coalesce(1)
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


def _our_ids(spark: Any, batch: pa.RecordBatch, where: str) -> list[int]:
    compiled = CompiledWhere.from_json(compile_where(spark, where, SCHEMA).to_json())
    return sorted(batch.filter(compiled.keep(batch)).column("id").to_pylist())


@pytest.mark.spark
def test_spark_and_evaluate_keep_the_same_rows(spark: Any, table: tuple[Any, Any]) -> None:
    df, batch = table
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    want = _spark_ids_all(df, AGREE)
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
