"""The Python API (cec_spark.api) on real local Spark: the same spec as the TOML, the same
exports as the CLI, a DataFrame source (also across a kill -9 and `cec recover`),
results() = spark.read.format("cec"), and bad builder calls named."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import cec_spark as cec
from cec.errors import SpecError, UsageError
from cec.spec import load_spec
from cec.spec.parse import field_error
from cec_spark.report import RecoverResult
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file
from cli.app import main
from cli.schema import problems
from tests.cec_spark.helpers import (
    REPO,
    read_export_csv,
    reference_count_windows,
    spec_text,
    wait_for,
    write_items_csv,
)
from tests.cec_spark.helpers import cec as cec_cli

P = 2
ROWS = 20_000
US = dt.timedelta(microseconds=1)
WINDOW = '{ kind = "time", size = "1s", slide = "500ms" }'


def _toml(csv: Path) -> str:
    source = f'kind = "csv"\npath = "{csv}"\ntime_field = "item_time"\nchunk_rows = 8000'
    return spec_text(source, window=WINDOW, partitions=P)


def _builder(csv: Path) -> cec.Stream:
    """The pipeline of :func:`_toml`, built in Python."""
    return (cec.stream(str(csv), time="item_time", chunk_rows=8000)
            .filter("item_price >= 0")
            .group_by("item_id")
            .window(time="1 second", slide="500 milliseconds")
            .agg(avg="item_price")
            .checkpoint(Q="2x", U=1_000_000, CI_ms=5, CP_ms=100)
            .options(partitions=P))


# --------------------------------------------------------------------------- pure


def test_the_builder_gives_the_spec_the_toml_gives(tmp_path: Path) -> None:
    csv = tmp_path / "items.csv"
    (tmp_path / "items.toml").write_text(_toml(csv))
    from_file = load_spec(tmp_path / "items.toml")
    built = _builder(csv).spec()
    assert built == dataclasses.replace(from_file, origin=cec.api.ORIGIN)
    # immutable: a call returns a new builder, the old one is unchanged
    b = _builder(csv)
    assert b.window(count=5).spec().aggregate.window.kind == "count"
    assert b.window(session="30 seconds").spec().aggregate.window.kind == "session"
    assert b.spec().aggregate.window.kind == "time"


@pytest.mark.parametrize(("make", "start", "field"), [
    (lambda s: s.agg(median="item_price"), ".agg(median='item_price')", "[aggregate].function"),
    (lambda s: s.window(), ".window()", "[aggregate].window.size"),
    (lambda s: s.window(slide="1s"), ".window(slide='1s')", "[aggregate].window.size"),
    (lambda s: s.window(time="10 parsecs"), ".window(time='10 parsecs')",
     "[aggregate].window.size"),
    (lambda s: s.window(count=5, slide=9), ".window(count=5, slide=9)",
     "[aggregate].window.slide"),
    (lambda s: s.window(session="1s", slide="1s"), ".window(slide='1s', session='1s')",
     "[aggregate].window.slide"),
    (lambda s: s.window(time="1s", session="1s"), ".window(time='1s', session='1s')",
     "[aggregate].window.size"),
    (lambda s: s.checkpoint(Q="lots"), ".checkpoint(Q='lots')", "[checkpoint].Q"),
    (lambda s: s.options(partitons=2), ".options(partitons=2)", "[run].partitons"),
    (lambda s: s.agg(avg="item_id").spec(), ".agg(avg='item_id')", "[aggregate].field"),
    (lambda s: cec.stream("x.csv").group_by("k"), "stream('x.csv')", "[source].time_field"),
])
def test_a_bad_builder_call_is_a_spec_error_naming_it(make: Any, start: str, field: str,
                                                      tmp_path: Path) -> None:
    s = _builder(tmp_path / "items.csv").filter("item_price < 90")
    with pytest.raises(SpecError) as err:
        make(s)
    assert str(err.value).startswith(f"{start}: {field}: "), str(err.value)
    assert err.value.exit_code == 2


def test_a_pipeline_without_a_window_says_which_call_is_missing() -> None:
    s = cec.generator(rows=10).group_by("item_id").agg("count")
    with pytest.raises(SpecError, match=r"^generator\(rows=10\): \.window\(\.\.\.\) was not "
                                        "called"):
        s.spec()
    with pytest.raises(SpecError, match="the generator has no column 'x'"):
        cec.generator().group_by("x").window(count=2).agg("count").spec()


def test_a_field_error_found_by_the_run_names_the_builder_call(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A problem the run finds with a field of a built spec (Spark cannot analyse the
    [filter]: the driver raises it about the spec's origin) names the call that set it,
    from the error's field, not from its text; the cause stays chained."""
    import cec_spark.run.plan
    import cec_spark.run.rto

    cause = ValueError("Spark: cannot resolve 'x'")

    def bad_filter(spec: Any, *args: object, **kwargs: object) -> None:
        raise field_error(spec.origin, ("filter", "where"), "'x > 1' is not valid") from cause

    monkeypatch.setattr(cec_spark.run.plan, "plan_new_run", bad_filter)
    s = cec.generator(rows=10).filter("x > 1").group_by("item_id").window(count=2).agg("count")
    with pytest.raises(SpecError) as err:
        s.run(tmp_path / "run")
    assert str(err.value) == ".filter('x > 1'): [filter].where: 'x > 1' is not valid"
    assert (err.value.field, err.value.problem) == (("filter", "where"), "'x > 1' is not valid")
    assert err.value.__cause__ is cause
    # an objective below the floor names the .checkpoint() call (checked before any plan)
    monkeypatch.setattr(cec_spark.run.rto, "floor", lambda: (20.0, "measured here"))
    with pytest.raises(SpecError, match=r"^\.checkpoint\(rto='5s'\): \[checkpoint\]\.rto = 5 s "
                                        "is below the floor of 20.0 s, measured here"):
        s.filter("item_price > 0").checkpoint(rto="5s").run(tmp_path / "run")
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """The user's own session (not cec's settings), as a PySpark job has one, with the
    worker daemon the README suggests (the killed job below has none)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master(f"local[{P + 2},3]").appName("cec-api-test")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.python.daemon.module", "cec_spark.driver.daemon")
               .config("spark.ui.enabled", "false").getOrCreate())
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(source csv, run directory, export) of `cec run pipeline` in its own process."""
    d = tmp_path_factory.mktemp("api")
    write_items_csv(d / "items.csv", ROWS, keys=200, seed=3)
    (d / "items.toml").write_text(_toml(d / "items.csv"))
    cec_cli(["run", "pipeline", str(d / "items.toml"), "--log-dir", str(d / "cli")],
            check=True)
    cec_cli(["export", str(d / "cli"), "--out", str(d / "cli.csv")], check=True)
    return d / "items.csv", d / "cli", d / "cli.csv"


