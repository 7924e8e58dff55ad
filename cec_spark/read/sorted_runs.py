"""Result rows in ``cec export``'s order, in bounded memory: sorted runs, then a merge.

The order is ``(key, window_start, window_end, tau1)`` (:data:`SORT_KEYS`, nulls last);
rows equal in all four keep the order they were added in (a stable sort). Rows are
added as they are read (:meth:`SortedRuns.add`); every :data:`SORT_ROWS` of them are
sorted in memory and, if more follow, written as a **run file** (Arrow IPC, the
columns given, batches of :data:`BLOCK_ROWS` rows, no compression) in a directory the
caller owns and removes. :meth:`SortedRuns.sorted` then gives the rows in order: the
one in-memory sort when nothing was spilled (as ``cec export`` always did), else a
k-way merge of the runs, a few batches of each in memory at a time.

**The merge, vectorized.** A row's place in the whole order is ``(key, window_start,
window_end, tau1, run, position in its run)``: unique, and the stable order of the rows
as added, since runs hold consecutive rows and each was sorted stably. Each run keeps
its next **step** of rows loaded (``STEP_ROWS / runs`` rows: the rest of its loaded
rows and as many next batches as that takes). The **bound** is the smallest place among
the steps' last rows; a run's rows past its step come after the step's last row, so
after the bound. A merge step takes from every run the rows of its step up to the bound
(a binary search of their places), at most :data:`STEP_ROWS` rows in all, concatenates
them in run order and sorts them stably (:func:`sort_results`: its quick path for
integer keys, a ``sort_by`` else); at least the bound's whole step is taken. More than
:data:`FAN_IN` runs are first merged in groups into fewer, longer run files (groups of
consecutive runs keep the order of ties; each group's files are removed once merged).

**A run is sorted and written on a thread** while the rows after it are read (numpy's
and Arrow's sorts, takes and writes run without the GIL): one run at a time, so a
reader that is ahead waits for it. ``cec export`` of 10 M results measured 2.1 s in
spills, beside 3.2 s of reading, in one thread.

Memory: about ``2 * SORT_ROWS`` rows while adding (one run held, the one before it
being sorted and written), ``FAN_IN * BLOCK_ROWS + 2 * STEP_ROWS``
rows while merging (with int64 keys, 48 bytes a row: ~25 MB and ~37 MB; longer string
keys, more), whatever the number of rows. ``cec export`` measured (bench/export_bench.py):
about 400-450 MiB of peak resident memory at 10 and 30 M results, of which ~165 MiB is
the process before it reads anything, in one thread; with this thread and the file's
(:class:`cec_spark.read.export.ResultFile`), 10 M results of a 100 M-row run: 441 MiB
against 364 (medians of 6), the export's wall 0.72 of one thread's.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa
from pyarrow import ipc

from cec.order import stable_order

SORT_ROWS = 1 << 19
"""Rows sorted in memory at once; more are spilled in run files of this size."""
BLOCK_ROWS = 1 << 13
"""Rows a run file's batches hold: what the merge loads of a run at a time."""
FAN_IN = 64
"""Runs merged at once; more are merged in groups first."""
STEP_ROWS = 1 << 17
"""Rows a merge step takes at most (``STEP_ROWS // runs`` of each run, 1 at least)."""

SORT_KEYS = [("key", "ascending"), ("window_start", "ascending"),
             ("window_end", "ascending"), ("tau1", "ascending")]


def sort_results(table: pa.Table) -> pa.Table:
    """``table`` ordered by key, window start, window end and ``tau1`` (ties), stably.

    A partition's results come in the order its windows closed, which for one key is
    almost always that order already, and a key is in one partition only. So a stable
    sort by the key alone usually gives the whole order. It is taken when a check of
    every pair of neighbouring rows of one key confirms it. Otherwise (or for a
    non-numeric key) the full sort runs. That is 3 M results in ~0.3 s instead of
    ~1.6 s.
    """
    order = quick_order(table)
    return table.sort_by(SORT_KEYS) if order is None else table.take(pa.array(order))


