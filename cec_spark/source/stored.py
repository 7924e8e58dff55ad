"""A bounded source's plan kept in the run directory, so a resume does not plan it again.

Planning a file source reads its files' metadata and a few bytes a chunk
(:mod:`cec_spark.source.check`; a run from before read each file's bytes once, its
newline offsets and the fingerprint). A resumed ingest (``cec recover``, a standby's
takeover) needs the same chunks, and it used to plan the whole source again in the
driver, then check the fingerprint of the part already read. The plan a run's ingest
starts from is written once, beside ``run.toml`` (``RUN/source_plan.json``:
:attr:`RunLayout.source_plan_file`), with each file's size and modification time (ns) as
they were *before* the planner read it (:func:`file_stats`; a file that changed while it
was planned is not stored). A resume lists the source (its files' metadata, no bytes)
and, when it finds the same files with the same sizes and times, takes the stored chunks
as they are (:func:`load_plan`): the quick check of ``make`` and ``rsync``. Anything
else (a file fixed, added, gone, touched; no stored plan; another version) plans the
source and checks the fingerprint as before, and the new plan is stored in its turn.

What the quick check does not see: a file rewritten in place with its old size and
its old modification time put back (``touch -r``, ``cp -p`` over it). The rows the
upstream logs hold are then the old ones, and the resumed run reads the new bytes from
its resume point on, as it would read a fixed file.

The file is JSON (never pickle), written durably: a plan is small (a chunk a line of
text, 64 Ki rows or more a chunk).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import xxhash

from cec.spec import PipelineSpec
from cec_spark.errors import InputError
from cec_spark.source.files import source_files
from cec_spark.source.planner import plan_source
from cec_spark.source.types import Chunk, ColumnTypes, SourcePlan
from storage_log.durable import write_durable

__all__ = ["PLAN_VERSION", "file_stats", "load_plan", "planned_with_stats", "store_plan"]

PLAN_VERSION = 1


def file_stats(spec: PipelineSpec) -> tuple[dict[str, Any], ...]:
    """``({"file", "bytes", "mtime_ns"}, ...)`` of a file source's files, listed as the
    planner lists them (empty for the generator and stream folders: never stored)."""
    src = spec.source
    if src.path is None or src.kind in ("generator", "stream-dir"):
        return ()
    path = Path(src.path)
    out = []
    for f in source_files(path, src.kind if path.is_dir() else None):
        st = f.stat()
        out.append({"file": str(f), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return tuple(out)


def planned_with_stats(spec: PipelineSpec, max_rows: int | None,
                       chunk_bytes: int | None, reports: bool
                       ) -> tuple[SourcePlan, tuple[dict[str, Any], ...]]:
    """The source planned from its files' metadata (:func:`plan_source`,
    ``validate=False``: the tasks check the rows they read; by bytes with the run's
    ``chunk_bytes``, reported with its ``source_reports``), and its files'
    :func:`file_stats` as they were before the planner read them: () when a file
    changed while it was planned (such a plan is not stored)."""
    stats = file_stats(spec)
    plan = plan_source(spec, max_rows=max_rows, validate=False, chunk_bytes=chunk_bytes,
                       reports=reports)
    return plan, stats if stats and file_stats(spec) == stats else ()


def _key(spec: PipelineSpec, max_rows: int | None) -> str:
    """What the chunks depend on besides the files: the ``[source]`` table, the key and
    field checked in each row, and ``--max-tuples``."""
    text = repr((spec.source, spec.aggregate.group_by, spec.aggregate.field, max_rows))
    return xxhash.xxh64_hexdigest(text.encode())


def store_plan(path: Path, spec: PipelineSpec, max_rows: int | None, plan: SourcePlan,
               stats: tuple[dict[str, Any], ...]) -> None:
    """Keep ``plan`` (made from files whose :func:`file_stats` were ``stats`` when the
    planner began) at ``path``, durably; nothing without stats."""
    if not stats or not plan.chunks:
        return
    body = {"version": PLAN_VERSION, "key": _key(spec, max_rows), "stats": list(stats),
            "columns": {"names": list(plan.columns.names), "types": list(plan.columns.types)},
            "warnings": list(plan.warnings), "files": list(plan.files),
            "chunks": [asdict(c) for c in plan.chunks]}
    write_durable(path, json.dumps(body, separators=(",", ":")))


def load_plan(path: Path, spec: PipelineSpec, max_rows: int | None) -> SourcePlan | None:
    """The plan stored at ``path`` if the source's files are as they were when it was
    made (same names, sizes and modification times, listed without reading a byte);
    None otherwise (none stored, unreadable, another version or spec): the caller
    plans the source (and checks its fingerprint) as without it."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a damaged plan is only a lost shortcut: plan again
    if not isinstance(body, dict) or body.get("version") != PLAN_VERSION \
            or body.get("key") != _key(spec, max_rows):
        return None
    try:
        if file_stats(spec) != tuple(body["stats"]):
            return None
        columns = ColumnTypes(tuple(body["columns"]["names"]), tuple(body["columns"]["types"]))
        chunks = tuple(Chunk.from_dict(c) for c in body["chunks"])
        return SourcePlan(columns, chunks, True, warnings=tuple(body["warnings"]),
                          files=tuple(body["files"]))
    except (OSError, InputError, KeyError, TypeError, ValueError):
        return None
