"""The shipped examples: listed, copied without overwriting, and each one runs."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from cli.app import main as _main


def main(argv: list[str]) -> int:
    """The command's exit status (click ends a command that succeeded with SystemExit)."""
    try:
        return _main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1


def test_list_names_every_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["examples", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    names = [e["name"] for e in listed]
    assert names == sorted(names) and {"items.toml", "items_csv.toml"} <= set(names)
    assert all(e["summary"] for e in listed)


def test_copy_then_refuse_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    assert main(["examples", "copy", str(tmp_path / "ex"), "--json"]) == 0
    copied = {Path(p).name for p in json.loads(capsys.readouterr().out)["copied"]}
    assert {"items.toml", "items_csv.toml", "items.csv", "README.md"} <= copied
    assert "__init__.py" not in copied
    spec = tomllib.loads((tmp_path / "ex" / "items_csv.toml").read_text())
    assert (tmp_path / "ex" / spec["source"]["path"]).is_file()  # its data came along
    before = (tmp_path / "ex" / "items.toml").read_bytes()
    (tmp_path / "ex" / "items.toml").write_text("# mine\n")
    assert main(["examples", "copy", str(tmp_path / "ex")]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "Traceback" not in err
    assert (tmp_path / "ex" / "items.toml").read_text() == "# mine\n" != before.decode()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cec ") and out.strip() != "cec"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", ["items.toml", "items_csv.toml"])
def test_every_example_runs(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                            ) -> None:
    """Each shipped spec, copied as a user would, runs to the end (bounded input)."""
    assert main(["examples", "copy", str(tmp_path / "ex")]) == 0
    capsys.readouterr()
    code = main(["run", "pipeline", str(tmp_path / "ex" / name), "--log-dir",
                 str(tmp_path / "run"), "--max-tuples", "20000", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out)
    assert summary["interrupted"] is False
    assert all(p["done"] for p in summary["per_partition"])
    # every row the filter kept (item_price >= 0) reached an operator: as many tuples as
    # Spark SQL's filter keeps of the first 20 000 source rows (and, for the csv, pandas)
    kept = _kept_rows(tmp_path / "ex" / name, 20_000)
    assert kept > 0
    assert sum(p["in_tuples"] for p in summary["per_partition"]) == kept, summary
    assert summary["ingested_tuples"] == kept, summary


def _kept_rows(spec_path: Path, max_rows: int) -> int:
    """The rows of the spec's source that its ``[filter]`` keeps, counted by Spark SQL
    over the source rows (not through cec's ingest or operators)."""
    from pyspark.sql import SparkSession

    from cec_spark.ingest.query import source_frame
    from cec_spark.run.plan import pipeline_spec
    from cec_spark.source.planner import plan_source

    spec = pipeline_spec(spec_path)
    plan = plan_source(spec, max_rows=max_rows)
    existed = SparkSession.getActiveSession()
    spark = existed or SparkSession.builder.master("local[2]").getOrCreate()
    try:  # a session left behind would be the next run's, with its 2 slots
        frame = source_frame(spark, spec, plan.columns, list(plan.chunks))
        planned = sum(c.rows for c in plan.chunks)
        assert 0 < planned <= max_rows and frame.count() == planned
        kept = frame.where(spec.where).count() if spec.where is not None else frame.count()
    finally:
        if existed is None:
            spark.stop()
    if spec.source.kind == "csv":
        assert spec.source.path is not None
        rows = pd.read_csv(spec.source.path).head(max_rows)
        assert kept == int((rows["item_price"] >= 0).sum())
    return int(kept)
