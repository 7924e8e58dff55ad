"""The run directory (ARCHITECTURE §6) and the settings stored in ``RUN/run.toml``.

::

    RUN/
      run.toml           the resolved spec + a [cec] table of run settings
      upstream/p0000/    storage_log: partition 0's input stream (the ingest writes it)
      output/p0000/      storage_log: partition 0's operator output
      state/p0000.json   the operator task's live counters (progress display only)
      STOP               present while a clean stop is requested (Ctrl-C)

``run.toml`` is written once, atomically and exclusively (a hard link: of two drivers
racing for one directory exactly one wins), before Spark starts and before any log;
recovery reads nothing else. The ``[cec]`` table holds what the spec does not:
``max_tuples`` (the source is cut after that many rows, so a resumed run ends where
the original would have), and the source's column types (so a resumed
``stream-dir`` ingest types its rows the same).
The ``state/`` files are advisory JSON written by the tasks with an atomic rename;
nothing depends on them for correctness.
"""

from __future__ import annotations

import json
import os
import socket
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cec.errors import UsageError
from cec.sources import ColumnTypes
from cec.spec import PipelineSpec, dump_spec, parse_stored_spec
from storage_log.segment import fsync_dir

RUN_FILE = "run.toml"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class RunSettings:
    """What a run needs beyond its spec."""

    max_tuples: int | None
    columns: ColumnTypes
    key_column: str

    @property
    def key_type(self) -> str:
        """The operator's key type: ``int64`` or ``string``."""
        i = self.columns.names.index(self.key_column)
        return "int64" if self.columns.types[i] == "int64" else "string"


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @property
    def run_file(self) -> Path:
        return self.root / RUN_FILE

    @property
    def stop_file(self) -> Path:
        return self.root / "STOP"

    def upstream(self, p: int) -> Path:
        return self.root / "upstream" / f"p{p:04d}"

    def output(self, p: int) -> Path:
        return self.root / "output" / f"p{p:04d}"

    def state_file(self, p: int) -> Path:
        return self.root / "state" / f"p{p:04d}.json"

    def exists(self) -> bool:
        return self.run_file.exists()

    # ------------------------------------------------------------------ run.toml

    def write_run_file(self, spec: PipelineSpec, settings: RunSettings) -> None:
        extra: dict[str, dict[str, object]] = {"cec": {
            "format_version": FORMAT_VERSION,
            "max_tuples": -1 if settings.max_tuples is None else settings.max_tuples,
            "column_names": list(settings.columns.names),
            "column_types": list(settings.columns.types),
        }}
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "state").mkdir(exist_ok=True)
        tmp = self.root / f"{RUN_FILE}.{socket.gethostname()}.{os.getpid()}.tmp"
        tmp.write_text(dump_spec(spec, extra), encoding="utf-8")
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        try:  # link, not rename: of two drivers racing for one directory, one wins
            os.link(tmp, self.run_file)
        except FileExistsError:
            raise UsageError(f"{self.root}: already holds a run (another `cec run` "
                             "started it first); resume it with 'cec recover --from-log "
                             f"{self.root}' or choose another --log-dir") from None
        finally:
            tmp.unlink()
        fsync_dir(self.root)

    def read_run_file(self) -> tuple[PipelineSpec, RunSettings]:
        if not self.run_file.exists():
            raise UsageError(f"{self.root}: not a cec run directory (no {RUN_FILE})")
        text = self.run_file.read_text(encoding="utf-8")
        origin = str(self.run_file)
        spec = parse_stored_spec(text, origin)
        try:
            cec = tomllib.loads(text)["cec"]
            max_tuples = int(cec["max_tuples"])
            columns = ColumnTypes(tuple(cec["column_names"]), tuple(cec["column_types"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{origin}: [cec] table missing or damaged: {exc}") from exc
        settings = RunSettings(None if max_tuples < 0 else max_tuples, columns,
                               spec.aggregate.group_by)
        return spec, settings

    # ------------------------------------------------------------------ state files

    def write_state(self, p: int, state: dict[str, Any]) -> None:
        path = self.state_file(p)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(state), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:  # advisory only
            pass

    def read_state(self, p: int) -> dict[str, Any]:
        try:
            raw = json.loads(self.state_file(p).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return raw if isinstance(raw, dict) else {}


def settings_for(spec: PipelineSpec, columns: ColumnTypes, max_tuples: int | None
                 ) -> RunSettings:
    return RunSettings(max_tuples, columns, spec.aggregate.group_by)