def _main(argv: list[str]) -> int:
    """``cec ARGV`` in this process: its exit status (click ends a command that succeeded
    with SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1


def _sorted(df: Any) -> list[tuple[Any, ...]]:
    cols = ["key", "window_start", "window_end", "count", "value"]
    return sorted(tuple(r) for r in df.select(*cols).collect())


@pytest.mark.spark
@pytest.mark.slow
def test_api_and_cli_give_identical_exports(cli_run: tuple[Path, Path, Path], spark: Any,
                                            tmp_path: Path) -> None:
    csv, cli_dir, cli_export = cli_run
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    t0 = time.monotonic()
    res = _builder(csv).run(tmp_path / "run")
    print(f"api run {time.monotonic() - t0:.1f}s")
    assert res.completed and res.outcome.source_rows == ROWS
    assert res.export(tmp_path / "api.csv").rows > 0
    assert (tmp_path / "api.csv").read_bytes() == cli_export.read_bytes()
    # results() is spark.read.format("cec") of the run, and holds what the export holds
    got = _sorted(res.results())
    assert got == _sorted(spark.read.format("cec").load(str(tmp_path / "run")))
    want = read_export_csv(cli_export)
    assert len(got) == len(want)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert sorted((k, (s.astimezone(dt.UTC) - epoch) // US, (e.astimezone(dt.UTC) - epoch) // US,
                   c) for k, s, e, c, _ in got) == sorted(
        (int(k), int(s), int(e), int(c)) for k, s, e, c in
        want[["key", "window_start", "window_end", "count"]].itertuples(index=False))
    assert got == _sorted(cec.api.results(cli_dir))  # the CLI's run, read through the API
    # the session was lent, not changed
    assert spark.conf.get("spark.sql.shuffle.partitions") == shuffle
    # the API's run directory is an ordinary run
    extent = cec.api.inspect_extent(tmp_path / "run")
    assert [e.partition for e in extent.partitions] == list(range(P))


@pytest.mark.spark
@pytest.mark.slow
def test_a_dataframe_source(cli_run: tuple[Path, Path, Path], spark: Any,
                            tmp_path: Path) -> None:
    """The CSV's rows as a DataFrame with a TIMESTAMP time column: written once to
    RUN/source, and the same export as the CLI's run of the CSV."""
    from pyspark.sql import functions as F

    csv, _, cli_export = cli_run
    df = (spark.read.csv(str(csv), header=True, inferSchema=True)
          .withColumn("item_time", F.timestamp_micros("item_time")))
    run = tmp_path / "run"
    built = (cec.stream(df, chunk_rows=8000).filter("item_price >= 0").group_by("item_id")
             .window(time="1 second", slide="500 milliseconds").agg(avg="item_price")
             .options(partitions=P))
    res = built.run(run)
    assert res.completed and res.outcome.source_rows == ROWS
    res.export(tmp_path / "df.csv")
    assert (tmp_path / "df.csv").read_bytes() == cli_export.read_bytes()
    spec = read_run_file(RunLayout(run))[0]  # the run names its staged source
    assert spec.source.kind == "parquet" and spec.source.path == run / "source"
    assert sorted(p.name for p in run.iterdir() if p.name == "source") == ["source"]
    # the same DataFrame into the same directory: refused, nothing changed
    with pytest.raises(UsageError, match="already holds a run"):
        built.run(run)
    # a column the DataFrame lacks: the call that named it, before anything is written
    with pytest.raises(SpecError, match=r"^\.group_by\('itm_id'\): the DataFrame has no "):
        built.group_by("itm_id").run(tmp_path / "other")
    assert not (tmp_path / "other").exists()
    # a session whose Python workers cannot import cec: said before anything is written
    sc = spark.sparkContext
    exe, sc.pythonExec = sc.pythonExec, "/bin/false"
    try:
        with pytest.raises(UsageError, match="Python workers run '/bin/false', which cannot "
                                             "import cec"):
            built.run(tmp_path / "other")
    finally:
        sc.pythonExec = exe
    assert not (tmp_path / "other").exists()


