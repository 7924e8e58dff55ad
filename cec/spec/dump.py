"""Writing a spec back: the resolved spec as TOML (absolute paths, every default filled in).

A run stores it as ``RUN/run.toml`` so recovery needs only the directory;
:func:`cec.spec.parse_stored_spec` reads it back into an equal :class:`PipelineSpec`
(sizes of time windows are written in microseconds, which the parser takes as such).
"""

from __future__ import annotations

from collections.abc import Mapping

from cec.spec.model import PipelineSpec


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def spec_to_tables(spec: PipelineSpec) -> dict[str, dict[str, object]]:
    """The fully resolved spec as TOML tables (every default explicit)."""
    src = spec.source
    source: dict[str, object] = {"kind": src.kind, "time_field": src.time_field,
                                 "chunk_rows": src.chunk_rows}
    if src.path is not None:
        source["path"] = str(src.path)
        source["poll_ms"] = src.poll_ms
    if src.format is not None:
        source["format"] = src.format
    if src.idle_close_us is not None:  # off when absent (TOML has no null)
        source["idle_close"] = src.idle_close_us
    if src.kind != "generator":
        source.update(time_unit=src.time_unit, allowed_lateness=src.allowed_lateness_us,
                      late=src.late)
    if src.generator is not None:
        g = src.generator
        source.update(rows=g.rows, keys=g.keys, seed=g.seed, start_ts=g.start_ts,
                      interval_us=g.interval_us)
    w = spec.aggregate.window
    window: dict[str, object] = ({"kind": w.kind, "gap": w.size} if w.kind == "session"
                                 else {"kind": w.kind, "size": w.size, "slide": w.slide})
    aggregate: dict[str, object] = {"group_by": spec.aggregate.group_by,
                                    "function": spec.aggregate.function, "window": window}
    if spec.aggregate.field is not None:
        aggregate["field"] = spec.aggregate.field
    cp = spec.checkpoint
    checkpoint: dict[str, object] = (
        {"rto": cp.rto_us} if cp.rto_us is not None else  # an objective sets Q and U
        {"Q": cp.q_records if cp.q_records is not None else cp.q_text, "U": cp.u})
    checkpoint.update({"CI_ms": cp.ci_ms, "CP_ms": cp.cp_ms, "mode": cp.mode})
    run: dict[str, object] = {"partitions": spec.run.partitions, "fsync": spec.run.fsync,
                              "master": spec.run.effective_master,
                              "segment_kb": spec.run.segment_kb,
                              "trim_upstream": spec.run.trim_upstream,
                              "trim_lag_s": spec.run.trim_lag_s,
                              "executor_wait_s": spec.run.executor_wait_s,
                              "slot_timeout_s": spec.run.slot_timeout_s,
                              "upstream": spec.run.upstream}
    if spec.run.ingest_tasks != 1:
        run["ingest_tasks"] = spec.run.ingest_tasks
    if spec.run.key_groups is not None:  # else the run's own are [cec] key_groups
        run["key_groups"] = spec.run.key_groups
    if spec.run.output_keep_mb is not None:
        run["output_keep_mb"] = spec.run.output_keep_mb
    if spec.run.output_keep_s is not None:
        run["output_keep_s"] = spec.run.output_keep_s
    if spec.run.spark:
        run["spark"] = spec.run.spark_conf
    tables: dict[str, dict[str, object]] = {"source": source}
    if spec.where is not None:
        tables["filter"] = {"where": spec.where}
    tables.update(aggregate=aggregate, checkpoint=checkpoint, run=run)
    return tables


def dump_spec(spec: PipelineSpec, extra: Mapping[str, Mapping[str, object]] | None = None
              ) -> str:
    """TOML text of the resolved spec (plus extra tables, e.g. ``[cec]`` run settings)."""
    lines = [f"# resolved from {spec.origin}"]
    tables: dict[str, Mapping[str, object]] = dict(spec_to_tables(spec))
    if extra:
        tables.update(extra)
    for name, tbl in tables.items():
        lines.append(f"\n[{name}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in tbl.items())
    return "\n".join(lines) + "\n"
