"""``RUN/run.toml``: its text (the resolved spec + a ``[cec]`` table + a checksum line),
the run settings it stores, and their parsing.

:class:`cec_spark.rundir.layout.RunLayout` writes, restores and reads the file; this module
makes and checks its text, so that a driver can hand the text it wrote to its tasks
(:func:`parse_run_text`) instead of each of them reading the file again.
"""

from __future__ import annotations

import tomllib
import uuid
from dataclasses import dataclass
from typing import Any

import xxhash

from cec.errors import CorruptionError, UsageError
from cec.spec import PipelineSpec, dump_spec, parse_stored_spec
from cec_spark.source.types import ColumnTypes

RUN_FILE = "run.toml"
BACKUP_FILE = "run.toml.bak"
FORMAT_VERSION = 1
# New runs hash keys into this many key groups (``pmod(xxhash64(key), G)``); partition
# ``p`` of ``P`` owns the groups ``kg`` with ``kg * P // G == p`` (Flink's key groups),
# so a rescale (``cec recover --partitions P'``, ``P' <= G``) moves whole groups.
KEY_GROUPS = 128
CHECKSUM_PREFIX = "# cec-checksum: xxh64 "


def sign_run_text(text: str) -> str:
    """``text`` with its checksum line appended (the last line of every run.toml)."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{CHECKSUM_PREFIX}{xxhash.xxh64_hexdigest(body.encode())}\n"


def check_run_text(text: str, origin: str) -> str | None:
    """None if ``text`` carries a valid checksum (or none, a run from before checksums);
    else why not."""
    head, sep, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(CHECKSUM_PREFIX):
        return None if CHECKSUM_PREFIX not in text else f"{origin}: its checksum line is " \
            "not the last line"
    want = last[len(CHECKSUM_PREFIX):].strip()
    got = xxhash.xxh64_hexdigest((head + sep).encode())
    return None if got == want else f"{origin}: checksum mismatch (stored {want}, " \
        f"content {got})"


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
    # the key groups of the key partition (KEY_GROUPS); None: a run from before key
    # groups, partitioned by pmod(xxhash64(key), P), which cannot be rescaled
    key_groups: int | None = None

    @property
    def key_type(self) -> str:
        """The operator's key type: ``int64`` or ``string``."""
        i = self.columns.names.index(self.key_column)
        return "int64" if self.columns.types[i] == "int64" else "string"


def settings_for(spec: PipelineSpec, columns: ColumnTypes, max_tuples: int | None,
                 source_files: tuple[dict[str, Any], ...] = (),
                 warnings: tuple[str, ...] = ()) -> RunSettings:
    """The settings of a new run (with a new run id)."""
    return RunSettings(max_tuples, columns, spec.aggregate.group_by, uuid.uuid4().hex,
                       source_files, warnings, max(KEY_GROUPS, spec.run.partitions))


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
        files = tuple({"file": str(f["file"]), "bytes": int(f["bytes"]),
                       "xxh64": str(f["xxh64"])} for f in cec.get("source_files", []))
        warnings = tuple(str(w) for w in cec.get("warnings", []))
        groups = cec.get("key_groups")
        if groups is not None and (isinstance(groups, bool) or not isinstance(groups, int)
                                   or groups < 1):
            raise ValueError(f"key_groups must be a positive integer, got {groups!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptionError(f"{origin}: [cec] table missing or damaged: {exc}"
                              f"{tail}") from exc
    settings = RunSettings(None if max_tuples < 0 else max_tuples, columns,
                           spec.aggregate.group_by, run_id, files, warnings, groups)
    return spec, settings