JOB = """
import os
import sys
from pyspark.sql import SparkSession, functions as F
import cec_spark as cec

os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers' Python must have cec
spark = (SparkSession.builder.master("local[4,3]").config("spark.pyspark.python",
         sys.executable).config("spark.ui.enabled", "false").getOrCreate())
df = spark.range(int(sys.argv[2])).select(
    (F.col("id") % 997).alias("item_id"),
    ((F.col("id") * 7919) % 1000 / 10.0).alias("item_price"),
    (F.lit(1_700_000_000_000_000) + F.col("id") * 1000).alias("item_time"))
res = (cec.stream(df, time="item_time", chunk_rows=8_000).group_by("item_id")
       .window(count=10).agg(avg="item_price").options(partitions=2).run(sys.argv[1]))
print("completed", res.completed, flush=True)
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_dataframe_run_killed_is_recovered_exactly_by_the_cli(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kill -9 of a Python job running a DataFrame pipeline; `cec recover --from-log`
    resumes it from RUN/source; the export is exact (every window, once)."""
    rows = 80_000
    (tmp_path / "job.py").write_text(JOB)
    run = tmp_path / "run"
    with (tmp_path / "job.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, str(tmp_path / "job.py"), str(run), str(rows)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})

    def processed() -> bool:
        for p in range(2):
            try:
                if int(json.loads((run / "state" / f"p{p:04d}.json").read_text())
                       .get("in_tuples", 0)) > 0:
                    return True
            except (OSError, ValueError):
                pass
        return proc.poll() is not None

    try:
        wait_for(processed, 240, "the first processed batch")
        assert proc.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    # `cec recover` in this process (its session: no second JVM to start)
    assert _main(["recover", "--from-log", str(run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert problems(result, RecoverResult) == []
    assert result["resumed"]["completed"], result
    # the reference: the same rows in pandas, closed tumbling windows of 10 per key
    ids = np.arange(rows)
    ref = reference_count_windows(pd.DataFrame({
        "item_id": ids % 997, "item_price": (ids * 7919 % 1000) / 10.0,
        "item_time": 1_700_000_000_000_000 + ids * 1000}), 10, where_nonneg=False)
    assert _main(["export", str(run), "--out", str(tmp_path / "got.csv")]) == 0
    got = read_export_csv(tmp_path / "got.csv")
    cols = ["key", "window_start", "window_end", "count"]
    assert got[cols].values.tolist() == ref[cols].values.tolist()
    np.testing.assert_allclose(got["value"].to_numpy(), ref["value"].to_numpy(), rtol=1e-12)
