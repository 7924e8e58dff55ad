"""Watching a ``stream-dir`` source: new files in name order, ``_END`` ends the stream."""

from __future__ import annotations

import os
from pathlib import Path

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.check import plan_file
from cec_spark.source.file_state import FileState
from cec_spark.source.files import file_format
from cec_spark.source.types import (
    END_MARKER,
    EXTENSIONS,
    Chunk,
    ColumnTypes,
    SourcePlan,
    WatchState,
)


class StreamDirWatcher:
    """Follows a ``stream-dir`` source: new files in name order, ``_END`` ends it."""

    def __init__(self, spec: PipelineSpec, *, max_rows: int | None = None,
                 start: SourcePlan | None = None) -> None:
        """``start``: a plan of this folder made earlier (:attr:`plan`, e.g. the run's
        plan): the watcher goes on from there, its files are not read again."""
        assert spec.source.path is not None
        self.spec = spec
        self.folder = spec.source.path
        self._st = FileState(spec, max_rows)
        self._seen: list[str] = []
        self._known: set[str] = set()  # every name looked at: consumed or skipped
        self.ended = False
        if start is not None and start.watch is not None:
            w = start.watch
            self._st.columns = start.columns if start.columns.names else None
            self._st.chunks = list(start.chunks)
            self._st.next_seq, self._st.last_ts, self._st.last_where = (
                w.next_seq, w.last_ts, w.last_where)
            if w.order is not None:
                self._st.order = w.order.copy()
            self._seen = list(w.seen)
            self._known = set(w.seen)
            self.ended = start.ended

    @property
    def plan(self) -> SourcePlan:
        cols = self._st.columns or ColumnTypes((), ())
        st = self._st
        return SourcePlan(cols, tuple(st.chunks), self.ended,
                          WatchState(tuple(self._seen), st.next_seq, st.last_ts,
                                     st.last_where,
                                     None if st.order is None else st.order.copy()),
                          tuple(st.warnings()))

    def poll(self) -> list[Chunk]:
        """Validate and plan files that appeared since the last poll; the new chunks."""
        if not self.folder.is_dir():
            raise InputError(f"{self.folder}: [source].path: not a directory")
        if self.ended:
            return []
        before = len(self._st.chunks)
        end_seen = (self.folder / END_MARKER).exists()
        fmt = self.spec.source.format
        for path in self._new_files(fmt):
            if self._seen and path.name < self._seen[-1]:
                raise InputError(f"{path.name}: arrived after {self._seen[-1]} but sorts before "
                                 "it; stream-dir files are consumed in name order")
            plan_file(self._st, path, file_format(path, fmt))
            self._seen.append(path.name)
            self._known.add(path.name)
            if self._st.full:
                end_seen = True
                break
        self.ended = end_seen
        if self.ended:
            self._st.flush()  # the rows still held (allowed_lateness) are released
        return self._st.chunks[before:]

    def _new_files(self, fmt: str | None) -> list[Path]:
        """The data files not consumed yet, in name order (as :func:`source_files`).

        Only names not seen before are looked at: a poll costs one listing of the
        folder, not a look at every file it ever consumed (a long stream has many).
        """
        try:
            with os.scandir(self.folder) as it:
                names = sorted(e.name for e in it if e.name not in self._known)
        except FileNotFoundError as exc:
            raise InputError(f"{self.folder}: [source].path: not a directory") from exc
        files = []
        for name in names:
            if name.startswith((".", "_")):
                continue  # hidden: being written, or the end marker
            path = self.folder / name
            if not path.is_file():
                continue
            if fmt is not None and not name.lower().endswith(EXTENSIONS[fmt]):
                self._known.add(name)  # never a data file of this source
                continue
            files.append(path)
        return files
