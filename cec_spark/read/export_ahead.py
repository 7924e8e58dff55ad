"""``cec run pipeline --out``: the export's reading done while the run goes on.

An export reads every result out of the output logs, sorts them in runs spilled beside
its file, then merges the runs into the file (:mod:`cec_spark.read.export`). At the end
of a run that reading came after the operators, on the run's path: 1.7 of the 2.6 s an
export of a 30 M-row run's 3 M results takes (docs/PROFILE.md, "The export read while
the run goes on"). :class:`ReadAhead` does it on a thread of the driver while the run
goes on: every :data:`EVERY_S` it reads what the output logs committed since, as
``cec tail`` does, into the sorted runs of the coming export. After the run,
:func:`~cec_spark.read.export.export` reads on from there and writes the file: the file
is the one it writes without a read-ahead (its order is a total one; no two results of
a run share the four sort keys).

What was read stays valid only while each log's writer is the one it was read from. A
new writer (a retried or recovered operator task, a repair) takes a new **epoch**
(:mod:`storage_log.epoch`), which may fence off records a reader had seen. So each log's
epochs are listed before it is read, and again at the end
(:meth:`~cec_spark.read.export.Begun.unchanged`): if they differ, the export reads
everything again. It reads everything again too if the read-ahead failed (a damaged
record: the export then meets it and says so), and a run whose output is trimmed as it
goes (``[run].output_keep_mb`` or ``output_keep_s``) is not read ahead at all, since
its export reads what is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from cec_spark.read.export import Begun, export, log_results, result_key_type
from cec_spark.read.sorted_runs import SORT_ROWS, SortedRuns
from cec_spark.rundir.acks import ack_key
from cec_spark.rundir.run_file import read_run_file
from storage_log.epoch import list_epochs
from storage_log.log import StreamLog

if TYPE_CHECKING:
    from collections.abc import Callable

    from cec_spark.report import ExportResult, RunResult
    from cec_spark.rundir.layout import RunLayout

#: seconds between two reads of the output logs while the run goes on
EVERY_S = 0.5
#: the read-ahead's nice value (Linux: a thread's own, inherited by the threads it starts)
NICE = 19


class ReadAhead:
    """The export of one ``cec run pipeline --out`` (module docstring); a no-op when
    ``out`` is None. :meth:`started` is the run's ``on_started`` (it calls ``then``
    first) and starts the read-ahead; :meth:`ended` its ``on_ended``, which writes the
    file (:func:`~cec_spark.read.export.export` in ``fmt``, while the run's session
    stops; its error kept for :meth:`result`); :meth:`take` ends the reading and hands
    what was read to the export; :meth:`close` ends it and removes what was not handed
    over."""

    def __init__(self, out: Path | str | None, fmt: str | None = None,
                 then: Callable[[RunLayout], None] | None = None, *,
                 every_s: float = EVERY_S, sort_rows: int = SORT_ROWS) -> None:
        self.out = None if out is None else Path(out)
        self.fmt, self.then, self.every_s, self.sort_rows = fmt, then, every_s, sort_rows
        self._exported: ExportResult | BaseException | None = None
        self._begun: Begun | None = None
        self._failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._logs: dict[str, StreamLog] = {}

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def started(self, layout: RunLayout) -> None:
        """The run's ``run.toml`` and lease exist: start reading its output logs."""
        if self.then is not None:
            self.then(layout)
        if self.out is None or not self.out.parent.is_dir():  # (the export makes it)
            return
        try:  # no read-ahead is no error: the export after the run reads it all
            spec = read_run_file(layout)[0]
            if spec.run.output_keep_mb is not None or spec.run.output_keep_s is not None:
                return
            reader = _Reader(layout, spec.run.partitions,
                             spec.aggregate.window.kind == "count", result_key_type(layout))
            spill = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.sort-",
                                          dir=self.out.parent))
            self._begun = Begun(SortedRuns(spill, sort_rows=self.sort_rows), spill, {})
            self._thread = threading.Thread(target=self._loop, args=(reader,),
                                            name="cec-export-ahead", daemon=True)
            self._thread.start()
        except Exception:  # (a read-only or full folder, an unreadable run.toml)
            self.close()

    def ended(self, result: RunResult) -> None:
        """The run ended: unless it was interrupted, its file written (and its error, if
        any, kept: the run itself ended as ``result`` says)."""
        if self.out is None or result.interrupted:
            return
        try:
            self._exported = export(result.run_dir, self.out, self.fmt, ahead=self.take)
        except BaseException as exc:  # raised by result(), on the command's thread
            self._exported = exc

    def result(self, run_dir: Path | str) -> ExportResult:
        """The file :meth:`ended` wrote (its error raised), or, when the run ended
        without it, the export written now."""
        done, self._exported = self._exported, None
        if isinstance(done, BaseException):
            raise done
        if done is None:
            assert self.out is not None
            return export(run_dir, self.out, self.fmt, ahead=self.take)
        return done

    def take(self) -> Begun | None:
        """End the reading; what was read (the caller owns it from here), or None when
        there is nothing to go on from (never started, failed, a writer changed)."""
        self._end_thread()
        begun, self._begun = self._begun, None
        if begun is not None and (self._failed or not begun.unchanged()):
            _discard(begun)
            return None
        return begun

    def close(self) -> None:
        """End the reading; remove what was read and not taken. Idempotent."""
        begun = self.take()
        if begun is not None:
            _discard(begun)

    def _end_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for log in self._logs.values():
            with contextlib.suppress(Exception):
                log.close()
        self._logs.clear()

    def _loop(self, reader: _Reader) -> None:
        # the run's tasks first: this thread, and the threads it starts (the sorted runs'
        # writer, the logs' decoders), take only the cores they leave idle
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        try:
            while not self._stop.wait(self.every_s):
                begun = self._begun
                if begun is None or not reader.read(begun, self._logs):
                    self._failed = True
                    return
        except Exception:  # the export reads it all again, and meets it and says so
            self._failed = True


@dataclass
class _Reader:
    """One read of every output log of the run (its first generation: a new run)."""

    layout: RunLayout
    partitions: int
    count_window: bool
    key_type: pa.DataType

    def read(self, begun: Begun, logs: dict[str, StreamLog]) -> bool:
        """What each log committed since the last read, into ``begun``; False when a
        log's writers changed since it was first read."""
        for gen, p, path, end in self.layout.output_logs(self.partitions):
            name = ack_key(gen, p)
            epochs = tuple(list_epochs(path))
            if not epochs:  # no writer yet, so nothing written
                continue
            if begun.epochs.setdefault(path, epochs) != epochs:
                return False
            log = logs.get(name)
            if log is None:
                log = logs[name] = StreamLog.open(path)
            since = begun.last.get(name, -1)
            begun.last[name] = log_results(log, since, end, self.count_window,
                                           self.key_type, begun.runs.add)
        return True


def _discard(begun: Begun) -> None:
    with contextlib.suppress(Exception):  # only its files are left: removed below
        begun.runs.close()
    shutil.rmtree(begun.spill, ignore_errors=True)
