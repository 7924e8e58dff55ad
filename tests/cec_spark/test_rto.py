"""The recovery-time objective: the spec field and --rto, the floor check at start, the
start-up meter, the metrics, and a real local-Spark run whose inspect extent predicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cec.errors import SpecError
from cec.policy import DEFAULT_FLOOR_S
from cec.spec import dump_spec, parse_spec, parse_stored_spec
from cec_spark.run import metrics, rto
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.layout import RunLayout
from tests.cec_spark.helpers import REPO, spec_text, write_items_csv
from tests.cec_spark.test_metrics import parse

BASE = """
[source]
kind = "generator"
[aggregate]
group_by = "item_id"
field = "item_price"
function = "avg"
window = { kind = "count", size = 10 }
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A machine cache of its own (no start-up measured yet)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("CEC_CACHE_DIR", str(d))
    yield d


# ------------------------------------------------------------------------------ spec


def test_rto_parses_as_a_duration_and_round_trips_through_run_toml() -> None:
    spec = parse_spec(BASE + '[checkpoint]\nrto = "1m30s"\n', origin="x.toml")
    assert spec.checkpoint.rto_us == 90_000_000 and spec.checkpoint.rto_s == 90.0
    text = dump_spec(spec)
    assert "rto = 90000000" in text and "\nQ =" not in text and "\nU =" not in text
    assert parse_stored_spec(text, "run.toml").checkpoint == spec.checkpoint
    assert parse_spec(BASE).checkpoint.rto_us is None


