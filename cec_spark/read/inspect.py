"""Library functions behind ``cec inspect extent`` and ``cec inspect log``.

Both need nothing but the run directory (``RUN/run.toml`` and the logs) and write nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from cec.errors import CecError, UsageError
from cec.policy import RecoveryRates
from cec.records import tuple_counts
from cec_spark.ingest.logs import late_rows, watermarks
from cec_spark.report import (
    ExtentPartition,
    ExtentResult,
    LogInfo,
    LogReport,
    Segment,
    TupleCounts,
    Verify,
)
from cec_spark.report.watermark import behind_s, reached, watermark_text
from cec_spark.run import rto
from cec_spark.rundir.advisory import read_advisory
from cec_spark.rundir.drivers import standby_view
from cec_spark.rundir.layout import RunLayout
from cec_spark.rundir.run_file import read_run_file
from recovery.ec import NothingToRecover
from recovery.partition import scan
from storage_log.cache import ID_FILE
from storage_log.epoch import read_chain
from storage_log.errors import CorruptLogError
from storage_log.log import StreamLog
from storage_log.segment import (
    list_segments,
    read_trim_marker,
    segment_path,
    sid_base,
    sid_epoch,
)

LOCK_WAIT_S = 30.0


def _partitions(layout: RunLayout, partition: int | None, total: int) -> list[int]:
    if partition is None:
        return list(range(total))
    if not 0 <= partition < total:
        raise UsageError(f"--partition: {partition} is not in 0..{total - 1}")
    return [partition]


def inspect_extent(root: Path | str, *, partition: int | None = None, at: int | None = None
                   ) -> ExtentResult:
    """``cec inspect extent``: q, u, replay_after_seq, n_c, the oldest windows, G_check counts and
    each partition's two watermarks, the ingest's and the operator's, as they are now
    (with ``at``: only where ``at`` is at or after them and the output log's last row,
    so that the extent is the newest one; else null, not known as of ``at``).

    ``at`` (a timestamp, microseconds) looks at the extent as it was when the last
    output row with ``ts <= at`` was written.
    """
    if at is not None and not -(1 << 63) <= at < (1 << 63):
        raise UsageError(f"--at: {at} is not a timestamp (microseconds, a signed 64-bit "
                         "integer)")
    layout = RunLayout(Path(root))
    spec, settings = read_run_file(layout)
    wms = _watermarks(layout, spec.run.partitions)
    late = late_rows(layout, spec.run.partitions)
    if at is not None and layout.generation and at < layout.generations[-1].cut_ts:
        g = layout.generations[-1]
        raise UsageError(f"--at {at}: before the run's rescale to {g.partitions} "
                         f"partitions (generation {g.gen}, at input seq {g.cut}, ts "
                         f"{g.cut_ts}): time travel reaches back to the rescale only "
                         "(the older generation's logs are output/p*, output/gNNNN/p*)")
    objective = spec.checkpoint.rto_s
    run_rto = rto.read_run(layout)
    view = standby_view(layout, spec.run.partitions)
    ready = view.ready
    fixed = rto.takeover_cost() if ready else rto.fixed_cost()
    if isinstance(run_rto.get("fixed_s"), int | float) and bool(
            run_rto.get("standby_ready")) == bool(ready):  # what the run's tasks predict with
        fixed = rto.Fixed(float(run_rto["fixed_s"]), bool(run_rto.get("fixed_measured")),
                          str(run_rto.get("fixed_how", "")))
    parts: list[ExtentPartition] = []
    for p in _partitions(layout, partition, spec.run.partitions):
        path = layout.output(p)
        entry: dict[str, Any] = {"partition": p, "empty": False, "reason": "",
                                 "trimmed_through_seq": None, "counts": None,
                                 "sealed": None, "n_c": None, "replay_after_seq": None,
                                 "t_c": None, "t_c_ts_us": None, "q": None, "u": None,
                                 "extent_bytes": None, "g_open_found": None,
                                 "g_check_found": None, "oldest": [],
                                 "late_rows": late[p], **(wms[p] if at is None else {})}
        if not path.exists():
            entry.update(empty=True, **_as_of(wms[p], at, None))
            parts.append(ExtentPartition(**entry))
            continue
        with StreamLog.open(path) as out:
            trimmed = read_trim_marker(path)
            if at is not None and trimmed is not None:
                first = next(iter(out.read_forward()), None)
                first_ts = None if first is None else int(first.column("ts")[0].as_py())
                if first_ts is None or at < first_ts:
                    entry.update(empty=True, trimmed_through_seq=trimmed,
                                 reason=f"output retention trimmed this log through seq "
                                        f"{trimmed}: time travel reaches back to ts "
                                        f"{first_ts} only")
                    parts.append(ExtentPartition(**entry))
                    continue
            rec = scan(out, at_ts=at)
            entry["counts"] = _counts(out, at)
            if at is not None:  # as of at: shown where it is the newest extent
                entry.update(_as_of(wms[p], at, out.last_ts))
            entry["sealed"] = bool(out.sealed)
        if isinstance(rec, NothingToRecover):
            entry.update(empty=True, reason=rec.reason)
        else:
            ext = rec.extent
            entry.update(n_c=rec.n_c, replay_after_seq=rec.replay_after_seq, t_c=rec.t_c,
                         t_c_ts_us=rec.t_c_ts, q=ext.records, u=ext.replay_length,
                         extent_bytes=ext.bytes, g_open_found=ext.g_open_found,
                         g_check_found=ext.g_check_found, oldest=list(ext.oldest))
            entry.update(_prediction(read_advisory(layout.state_file(p)), fixed, ext.records,
                                     ext.replay_length, objective))
        parts.append(ExtentPartition(**entry))
    return ExtentResult(run_dir=str(layout.root), at_us=at, partitions=parts, rto_s=objective,
                        fixed_s=fixed.seconds, fixed_how=fixed.how,
                        warnings=list(settings.warnings), standbys_ready=ready,
                        standbys_hot=view.hot, standby_behind_records=view.behind)


def _as_of(wm: dict[str, Any], at: int | None, last_ts: int | None) -> dict[str, Any]:
    """A partition's watermarks (now) for an extent as of ``at``: shown only where that
    extent is the newest one, ``at`` at or after the output log's last row and after
    both watermarks; before, what they were is not known (nothing is shown)."""
    if at is None:
        return wm
    known = [t for t in (last_ts, wm["ingest_watermark_us"], wm["operator_watermark_us"])
             if t is not None]
    return wm if all(at >= t for t in known) else {}


def _watermarks(layout: RunLayout, partitions: int) -> list[dict[str, Any]]:
    """Each partition's two watermarks now (:mod:`cec_spark.report.watermark`): the
    operator's from its state file (the last W applied, the last tuple's position), read
    before the ingest's from its upstream log's last token, so that the operator's is
    not seen ahead of the ingest's for want of a newer token."""
    states = [read_advisory(layout.state_file(p)) for p in range(partitions)]
    released = watermarks(layout, partitions)
    out = []
    for p, (st, i) in enumerate(zip(states, released, strict=True)):
        o = reached(_int(st.get("watermark_us")),
                    _row_ts(layout.upstream(p), _int(st.get("in_last_seq"))))
        out.append({"ingest_watermark_us": i, "operator_watermark_us": o,
                    "operator_behind_s": behind_s(i, o), "watermark": watermark_text(i, o)})
    return out


