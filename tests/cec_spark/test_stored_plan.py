"""The bounded source's plan kept for a resume (cec_spark.source.stored): taken as it is
while the files have the sizes and times it was made from, refused otherwise (the resume
then plans the files again). No Spark: real files, the planner, the JSON on disk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cec.spec import PipelineSpec, parse_spec
from cec_spark.rundir.layout import RunLayout
from cec_spark.source.planner import plan_source
from cec_spark.source.stored import PLAN_VERSION, file_stats, load_plan, store_plan
from tests.cec_spark.helpers import spec_text


def _source(tmp: Path, files: int = 3, rows: int = 700, lateness: str = "") -> PipelineSpec:
    folder = tmp / "src"
    folder.mkdir()
    rng = np.random.default_rng(5)
    n = files * rows
    df = pd.DataFrame({"item_id": rng.integers(0, 30, n),
                       "item_price": np.round(rng.uniform(0, 100, n), 2),
                       "item_time": 1_700_000_000_000_000 + np.cumsum(rng.integers(0, 900, n))})
    for f in range(files):
        df.iloc[f * rows:(f + 1) * rows].to_csv(folder / f"f{f}.csv", index=False)
    src = (f'kind = "csv"\npath = "{folder}"\ntime_field = "item_time"\nchunk_rows = 256'
           + lateness)
    return parse_spec(spec_text(src), origin="s.toml", base=tmp)


def _stored(tmp: Path, spec: PipelineSpec, max_rows: int | None = None) -> Path:
    path = RunLayout(tmp / "run").source_plan_file
    path.parent.mkdir(exist_ok=True)
    stats = file_stats(spec)
    store_plan(path, spec, max_rows, plan_source(spec, max_rows=max_rows, validate=False),
               stats)
    return path


@pytest.mark.parametrize("lateness", ["", '\nallowed_lateness = "1ms"'],
                         ids=["in-order", "with-lateness"])
def test_the_stored_plan_is_the_plan(tmp_path: Path, lateness: str) -> None:
    """Every chunk field for field (the lateness plan's carried chunks too), the
    columns, the fingerprint and the warnings."""
    spec = _source(tmp_path, lateness=lateness)
    path = _stored(tmp_path, spec)
    body = json.loads(path.read_text())
    assert body["version"] == PLAN_VERSION and len(body["stats"]) == 3
    planned, loaded = plan_source(spec, validate=False), load_plan(path, spec, None)
    assert loaded is not None
    assert loaded == planned
    # 700 rows a file, 256 a chunk: 3 chunks a file (and the lateness plan's flush)
    assert len(loaded.chunks) == (10 if lateness else 9)
    if lateness:
        assert any(c.carry for c in loaded.chunks)


def test_a_changed_source_is_planned_again(tmp_path: Path) -> None:
    """A file touched, rewritten with the same size, grown, added or gone: no stored plan
    (the caller plans the files and checks the fingerprint)."""
    spec = _source(tmp_path)
    path = _stored(tmp_path, spec)
    folder = tmp_path / "src"
    assert load_plan(path, spec, None) is not None
    f1 = folder / "f1.csv"
    st = f1.stat()
    os.utime(f1, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))  # touched
    assert load_plan(path, spec, None) is None
    os.utime(f1, ns=(st.st_atime_ns, st.st_mtime_ns))  # its time put back: as it was
    assert load_plan(path, spec, None) is not None
    text = f1.read_text()
    f1.write_text(text.replace(",1", ",2", 1))  # the same size, a new time
    assert f1.stat().st_size == st.st_size and load_plan(path, spec, None) is None
    path = _stored(tmp_path, spec)
    (folder / "f3.csv").write_text((folder / "f0.csv").read_text())  # added
    assert load_plan(path, spec, None) is None
    (folder / "f3.csv").unlink()
    assert load_plan(path, spec, None) is not None
    (folder / "f2.csv").unlink()  # gone
    assert load_plan(path, spec, None) is None


def test_a_plan_of_another_spec_damaged_or_absent_is_not_taken(tmp_path: Path) -> None:
    spec = _source(tmp_path)
    path = _stored(tmp_path, spec, max_rows=1000)
    assert load_plan(path, spec, 1000) is not None
    assert load_plan(path, spec, None) is None  # another --max-tuples
    assert load_plan(path, spec, 1000).rows == 1000  # type: ignore[union-attr]
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "version": PLAN_VERSION + 1}))
    assert load_plan(path, spec, 1000) is None
    path.write_text(path.read_text()[:100])  # cut
    assert load_plan(path, spec, 1000) is None
    path.unlink()
    assert load_plan(path, spec, 1000) is None


def test_nothing_is_stored_without_stats(tmp_path: Path) -> None:
    """A plan whose files changed while it was made (the caller then has no stats)."""
    spec = _source(tmp_path)
    path = RunLayout(tmp_path / "run").source_plan_file
    path.parent.mkdir()
    store_plan(path, spec, None, plan_source(spec, validate=False), ())
    assert not path.exists()
