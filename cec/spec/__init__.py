"""Pipeline specs: the TOML file a user writes, parsed into frozen dataclasses.

A spec has five tables (``[source]``, ``[filter]``, ``[aggregate]``, ``[checkpoint]``,
``[run]``); only ``[source]`` and ``[aggregate]`` are required. Every problem is a
:class:`cec.errors.SpecError` whose message names the file and the field, e.g.::

    items.toml: [aggregate].function: 'median' is not one of count|sum|min|max|avg

Relative paths are resolved against the directory of the spec file. The parser does
no I/O beyond reading the spec itself (whether a source path exists is checked by
:mod:`cec_spark.source.planner`, which names the missing file).

``dump_spec`` writes the resolved spec back as TOML (absolute paths, every default
filled in); a run stores it as ``RUN/run.toml`` so recovery needs only the directory,
and ``load_spec`` reads it back into an equal :class:`PipelineSpec`.

=============  ==============================================================
``model``      the parsed spec: frozen dataclasses, ``parse_conf``, ``default_master``
``tables``     the file as pydantic models, one per table: fields and their checks
``values``     how one value is checked (by hand, nothing coerced); :class:`Problem`
``parse``      TOML → models → spec; pydantic's errors → one ``SpecError``
``dump``       the spec → TOML (``run.toml``)
=============  ==============================================================

Durations (``"10s"``) are parsed by :mod:`cec.durations`; a window is a
:data:`cec.windows.WindowSpec` (``CountWindow | TimeWindow``); the fsync modes are
storage_log's (:data:`storage_log.FSYNC_MODES`).
"""

from cec.durations import parse_duration_us
from cec.spec.dump import dump_spec, spec_to_tables
from cec.spec.model import (
    DEFAULT_KEY_GROUPS,
    FILE_FORMATS,
    FSYNC_MODES,
    FUNCTIONS,
    MAX_KEY_GROUPS,
    MODES,
    RESERVED_COLUMNS,
    SOURCE_KINDS,
    WINDOW_KINDS,
    AggregateSpec,
    CheckpointSpec,
    Function,
    GeneratorSpec,
    PipelineSpec,
    RunSpec,
    SourceKind,
    SourceSpec,
    WindowSpec,
    default_master,
    parse_conf,
)
from cec.spec.parse import load_spec, parse_spec, parse_stored_spec

__all__ = [
    "DEFAULT_KEY_GROUPS",
    "FILE_FORMATS",
    "FSYNC_MODES",
    "FUNCTIONS",
    "MAX_KEY_GROUPS",
    "MODES",
    "RESERVED_COLUMNS",
    "SOURCE_KINDS",
    "WINDOW_KINDS",
    "AggregateSpec",
    "CheckpointSpec",
    "Function",
    "GeneratorSpec",
    "PipelineSpec",
    "RunSpec",
    "SourceKind",
    "SourceSpec",
    "WindowSpec",
    "default_master",
    "dump_spec",
    "load_spec",
    "parse_conf",
    "parse_duration_us",
    "parse_spec",
    "parse_stored_spec",
    "spec_to_tables",
]
