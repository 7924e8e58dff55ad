"""The ingest tasks of a run the user did not give them (cec_spark.run.plan), no Spark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cec.spec import load_spec
from cec_spark.run.plan import choose_ingest_tasks, plan_new_run
from tests.cec_spark.helpers import spec_text, write_items_csv


def test_the_users_number_is_kept() -> None:
    assert choose_ingest_tasks(1, slots=64, partitions=4, cores=64) == (1, None)
    assert choose_ingest_tasks(3, slots=6, partitions=4, cores=2) == (3, None)


def test_one_task_where_the_operators_need_the_cores() -> None:
    # this machine: 2 cores, the default master local[P+2,3]: 2 free slots, no spare core
    assert choose_ingest_tasks(None, slots=6, partitions=4, cores=2) == (1, None)
    assert choose_ingest_tasks(None, slots=5, partitions=4, cores=8) == (1, None)
    assert choose_ingest_tasks(None, slots=None, partitions=4, cores=64) == (1, None)


def test_spare_slots_and_cores_give_more_tasks_and_say_so() -> None:
    n, why = choose_ingest_tasks(None, slots=20, partitions=4, cores=16)
    assert n == 12 and why is not None
    assert why.startswith("[run].ingest_tasks is not set: 12 ingest tasks (Spark gives 20 "
                          "task slots, the 4 operator tasks take 4; 12 of the 16 cores")
    assert choose_ingest_tasks(None, slots=7, partitions=4, cores=16)[0] == 3


def _spec(tmp_path: Path, extra_run: str) -> Path:
    write_items_csv(tmp_path / "items.csv", 200, keys=10)
    src = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"'
    path = tmp_path / "s.toml"
    path.write_text(spec_text(src, partitions=4, extra_run=extra_run))
    return path


@pytest.mark.parametrize(("extra", "cores", "want", "warned"), [
    ('master = "local[20]"', 16, 12, True),  # not given: chosen, and said
    ('master = "local[20]"\ningest_tasks = 1', 16, 1, False),  # given: kept
    ('master = "local[6,3]"', 16, 2, True),
    ('master = "local[6,3]"', 2, 1, False),  # this machine, the default master
])
def test_a_new_runs_plan_carries_the_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            extra: str, cores: int, want: int,
                                            warned: bool) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    path = _spec(tmp_path, extra)
    plan = plan_new_run(load_spec(path), path, tmp_path / "run")
    assert plan.spec.run.ingest_tasks == want
    said = [w for w in plan.settings.warnings if "ingest_tasks" in w]
    assert bool(said) == warned
    # run.toml keeps the number, so a resume reads the same one
    assert (f"ingest_tasks = {want}" in plan.run_text) == (want != 1)
