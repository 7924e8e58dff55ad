"""Rescale on recovery without Spark: whole rescales of run directories whose logs
are written here the way the ingest and the operator tasks write them (real files,
real logs; the partition of a key is :mod:`recovery.rescale`'s, which
tests/cec_spark/test_rescale.py holds equal to Spark's).

They cover what a kill rarely hits: an old partition whose upstream log (and so its
output) ran ahead of another's (the cut falls before its output's end), one that lags
behind the cut (drained), a crash after the new generation's logs were written but
before ``generations.toml`` (the rescale runs again), two rescales in a row, and a
run killed before its logs existed (``recover_run``, the resume stubbed). Each ends
with the same results as the run without a rescale.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from cec.errors import CorruptionError, RecoveryError, UsageError
from cec_spark.errors import DriverSupersededError
from cec_spark.ingest.logs import create_logs
from cec_spark.ingest.writer import value_column
from cec_spark.read.export import results_table
from cec_spark.recover import resume as resume_mod
from cec_spark.recover.rescale import check_rescale, rescale, task_error
from cec_spark.recover.resume import recover_run
from cec_spark.run.plan import RunPlan, pipeline_spec, plan_new_run
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file, write_run_text
from recovery.rescale import partitions_of
from storage_log.log import StreamLog
from tests.cec_spark.helpers import operate_partitions, spec_text, write_items_csv

ROWS = 6_000
CHUNK = 500


def _new_run(tmp: Path, name: str, window: str, partitions: int, *, logs: bool = True
             ) -> RunLayout:
    src = tmp / "items.csv"
    if not src.exists():
        write_items_csv(src, ROWS, keys=150, seed=9, negative=False)
    spec_path = tmp / f"{name}.toml"
    spec_path.write_text(spec_text(
        f'kind = "csv"\npath = "{src}"\ntime_field = "item_time"\nchunk_rows = {CHUNK}',
        where=None, window=window, function="sum", partitions=partitions))
    plan = plan_new_run(pipeline_spec(spec_path), spec_path, tmp / name)
    write_run_text(plan.layout, plan.run_text)
    if logs:  # else: killed after run.toml was written, before the logs were created
        create_logs(plan.layout, partitions, "never")
    return RunLayout(plan.layout.root)


def _rows(tmp: Path) -> pa.Table:
    t = pacsv.read_csv(tmp / "items.csv")
    return pa.table({"ts": t.column("item_time"),
                     "seq": pa.array(np.arange(t.num_rows, dtype=np.int64)),
                     "item_id": t.column("item_id"), "item_price": t.column("item_price")})


def _ingest(layout: RunLayout, rows: pa.Table, chunks: range, only: set[int] | None = None,
            seal: bool = False) -> None:
    """Chunks of the source into the current generation's upstream logs, one commit
    with the chunk's token each (``only``: into those partitions only)."""
    spec, settings = read_run_file(layout)
    assert value_column(spec) == "item_price"
    parts = spec.run.partitions
    logs = [StreamLog.open(layout.upstream(p), writable=True, fsync="never")
            for p in range(parts)]
    try:
        for c in chunks:
            sl = rows.slice(c * CHUNK, CHUNK)
            target = partitions_of(sl.column("item_id").to_pylist(), parts,
                                   settings.key_groups or 128)
            token = json.dumps({"chunk": c, "next_seq": (c + 1) * CHUNK}).encode()
            for p, log in enumerate(logs):
                if only is not None and p not in only:
                    continue
                mine = sl.filter(pa.array(target == p))
                if mine.num_rows:
                    log.append(mine.combine_chunks().to_batches()[0])
                log.commit(token)
        if seal:
            for log in logs:
                log.seal()
    finally:
        for log in logs:
            log.close()


