"""A new run's directory (``cec run --log-dir``): empty, or holding only what a ``cec run``
killed before its run.toml existed left there (tests/cli/test_no_hang.py's random kill
landed there once: the next ``cec run`` refused the directory as not empty)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cec.errors import UsageError
from cec_spark.run.plan import check_new_run_dir
from cec_spark.rundir.layout import RunLayout
from storage_log.durable import temp_path


def test_what_a_killed_creation_leaves_does_not_stop_a_new_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    layout = RunLayout(run)
    layout.state_dir(0).mkdir(parents=True)  # write_run_text's first steps, then kill -9
    temp_path(layout.run_file).write_text("[source]\n")
    (run / ".run.toml.otherhost.4242.tmp").write_text("")
    assert check_new_run_dir(run).root == run.resolve()


@pytest.mark.parametrize("entry", ["state/p0000.json", "output", "run.toml.bak",
                                   ".run.toml.tmp.x", "notes.txt"])
def test_anything_else_is_a_directory_not_empty(tmp_path: Path, entry: str) -> None:
    run = tmp_path / "run"
    path = run / entry
    path.parent.mkdir(parents=True, exist_ok=True)
    if entry == "output":
        path.mkdir()
    else:
        path.write_text("x")
    with pytest.raises(UsageError, match="--log-dir exists and is not empty"):
        check_new_run_dir(run)
