"""Issue 29 item 1 without Spark: each small file of a run directory, one byte flipped
or cut short, ends exact (rebuilt from what is intact) or fails naming what is lost.

The run directories are written here the way the ingest and the operator tasks write
them (tests/cec_spark/test_rescale_offline.py). ``cec recover --repair`` starts Spark
to resume; here its repair step (:func:`cec_spark.rundir.repair.repair_files`, the first thing
``--repair`` does) and the export are run, and test_small_files_spark.py runs the
command itself.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from cec.errors import CorruptionError, RecoveryError, UsageError, exit_code
from cec_spark.errors import DriverSupersededError
from cec_spark.read.export import results_table
from cec_spark.recover.rescale import rescale
from cec_spark.rundir.advisory import read_advisory, write_advisory
from cec_spark.rundir.drivers import check_driver, latest_driver, take_driver
from cec_spark.rundir.generations import GENERATIONS_BACKUP
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.repair import repair_files
from tests.cec_spark.helpers import operate_partitions
from tests.cec_spark.test_rescale_offline import (
    CHUNK,
    ROWS,
    _ingest,
    _new_run,
    _rows,
)

WINDOW = '{ kind = "count", size = 5 }'


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


DAMAGE: dict[str, Callable[[Path], None]] = {"flipped": flip, "truncated": cut}


@pytest.fixture(scope="module")
def rescaled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    """A finished run rescaled once (2 -> 3 partitions), and its results."""
    tmp = tmp_path_factory.mktemp("small-files")
    layout = _new_run(tmp, "run", WINDOW, 2)
    rows = _rows(tmp)
    _ingest(layout, rows, range(4))
    operate_partitions(layout)
    assert rescale(layout, 3) is not None
    new = RunLayout(layout.root)
    _ingest(new, rows, range(4, ROWS // CHUNK), seal=True)
    operate_partitions(new)
    take_driver(new)
    return layout.root, results_table(layout.root)


def _copy(src: Path, tmp: Path) -> RunLayout:
    shutil.copytree(src, tmp / "run", symlinks=True)
    return RunLayout(tmp / "run")


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_generations_toml_is_restored_from_its_backup(rescaled: tuple[Path, pa.Table],
                                                      tmp_path: Path, how: str) -> None:
    layout = _copy(rescaled[0], tmp_path)
    good = layout.generations_file.read_bytes()
    assert layout.generations_backup.read_bytes() == good
    DAMAGE[how](layout.generations_file)
    with pytest.raises(CorruptionError) as err:
        results_table(layout.root)
    assert exit_code(err.value) == 3
    assert f"cec recover --from-log {layout.root} --repair" in str(err.value)
    # the command named: its repair step, then the export
    done = repair_files(RunLayout(layout.root))
    assert any(f"restored {layout.generations_file}" in d for d in done), done
    assert layout.generations_file.read_bytes() == good
    assert results_table(layout.root).equals(rescaled[1])


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_generations_toml_and_its_backup_damaged_is_exit_4(
        rescaled: tuple[Path, pa.Table], tmp_path: Path, how: str) -> None:
    layout = _copy(rescaled[0], tmp_path)
    DAMAGE[how](layout.generations_file)
    DAMAGE[how](layout.generations_backup)
    with pytest.raises(RecoveryError, match="lost the run's rescales") as err:
        results_table(layout.root)
    assert exit_code(err.value) == 4
    assert GENERATIONS_BACKUP in str(err.value)


def test_a_lost_generations_toml_is_not_a_run_never_rescaled(
        rescaled: tuple[Path, pa.Table], tmp_path: Path) -> None:
    layout = _copy(rescaled[0], tmp_path)
    layout.generations_file.unlink()
    with pytest.raises(CorruptionError, match="--repair"):
        results_table(layout.root)
    repair_files(RunLayout(layout.root))
    assert results_table(layout.root).equals(rescaled[1])


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_run_toml_bak_is_written_again_by_the_repair(rescaled: tuple[Path, pa.Table],
                                                     tmp_path: Path, how: str) -> None:
    """Nothing reads the backup while run.toml is intact (the export is exact); the
    repair writes it again, and it then stands in for a damaged run.toml."""
    layout = _copy(rescaled[0], tmp_path)
    good = layout.run_file.read_bytes()
    DAMAGE[how](layout.backup_file)
    assert results_table(layout.root).equals(rescaled[1])
    done = repair_files(RunLayout(layout.root))
    assert any(f"wrote {layout.backup_file} again" in d for d in done), done
    assert layout.backup_file.read_bytes() == good
    flip(layout.run_file)  # damage (exit 3) or, if it still parses, an edit (exit 2)
    with pytest.raises((CorruptionError, UsageError), match="--repair"):
        results_table(layout.root)
    repair_files(RunLayout(layout.root))
    assert layout.run_file.read_bytes() == good
    assert results_table(layout.root).equals(rescaled[1])


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_driver_file_still_fences_older_drivers(rescaled: tuple[Path, pa.Table],
                                                          tmp_path: Path, how: str) -> None:
    """drivers/N: only its name counts (the number); its content is what a message
    says of the driver, and is shown as unknown when damaged."""
    layout = _copy(rescaled[0], tmp_path)
    newest = latest_driver(layout)
    assert newest >= 1
    DAMAGE[how](layout.drivers_dir / f"{newest:08d}")
    assert latest_driver(layout) == newest
    with pytest.raises(DriverSupersededError, match=f"number {newest}"):
        check_driver(layout, newest - 1)
    mine = take_driver(layout)
    assert mine == newest + 1
    check_driver(layout, mine)
    assert results_table(layout.root).equals(rescaled[1])


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_damaged_state_and_metrics_files_are_advisory(rescaled: tuple[Path, pa.Table],
                                                      tmp_path: Path, how: str) -> None:
    layout = _copy(rescaled[0], tmp_path)
    write_advisory(layout.state_file(0), {"in_tuples": 5, "pid": 1})
    metrics = layout.root / "metrics" / "cec.prom"
    metrics.parent.mkdir(exist_ok=True)
    metrics.write_text('cec_up_seconds{run="x"} 1.0\n')
    DAMAGE[how](layout.state_file(0))
    DAMAGE[how](metrics)
    assert read_advisory(layout.state_file(0)) in ({}, {"in_tuples": 5, "pid": 1})
    assert results_table(layout.root).equals(rescaled[1])
    write_advisory(layout.state_file(0), {"in_tuples": 6})
    assert read_advisory(layout.state_file(0)) == {"in_tuples": 6}
