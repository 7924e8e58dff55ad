"""cec export in bounded memory (cec_spark.read.sorted_runs): the file equals, byte for
byte, the one an in-memory sort of every result writes (the reference below, the export
as it was), on random run directories (several partitions, int and string keys, ties,
count and time windows, two generations), with runs spilled and merged in one or two
levels; and an export whose results would not fit in 512 MiB stays under it. No Spark.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.export_bench import SPEC, Shape
from bench.export_bench import make_run as make_big
from cec.records import G_CHECK, G_OPEN, G_OPEN_R, R, output_schema
from cec_spark.ingest.logs import create_logs
from cec_spark.read import export as export_mod
from cec_spark.read.export import (
    COLUMNS,
    ResultFile,
    empty_results,
    export,
    iso_text,
    read_results,
    result_key_type,
    window_end_kind,
    write_all,
)
from cec_spark.read.sorted_runs import SORT_KEYS, SortedRuns
from cec_spark.run.plan import pipeline_spec, plan_new_run
from cec_spark.rundir.acks import read_ack
from cec_spark.rundir.generations import Generation, store_generations
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file, write_run_text
from storage_log.log import StreamLog
from tests.cec_spark.helpers import REPO

ROW_GROUP = 50  # parquet row groups in these tests (the reference writes the same)


def reference(root: Path, out: Path, fmt: str, after: dict[str, int] | None = None) -> None:
    """The export as it was: every result in memory, one stable full sort, one write."""
    layout = RunLayout(root)
    parts: list[pa.Table] = []
    read_results(layout, after, parts.append)
    table = pa.concat_tables(parts) if parts else empty_results(result_key_type(layout))
    table = table.sort_by(SORT_KEYS).select(list(COLUMNS))
    for col in ("window_start", "window_end"):
        ts = table.column(col).cast(pa.timestamp("us", tz="UTC"))
        if fmt == "csv":
            ts = pc.strftime(ts, format="%Y-%m-%dT%H:%M:%SZ")
        table = table.set_column(table.column_names.index(col), col, ts)
    if fmt == "csv":
        pacsv.write_csv(table, out)
    else:
        pq.write_table(table.replace_schema_metadata({"cec.window_end": _end(layout)}), out,
                       row_group_size=ROW_GROUP)


def _end(layout: RunLayout) -> str:
    return window_end_kind(read_run_file(layout)[0].aggregate.window.kind)


def _log_rows(rng: np.random.Generator, n: int, key_type: str, keys: int, seq0: int = 0
              ) -> pa.RecordBatch:
    """``n`` output rows: results (R, G_open+R) and control rows, few keys, windows and
    tau1 values (many ties, full ties too), in no order but the log's."""
    ty = rng.choice(np.array([R, R, R, G_OPEN_R, G_OPEN, G_CHECK], np.int8), n)
    k = rng.integers(0, keys, n)
    key = pa.array(k - keys // 2) if key_type == "int64" \
        else pa.array([f"k{v}" * (1 + v % 3) for v in k.tolist()], pa.string())
    ws = rng.integers(0, 6, n) * 1_000_000 + 1_700_000_000_000_000
    we = ws + rng.integers(1, 3, n) * 1_000_000
    cols = {"ts": np.zeros(n, np.int64), "seq": np.arange(seq0, seq0 + n, dtype=np.int64),
            "type": ty, "t_now": np.zeros(n, np.int64), "n_open": np.zeros(n, np.int64),
            "key": key, "win_start": ws, "win_end": we, "tau1": rng.integers(0, 3, n),
            "cnt": rng.integers(1, 9, n), "sum": rng.random(n), "min": rng.random(n),
            "max": rng.random(n), "first_ts": ws + rng.integers(0, 5, n),
            "last_ts": we + rng.integers(0, 5, n), "value": rng.random(n)}
    schema = output_schema(key_type)
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in schema],
                                      schema=schema)


