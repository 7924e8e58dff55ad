"""``[run] key_groups`` (issue 38 item 4): a run's key groups (Flink's max parallelism),
chosen at creation, up to 32,768; a rescale up to them, refused beyond.

Cheap checks first (the spec's field, its errors, run.toml, the rescale's refusal, the
key partition's cost at 32,768 groups), then one sequence on real local Spark with
P = 32: a run killed -9 mid-run, then rescaled 32 -> 48 with ``key_groups = 256``; its
export equals the pandas reference exactly (``max`` of count windows: no float
summation order).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from cec.errors import CorruptionError, SpecError, UsageError
from cec.records import output_schema
from cec.spec import MAX_KEY_GROUPS, PipelineSpec, dump_spec, parse_spec, parse_stored_spec
from cec_spark.ingest.project import Partitioner
from cec_spark.recover.rescale import check_rescale
from cec_spark.report import RecoverResult
from cec_spark.rundir.checksum import sign_run_text
from cec_spark.rundir.run_file import KEY_GROUPS, parse_run_text, run_text, settings_for
from cec_spark.source.types import ColumnTypes
from recovery.rescale import handoff, partitions_of
from tests.cec_spark.helpers import (
    alive,
    cec,
    read_export_csv,
    spec_text,
    start_cec,
    wait_for,
    write_items_csv,
)
from tests.cli.test_pipeline_cli import checked

CSV = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"'
COLUMNS = ColumnTypes(("item_id", "item_price", "item_time"), ("int64", "float64", "int64"))


def _spec(extra_run: str = "", partitions: int = 3) -> PipelineSpec:
    return parse_spec(spec_text(CSV, partitions=partitions, extra_run=extra_run),
                      origin="t.toml")


# --------------------------------------------------------------------------- the spec

def test_key_groups_default_and_chosen() -> None:
    assert _spec().run.key_groups is None
    assert _spec().run.new_run_key_groups == KEY_GROUPS == 128
    big = _spec(partitions=300)
    assert big.run.new_run_key_groups == 300
    for groups in (3, 256, 1000, MAX_KEY_GROUPS):  # no power of two needed
        spec = _spec(f"key_groups = {groups}")
        assert spec.run.key_groups == groups
        assert spec.run.new_run_key_groups == groups
    # the command line's --partitions stays within them
    spec = _spec("key_groups = 256")
    assert spec.with_run(partitions=256).run.partitions == 256
    with pytest.raises(SpecError, match=r"--partitions: 257 is more than t\.toml's "
                       r"\[run\]\.key_groups \(256\)"):
        spec.with_run(partitions=257)
    with pytest.raises(SpecError, match=r"--partitions: must be <= 32768"):
        _spec().with_run(partitions=MAX_KEY_GROUPS + 1)


@pytest.mark.parametrize(("extra", "partitions", "needle"), [
    ("key_groups = 32769", 3, "t.toml: [run].key_groups: must be <= 32768, got 32769"),
    ("key_groups = 0", 3, "[run].key_groups: must be >= 1, got 0"),
    ("key_groups = 2", 3, "[run].key_groups: must be >= partitions (3)"),
    ("key_groups = 31", 32, "[run].key_groups: must be >= partitions (32)"),
    ("key_groups = true", 3, "[run].key_groups: must be an integer, got True"),
    ('key_groups = "256"', 3, "[run].key_groups: must be an integer, got '256'"),
    ("key_groups = 2.5", 3, "[run].key_groups: must be an integer, got 2.5"),
    ("", 40_000, "[run].partitions: must be <= 32768"),
])
def test_bad_key_groups_name_the_field_and_the_limit(extra: str, partitions: int,
                                                     needle: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(extra, partitions)
    assert needle in str(err.value)
    assert err.value.exit_code == 2  # the documented exit status of a bad spec


def test_the_cli_refuses_them_with_exit_2(tmp_path: Path) -> None:
    """``cec run pipeline --partitions`` above the spec's key groups: the spec error
    names the option, the file, the field and the limit, exit 2, before any run
    directory or Spark exists (the spec's own checks: the unit tests above)."""
    write_items_csv(tmp_path / "items.csv", 10)
    spec = tmp_path / "kg.toml"
    spec.write_text(spec_text(CSV, partitions=4, extra_run="key_groups = 256"))
    over = cec(["run", "pipeline", str(spec), "--log-dir", str(tmp_path / "run"),
                "--partitions", "300"])
    assert over.returncode == 2, over.stderr
    assert "--partitions: 300 is more than kg.toml's [run].key_groups (256)" in over.stderr
    assert not (tmp_path / "run").exists()


def test_key_groups_are_stored_and_read_back() -> None:
    spec = _spec("key_groups = 256", partitions=32)
    text = run_text(spec, settings_for(spec, COLUMNS, None))
    doc = tomllib.loads(text)
    assert doc["run"]["key_groups"] == 256 and doc["cec"]["key_groups"] == 256
    back, settings = parse_run_text(text, "run.toml")
    assert back.run.key_groups == 256 and settings.key_groups == 256
    # without the field: [run] has none (run.toml as before), [cec] the default
    plain = _spec(partitions=4)
    assert "key_groups" not in tomllib.loads(dump_spec(plain))["run"]
    assert parse_stored_spec(dump_spec(plain), "run.toml").run.key_groups is None
    _, settings = parse_run_text(run_text(plain, settings_for(
        plain, COLUMNS, None)), "run.toml")
    assert settings.key_groups == 128


def test_a_damaged_key_groups_in_run_toml_is_corruption() -> None:
    """[cec] key_groups outside partitions..32768 cannot be a run's: damage (exit 3)."""
    spec = _spec(partitions=32)
    for bad in (16, 40_000, "x"):
        text = dump_spec(spec, {"cec": {
            "max_tuples": -1, "column_names": list(COLUMNS.names),
            "column_types": list(COLUMNS.types), "key_groups": bad}})
        with pytest.raises(CorruptionError, match=r"\[cec\] table missing or damaged: "
                           r"key_groups must be an integer in 32\.\.32768"):
            parse_run_text(sign_run_text(text), "run.toml")


def test_rescale_up_to_the_key_groups_and_no_further(tmp_path: Path) -> None:
    spec = _spec("key_groups = 256", partitions=32)
    settings = settings_for(spec, COLUMNS, None)
    for p in (1, 48, 256):
        check_rescale(settings, spec, p, tmp_path)
    with pytest.raises(UsageError) as err:
        check_rescale(settings, spec, 257, tmp_path)
    msg = str(err.value)
    assert "--partitions: 257 is not in 1..256" in msg and "[cec] key_groups" in msg
    assert "[run] key_groups = N (up to 32768)" in msg and err.value.exit_code == 2


def test_32768_groups_stay_cheap() -> None:
    """The key partition at the most key groups: the same as Python's reference rule,
    every partition reached, and no per-group work (200,000 keys in well under the
    time a per-group loop would take)."""
    keys = np.arange(-100_000, 100_000, dtype=np.int64) * 7919
    for partitions in (2, 48, MAX_KEY_GROUPS):
        part = Partitioner(partitions, MAX_KEY_GROUPS)
        t0 = time.perf_counter()
        got = np.asarray(part(pa.array(keys)))
        took = time.perf_counter() - t0
        sample = keys[::997]
        assert got[::997].tolist() == partitions_of(sample.tolist(), partitions,
                                                    MAX_KEY_GROUPS).tolist()
        # every partition reached (at P = G each owns one group: nearly all of them)
        assert len(np.unique(got)) >= min(partitions, 32_000)
        print(f"P={partitions}: 200k int64 keys partitioned in {took * 1e3:.0f} ms")
    # groups that are no power of two (np.mod, not the low bits)
    for partitions, groups in ((7, 1000), (48, MAX_KEY_GROUPS - 1), (300, 300)):
        got = np.asarray(Partitioner(partitions, groups)(pa.array(keys[::50])))
        assert got.tolist() == partitions_of(keys[::50].tolist(), partitions,
                                             groups).tolist()
    # strings: one hash per distinct key, whatever the groups
    strs = pa.array([f"k{i}" for i in range(5_000)])
    got = np.asarray(Partitioner(7, 1000)(strs))
    assert got.tolist() == partitions_of(strs.to_pylist(), 7, 1000).tolist()


def test_handoff_at_32768_groups() -> None:
    """A rescale's handoff with the most key groups: each window goes to the partition
    of its key, once."""
    schema = output_schema("int64")
    n = 5000
    keys = np.arange(n, dtype=np.int64) * 31 + 7
    cols = {"key": keys, "win_start": np.zeros(n, np.int64), "win_end": np.full(n, 10),
            "tau1": np.arange(n, dtype=np.int64), "cnt": np.ones(n, np.int64),
            "sum": np.ones(n), "min": np.ones(n), "max": np.ones(n),
            "first_ts": np.zeros(n, np.int64), "last_ts": np.zeros(n, np.int64)}
    table = pa.table({k: pa.array(v, schema.field(k).type) for k, v in cols.items()})
    half = n // 2
    records = handoff([table.slice(0, half), table.slice(half)], cut=99, ts=0,
                      partitions=48, groups=MAX_KEY_GROUPS, function="max",
                      key_type="int64", window_kind="time")
    assert len(records) == 48 and sum(r.num_rows for r in records) == n
    want = partitions_of(keys.tolist(), 48, MAX_KEY_GROUPS)
    for p, rec in enumerate(records):
        assert sorted(rec.column("key").to_pylist()) == sorted(keys[want == p].tolist())
        assert set(rec.column("n_open").to_pylist()) <= {rec.num_rows}


# --------------------------------------------------------------------------- P = 32

P, P2, GROUPS = 32, 48, 256
ROWS, KEYS, FILES, SIZE = 8_000, 2_000, 8, 3


def _states(run: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted((run / "state").glob("p*.json")):
        with contextlib.suppress(OSError, ValueError):
            out.append(json.loads(f.read_text()))
    return out


def _processed(run: Path) -> int:
    return sum(int(s.get("in_tuples", 0)) for s in _states(run))


def _kill(proc: subprocess.Popen[bytes], run: Path) -> None:
    """kill -9 the whole process group; wait for its Python workers to go."""
    pids = [int(s["pid"]) for s in _states(run) if "pid" in s]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
    wait_for(lambda: not any(alive(pid) for pid in pids), 90, "orphaned workers to exit")


def _add(live: Path, parts: list[pd.DataFrame], files: range) -> None:
    for i in files:
        tmp_file = live / f".f-{i:03d}.tmp"
        parts[i].to_csv(tmp_file, index=False)
        tmp_file.rename(live / f"f-{i:03d}.csv")


def _reference(df: pd.DataFrame) -> pd.DataFrame:
    """Closed tumbling count windows of SIZE per key, ``max(item_price)``."""
    df = df[df.item_price >= 0].reset_index(drop=True).copy()
    df["w"] = df.groupby("item_id").cumcount() // SIZE
    g = df.groupby(["item_id", "w"], sort=False)
    out = pd.DataFrame({
        "key": g.item_id.first(), "window_start": g.item_time.first(),
        "window_end": g.item_time.last(), "count": g.item_price.size(),
        "value": g.item_price.max()}).reset_index(drop=True)
    out = out[out["count"] == SIZE]
    return out.sort_values(["key", "window_start", "window_end"]).reset_index(drop=True)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The ``cec`` processes a test started: their process groups killed at its end
    (a failed wait leaves none behind)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)


@pytest.mark.spark
@pytest.mark.slow
def test_p32_killed_then_rescaled_to_48(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    """P = 32, key_groups = 256, a stream folder given in two parts: kill -9 mid-run
    (some input processed, more to come), then ``cec recover --partitions 48`` to the
    end: the export equals the reference exactly. (A recovery with the run's own 32
    partitions killed again in between made this the suite's longest test, 86 s on two
    busy cores; a recovery killed and recovered again is tests/cli's.)"""
    df = write_items_csv(tmp_path / "items.csv", ROWS, keys=KEYS, seed=38)
    parts = [df.iloc[i * ROWS // FILES:(i + 1) * ROWS // FILES] for i in range(FILES)]
    kept = [int((p.item_price >= 0).sum()) for p in parts]  # rows past the filter
    live = tmp_path / "live"
    live.mkdir()
    spec = tmp_path / "p32.toml"
    spec.write_text(spec_text(f'kind = "stream-dir"\npath = "{live}"\n'
                              'time_field = "item_time"\npoll_ms = 50',
                              window=f'{{ kind = "count", size = {SIZE} }}',
                              function="max", partitions=P,
                              extra_run=f"key_groups = {GROUPS}"))
    run = tmp_path / "run"
    t0 = time.monotonic()

    # 1. the run, killed -9 once it processed the first two files (of eight)
    _add(live, parts, range(2))
    procs.append(start_cec(["run", "pipeline", str(spec), "--log-dir", str(run), "--json"],
                           tmp_path / "run.log"))
    wait_for(lambda: _processed(run) >= sum(kept[:2]), 240,
             "the first two files processed")
    t1 = time.monotonic()
    print(f"P={P}: started and processed the first files in {t1 - t0:.1f}s")
    _kill(procs[-1], run)
    first = _processed(run)
    assert sum(kept[:2]) <= first < sum(kept), first  # mid-run: input was still to come
    assert len(_states(run)) == P
    assert tomllib.loads((run / "run.toml").read_text())["cec"]["key_groups"] == GROUPS
    t2 = time.monotonic()
    print(f"killed in {t2 - t1:.1f}s")

    # 2. the rest of the source, and the rescale 32 -> 48 to the end
    _add(live, parts, range(2, FILES))
    (live / "_END").touch()
    rec = cec(["recover", "--from-log", str(run), "--partitions", str(P2), "--json"],
              timeout=600, check=True)
    result = checked(rec.stdout, RecoverResult)
    assert result["resumed"]["completed"], result
    rescale = result["rescale"]
    assert (rescale["from_partitions"], rescale["to_partitions"]) == (P, P2)
    assert len(rescale["windows_per_partition"]) == P2
    assert sum(rescale["windows_per_partition"]) > 0  # open windows moved
    assert len(result["partitions"]) == P2
    t5 = time.monotonic()
    print(f"rescaled {P}->{P2} and ran to the end in {t5 - t2:.1f}s; processed at the "
          f"first kill {first}; windows moved {rescale['windows_per_partition']}")

    out = tmp_path / "got.csv"
    cec(["export", str(run), "--out", str(out)], check=True)
    got, want = read_export_csv(out), _reference(df)
    cols = ["key", "window_start", "window_end", "count", "value"]
    assert len(want) > 1000
    assert got[cols].values.tolist() == want[cols].values.tolist()
