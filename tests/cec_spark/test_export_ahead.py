"""``cec run pipeline --out``'s read-ahead (cec_spark.read.export_ahead), without Spark:
output logs written here by writer threads while a read-ahead polls them, then the
export from what it read. Every file must equal, byte for byte, the export of the same
logs read after their writers ended (the reference). A new writer epoch on a log read
ahead, a failed read-ahead, and a run that trims its output each make the export read
everything again; nothing of the read-ahead is left beside the file.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench.export_bench import SPEC
from cec_spark.ingest.logs import create_logs
from cec_spark.read import export as export_mod
from cec_spark.read import export_ahead as ahead_mod
from cec_spark.read.export import export
from cec_spark.read.export_ahead import ReadAhead
from cec_spark.run.plan import pipeline_spec, plan_new_run
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import write_run_text
from storage_log.log import StreamLog
from tests.cec_spark.test_export_bounded import _log_rows

P = 3


def _new_run(tmp: Path, *, kind: str = "time", keep: str = "") -> RunLayout:
    source = tmp / "items.csv"
    source.write_text("item_id,item_price,item_time\n7,1.0,1700000000000000\n")
    window = '{ kind = "count", size = 5 }' if kind == "count" \
        else '{ kind = "time", size = "10s" }'
    spec_path = tmp / "items.toml"
    spec_path.write_text(SPEC.format(source=source, window=window, partitions=P) + keep)
    plan = plan_new_run(pipeline_spec(spec_path), spec_path, tmp / "run")
    write_run_text(plan.layout, plan.run_text)
    create_logs(plan.layout, P, "never")
    return plan.layout


def _records(p: int, n: int, seed: int) -> pa.RecordBatch:
    """Partition ``p``'s output rows: results and control rows of keys no other
    partition has (a key is in one partition of a run)."""
    rows = _log_rows(np.random.default_rng(seed), n, "int64", 50)
    key = pa.array(np.asarray(rows.column("key")) * P + p)
    return rows.set_column(rows.schema.get_field_index("key"), "key", key)


def _write(layout: RunLayout, p: int, rows: pa.RecordBatch, gate: threading.Event | None,
           *, per_commit: int = 25) -> None:
    """Partition ``p``'s writer: ``rows`` committed a few at a time, ``gate`` (when
    given) waited for after the first half."""
    with StreamLog.open(layout.output_of(0, p), writable=True, create=True,
                        fsync="never") as log:
        first = 0 if log.last_seq is None else log.last_seq + 1
        rows = rows.set_column(rows.schema.get_field_index("seq"), "seq",
                               pa.array(np.arange(first, first + rows.num_rows)))
        for s in range(0, rows.num_rows, per_commit):
            if gate is not None and s >= rows.num_rows // 2:
                gate.wait(30)
                gate = None
            log.append(rows.slice(s, per_commit))
            log.commit()
            time.sleep(0.001)


def _written(tmp: Path, rows: int) -> RunLayout:
    """A new run whose every output log holds ``rows`` rows, its writers ended."""
    layout = _new_run(tmp)
    for p in range(P):
        _write(layout, p, _records(p, rows, p), None)
    return layout


def _every_log_read(ahead: ReadAhead) -> bool:
    return ahead._begun is not None and len(ahead._begun.last) == P


def _reference(layout: RunLayout, out: Path) -> bytes:
    export(layout.root, out)
    return out.read_bytes()


def _spills(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".sort-" in p.name)


def _wait_for(what: object, cond: object, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < end, f"waited {timeout} s for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("kind", ["time", "count"])
def test_results_read_while_the_logs_grow_give_the_export_after_them(
        tmp_path: Path, fmt: str, kind: str) -> None:
    layout = _new_run(tmp_path, kind=kind)
    out = tmp_path / "out" / f"results.{fmt}"
    out.parent.mkdir()
    gate = threading.Event()
    writers = [threading.Thread(target=_write, args=(layout, p, _records(p, 900, p), gate))
               for p in range(P)]
    with ReadAhead(out, every_s=0.01, sort_rows=97) as ahead:
        ahead.started(layout)
        for w in writers:
            w.start()
        # the first halves are read ahead, and spilled in sorted runs
        _wait_for("the first halves", lambda: ahead._begun is not None and all(
            ahead._begun.last.get(str(p), -1) >= 449 for p in range(P)))
        assert ahead._begun is not None and ahead._begun.runs.spilled > 0
        gate.set()
        for w in writers:
            w.join()
        got = export(layout.root, out, ahead=ahead.take)
        assert ahead._begun is None  # taken: the export went on from it
    assert _spills(out.parent) == []
    want = _reference(layout, tmp_path / f"want.{fmt}")
    assert out.read_bytes() == want
    assert got.rows > 0


def test_a_new_writer_on_a_log_read_ahead_makes_the_export_read_it_all_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _written(tmp_path, 300)
    out = tmp_path / "results.csv"
    calls: list[dict[str, int] | None] = []
    with ReadAhead(out, every_s=0.01) as ahead:
        ahead.started(layout)
        _wait_for("every log", lambda: _every_log_read(ahead))
        # a retried task: a new writer (a new epoch) on partition 1, which appends more
        _write(layout, 1, _records(1, 200, 9), None)
        spill = ahead._begun.spill if ahead._begun is not None else None
        read = export_mod.read_results

        def counted(layout: RunLayout, after: dict[str, int] | None, add: object,
                    run_file: object = None) -> dict[str, int]:
            calls.append(after)
            return read(layout, after, add, run_file)  # type: ignore[arg-type]

        monkeypatch.setattr(export_mod, "read_results", counted)
        export(layout.root, out, ahead=ahead.take)
    assert calls == [None]  # read from the start, not from what was read ahead
    assert spill is not None and not spill.exists()
    assert out.read_bytes() == _reference(layout, tmp_path / "want.csv")


def test_a_change_found_only_by_the_export_s_last_look_reads_it_all_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new writer between the read-ahead's end and the export's read of the rest."""
    layout = _written(tmp_path, 200)
    out = tmp_path / "results.parquet"
    with ReadAhead(out, every_s=0.01) as ahead:
        ahead.started(layout)
        _wait_for("every log", lambda: _every_log_read(ahead))
        begun = ahead.take()
        assert begun is not None
        monkeypatch.setattr(ahead, "take", lambda: begun)
        _write(layout, 0, _records(0, 100, 5), None)  # a new epoch on partition 0
        assert not begun.unchanged()
        export(layout.root, out, ahead=ahead.take)
    assert _spills(tmp_path) == []
    assert out.read_bytes() == _reference(layout, tmp_path / "want.parquet")