def _row_ts(path: Path, seq: int | None) -> int | None:
    """The time of the upstream row at ``seq`` (None: no such row, or none readable)."""
    if seq is None or not path.exists():
        return None
    try:
        with StreamLog.open(path) as log:
            batch = next(iter(log.read_forward(after_seq=seq - 1)), None)
    except (CecError, OSError):  # trimmed, or a log being created: not known
        return None
    if batch is None or not batch.num_rows or batch.column("seq")[0].as_py() != seq:
        return None
    return int(batch.column("ts")[0].as_py())


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _counts(out: StreamLog, at: int | None) -> TupleCounts:
    """An output log's rows by type (as of ts ``at``: None, all)."""
    counts = {"R": 0, "G_open": 0, "G_check": 0}
    for batch in out.read_forward():
        types = batch.column("type").to_numpy()
        if at is not None:
            ts = batch.column("ts").to_numpy()
            if len(ts) and ts[0] > at:
                break
            types = types[: int(np.searchsorted(ts, at, "right"))]
        for name, k in zip(counts, tuple_counts(types), strict=True):
            counts[name] += int(k)
    return TupleCounts(**counts)


def _prediction(state: dict[str, Any], fixed: rto.Fixed, q: int, u: int,
                objective: float | None) -> dict[str, Any]:
    """The predicted recovery time of an extent, with the rates the partition's task
    measured (its state file) or the defaults (:mod:`cec_spark.run.rto`)."""
    info = state.get("rto") if isinstance(state.get("rto"), dict) else {}
    rates = RecoveryRates.from_dict((info or {}).get("rates"))
    measured = [m for m in rates.measured if m != "fixed"] + (["fixed"] if fixed.measured
                                                             else [])
    rates = RecoveryRates(fixed.seconds, rates.ec_records_per_s,
                          rates.replay_positions_per_s, tuple(measured))
    pred = rates.predict_s(q, u)
    return {"predicted_recovery_s": round(pred, 3),
            "ec_records_per_s": round(rates.ec_records_per_s, 1),
            "replay_positions_per_s": round(rates.replay_positions_per_s, 1),
            "rates_measured": sorted(measured),
            "within_objective": None if objective is None else pred <= objective}