def make_run(tmp: Path, name: str, seed: int, *, key_type: str, kind: str,
             partitions: tuple[int, ...], rows: int, keys: int) -> Path:
    """A run directory whose output logs (one generation per entry of ``partitions``)
    hold random rows in records of up to 40 rows; an older generation's logs go on past
    the end its successor recorded."""
    rng = np.random.default_rng(seed)
    source = tmp / f"{name}.csv"
    item = "7" if key_type == "int64" else '"a"'
    source.write_text(f"item_id,item_price,item_time\n{item},1.0,1700000000000000\n")
    window = '{ kind = "count", size = 5 }' if kind == "count" \
        else '{ kind = "time", size = "10s" }'
    spec_path = tmp / f"{name}.toml"
    spec_path.write_text(SPEC.format(source=source, window=window,
                                     partitions=partitions[-1]))
    plan = plan_new_run(pipeline_spec(spec_path), spec_path, tmp / name)
    write_run_text(plan.layout, plan.run_text)
    create_logs(plan.layout, partitions[0], "never")
    gens = [Generation(0, partitions[0])]
    prev_ends: list[int] = []
    for g, parts in enumerate(partitions):
        ends = []
        for p in range(parts):
            n = int(rng.integers(0, rows + 1))
            batch = _log_rows(rng, n, key_type, keys)
            with StreamLog.open(plan.layout.output_of(g, p), writable=True, create=True,
                                fsync="never") as log:
                for s in range(0, n, 40):
                    log.append(batch.slice(s, 40))
                    log.commit()
            ends.append(int(rng.integers(-1, n)) if n else -1)
        if g:
            gens.append(Generation(g, parts, previous_ends=tuple(prev_ends)))
        prev_ends = ends
    if len(gens) > 1:
        store_generations(plan.layout.generations_file, plan.layout.generations_backup,
                          tuple(gens))
    return plan.layout.root


def bounded(root: Path, out: Path, fmt: str, *, sort_rows: int, block_rows: int,
            fan_in: int, step_rows: int) -> tuple[int, int]:
    """The export's path (runs, merge, file), with these sizes; its rows and keys."""
    layout = RunLayout(root)
    runs = SortedRuns(out.parent / f"spill-{fmt}", sort_rows=sort_rows,
                      block_rows=block_rows, fan_in=fan_in, step_rows=step_rows)
    read_results(layout, None, runs.add)
    file = ResultFile(out, fmt, _end(layout))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(export_mod, "ROW_GROUP_ROWS", ROW_GROUP)
        write_all(file, runs.sorted(), empty_results(result_key_type(layout)))
    return file.rows, file.keys


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), key_type=st.sampled_from(["int64", "string"]),
       kind=st.sampled_from(["time", "count"]),
       partitions=st.lists(st.integers(1, 4), min_size=1, max_size=2).map(tuple),
       rows=st.integers(0, 400), keys=st.integers(1, 40),
       sort_rows=st.integers(1, 300), block_rows=st.integers(1, 64),
       fan_in=st.integers(2, 6), step_rows=st.integers(1, 200))
def test_the_bounded_export_equals_the_in_memory_one_byte_for_byte(
        tmp_path_factory: pytest.TempPathFactory, seed: int, key_type: str, kind: str,
        partitions: tuple[int, ...], rows: int, keys: int, sort_rows: int, block_rows: int,
        fan_in: int, step_rows: int) -> None:
    tmp = tmp_path_factory.mktemp("run")
    root = make_run(tmp, "run", seed, key_type=key_type, kind=kind, partitions=partitions,
                    rows=rows, keys=keys)
    for fmt in ("csv", "parquet"):
        reference(root, tmp / f"want.{fmt}", fmt)
        got_rows, got_keys = bounded(root, tmp / f"got.{fmt}", fmt, sort_rows=sort_rows,
                                     block_rows=block_rows, fan_in=fan_in,
                                     step_rows=step_rows)
        assert (tmp / f"got.{fmt}").read_bytes() == (tmp / f"want.{fmt}").read_bytes()
        want = pq.read_table(tmp / "want.parquet") if fmt == "parquet" else None
    assert want is not None
    assert got_rows == want.num_rows and got_keys == len(pc.unique(want.column("key")))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("key_type", ["int64", "string"])
