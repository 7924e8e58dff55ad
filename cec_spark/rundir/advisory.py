"""Advisory JSON files: state and measurements that nothing depends on for correctness
(the operator tasks' ``RUN/state/pNNNN.json``, the ingest's, the recovery-time
objective's, a takeover's; the machine's start-up samples).

Each is one JSON object, replaced whole by an atomic rename; a failure to write is
ignored, and a file missing, unreadable or not an object reads as ``{}``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["read_advisory", "write_advisory"]


def write_advisory(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON in ``path``, replaced whole; advisory (state and measurements,
    never what recovery depends on): a failure to write is ignored. Not a durable
    write (:func:`storage_log.durable.write_durable`) on purpose: a task writes its
    state file every second or so, and two fsyncs each time would cost the log's
    own fsyncs their disk time for a file whose loss costs nothing."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def read_advisory(path: Path) -> dict[str, Any]:
    """What :func:`write_advisory` wrote; ``{}`` for a file missing, unreadable or not
    a JSON object."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}
