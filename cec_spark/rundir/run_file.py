"""``RUN/run.toml``: its text (the resolved spec + a ``[cec]`` table + a checksum line),
the run settings it stores, their parsing, and the file itself: written once, read,
restored from its copy ``run.toml.bak``.

``run.toml`` is written once, atomically and exclusively (a hard link: of two drivers
racing for one directory exactly one wins), before Spark starts and before any log;
recovery reads nothing else. The ``[cec]`` table holds what the spec does not:
``max_tuples`` (the source is cut after that many rows, so a resumed run ends where the
original would have), and the source's column types (so a resumed ``stream-dir`` ingest
types its rows the same). A driver hands the text it wrote to its tasks
(:func:`parse_run_text`) instead of each of them reading the file again. Its checksum
line is :mod:`~cec_spark.rundir.checksum`'s, its path the layout's.
"""

from __future__ import annotations

import tomllib
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cec.errors import CorruptionError, UsageError
from cec.spec import (
    DEFAULT_KEY_GROUPS,
    MAX_KEY_GROUPS,
    PipelineSpec,
    default_master,
    dump_spec,
    parse_stored_spec,
)
from cec_spark.rundir.checksum import (
    CHECKSUM_PREFIX,
    FORMAT_VERSION,
    check_run_text,
    sign_run_text,
)
from cec_spark.rundir.layout import BACKUP_FILE, RUN_FILE, RunLayout
from cec_spark.source.types import ColumnTypes
from storage_log.durable import write_durable

# New runs hash keys into G key groups (``pmod(xxhash64(key), G)``); partition ``p`` of
# ``P`` owns the groups ``kg`` with ``kg * P // G == p`` (Flink's key groups), so a
# rescale (``cec recover --partitions P'``, ``P' <= G``) moves whole groups. G is the
# spec's ``[run] key_groups`` (1..MAX_KEY_GROUPS, >= P), else max(KEY_GROUPS, P),
# fixed at creation in ``[cec] key_groups``.
KEY_GROUPS = DEFAULT_KEY_GROUPS
VALUE_FALLBACK = "__cec_value"  # the value column of a `count` aggregate without field


def value_column(spec: PipelineSpec) -> str:
    """The name of the value column in the upstream logs."""
    return spec.aggregate.field if spec.aggregate.field is not None else VALUE_FALLBACK


@dataclass(frozen=True)
class RunSettings:
    """What a run needs beyond its spec."""

    max_tuples: int | None
    columns: ColumnTypes
    key_column: str
    run_id: str | None = None  # None: a run stored before run ids existed
    # each source file's name, size and xxh64 when the run started (cec_spark.source.fingerprint)
    source_files: tuple[dict[str, Any], ...] = ()
    # what looked wrong about the source when the run was planned (the time unit)
    warnings: tuple[str, ...] = ()
    # the key groups of the key partition (RunSpec.new_run_key_groups at creation);
    # None: a run from before key groups, partitioned by pmod(xxhash64(key), P), which
    # cannot be rescaled
    key_groups: int | None = None
    # a text file source planned by bytes: its chunks' size (cec_spark.source.check.
    # chunk_bytes_for, fixed at creation in ``[cec] chunk_bytes``); None: planned by
    # rows (every other source, and runs from before)
    chunk_bytes: int | None = None
    # a csv, jsonl or parquet file source whose tasks report the chunks they read (rows
    # and digest, cec_spark.source.chunk_report; ``[cec] source_reports``): its
    # fingerprint is its files' sizes and times; False: digests (runs from before)
    source_reports: bool = False

    @property
    def key_type(self) -> str:
        """The operator's key type: ``int64`` or ``string``."""
        i = self.columns.names.index(self.key_column)
        return "int64" if self.columns.types[i] == "int64" else "string"


def settings_for(spec: PipelineSpec, columns: ColumnTypes, max_tuples: int | None,
                 source_files: tuple[dict[str, Any], ...] = (),
                 warnings: tuple[str, ...] = (), chunk_bytes: int | None = None,
                 source_reports: bool = False) -> RunSettings:
    """The settings of a new run (with a new run id)."""
    return RunSettings(max_tuples, columns, spec.aggregate.group_by, uuid.uuid4().hex,
                       source_files, warnings, spec.run.new_run_key_groups, chunk_bytes,
                       source_reports)