def quick_order(table: pa.Table) -> np.ndarray | None:
    """The rows' order by a stable sort of the (integer, non-null) key alone, if that is
    the whole order (checked); else None."""
    if table.num_rows < 2 or not pa.types.is_integer(table.column("key").type) \
            or table.column("key").null_count:
        return None
    key = table.column("key").to_numpy()
    order = stable_order(key)
    k = key[order]
    same = k[1:] == k[:-1]
    if same.any():
        ws, we, tau = (table.column(c).to_numpy()[order]
                       for c in ("window_start", "window_end", "tau1"))
        ordered = (ws[1:] > ws[:-1]) | ((ws[1:] == ws[:-1]) & (
            (we[1:] > we[:-1]) | ((we[1:] == we[:-1]) & (tau[1:] >= tau[:-1]))))
        if not bool(np.all(ordered | ~same)):
            return None
    return order


T = TypeVar("T")


class InFlight(Generic[T]):
    """Work done on a thread of its own, one piece at a time, behind its caller (the
    export's runs, :class:`SortedRuns`; its file's writes,
    :class:`cec_spark.read.export.ResultFile`): a piece is started once the one before
    it ended, whose result is then handed back and whose error is raised."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._piece: Future[T] | None = None

    @property
    def busy(self) -> bool:
        """A piece is under way (or ended and not settled yet)."""
        return self._piece is not None

    def settle(self) -> T | None:
        """Wait for the piece under way: its result (None if there is none); its error
        raised."""
        piece, self._piece = self._piece, None
        return None if piece is None else piece.result()

    def submit(self, work: Callable[[], T]) -> T | None:
        """``work`` started on the thread once the piece before it ended (that piece's
        result is returned; its error raised, and then ``work`` is not started)."""
        done = self.settle()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=self._name)
        self._piece = self._pool.submit(work)
        return done

    def close(self, *, quiet: bool = False) -> T | None:
        """Wait for the piece under way and end the thread; idempotent. The piece's
        result, its error raised unless ``quiet`` (another error is already on its way:
        the piece's own was or will be raised by the caller's)."""
        try:
            if quiet:
                piece, self._piece = self._piece, None
                if piece is not None:
                    piece.exception()  # waits
                return None
            return self.settle()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


class SortedRuns:
    """Rows added in any order, given back sorted (module docstring); run files go to
    ``directory`` (made on the first spill; the caller removes it)."""

    def __init__(self, directory: Path, *, sort_rows: int = SORT_ROWS,
                 block_rows: int = BLOCK_ROWS, fan_in: int = FAN_IN,
                 step_rows: int = STEP_ROWS) -> None:
        self._dir = directory
        self._sort_rows, self._block_rows, self._fan_in = sort_rows, block_rows, max(2, fan_in)
        self._step_rows = step_rows
        self._held: list[pa.Table] = []
        self._held_rows = 0
        self._runs: list[Path] = []
        self._files = 0
        self._writing: InFlight[Path] = InFlight("cec-export-sort")  # the run being written
        self.rows = 0

    @property
    def spilled(self) -> int:
        """Run files written or being written so far."""
        return len(self._runs) + self._writing.busy

    def close(self) -> None:
        """Wait for the run being written, if any (its error, if one, is raised), and
        end the thread; the caller then removes the directory. Idempotent."""
        path = self._writing.close()
        if path is not None:
            self._runs.append(path)

    def add(self, rows: pa.Table) -> None:
        """Rows to sort; held until ``sort_rows`` are, then sorted and spilled."""
        self._held.append(rows)
        self._held_rows += rows.num_rows
        self.rows += rows.num_rows
        if self._held_rows >= self._sort_rows:
            self._spill()

    def sorted(self) -> Iterator[pa.Table]:
        """Every row added, in order, a table at a time (none when none was added)."""
        if not self.spilled:
            if self._held_rows:
                yield sort_results(pa.concat_tables(self._held))
            self._held, self._held_rows = [], 0
            return
        if self._held_rows:
            self._spill()
        self.close()
        runs = self._runs
        while len(runs) > self._fan_in:  # merge groups of runs into longer runs
            longer = []
            for i in range(0, len(runs), self._fan_in):
                longer.append(self._write_run(_merge(runs[i:i + self._fan_in],
                                                     self._step_rows)))
                for path in runs[i:i + self._fan_in]:
                    path.unlink()
            runs = longer
        yield from _merge(runs, self._step_rows)

    def _spill(self) -> None:
        """The rows held, sorted and written as the next run on the thread (after the
        run before it is written)."""
        table = pa.concat_tables(self._held)
        self._held, self._held_rows = [], 0
        path = self._next_path()
        done = self._writing.submit(lambda: self._write_run(iter([sort_results(table)]), path))
        if done is not None:
            self._runs.append(done)

    def _next_path(self) -> Path:
        path = self._dir / f"run-{self._files:06d}.arrow"
        self._files += 1
        return path

    def _write_run(self, tables: Iterator[pa.Table], path: Path | None = None) -> Path:
        self._dir.mkdir(parents=True, exist_ok=True)
        if path is None:
            path = self._next_path()
        writer = None
        with pa.OSFile(str(path), "wb") as sink:
            for t in tables:
                if writer is None:
                    writer = ipc.new_file(sink, t.schema)
                writer.write_table(t, max_chunksize=self._block_rows)
            if writer is not None:
                writer.close()
        return path


class _Run:
    """A run file read a batch at a time: the rows loaded and not taken yet (at least a
    step's, :meth:`fill`), and each row's place in the order (:meth:`place`)."""

    def __init__(self, path: Path, index: int, step: int) -> None:
        self.index, self.step = index, step
        self._file = pa.OSFile(str(path))  # read, not mapped: a mapped file's pages count
        self._reader = ipc.open_file(self._file)  # as the process's resident memory
        self._next = 0
        self.base = 0  # the run's row number of the batch's first row
        self.batch = pa.RecordBatch.from_pylist([], schema=self._reader.schema)
        self.pos = 0
        self.fill()

    @property
    def left(self) -> int:
        """Rows loaded and not taken yet."""
        return int(self.batch.num_rows) - self.pos

    def fill(self) -> bool:
        """At least a step's rows not taken yet loaded (fewer at the run's end; the file
        closed there); False: none left."""
        if self.left >= self.step or self._file.closed:
            return self.left > 0
        parts = [self.batch.slice(self.pos)]
        while sum(b.num_rows for b in parts) < self.step \
                and self._next < self._reader.num_record_batches:
            parts.append(self._reader.get_batch(self._next))
            self._next += 1
        if self._next == self._reader.num_record_batches:
            self._file.close()
        self.base += self.pos
        self.batch, self.pos = pa.concat_batches(parts), 0
        k = self.batch.column("key")
        self._key = k.to_numpy(zero_copy_only=False) \
            if pa.types.is_integer(k.type) and not k.null_count else None
        self._keys = k
        self._cols = [self.batch.column(c).to_numpy() for c in
                      ("window_start", "window_end", "tau1")]
        self._blank: Any = 0 if pa.types.is_integer(k.type) else ""
        return self.left > 0

    def place(self, i: int) -> tuple[Any, ...]:
        """Row ``i`` of the batch's place in the whole order (null keys last)."""
        if self._key is not None:
            key: Any = int(self._key[i])
            null = False
        else:
            key = self._keys[i].as_py()
            null = key is None
            key = self._blank if null else key
        ws, we, tau = self._cols
        return (null, key, int(ws[i]), int(we[i]), int(tau[i]), self.index, self.base + i)

    def last(self) -> tuple[Any, ...]:
        """The place of the last row of the next step's rows."""
        return self.place(min(self.pos + self.step, self.batch.num_rows) - 1)

    def take_upto(self, bound: tuple[Any, ...]) -> pa.RecordBatch | None:
        """The rows of the next step's not after ``bound``; taken (those after the step
        come after its last row, so after the bound)."""
        hi = min(self.pos + self.step, self.batch.num_rows)
        end = bisect.bisect_right(range(hi), bound, lo=self.pos, key=self.place)
        if end == self.pos:
            return None
        rows = self.batch.slice(self.pos, end - self.pos)
        self.pos = end
        return rows


def _merge(paths: list[Path], step_rows: int) -> Iterator[pa.Table]:
    """The rows of sorted run files (in the order they were written), in order, at most
    ``step_rows`` (or 1 a run) a table."""
    step = max(1, step_rows // max(1, len(paths)))
    runs = [r for r in (_Run(p, i, step) for i, p in enumerate(paths)) if r.left]
    while runs:
        bound = min(r.last() for r in runs)
        pieces = [b for b in (r.take_upto(bound) for r in runs) if b is not None]
        table = pa.Table.from_batches(pieces)
        yield table if len(pieces) == 1 else sort_results(table)
        runs = [r for r in runs if r.fill()]