def _reference(tmp: Path, window: str) -> pa.Table:
    layout = _new_run(tmp, "ref", window, 3)
    _ingest(layout, _rows(tmp), range(ROWS // CHUNK), seal=True)
    operate_partitions(layout)
    return results_table(layout.root)


@pytest.mark.parametrize("window", ['{ kind = "count", size = 7 }',
                                    '{ kind = "count", size = 6, slide = 4 }',
                                    '{ kind = "time", size = "300ms", slide = "100ms" }'])
def test_ahead_and_behind_partitions_rescale_exactly(tmp_path: Path, window: str) -> None:
    ref = _reference(tmp_path, window)
    rows = _rows(tmp_path)
    layout = _new_run(tmp_path, "run", window, 3)
    _ingest(layout, rows, range(4))
    _ingest(layout, rows, range(4, 6), only={0})  # log 0 ran two chunks ahead
    operate_partitions(layout, only={0, 1})  # partition 0's output goes past the cut
    operate_partitions(layout, upto=2 * CHUNK, only={2})  # partition 2 lags behind it
    result = rescale(layout, 2)
    assert result is not None and result.cut == 4 * CHUNK - 1
    assert [o.state for o in result.old] == ["ahead", "drained", "drained"], result.old
    assert result.old[2].drained_tuples > 0  # it processed its input up to the cut
    assert result.old[0].t_c is not None and result.old[0].t_c > result.cut
    new = RunLayout(layout.root)
    assert (new.generation, new.cut) == (1, 4 * CHUNK - 1)
    _ingest(new, rows, range(4, ROWS // CHUNK), seal=True)
    operate_partitions(new)
    assert results_table(layout.root).equals(ref)


def test_drained_partitions_crash_before_commit_and_two_rescales(tmp_path: Path) -> None:
    """Every old partition behind the cut; a rescale to 3 dies before its commit, one to
    4 (run again, other partitions) then commits; a second rescale (4 -> 1) later."""
    window = '{ kind = "count", size = 5 }'
    ref = _reference(tmp_path, window)
    rows = _rows(tmp_path)
    layout = _new_run(tmp_path, "run", window, 2)
    _ingest(layout, rows, range(5))
    operate_partitions(layout, upto=3 * CHUNK)  # every partition behind the cut: drained
    # a rescale that dies after writing generation 1's logs, before generations.toml
    drained = rescale(layout, 4, dry_run=True)
    assert drained is not None and drained.dry_run
    assert sum(drained.windows_per_partition) == sum(o.windows for o in drained.old)
    def crash(*_: object) -> None:
        raise KeyboardInterrupt  # dies here: the old generation drained, the new written

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("cec_spark.recover.rescale.store_generations", crash)
        with pytest.raises(KeyboardInterrupt):
            rescale(layout, 3)
    assert (layout.root / "output" / "g0001" / "p0002").exists()
    assert RunLayout(layout.root).generation == 0  # not committed: still the old one
    first = rescale(layout, 4)
    assert first is not None and all(o.state == "drained" for o in first.old)
    assert not (layout.root / "output" / "g0001" / "p0004").exists()
    g1 = RunLayout(layout.root)
    _ingest(g1, rows, range(5, 8))
    operate_partitions(g1, upto=7 * CHUNK)
    second = rescale(g1, 1)
    assert second is not None and (second.generation, second.cut) == (2, 8 * CHUNK - 1)
    g2 = RunLayout(layout.root)
    assert [g.partitions for g in g2.generations] == [2, 4, 1]
    assert g2.output(0) == layout.root / "output" / "g0002" / "p0000"
    _ingest(g2, rows, range(8, ROWS // CHUNK), seal=True)
    operate_partitions(g2)
    assert results_table(layout.root).equals(ref)
    with pytest.raises(UsageError, match="complete"):
        rescale(g2, 3)


def test_a_run_killed_before_its_logs_starts_with_the_new_partitions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after run.toml appeared, before the ingest created upstream/ (issue 29):
    ``cec recover --partitions P'`` has nothing to move, so the run starts with P'
    (a generation at the cut -1: the whole input), exactly."""
    window = '{ kind = "count", size = 6, slide = 4 }'
    ref = _reference(tmp_path, window)
    layout = _new_run(tmp_path, "run", window, 3, logs=False)
    assert not (layout.root / "upstream").exists()
    planned = recover_run(layout.root, dry_run=True, partitions=2)
    assert planned.rescale is not None and planned.rescale.dry_run
    assert [o.state for o in planned.rescale.old] == ["empty"] * 3
    assert not (layout.root / "upstream").exists()  # a dry run writes nothing
    resumed: list[RunPlan] = []

    def resume(root: Path, **kw: Any) -> None:  # the run Spark would resume
        resumed.append(kw["plan"])

    monkeypatch.setattr(resume_mod, "resume_run", resume)
    result = recover_run(layout.root, partitions=2, progress=False)
    assert result.rescale is not None
    assert (result.rescale.cut, result.rescale.chunk) == (-1, -1)
    assert [o.state for o in result.rescale.old] == ["empty"] * 3
    assert result.rescale.windows_per_partition == [0, 0]
    assert [(e.partition, e.fresh_start) for e in result.partitions] == [(0, True), (1, True)]
    new = RunLayout(layout.root)
    assert (new.generation, new.cut) == (1, -1)
    assert [p.partitions for p in resumed] == [2]
    assert resumed[0].layout.generation == 1
    _ingest(new, _rows(tmp_path), range(ROWS // CHUNK), seal=True)
    operate_partitions(new)
    assert results_table(layout.root).equals(ref)


def test_a_run_without_key_groups_is_refused(tmp_path: Path) -> None:
    layout = _new_run(tmp_path, "run", '{ kind = "count", size = 5 }', 2)
    spec, settings = read_run_file(layout)
    with pytest.raises(UsageError, match="before key groups"):
        check_rescale(replace(settings, key_groups=None), spec, 3, layout.root)
    with pytest.raises(UsageError, match="key groups"):
        check_rescale(settings, spec, 129, layout.root)


def test_a_failed_rescale_task_keeps_its_error_in_the_driver() -> None:
    """Spark wraps a task's exception in its own: the rescale's driver raises the task's
    error class with its message (so the command exits as the task would have), and
    says what failed otherwise."""
    def wrapped(line: str) -> Exception:
        return Exception("An error occurred while calling o1.collectAndServe.\n"
                         "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                         f"{line}\n\tat org.apache.spark.api.python...")
    cases = [("cec.errors.RecoveryError: a session ending at 5 is still open at ts 9",
              RecoveryError, "a session ending at 5 is still open at ts 9"),
             ("storage_log.errors.CorruptLogError: /r/output/p0001: bad frame at 40",
              CorruptionError, "/r/output/p0001: bad frame at 40"),
             ("cec_spark.errors.DriverSupersededError: another driver (number 3)",
              DriverSupersededError, "another driver (number 3)")]
    for line, cls, message in cases:
        got = task_error(wrapped(line), "drain 3 old partitions")
        assert type(got) is cls and str(got) == message, (got, cls)
    other = task_error(wrapped("MemoryError"), "drain 3 old partitions")
    assert type(other) is RecoveryError
    assert "the rescale's tasks failed (drain 3 old partitions): MemoryError" in str(other)
    assert "run the same cec recover --partitions again" in str(other)