def run_text(spec: PipelineSpec, settings: RunSettings) -> str:
    """The signed text of a run's run.toml."""
    extra: dict[str, dict[str, object]] = {"cec": {
        "format_version": FORMAT_VERSION,
        "max_tuples": -1 if settings.max_tuples is None else settings.max_tuples,
        "column_names": list(settings.columns.names),
        "column_types": list(settings.columns.types),
    }}
    if settings.run_id is not None:
        extra["cec"]["run_id"] = settings.run_id
    if settings.source_files:
        extra["cec"]["source_files"] = list(settings.source_files)
    if settings.warnings:
        extra["cec"]["warnings"] = list(settings.warnings)
    if settings.key_groups is not None:
        extra["cec"]["key_groups"] = settings.key_groups
    if settings.chunk_bytes is not None:
        extra["cec"]["chunk_bytes"] = settings.chunk_bytes
    if settings.source_reports:
        extra["cec"]["source_reports"] = True
    return sign_run_text(dump_spec(spec, extra))


def parse_run_text(text: str, origin: str, repair: str = "") -> tuple[PipelineSpec,
                                                                      RunSettings]:
    """The spec and settings of a run.toml's text.

    A text whose checksum fails is damage (CorruptionError, exit 3) when it no longer
    parses, and an edit (UsageError, exit 2: a run's spec cannot change) when it does;
    ``repair`` (how to repair it) ends either message.
    """
    tail = f"; {repair}" if repair else ""
    bad = check_run_text(text, origin)
    try:
        spec = parse_stored_spec(text, origin)
    except UsageError as exc:
        if bad is not None:
            raise CorruptionError(f"{bad}: damaged ({exc}){tail}") from exc
        raise
    if bad is not None:
        raise UsageError(f"{bad}: it was edited after the run started, and a run's "
                         f"spec cannot change (start a new run for a new spec){tail}")
    try:
        cec = tomllib.loads(text)["cec"]
        max_tuples = int(cec["max_tuples"])
        columns = ColumnTypes(tuple(cec["column_names"]), tuple(cec["column_types"]))
        run_id = cec.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise TypeError(f"run_id must be a string, got {run_id!r}")
        files = tuple(_file_entry(f) for f in cec.get("source_files", []))
        warnings = tuple(str(w) for w in cec.get("warnings", []))
        groups = cec.get("key_groups")
        if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int)
                                   or not spec.run.partitions <= groups <= MAX_KEY_GROUPS):
            raise ValueError(f"key_groups must be an integer in {spec.run.partitions}.."
                             f"{MAX_KEY_GROUPS} (the run's partitions up to the most key "
                             f"groups), got {groups!r}")
        if spec.run.key_groups is not None and groups != spec.run.key_groups:
            raise ValueError(f"key_groups {groups!r} is not [run].key_groups "
                             f"({spec.run.key_groups})")
        chunk_bytes = cec.get("chunk_bytes")
        if chunk_bytes is not None and (isinstance(chunk_bytes, bool)
                                        or not isinstance(chunk_bytes, int)
                                        or chunk_bytes < 1):
            raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
        reports = cec.get("source_reports", False)
        if not isinstance(reports, bool):
            raise ValueError(f"source_reports must be true or false, got {reports!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptionError(f"{origin}: [cec] table missing or damaged: {exc}"
                              f"{tail}") from exc
    settings = RunSettings(None if max_tuples < 0 else max_tuples, columns,
                           spec.aggregate.group_by, run_id, files, warnings, groups,
                           chunk_bytes, reports)
    return spec, settings


def _file_entry(raw: dict[str, Any]) -> dict[str, Any]:
    """A source file's fingerprint entry: its name, size and the xxh64 of its bytes (a
    run planned by rows), or its modification time (by bytes: the digests are the
    chunks', cec_spark.source.chunk_report)."""
    entry: dict[str, Any] = {"file": str(raw["file"]), "bytes": int(raw["bytes"])}
    if "xxh64" in raw or "mtime_ns" not in raw:
        entry["xxh64"] = str(raw["xxh64"])
    else:
        entry["mtime_ns"] = int(raw["mtime_ns"])
    return entry


# --------------------------------------------------------------------------- the file

def write_run_text(layout: RunLayout, text: str) -> None:
    """Store a new run's run.toml (:func:`run_text`) and its backup."""
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.state_dir(0).mkdir(exist_ok=True)
    try:  # link, not rename: of two drivers racing for one directory, one wins
        write_durable(layout.run_file, text, exclusive=True)
    except FileExistsError:
        raise UsageError(f"{layout.root}: already holds a run (another `cec run` "
                         "started it first); resume it with 'cec recover --from-log "
                         f"{layout.root}' or choose another --log-dir") from None
    write_durable(layout.backup_file, text)