# --------------------------------------------------------------------------- log


def _log_dirs(root: Path) -> list[Path]:
    layout = RunLayout(root)
    if layout.exists():
        spec, _ = read_run_file(layout)
        dirs = []
        for gen, p, out, _ in layout.output_logs(spec.run.partitions):  # every generation
            dirs += [layout.upstream_of(gen, p), out]
        return [d for d in dirs if d.exists()]
    if (root / ID_FILE).exists() or any(root.glob("*.seg")):
        return [root]
    raise UsageError(f"{root}: neither a run directory nor a log")


def describe_log(path: Path, *, verify: bool) -> LogInfo:
    """Segments, records, index and (``verify``) every record's checksum of one log."""
    chain = read_chain(path)
    segments = [Segment(name=segment_path(path, s).name, base_seq=sid_base(s),
                        epoch=sid_epoch(s), bytes=segment_path(path, s).stat().st_size,
                        fenced_at=chain.limits.get(s))
                for s in chain.segments]
    info: dict[str, Any] = {"path": str(path), "segments": segments, "epoch": chain.epoch,
                            "dead_segments": [segment_path(path, s).name
                                              for s in list_segments(path)
                                              if s not in set(chain.segments)],
                            "first_seq": None, "last_seq": None, "last_ts_us": None,
                            "sealed": None, "token": None, "schema": None, "verify": None,
                            "damaged": None}
    try:
        with StreamLog.open(path) as log:
            token = log.last_token()
            info.update(first_seq=log.first_seq, last_seq=log.last_seq,
                        last_ts_us=log.last_ts, sealed=log.sealed,
                        token=token.decode("utf-8", "replace") if token is not None else None,
                        schema=[f"{f.name}: {f.type}" for f in log.schema] if log.schema
                        else None)
            if verify:
                t0 = time.perf_counter()
                records = log.verify()  # every frame of the chain, with or without index
                info["verify"] = Verify(ok=True, records=records,
                                        elapsed_s=round(time.perf_counter() - t0, 3))
    except CorruptLogError as exc:
        info["damaged"] = str(exc)
    return LogInfo(**info)


def inspect_log(root: Path | str, *, verify: bool = False) -> LogReport:
    """``cec inspect log``: every log of a run directory (or one log directory)."""
    root = Path(root)
    if not root.exists():
        raise UsageError(f"{root}: no such directory")
    logs = [describe_log(d, verify=verify) for d in _log_dirs(root)]
    return LogReport(root=str(root), logs=logs,
                     damaged=[f"{e.path}: {e.damaged}" for e in logs if e.damaged is not None])