def test_a_failed_read_ahead_is_not_used(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _written(tmp_path, 200)
    out = tmp_path / "results.csv"

    def broken(*args: object) -> int:
        raise OSError("a damaged record")

    monkeypatch.setattr(ahead_mod, "log_results", broken)
    with ReadAhead(out, every_s=0.01) as ahead:
        ahead.started(layout)
        _wait_for("the failure", lambda: ahead._failed)
        assert ahead.take() is None
        assert _spills(tmp_path) == []
        export(layout.root, out, ahead=ahead.take)
    assert out.read_bytes() == _reference(layout, tmp_path / "want.csv")


def test_a_run_that_trims_its_output_is_not_read_ahead(tmp_path: Path) -> None:
    layout = _new_run(tmp_path, keep="output_keep_mb = 64\n")
    with ReadAhead(tmp_path / "results.csv", every_s=0.01) as ahead:
        ahead.started(layout)
        assert ahead._thread is None and ahead.take() is None
    assert _spills(tmp_path) == []


def test_without_out_it_only_calls_the_next_hook_and_close_leaves_nothing(
        tmp_path: Path) -> None:
    layout = _new_run(tmp_path)
    seen: list[Path] = []
    with ReadAhead(None, None, lambda lay: seen.append(lay.root)) as ahead:
        ahead.started(layout)
        assert ahead._thread is None
    assert seen == [layout.root]
    out = tmp_path / "x" / "results.csv"  # its folder does not exist: made by the export
    with ReadAhead(out) as ahead:
        ahead.started(layout)
        assert ahead._thread is None
    with ReadAhead(tmp_path / "results.csv", every_s=0.01) as ahead:
        ahead.started(layout)
        assert _spills(tmp_path) != []  # an interrupted run: closed without an export
    assert _spills(tmp_path) == []


def test_the_session_stops_while_the_file_is_written_and_its_error_is_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """runner._end: the run's own session stops on a thread while on_ended runs (each
    waits for the other to have started: in turn they would wait for ever); a stop's
    error is raised once on_ended is done; without a session of its own only on_ended."""
    from cec_spark.driver import runner

    stopping, writing = threading.Event(), threading.Event()
    done: list[str] = []

    def stop(spark: object) -> None:
        stopping.set()
        assert writing.wait(10), "on_ended did not start while the session stopped"
        done.append(f"stopped {spark}")

    def on_ended(result: object) -> None:
        writing.set()
        assert stopping.wait(10), "the session did not stop while the file was written"
        done.append(f"wrote {result}")

    monkeypatch.setattr(runner, "stop_session", stop)
    runner._end("spark", "result", on_ended)  # type: ignore[arg-type]
    assert sorted(done) == ["stopped spark", "wrote result"]

    def bad_stop(spark: object) -> None:
        raise RuntimeError("the JVM did not stop")

    monkeypatch.setattr(runner, "stop_session", bad_stop)
    with pytest.raises(RuntimeError, match="did not stop"):
        runner._end("spark", "result", lambda r: done.append("wrote again"))  # type: ignore[arg-type]
    assert done[-1] == "wrote again"
    runner._end(None, "lent", lambda r: done.append(f"only {r}"))  # type: ignore[arg-type]
    assert done[-1] == "only lent"


def test_ended_writes_the_file_keeps_its_error_and_skips_an_interrupted_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    layout = _written(tmp_path, 100)
    out = tmp_path / "results.csv"
    with ReadAhead(out, "csv") as ahead:
        ahead.ended(SimpleNamespace(interrupted=True, run_dir=str(layout.root)))  # type: ignore[arg-type]
        assert not out.exists()
        ahead.ended(SimpleNamespace(interrupted=False, run_dir=str(layout.root)))  # type: ignore[arg-type]
        assert out.exists() and ahead.result(layout.root).rows > 0
    assert out.read_bytes() == _reference(layout, tmp_path / "want.csv")

    def full_disk(*args: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ahead_mod, "export", full_disk)
    with ReadAhead(tmp_path / "again.csv", "csv") as ahead:
        ahead.ended(SimpleNamespace(interrupted=False, run_dir=str(layout.root)))  # type: ignore[arg-type]
        with pytest.raises(OSError, match="No space left"):
            ahead.result(layout.root)


def test_a_read_ahead_that_cannot_start_does_not_stop_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _new_run(tmp_path)

    def read_only(**kw: object) -> str:
        raise PermissionError(13, "Permission denied", str(kw.get("dir")))

    monkeypatch.setattr(ahead_mod.tempfile, "mkdtemp", read_only)
    seen: list[Path] = []
    with ReadAhead(tmp_path / "results.csv", "csv", lambda lay: seen.append(lay.root)) as ahead:
        ahead.started(layout)  # no error: the export after the run reads everything
        assert ahead._thread is None and ahead.take() is None
    assert seen == [layout.root]