def creation_leftover(layout: RunLayout, entry: Path) -> bool:
    """``entry`` of the run directory is what a ``cec run`` killed inside
    :func:`write_run_text` (before run.toml was linked into place) leaves: the empty state
    folder of generation 0 or a hidden temporary of run.toml. A new run may start there
    (it is not removed: it may be another ``cec run``'s, racing for the directory)."""
    if entry == layout.state_dir(0):
        return entry.is_dir() and not any(entry.iterdir())
    name = layout.run_file.name
    return entry.parent == layout.root and entry.name.startswith(f".{name}.") \
        and entry.name.endswith(".tmp")


def read_run(layout: RunLayout) -> tuple[str, PipelineSpec, RunSettings]:
    """The run's run.toml text, spec (with the current generation's partitions) and
    settings.

    A run.toml whose checksum fails is damage (CorruptionError, exit 3) when it no
    longer parses, and an edit (UsageError, exit 2: a run's spec cannot change) when it
    does; either way ``cec recover --repair`` restores it from ``run.toml.bak``.
    """
    repair = f"'cec recover --from-log {layout.root} --repair' restores it from " \
             f"{BACKUP_FILE}"
    if not layout.run_file.exists():
        if layout.backup_file.exists():
            raise CorruptionError(f"{layout.run_file} is missing; {repair}")
        raise UsageError(f"{layout.root}: not a cec run directory (no {RUN_FILE})")
    origin = str(layout.run_file)
    try:
        text = layout.run_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptionError(f"{origin}: damaged (not UTF-8 at byte {exc.start}); "
                              f"{repair}") from exc
    spec, settings = parse_run_text(text, origin, repair)
    return text, current_spec(layout, spec), settings


def read_run_file(layout: RunLayout) -> tuple[PipelineSpec, RunSettings]:
    """The run's spec and settings (:func:`read_run` without the text)."""
    _, spec, settings = read_run(layout)
    return spec, settings


def current_spec(layout: RunLayout, spec: PipelineSpec) -> PipelineSpec:
    """``spec`` with the current generation's partitions (run.toml keeps the
    partitions the run started with; a rescale records its own)."""
    if layout.generation and layout.generations[-1].partitions != spec.run.partitions:
        return rescaled_spec(spec, layout.generations[-1].partitions)
    return spec


def rescaled_spec(spec: PipelineSpec, partitions: int) -> PipelineSpec:
    """``spec`` with ``partitions``; a stored master that was the default for the old
    partition count (``local[P+2,3]``) becomes the default for the new one."""
    master = spec.run.master
    if master == default_master(spec.run.partitions):
        master = None
    return replace(spec, run=replace(spec.run, partitions=partitions, master=master))


def restore_run_file(layout: RunLayout) -> str:
    """``--repair``: put back a damaged or missing run.toml from its backup; what was
    done (CorruptionError if the backup is damaged too)."""
    problem = run_file_problem(layout)
    if problem is None:
        return "run.toml is intact"
    try:
        backup = layout.backup_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptionError(f"{problem}; its backup {layout.backup_file} cannot be read "
                              f"either ({exc}): the run's spec is lost") from exc
    bad = check_run_text(backup, str(layout.backup_file))
    if bad is not None or CHECKSUM_PREFIX not in backup:
        why = bad or "no checksum"
        raise CorruptionError(f"{problem}; its backup is damaged too ({why}): the "
                              "run's spec is lost")
    write_durable(layout.run_file, backup)
    return f"restored {layout.run_file} from {layout.backup_file} ({problem})"


def refresh_backup(layout: RunLayout) -> str | None:
    """``--repair``: a damaged or missing run.toml.bak written again from the intact
    run.toml; what was done (None: nothing to do)."""
    try:
        text = layout.backup_file.read_text(encoding="utf-8")
        bad = check_run_text(text, str(layout.backup_file))
        if bad is None and CHECKSUM_PREFIX in text:
            return None
    except (OSError, UnicodeDecodeError) as exc:
        bad = f"{layout.backup_file} cannot be read: {exc}"
    write_durable(layout.backup_file, layout.run_file.read_text(encoding="utf-8"))
    return f"wrote {layout.backup_file} again from {RUN_FILE} ({bad or 'no checksum'})"


def run_file_problem(layout: RunLayout) -> str | None:
    """Why run.toml cannot be trusted (None: it can)."""
    try:
        text = layout.run_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"{layout.run_file} is missing"
    except (OSError, UnicodeDecodeError) as exc:
        return f"{layout.run_file} cannot be read: {exc}"
    return check_run_text(text, str(layout.run_file))
