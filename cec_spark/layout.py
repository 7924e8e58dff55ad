"""The run directory (ARCHITECTURE §6) and the settings stored in ``RUN/run.toml``.

::

    RUN/
      run.toml           the resolved spec + a [cec] table of run settings + checksum
      run.toml.bak       its copy (cec recover --repair restores run.toml from it)
      upstream/p0000/    storage_log: partition 0's input stream (the ingest writes it)
      output/p0000/      storage_log: partition 0's operator output
      state/p0000.json   the operator task's live counters (progress display only)
      STOP               present while a clean stop is requested (Ctrl-C)
      drivers/00000001   one file per driver that ran the run (cec run, cec recover)
      consumers/NAME.json  what `cec export --consumer NAME` acknowledged (retention)

``run.toml`` (its text: :mod:`cec_spark.run_file`) is written once, atomically and
exclusively (a hard link: of two drivers racing for one directory exactly one wins),
before Spark starts and before any log; recovery reads nothing else. The ``[cec]``
table holds what the spec does not: ``max_tuples`` (the source is cut after that many
rows, so a resumed run ends where the original would have), and the source's column
types (so a resumed ``stream-dir`` ingest types its rows the same).
Each driver takes the next number in ``drivers/`` (an exclusive hard link, as for
``run.toml``) before it starts any task, and hands it to its tasks: a task or driver
that sees a newer driver stops with :class:`DriverSupersededError`. So of two drivers
on one run (two ``cec recover`` on two hosts) the newer one runs and the older one
stops with a clear error, instead of their tasks fencing each other's logs in turn
(the logs' own epochs keep the data exact either way).
The ``state/`` files are advisory JSON written by the tasks with an atomic rename;
nothing depends on them for correctness.
"""

from __future__ import annotations

import json
import os
import socket
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cec.errors import CorruptionError, UsageError
from cec.spec import PipelineSpec
from cec_spark.run_file import (
    BACKUP_FILE,
    CHECKSUM_PREFIX,
    FORMAT_VERSION,
    RUN_FILE,
    RunSettings,
    check_run_text,
    parse_run_text,
    run_text,
    settings_for,
    sign_run_text,
)
from storage_log.segment import fsync_dir

