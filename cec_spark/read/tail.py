"""``cec tail DIR``: the run's console consumer, one line per result as soon as it is
durable.

What it follows: every output log of every generation (:meth:`RunLayout.output_logs`,
re-read when ``generations.toml`` changes, so a rescale during a tail is followed), each
from a position of its own:

* by default from the logs' ends at start (new results only, as ``tail -f``); a run
  that starts after the tail holds only new results: from its first one;
* ``--from-start``: from the first result;
* ``--consumer NAME``: after what ``NAME`` acknowledged (``RUN/consumers/NAME.json``,
  shared with ``cec export --consumer``); a new consumer starts at the first result.

It reads committed records only (a record is committed when it is durable), prints the
results (``R`` and ``G_open+R`` rows) with the fields of ``cec export`` (``key,
window_start, window_end, count, value``, the bounds as ISO-8601 text) as JSON lines or
CSV, flushes, and then acknowledges. It ends after the last result of a bounded run
(every log of the current generation sealed and read) and on Ctrl-C; it says on stderr
what it waits for (the run to start, new results) when nothing comes.

**Exactly once across a kill of the tail itself.** Printing and acknowledging cannot be
one atomic step, so a tail with ``--consumer`` writes an *intent* first
(``RUN/consumers/NAME.pending.json``: the acks after this batch, and the identity,
size and byte count of standard output when it is a regular file), then the lines,
then the ack, then removes the intent. A restarted tail that finds an intent looks at
its standard output: the same file, grown by the batch's bytes, means the batch was
printed (the ack is completed, nothing printed twice); the same file at its old size
means it was not (printed now); the same file with part of the batch (a kill inside
the write) is cut back to its old size and the batch printed whole. When standard
output is a pipe or a terminal nothing can tell, and the batch is printed again, with a
warning on stderr (at least once). Appending to a file (``cec tail ... >> out``) is
exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.csv as pacsv

from cec.errors import UsageError
from cec_spark.read.export import COLUMNS, check_consumer, result_rows, with_timestamps
from cec_spark.rundir.acks import ack_key, read_ack, write_ack
from cec_spark.rundir.layout import FOLDERS, RUN_FILE, RunLayout
from cec_spark.rundir.run_file import current_spec, read_run_file
from cec_spark.watchdog import say
from storage_log.durable import write_durable
from storage_log.errors import StorageLogError
from storage_log.faults import armed, crash_point
from storage_log.log import StreamLog
from storage_log.notify import CommitWatch

POLL_S = 0.05  # the longest sleep between two looks at the logs (a write on this host
# wakes the tail at once: storage_log.notify; across hosts this is the poll)
SAY_AFTER_S = 2.0  # the first "waiting for" line, then at growing intervals


@dataclass
class _Follow:
    """One output log being followed: printed through ``pos`` (an output seq)."""

    name: str
    path: Path
    end: int | None  # the last seq of this log that belongs to the run (old generation)
    pos: int
    log: StreamLog | None = None
    done: bool = False


@dataclass
class TailState:
    """What a tail has printed: per output log (:func:`ack_key`), the last output seq."""

    acks: dict[str, int] = field(default_factory=dict)
    lines: int = 0


def check_run_dir(run_dir: Path) -> bool:
    """True when ``run_dir`` holds a run; False while one may still start there (missing,
    empty, or only what a starting driver creates); exit 2 for anything else."""
    layout = RunLayout(run_dir)
    if layout.exists():
        return True
    if not run_dir.exists():
        return False
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a directory (cec tail follows a run directory)")
    # while its driver creates it (before run.toml exists) a run directory holds its
    # folders and hidden temporary files (run.toml is written as .run.toml.HOST.PID.tmp)
    other = [n for n in os.listdir(run_dir)
             if n not in FOLDERS and not n.startswith((RUN_FILE, "."))]
    if other:
        raise UsageError(f"{run_dir}: not a cec run directory (no run.toml; it holds "
                         f"{sorted(other)[0]!r})")
    return False


class Tail:
    """The loop of ``cec tail``; :func:`tail` is its entry."""

    def __init__(self, run_dir: Path, out: IO[str], *, fmt: str, from_start: bool,
                 consumer: str | None, stop: Callable[[], bool]) -> None:
        if fmt not in ("jsonl", "csv"):
            raise UsageError(f"--format: {fmt!r} is not one of jsonl|csv")
        if consumer is not None:
            check_consumer(consumer)
        self.run_dir, self.out, self.fmt = run_dir, out, fmt
        self.from_start, self.consumer, self.stop = from_start, consumer, stop
        self.state = TailState()
        self.follows: dict[str, _Follow] = {}
        self._gens_mtime: float | None = -1.0
        self._header = fmt == "csv"
        self._count_window = False
        self._key_type = pa.int64()
        self._layout: RunLayout | None = None
        self.watch = CommitWatch(fallback_s=POLL_S)

    # -------------------------------------------------------------- the loop

    def run(self) -> TailState:
        if not self._wait_for_run():
            return self.state
        layout = self._layout
        assert layout is not None
        start = read_ack(layout, self.consumer) if self.consumer is not None else None
        if self.consumer is not None:
            self._settle_intent(layout)
            start = read_ack(layout, self.consumer)
        self._refresh(start)
        quiet_since = time.monotonic()
        said = SAY_AFTER_S
        try:
            while not self.stop():
                printed = self._poll()
                if printed:
                    quiet_since, said = time.monotonic(), SAY_AFTER_S
                elif self._complete():
                    return self.state
                else:
                    waited = time.monotonic() - quiet_since
                    if waited >= said:
                        say(f"tail: waiting for new results in {self.run_dir} "
                            f"({self._waiting_on()}; {waited:.0f} s)")
                        said *= 2
                    self.watch.wait(POLL_S)
                    self._refresh(None)
        finally:
            self.watch.close()
            for f in self.follows.values():
                if f.log is not None:
                    f.log.close()
        return self.state

    def _wait_for_run(self) -> bool:
        """Wait (saying so) until the run directory holds a run; False if stopped. A run
        that started after the tail holds only new results: it is printed from its
        start (else a result its operators committed before the tail's first look at
        their logs would be taken for an old one, and skipped)."""
        began, said = time.monotonic(), SAY_AFTER_S
        while not check_run_dir(self.run_dir):
            self.from_start = True
            if self.stop():
                return False
            waited = time.monotonic() - began
            if waited >= said:
                say(f"tail: waiting for a run to start in {self.run_dir} (no run.toml yet; "
                    f"{waited:.0f} s)")
                said *= 2
            time.sleep(POLL_S)
        self._layout = RunLayout(self.run_dir)
        spec, settings = read_run_file(self._layout)
        self._count_window = spec.aggregate.window.kind == "count"
        self._key_type = pa.int64() if settings.key_type == "int64" else pa.string()
        return True

    def _refresh(self, start: dict[str, int] | None) -> None:
        """Follow every output log of every generation (again when the generations
        changed: a rescale during the tail)."""
        layout = RunLayout(self.run_dir)
        try:
            mtime: float | None = layout.generations_file.stat().st_mtime
        except FileNotFoundError:
            mtime = None
        if mtime == self._gens_mtime:
            return
        self._gens_mtime = mtime
        self._layout = layout
        spec = current_spec(layout, read_run_file(layout)[0])
        for gen, p, path, end in layout.output_logs(spec.run.partitions):
            name = ack_key(gen, p)
            self.watch.add(path.parent)  # a log's directory appears there
            f = self.follows.get(name)
            if f is None:
                pos = self._start_pos(path, name, start)
                self.follows[name] = _Follow(name, path, end, pos)
            else:
                f.end = end

    def _start_pos(self, path: Path, name: str, start: dict[str, int] | None) -> int:
        if start is not None:
            return start.get(name, -1)
        if self.from_start or self.consumer is not None:
            return -1
        log = _open(path)  # new results only: from the log's end now
        if log is None:
            return -1
        with log:
            return -1 if log.last_seq is None else log.last_seq

    def _complete(self) -> bool:
        """Every log read to its end: old generations to their recorded end, the current
        one sealed."""
        return bool(self.follows) and all(f.done for f in self.follows.values())

    def _waiting_on(self) -> str:
        open_logs = [f.name for f in self.follows.values() if not f.done]
        if not any(f.log is not None for f in self.follows.values()):
            return "no output log yet: the run's operator tasks have not started"
        return f"{len(open_logs)} output log(s) still open"

    # -------------------------------------------------------------- one poll

    def _poll(self) -> int:
        """Print what was committed since the last poll; the number of lines."""
        tables: list[pa.Table] = []
        acks: dict[str, int] = {}
        for f in self.follows.values():
            if f.done:
                continue
            got, pos = self._read(f)
            if got is not None:
                tables.append(got)
            if pos != f.pos:
                acks[f.name] = pos
        if not acks:
            return 0
        lines = self._format(tables)
        self._emit(lines, acks)
        for name, pos in acks.items():
            self.follows[name].pos = pos
        return lines.count("\n") - (1 if self._header_in(lines) else 0)

    def _read(self, f: _Follow) -> tuple[pa.Table | None, int]:
        if f.log is None:
            f.log = _open(f.path)
            if f.log is None:
                return None, f.pos
            self.watch.add(f.path)  # its commits wake the tail
        sealed = f.end is None and f.log.sealed  # before last_seq: then last is final
        last = f.log.last_seq
        upto = last if f.end is None or last is None else min(f.end, last)
        if upto is None or upto <= f.pos:
            if f.end is not None:
                f.done = f.pos >= f.end
            else:
                f.done = sealed and (last is None or f.pos >= last)
            return None, f.pos
        parts = [result_rows(b, self._count_window, self._key_type, upto)
                 for b in f.log.read_forward(after_seq=f.pos) if b.num_rows]
        parts = [t for t in parts if t is not None and t.num_rows]
        return (pa.concat_tables(parts) if parts else None), upto

    def _format(self, tables: list[pa.Table]) -> str:
        if not tables:
            return ""
        table = with_timestamps(pa.concat_tables(tables).select(list(COLUMNS)), iso=True)
        if self.fmt == "csv":
            sink = pa.BufferOutputStream()
            pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=self._header))
            self._header = False
            return bytes(sink.getvalue()).decode()
        return "".join(json.dumps(row, separators=(",", ":")) + "\n"
                       for row in table.to_pylist())

    def _header_in(self, lines: str) -> bool:
        return self.fmt == "csv" and lines.startswith('"key"')

    # -------------------------------------------------------------- print, then ack

    def _emit(self, lines: str, acks: dict[str, int]) -> None:
        self.state.acks.update(acks)
        if self.consumer is None:
            self._write(lines)
            return
        layout = self._layout
        assert layout is not None
        new = {**read_ack(layout, self.consumer), **acks}
        data = lines.encode()
        layout.consumers_dir.mkdir(exist_ok=True)
        intent = {"acks": new, "out": _out_identity(self.out), "bytes": len(data)}
        write_durable(self._intent_path(layout), json.dumps(intent))
        crash_point("tail.after_intent")
        if armed("tail.mid_print"):  # (a test) a kill inside the write: half, then the rest
            half = len(lines) // 2
            self._write(lines[:half])
            crash_point("tail.mid_print")
            lines = lines[half:]
        self._write(lines)
        crash_point("tail.after_print")
        write_ack(layout, self.consumer, new)
        with contextlib.suppress(FileNotFoundError):
            self._intent_path(layout).unlink()

    def _write(self, lines: str) -> None:
        if lines:
            self.out.write(lines)
            self.out.flush()
            self.state.lines += lines.count("\n")

    def _intent_path(self, layout: RunLayout) -> Path:
        assert self.consumer is not None
        return layout.consumer_intent(self.consumer)

    def _settle_intent(self, layout: RunLayout) -> None:
        """A previous tail of this consumer died between its intent and its ack: was
        its batch printed? (See the module docstring.)"""
        assert self.consumer is not None
        path = self._intent_path(layout)
        try:
            intent = json.loads(path.read_text("utf-8"))
            acks = {str(k): int(v) for k, v in intent["acks"].items()}
            then, nbytes = intent["out"], int(intent["bytes"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            say(f"tail: {path} is unreadable: its batch is printed again (at least once)")
            path.unlink()
            return
        now = _out_identity(self.out)
        same = then is not None and now is not None and then[:2] == now[:2]
        if now is None or not same:
            say("tail: the previous tail of consumer "
                f"{self.consumer!r} was stopped while printing to another output; its last "
                "batch is printed again (at least once: only a file tells what was printed)")
        elif now[2] >= then[2] + nbytes:
            crash_point("tail.before_ack")
            write_ack(layout, self.consumer, acks)  # printed: complete the ack
        elif now[2] > then[2]:
            os.ftruncate(self.out.fileno(), then[2])  # a torn batch: cut, print it whole
            with contextlib.suppress(OSError, ValueError):  # appending: writes go to the end
                self.out.seek(then[2])
        path.unlink()


def _open(path: Path) -> StreamLog | None:
    if not path.exists():
        return None
    try:
        return StreamLog.open(path)
    except StorageLogError:
        if not any(path.glob("*.seg")):
            return None  # created, not yet written: the task is starting
        raise


def _out_identity(out: IO[str]) -> list[int] | None:
    """(device, inode, size) of ``out`` when it is a regular file, else None."""
    try:
        out.flush()
        st = os.fstat(out.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return [st.st_dev, st.st_ino, st.st_size] if stat.S_ISREG(st.st_mode) else None


def tail(run_dir: Path | str, *, out: IO[str] | None = None, fmt: str = "jsonl",
         from_start: bool = False, consumer: str | None = None,
         stop: Callable[[], bool] | None = None) -> TailState:
    """Follow the run in ``run_dir`` until it completes or ``stop()`` (see the module
    docstring); what was printed."""
    return Tail(Path(run_dir), out or sys.stdout, fmt=fmt, from_start=from_start,
                consumer=consumer, stop=stop or (lambda: False)).run()

