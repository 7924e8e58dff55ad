"""An export's format: ``--format``, or the one the file's name says (pure, no Spark)."""

from __future__ import annotations

import pytest

from cec.errors import UsageError
from cec_spark.read.export import export_format


@pytest.mark.parametrize(("out", "fmt", "want"), [
    ("r.parquet", None, "parquet"),
    ("R.PQ", None, "parquet"),
    ("dir.d/r.csv", None, "csv"),
    ("r.txt", None, "csv"),           # a name that says nothing: csv, as before
    ("results", None, "csv"),
    ("r.txt", "parquet", "parquet"),  # --format decides where the name does not
    ("r.parquet", "parquet", "parquet"),
    ("", None, "csv"),                # `cec run pipeline` without --out
])
def test_the_format_is_given_or_named_by_the_file(out: str, fmt: str | None, want: str) -> None:
    assert export_format(out, fmt) == want


@pytest.mark.parametrize(("out", "fmt", "message"), [
    ("r.parquet", "csv", "--out r.parquet: its name says parquet, --format says csv"),
    ("r.csv", "parquet", "--out r.csv: its name says csv, --format says parquet"),
    ("r.csv", "xml", "--format: 'xml' is not one of csv|parquet"),
])
def test_a_format_that_is_unknown_or_contradicts_the_name_is_refused(
        out: str, fmt: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        export_format(out, fmt)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.exit_code == 2