__all__ = ["BACKUP_FILE", "CHECKSUM_PREFIX", "FORMAT_VERSION", "RUN_FILE",
           "DriverSupersededError", "RunLayout", "RunNotVisibleError", "RunSettings",
           "check_run_text", "settings_for", "sign_run_text"]


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @property
    def run_file(self) -> Path:
        return self.root / RUN_FILE

    @property
    def backup_file(self) -> Path:
        return self.root / BACKUP_FILE

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
        self.write_run_text(run_text(spec, settings))

    def write_run_text(self, text: str) -> None:
        """Store a new run's run.toml (:func:`cec_spark.run_file.run_text`) and its backup."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "state").mkdir(exist_ok=True)
        tmp = self.root / f"{RUN_FILE}.{socket.gethostname()}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
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
        self._write_backup(text)
        fsync_dir(self.root)

    def _write_backup(self, text: str) -> None:
        tmp = self.root / f"{BACKUP_FILE}.{socket.gethostname()}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.backup_file)

    def restore_run_file(self) -> str:
        """``--repair``: put back a damaged or missing run.toml from its backup; what was
        done (CorruptionError if the backup is damaged too)."""
        problem = self._run_file_problem()
        if problem is None:
            return "run.toml is intact"
        try:
            backup = self.backup_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CorruptionError(f"{problem}; its backup {self.backup_file} cannot be read "
                                  f"either ({exc}): the run's spec is lost") from exc
        bad = check_run_text(backup, str(self.backup_file))
        if bad is not None or CHECKSUM_PREFIX not in backup:
            why = bad or "no checksum"
            raise CorruptionError(f"{problem}; its backup is damaged too ({why}): the "
                                  "run's spec is lost")
        tmp = self.root / f"{RUN_FILE}.repair.{os.getpid()}.tmp"
        tmp.write_text(backup, encoding="utf-8")
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.run_file)
        fsync_dir(self.root)
        return f"restored {self.run_file} from {self.backup_file} ({problem})"

    def _run_file_problem(self) -> str | None:
        """Why run.toml cannot be trusted (None: it can)."""
        try:
            text = self.run_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return f"{self.run_file} is missing"
        except (OSError, UnicodeDecodeError) as exc:
            return f"{self.run_file} cannot be read: {exc}"
        return check_run_text(text, str(self.run_file))

    def read_run_file(self) -> tuple[PipelineSpec, RunSettings]:
        """The run's spec and settings (:meth:`read_run`)."""
        _, spec, settings = self.read_run()
        return spec, settings

    def read_run(self) -> tuple[str, PipelineSpec, RunSettings]:
        """The run's run.toml text, spec and settings.

        A run.toml whose checksum fails is damage (CorruptionError, exit 3) when it no
        longer parses, and an edit (UsageError, exit 2: a run's spec cannot change) when
        it does; either way ``cec recover --repair`` restores it from ``run.toml.bak``.
        """
        repair = f"'cec recover --from-log {self.root} --repair' restores it from " \
                 f"{BACKUP_FILE}"
        if not self.run_file.exists():
            if self.backup_file.exists():
                raise CorruptionError(f"{self.run_file} is missing; {repair}")
            raise UsageError(f"{self.root}: not a cec run directory (no {RUN_FILE})")
        origin = str(self.run_file)
        try:
            text = self.run_file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptionError(f"{origin}: damaged (not UTF-8 at byte {exc.start}); "
                                  f"{repair}") from exc
        spec, settings = parse_run_text(text, origin, repair)
        return text, spec, settings

    def check_visible(self, run_id: str | None) -> None:
        """On an executor: this host sees the run the driver created (same run id).

        Raises :class:`RunNotVisibleError` naming this host, the path and the cause.
        """
        where = f"host {socket.gethostname()} (pid {os.getpid()}, cwd {os.getcwd()})"
        if not self.root.is_absolute():
            raise RunNotVisibleError(f"{where}: the run directory {self.root} is a relative "
                                     "path (the driver resolves it; is this an old driver?)")
        if not self.root.is_dir():
            raise RunNotVisibleError(f"{where}: cannot see the run directory {self.root} (is "
                                     "it on a file system every host mounts at that path?)")
        try:
            text = self.run_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise RunNotVisibleError(f"{where}: cannot read {self.run_file}: "
                                     f"{exc.strerror or exc}") from exc
        if run_id is None:
            return
        try:
            found = tomllib.loads(text).get("cec", {}).get("run_id")
        except tomllib.TOMLDecodeError as exc:
            raise RunNotVisibleError(f"{where}: {self.run_file} is damaged: {exc}") from exc
        if found != run_id:
            raise RunNotVisibleError(f"{where}: {self.run_file} belongs to run {found}, not "
                                     f"to this run {run_id} (another run in the same "
                                     "directory, or a host that sees a different directory "
                                     "at this path)")

    def check_owner(self, trust: bool) -> None:
        """A run directory is code (``[filter].where`` is Spark SQL that a resume runs
        again): refuse one whose run.toml another user owns, unless ``trust``."""
        if trust or not hasattr(os, "getuid"):
            return
        try:
            owner = self.run_file.stat().st_uid
        except OSError:
            return  # read_run_file names what is missing
        if owner != os.getuid():
            raise UsageError(f"{self.run_file} belongs to uid {owner}, not to you (uid "
                             f"{os.getuid()}): resuming a run executes its [filter] as Spark "
                             "SQL; pass --trust if you trust who wrote it")

    # ------------------------------------------------------------------ drivers

    @property
    def drivers_dir(self) -> Path:
        return self.root / "drivers"

    def take_driver(self) -> int:
        """A new driver number for this run: one more than any before, never reused."""
        self.drivers_dir.mkdir(exist_ok=True)
        info = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        tmp = self.drivers_dir / f".{socket.gethostname()}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(info), encoding="utf-8")
        try:
            while True:
                n = self.latest_driver() + 1
                try:
                    os.link(tmp, self.drivers_dir / f"{n:08d}")
                except FileExistsError:
                    continue  # another driver took n first: take the next
                fsync_dir(self.drivers_dir)
                return n
        finally:
            tmp.unlink()

    def latest_driver(self) -> int:
        """The newest driver number (0: none yet, a run from before driver numbers)."""
        try:
            names = os.listdir(self.drivers_dir)
        except FileNotFoundError:
            return 0
        return max((int(n) for n in names if n.isdigit()), default=0)

    def driver_info(self, n: int) -> dict[str, Any]:
        try:
            raw = json.loads((self.drivers_dir / f"{n:08d}").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return raw if isinstance(raw, dict) else {}

    def check_driver(self, mine: int | None) -> None:
        """DriverSupersededError if a newer driver than ``mine`` took the run."""
        if mine is None:
            return
        newest = self.latest_driver()
        if newest > mine:
            info = self.driver_info(newest)
            raise DriverSupersededError(
                f"{self.root}: another driver (number {newest}, host {info.get('host')}, "
                f"pid {info.get('pid')}) took over this run; this one (number {mine}) "
                "stops. Its committed output is kept; the newer driver continues it")

    # ------------------------------------------------------------------ consumers

    @property
    def consumers_dir(self) -> Path:
        return self.root / "consumers"

    def consumer_acks(self, p: int) -> list[int]:
        """Per registered consumer, the output seq of partition ``p`` it acknowledged
        (-1: none yet). Unreadable ack files count as nothing acknowledged."""
        try:
            names = sorted(n for n in os.listdir(self.consumers_dir) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        acks = []
        for name in names:
            acks.append(self.read_ack(name[:-len(".json")]).get(p, -1))
        return acks

    def read_ack(self, consumer: str) -> dict[int, int]:
        try:
            raw = json.loads((self.consumers_dir / f"{consumer}.json").read_text("utf-8"))
            return {int(k): int(v) for k, v in raw["partitions"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def write_ack(self, consumer: str, acks: dict[int, int]) -> None:
        self.consumers_dir.mkdir(exist_ok=True)
        path = self.consumers_dir / f"{consumer}.json"
        tmp = path.with_name(f".{consumer}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"consumer": consumer, "acked_at": time.time(),
                                   "partitions": {str(k): v for k, v in acks.items()}}),
                       encoding="utf-8")
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(self.consumers_dir)

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


class DriverSupersededError(UsageError):
    """A newer driver took over the run (two ``cec recover`` at once): this one stops."""


class RunNotVisibleError(UsageError):
    """An executor does not see the run directory the driver created (exit 2)."""

