"""Issue 40 item 2: the upstream logs of a replayable source are a cache of it.

A run of a file source writes its upstream records without zstd and, on one host,
commits them without fsync (``[run] upstream = "cache"``, the default; ARCHITECTURE §5
"Replay"). A host crash may then lose or tear what the page cache held: ``cec recover``
after another boot reads every upstream log in full, cuts it where damaged and the
ingest reads the rows cut again from the source, whose files are checked unchanged.
Here a real run is killed -9 mid-ingest, a byte of a committed upstream record is
flipped and the drivers' records say they ran in another boot: the recovery cuts the
log without ``--repair`` and the export is exactly the reference.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from cec.spec import parse_spec
from cec_spark.ingest.writer import WriterConfig
from cec_spark.rundir.drivers import earlier_boot, latest_driver
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.lease import boot_id
from storage_log import columnar
from storage_log.framing import Codec
from tests.cec_spark.helpers import (
    assert_results_equal,
    cec,
    reference_count_windows,
    spec_text,
    start_cec,
    wait_for,
)
from tests.storage_log.frames import packed_column_flags, record_frames

P, SIZE, ROWS, CHUNK = 2, 10, 600_000, 150_000


def _spec(source: str, run: str = "") -> object:
    return parse_spec(f"[source]\n{source}\ntime_field = \"item_time\"\n[aggregate]\n"
                      "group_by = \"item_id\"\nfunction = \"count\"\n"
                      "window = { kind = \"count\", size = 2 }\n"
                      f"[run]\n{run}\n", origin="<test>")


@pytest.mark.parametrize(("source", "run", "cache", "fsync", "level"), [
    ('kind = "csv"\npath = "x.csv"', "", True, "never", 0),
    ('kind = "parquet"\npath = "d"', 'master = "local[4]"', True, "never", 0),
    ('kind = "generator"\nrows = 10', "", True, "never", 0),
    # on a cluster a commit's fsync is what shows it to the other hosts
    ('kind = "csv"\npath = "x.csv"', 'master = "spark://127.0.0.1:7077"', True, "always", 0),
    ('kind = "csv"\npath = "x.csv"', 'upstream = "durable"', False, "always", 1),
    ('kind = "csv"\npath = "x.csv"', 'upstream = "durable"\nfsync = "interval"', False,
     "interval", 1),
    # a stream folder's files may be removed once read: its logs are its only copy
    ('kind = "stream-dir"\npath = "in"\nformat = "csv"', "", False, "always", 1)])
def test_which_upstream_logs_are_a_cache(source: str, run: str, cache: bool, fsync: str,
                                         level: int, tmp_path: Path) -> None:
    spec = _spec(source, run)
    assert spec.upstream_cache is cache  # type: ignore[attr-defined]
    cfg = WriterConfig.for_run(spec, RunLayout(tmp_path), None)  # type: ignore[arg-type]
    assert (cfg.fsync, cfg.level) == (fsync, level)
    assert cfg.trim is (fsync != "interval")  # trimming follows the output's fsync


def test_a_bad_upstream_mode_is_named() -> None:
    from cec.errors import SpecError
    with pytest.raises(SpecError, match=r"\[run\]\.upstream.*'cache', 'durable'|"
                                        r"upstream.*cache.*durable"):
        _spec('kind = "csv"\npath = "x.csv"', 'upstream = "fast"')


def test_earlier_boot_reads_the_drivers_records(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    layout.drivers_dir.mkdir(parents=True)
    mine = boot_id()
    assert mine  # Linux: /proc/sys/kernel/random/boot_id
    records = [{"host": "h", "pid": 1},  # from before boots were recorded: says nothing
               {"host": "h", "pid": 2, "boot": "another-boot"},
               {"host": "h", "pid": 3, "boot": mine}]
    for n, rec in enumerate(records, 1):
        layout.driver_file(n).write_text(json.dumps(rec))
    assert earlier_boot(layout, 4) == 2  # driver 2's page cache is gone
    assert earlier_boot(layout, 2) is None
    layout.driver_file(2).write_text(json.dumps({**records[1], "boot": mine}))
    assert earlier_boot(layout, 4) is None


@pytest.mark.spark
def test_a_damaged_cache_after_a_reboot_is_read_again_from_the_source(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(40)
    df = pd.DataFrame({
        "item_id": rng.integers(0, 300, ROWS),
        "item_price": rng.integers(0, 10_000, ROWS).astype(np.float64),
        "item_time": 1_700_000_000_000_000 + np.cumsum(rng.integers(0, 2_000, ROWS))})
    pacsv.write_csv(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "items.csv")
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text(f'kind = "csv"\npath = "{tmp_path / "items.csv"}"\n'
                              f'time_field = "item_time"\nchunk_rows = {CHUNK}', where=None,
                              partitions=P, window=f'{{ kind = "count", size = {SIZE} }}')
                    + '\n[run.spark]\n"spark.sql.execution.arrow.maxRecordsPerBatch" = '
                      '25000\n')
    run, mark, log = tmp_path / "run", tmp_path / "mark", tmp_path / "cec.log"
    mark.mkdir()
    # the whole run killed -9 once its ingest has committed the logs a few times
    proc = start_cec(["run", "pipeline", str(spec), "--log-dir", str(run)], log,
                     {"CEC_CRASH_AT": "ingest.after_token@4%i0", "CEC_CRASH_MARK": str(mark)})
    try:
        wait_for(lambda: proc.poll() is not None
                 or any(not m.name.startswith(".") for m in mark.iterdir()), 300,
                 "the ingest's crash point")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert any(m.name.startswith("ingest.after_token.") for m in mark.iterdir()), \
        log.read_text(errors="replace")[-3000:]
    layout = RunLayout(run)
    up0 = layout.upstream(0)
    # the cache's records: large ones packed with no column compressed
    frames = record_frames(up0)
    assert frames and all(c in (Codec.PACKED, Codec.NONE) for c, _ in frames)
    assert not any(f & columnar.ZSTD for c, b in frames if c == Codec.PACKED
                   for f in packed_column_flags(b))
    # a host crash: the drivers ran in another boot, and a committed record is torn
    for n in range(1, latest_driver(layout) + 1):
        rec = json.loads(layout.driver_file(n).read_text())
        assert rec["boot"] == boot_id()
        layout.driver_file(n).write_text(json.dumps({**rec, "boot": "another-boot"}))
    seg = sorted(up0.glob("*.seg"))[0]
    data = bytearray(seg.read_bytes())
    data[len(data) // 3] ^= 0xFF
    seg.write_bytes(bytes(data))

    done = cec(["recover", "--from-log", str(run), "--json"], timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "ran in another boot of its machine" in done.stderr
    said = json.loads(done.stdout)
    assert any(r.startswith("partition 0: upstream log cut after seq")
               for r in said["repairs"]), said["repairs"]
    assert_results_equal(run, reference_count_windows(df, SIZE, where_nonneg=False))