def test_export_spills_merges_and_writes_the_same_file(tmp_path: Path, fmt: str,
                                                       key_type: str) -> None:
    """export() itself, its runs merged in two levels (sort_rows small: more than 64
    runs), parquet row groups as write_table cuts them (ROW_GROUP), a consumer's acks as
    before: the second export has what was committed after the first."""
    root = make_run(tmp_path, "run", 3, key_type=key_type, kind="time", partitions=(2, 3),
                    rows=2000, keys=300)
    layout = RunLayout(root)
    reference(root, tmp_path / f"want.{fmt}", fmt)
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(export_mod, "ROW_GROUP_ROWS", ROW_GROUP)
        got = export(root, out / f"got.{fmt}", fmt, consumer="c1", sort_rows=37)
        assert (out / f"got.{fmt}").read_bytes() == (tmp_path / f"want.{fmt}").read_bytes()
        assert sorted(p.name for p in out.iterdir()) == [f"got.{fmt}"]  # the spill is gone
        assert got.rows > 37 * 64 and got.consumer == "c1"
        acked = read_ack(layout, "c1")
        assert set(acked) == {"0", "1", "g1/0", "g1/1", "g1/2"}
        with StreamLog.open(layout.output_of(1, 1), writable=True, fsync="never") as log:
            first = -1 if log.last_seq is None else log.last_seq
            log.append(_log_rows(np.random.default_rng(8), 500, key_type, 300, first + 1))
            log.commit()
        again = export(root, out / f"again.{fmt}", fmt, consumer="c1", sort_rows=37)
        reference(root, tmp_path / f"new.{fmt}", fmt, after=acked)
    assert 0 < again.rows < 500
    assert (out / f"again.{fmt}").read_bytes() == (tmp_path / f"new.{fmt}").read_bytes()
    assert read_ack(layout, "c1")["g1/1"] == first + 500


def test_null_keys_sort_last_and_count_as_one_key(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    n = 900
    key = pa.array([None if v < 3 else int(v) for v in rng.integers(0, 12, n)], pa.int64())
    table = pa.table({"key": key, "window_start": rng.integers(0, 4, n),
                      "window_end": rng.integers(4, 6, n), "count": np.ones(n, np.int64),
                      "value": np.arange(n) * 0.5, "tau1": rng.integers(0, 2, n)})
    runs = SortedRuns(tmp_path / "spill", sort_rows=50, block_rows=16, fan_in=3, step_rows=40)
    for s in range(0, n, 30):
        runs.add(table.slice(s, 30))
    assert runs.spilled > 3  # merged in two levels
    got = pa.concat_tables(list(runs.sorted()))
    assert got.equals(table.sort_by(SORT_KEYS))
    file = ResultFile(tmp_path / "k.csv", "csv", "exclusive")
    write_all(file, [got.slice(0, 400), got.slice(400)], empty_results(pa.int64()))
    assert file.keys == len(pc.unique(table.column("key"))) and file.rows == n


def test_iso_text_is_strftime_s_text() -> None:
    rng = np.random.default_rng(1)
    edges = [0, 1, 999_999, 951_782_400_000_000, 253_402_300_799_999_999]
    for micros in (np.concatenate([rng.integers(0, 253_402_300_800_000_000, 5000), edges]),
                   np.array([-1, -10**12, 5, 253_402_300_800_000_000]),  # strftime's way
                   np.array([], np.int64)):
        col = pa.chunked_array([pa.array(micros, pa.int64())])
        want = pc.strftime(col.cast(pa.timestamp("us", tz="UTC")),
                           format="%Y-%m-%dT%H:%M:%SZ")
        assert iso_text(col).equals(want)


CHILD = """
import sys
from cec_spark.read.export import export
r = export(sys.argv[1], sys.argv[2], "parquet")
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
print(r.rows, hwm * 1024)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_an_export_too_big_for_memory_stays_under_512_mib(tmp_path: Path) -> None:
    """4.2 M results: the export as it was held them in memory, ~130 bytes each (over
    512 MiB, the process's own ~170 MiB apart); parquet (the format whose writer holds
    more) stays under 512 MiB of peak resident memory."""
    results = 4_200_000
    make_big(tmp_path / "big", Shape(results, partitions=4))
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "big"),
                            str(tmp_path / "out.parquet")], capture_output=True, text=True,
                           timeout=300, check=True, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    rows, peak = map(int, child.stdout.split())
    assert rows >= results and rows * 130 > 512 << 20
    assert peak < 512 << 20, f"peak RSS {peak >> 20} MiB"