@pytest.mark.parametrize(("extra", "needle"), [
    ('rto = "5s"\nQ = "2x"', "[checkpoint].Q: cannot be given with rto"),
    ('rto = "5s"\nU = 1000', "[checkpoint].U: cannot be given with rto"),
    ('rto = "soon"', "[checkpoint].rto: 'soon' is not a positive duration"),
    ("rto = 0", "[checkpoint].rto: 0 is not a positive duration"),
    ('rto = "5s"\nmode = "open-only"', '[checkpoint].rto: needs mode = "targets"'),
])
def test_rto_exclusive_with_q_and_u(extra: str, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(BASE + "[checkpoint]\n" + extra + "\n", origin="x.toml")
    assert str(err.value).startswith("x.toml: ") and needle in str(err.value)


def test_rto_option_overrides_and_refuses_explicit_targets() -> None:
    spec = parse_spec(BASE, origin="x.toml").with_rto("45s")
    assert spec.checkpoint.rto_s == 45.0
    assert parse_spec(BASE + '[checkpoint]\nrto = "5s"\n').with_rto("9s").checkpoint.rto_s == 9
    with pytest.raises(SpecError, match=r"--rto: x.toml: \[checkpoint\] sets Q or U"):
        parse_spec(BASE + "[checkpoint]\nU = 5\n", origin="x.toml").with_rto("45s")
    with pytest.raises(SpecError, match="--rto: 'fast' is not a positive duration"):
        parse_spec(BASE).with_rto("fast")


# ----------------------------------------------------------------------- floor, start-up


def test_floor_is_refused_at_start_and_names_how_it_was_measured(cache: Path) -> None:
    spec = parse_spec(BASE, origin="x.toml")
    with pytest.raises(SpecError) as err:
        rto.check_objective(spec.with_rto("1s"))
    msg = str(err.value)
    assert f"below the floor of {DEFAULT_FLOOR_S:.1f} s" in msg and "documented floor" in msg
    # a recovery is never refused, only warned
    assert "below the floor" in (rto.check_objective(spec.with_rto("1s"), resume=True) or "")
    # measured start-ups: the floor is the quickest, the fixed cost the slowest
    rto.record_startup("recover", 9.0)
    rto.record_startup("recover", 12.0)
    low, how = rto.floor()
    assert low == 9.0 and str(cache / "startup.json") in how
    assert rto.fixed_cost().seconds == 12.0 and rto.fixed_cost().measured
    with pytest.raises(SpecError, match=r"below the floor of 9\.0 s"):
        rto.check_objective(spec.with_rto("8s"))
    warn = rto.check_objective(spec.with_rto("12s"))  # above the floor, below fixed / 0.8
    assert warn is not None and "may not be met" in warn and "12.0 s" in warn
    assert rto.check_objective(spec.with_rto("60s")) is None
    assert rto.check_objective(spec) is None


def test_startup_meter_measures_once_every_task_recovered(cache: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    layout = RunLayout(tmp_path / "run")
    (layout.root / "state").mkdir(parents=True)
    monkeypatch.setattr(rto, "_MEASURE", [True])
    meter = rto.StartupMeter(layout, 2)
    t0 = meter.started
    assert rto.read_run(layout)["fixed_measured"] is False
    begun = {"recover_started_at": t0 + 7.0}
    assert meter.check([begun, {}]) is None  # partition 1 not started
    assert meter.check([{**begun, "recovered_at": t0 + 8}, begun]) is None  # still recovering
    done = {"recover_started_at": t0 + 7.5, "recovered_at": t0 + 9, "recovered": {"n_c": 1}}
    took = meter.check([{**begun, "recovered_at": t0 + 8}, done])
    assert took == pytest.approx(7.5)
    assert meter.check([done, done]) is None  # once
    stored = rto.read_run(layout)
    assert stored["startup_recover_s"] == pytest.approx(7.5) and stored["fixed_measured"]
    assert [s["s"] for s in rto.read_machine()["recover"]] == [7.5]


def test_with_a_standby_the_floor_and_the_fixed_cost_are_a_takeovers(
        cache: Path, tmp_path: Path) -> None:
    """Issue 27: ``--rto 1s --standby`` is accepted (the floor is a takeover's); a run's
    tasks predict with the takeover's fixed cost while a standby is ready, a restart's
    when none is; both measured on this machine once they are."""
    spec = parse_spec(BASE, origin="x.toml").with_rto("1s")
    with pytest.raises(SpecError, match="below the floor"):
        rto.check_objective(spec)  # a restart cannot be that quick
    warn = rto.check_objective(spec, standby=True)  # accepted: 0.3 s floor, 1 s cost
    assert warn is not None and "a takeover's fixed cost is 1.0 s" in warn  # no margin
    rto.record_startup("takeover", 0.45)
    rto.record_startup("takeover", 0.7)
    assert rto.check_objective(spec, standby=True) is None  # measured: room for 1 s
    assert rto.takeover_floor()[0] == 0.45
    assert rto.takeover_cost().seconds == 0.7 and rto.takeover_cost().measured
    with pytest.raises(SpecError, match=r"below the floor of 0\.5 s"):
        rto.check_objective(parse_spec(BASE, origin="x.toml").with_rto("0.4s"), standby=True)
    layout = RunLayout(tmp_path / "run")
    (layout.root / "state").mkdir(parents=True)
    meter = rto.StartupMeter(layout, 1)
    restart = rto.read_run(layout)["fixed_s"]
    assert restart > 1.0 and rto.read_run(layout)["standby_ready"] is False
    assert meter.standby(True) and not meter.standby(True)  # said once per change
    assert rto.read_run(layout)["fixed_s"] == 0.7 and rto.read_run(layout)["standby_ready"]
    assert meter.standby(False)
    assert rto.read_run(layout)["fixed_s"] == restart


def test_metrics_carry_the_prediction_and_the_objective() -> None:
    states = [{"in_tuples": 1, "rto": {"objective_s": 30.0, "predicted_s": 21.5}},
              {"in_tuples": 1, "rto": {"objective_s": 30.0, "predicted_s": 19.25}}]
    got = parse(metrics.exposition("r", states, [1, 1], source_rows=2, sealed=False,
                                   up_s=1.0))
    assert got["cec_predicted_recovery_seconds", "0"] == 21.5
    assert got["cec_predicted_recovery_seconds", "1"] == 19.25
    assert got["cec_recovery_objective_seconds", None] == 30.0
    none = parse(metrics.exposition("r", [{"in_tuples": 1}], [1], source_rows=1, sealed=False,
                                    up_s=1.0))
    assert ("cec_recovery_objective_seconds", None) not in none
    assert none["cec_standbys_ready", None] == 0
    ready = parse(metrics.exposition("r", [{"in_tuples": 1}], [1], source_rows=1,
                                     sealed=False, up_s=1.0, standbys_ready=2))
    assert ready["cec_standbys_ready", None] == 2


def test_cli_refuses_an_objective_below_the_floor_before_spark(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(BASE)
    env = {**os.environ, "CEC_CACHE_DIR": str(tmp_path / "cache")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli.app", "run", "pipeline", str(spec),
                           "--rto", "1s", "--log-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert "[checkpoint].rto = 1 s is below the floor" in proc.stderr
    assert not (tmp_path / "run").exists()
    assert time.monotonic() - t0 < 60  # refused before any Spark job (no timing claim)
    spec.write_text(BASE + "[checkpoint]\nQ = 100\n")
    proc = subprocess.run([sys.executable, "-m", "cli.app", "run", "pipeline", str(spec),
                           "--rto", "40s", "--log-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
                          check=False)
    assert proc.returncode == 2 and "--rto: s.toml: [checkpoint] sets Q or U" in proc.stderr


# ------------------------------------------------------------------------- real Spark


@pytest.mark.spark
def test_a_run_with_rto_predicts_its_recovery_in_inspect_extent(tmp_path: Path,
                                                                cache: Path) -> None:
    from cec_spark.driver.runner import run_pipeline
    from cec_spark.read.inspect import inspect_extent

    data = tmp_path / "items.csv"
    write_items_csv(data, 60_000, keys=500)
    spec = tmp_path / "rto.toml"
    text = spec_text(f'kind = "csv"\npath = "{data}"\ntime_field = "item_time"\n'
                     'chunk_rows = 5000', partitions=2)
    text = text.replace('Q = "2x"\nU = 1000000\n', 'rto = "40s"\n')
    spec.write_text(text)
    run = tmp_path / "run"
    res = run_pipeline(spec, run, progress=False)
    assert res.completed
    layout = RunLayout(run)
    for p in range(2):
        info = read_advisory(layout.state_file(p))["rto"]
        assert info["objective_s"] == 40.0 and info["feasible"] is True
        assert info["q_target"] >= 1 and info["u_target"] >= 1
        assert info["predicted_s"] <= 40.0
    ext = inspect_extent(run)
    assert ext.rto_s == 40.0 and ext.fixed_s is not None and ext.fixed_how
    for e in ext.partitions:
        assert not e.empty and e.q is not None and e.u is not None
        assert e.predicted_recovery_s == pytest.approx(
            ext.fixed_s + e.q / e.ec_records_per_s + e.u / e.replay_positions_per_s, rel=1e-3)
        assert e.within_objective is True
    stored = json.loads((run / "state" / "rto.json").read_text())
    assert stored["fixed_s"] == ext.fixed_s
