"""The run directory (ARCHITECTURE §6): the one map of every path under it.

Every path under a run directory is built here (``tests/test_layers.py`` checks that no
other library module joins a run directory's entry name onto a path):

::

    RUN/
      run.toml             the resolved spec + a [cec] table of run settings + checksum
      run.toml.bak         its copy (cec recover --repair restores run.toml from it)
      generations.toml     after a rescale (cec recover --partitions P'): the run's
                           generations; generation g >= 1 keeps its logs in
                           upstream/gNNNN/pNNNN, output/gNNNN/pNNNN, state/gNNNN/
      generations.toml.bak its copy (cec recover --repair restores it from it)
      upstream/p0000/      storage_log: partition 0's input stream (the ingest writes it)
      output/p0000/        storage_log: partition 0's operator output
      state/p0000.json     the operator task's live counters (progress display only)
      state/ingest.json    the stream-dir ingest task's figures (progress display only)
      state/rto.json       the recovery-time objective's fixed cost and catch-up target
                           (the driver writes it, the tasks read it: cec_spark.run.rto)
      state/takeover.json  a standby's takeover timings (cec_spark.standby.standby)
      STOP                 present while a clean stop is requested (Ctrl-C)
      drivers/00000001     one file per driver that ran the run (cec run, cec recover,
                           a standby taking over), and 00000001.live: its lease
      standbys/H-PID.live  the lease of each `cec standby` watching the run
      consumers/NAME.json  what `cec export --consumer NAME` acknowledged (retention),
                           and NAME.pending.json: a `cec tail`'s batch in flight
      source/              a DataFrame run's staged input (the Python API)
      watchdog/H-PID.txt   a driver's thread stacks when it made no progress
                           (cec_spark.watchdog)
      metrics/cec.prom     the Prometheus textfile of the run (cec_spark.run.metrics)
      standby.log          the messages of the standby `cec run --standby` started

``run.toml`` (its text: :mod:`cec_spark.rundir.run_file`) is written once, atomically and
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
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from cec.errors import CorruptionError, RecoveryError, UsageError
from cec.spec import PipelineSpec, default_master
from cec_spark.errors import DriverSupersededError, RunNotVisibleError
from cec_spark.rundir.generations import (
    GENERATIONS_BACKUP,
    GENERATIONS_FILE,
    Generation,
    read_generations,
    write_generations,
)
from cec_spark.rundir.lease import (
    DEFAULT_LEASE_S,
    Lease,
    lock_state,
    pid_alive,
    read_lease,
    same_machine,
)
from cec_spark.rundir.run_file import (
    BACKUP_FILE,
    CHECKSUM_PREFIX,
    RUN_FILE,
    RunSettings,
    check_run_text,
    parse_run_text,
    run_text,
)
from storage_log.durable import write_durable
from storage_log.reconcile import first_damage

__all__ = ["VALUE_FALLBACK", "RunLayout", "ack_key", "read_advisory", "rescaled_spec",
           "value_column", "write_advisory"]

STOP_FILE = "STOP"
UPSTREAM_DIR = "upstream"
OUTPUT_DIR = "output"
STATE_DIR = "state"
DRIVERS_DIR = "drivers"
STANDBYS_DIR = "standbys"
CONSUMERS_DIR = "consumers"
SOURCE_DIR = "source"
WATCHDOG_DIR = "watchdog"
METRICS_DIR = "metrics"
STANDBY_LOG = "standby.log"
INGEST_STATE_FILE = "ingest.json"  # in the current generation's state/
RTO_FILE = "rto.json"  # in state/
TAKEOVER_FILE = "takeover.json"  # in state/
FOLDERS = frozenset({UPSTREAM_DIR, OUTPUT_DIR, STATE_DIR, DRIVERS_DIR, STANDBYS_DIR,
                     CONSUMERS_DIR, SOURCE_DIR, WATCHDOG_DIR, METRICS_DIR})
"""Every folder a run directory may hold."""
BEFORE_RUN_FILE = frozenset({STATE_DIR, SOURCE_DIR})
"""What a driver creates in a new run directory before its run.toml (the state folder,
the Python API's staged DataFrame); run.toml's own temporary file is hidden
(``.run.toml.HOST.PID.tmp``)."""

# this process's driver of each run directory (str(root)) and its lease
_DRIVER_LEASES: dict[str, tuple[int, Lease]] = {}

VALUE_FALLBACK = "__cec_value"  # the value column of a `count` aggregate without field


def value_column(spec: PipelineSpec) -> str:
    """The name of the value column in the upstream logs."""
    return spec.aggregate.field if spec.aggregate.field is not None else VALUE_FALLBACK


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
        return self.root / STOP_FILE

    def upstream(self, p: int) -> Path:
        """Partition ``p``'s upstream log in the current generation."""
        return self.upstream_of(self.generation, p)

    def output(self, p: int) -> Path:
        """Partition ``p``'s output log in the current generation."""
        return self.output_of(self.generation, p)

    def state_file(self, p: int) -> Path:
        """Partition ``p``'s operator task's state file in the current generation."""
        return self.state_dir(self.generation) / f"p{p:04d}.json"

    @property
    def ingest_state_file(self) -> Path:
        """The stream-dir ingest task's state file in the current generation."""
        return self.state_dir(self.generation) / INGEST_STATE_FILE

    @property
    def rto_file(self) -> Path:
        """``state/rto.json``: the objective's fixed cost and catch-up target."""
        return self.root / STATE_DIR / RTO_FILE

    @property
    def takeover_file(self) -> Path:
        """``state/takeover.json``: the last standby takeover's timings."""
        return self.root / STATE_DIR / TAKEOVER_FILE

    def upstream_of(self, gen: int, p: int) -> Path:
        return self.upstream_dir(gen) / f"p{p:04d}"

    def output_of(self, gen: int, p: int) -> Path:
        return self.output_dir(gen) / f"p{p:04d}"

    def upstream_dir(self, gen: int) -> Path:
        """Generation ``gen``'s upstream logs."""
        return self._gen_dir(UPSTREAM_DIR, gen)

    def output_dir(self, gen: int) -> Path:
        """Generation ``gen``'s output logs."""
        return self._gen_dir(OUTPUT_DIR, gen)

    def state_dir(self, gen: int) -> Path:
        """Generation ``gen``'s state files."""
        return self._gen_dir(STATE_DIR, gen)

    def _gen_dir(self, kind: str, gen: int) -> Path:
        return self.root / kind if gen == 0 else self.root / kind / f"g{gen:04d}"

    @property
    def source_dir(self) -> Path:
        """A DataFrame run's staged input (the Python API stages it before the run)."""
        return self.root / SOURCE_DIR

    def watchdog_file(self, host: str, pid: int) -> Path:
        """Where driver ``host``/``pid`` leaves its thread stacks (cec_spark.watchdog)."""
        return self.root / WATCHDOG_DIR / f"{host}-{pid}.txt"

    @property
    def metrics_dir(self) -> Path:
        """The folder of the run's Prometheus textfile (``cec.prom``, written by
        :func:`cec_spark.run.metrics.write`)."""
        return self.root / METRICS_DIR

    @property
    def standby_log(self) -> Path:
        """The messages of the standby ``cec run --standby`` started."""
        return self.root / STANDBY_LOG

    # ------------------------------------------------------------------ generations

    @property
    def generations_file(self) -> Path:
        return self.root / GENERATIONS_FILE

    @property
    def generations_backup(self) -> Path:
        return self.root / GENERATIONS_BACKUP

    @cached_property
    def generations(self) -> tuple[Generation, ...]:
        """The run's generations, oldest first (empty: never rescaled, generation 0
        only, with run.toml's partitions). Read once per RunLayout object.

        A damaged ``generations.toml`` is CorruptionError (exit 3) naming ``cec recover
        --repair``, which restores it from its backup; with no intact backup it is
        RecoveryError (exit 4): the run's rescales are lost."""
        try:
            if not self.generations_file.exists() and self.generations_backup.exists():
                raise CorruptionError(f"{self.generations_file} is missing (its backup is "
                                      "there: the run was rescaled)")
            return read_generations(self.generations_file)
        except CorruptionError as exc:
            backup = self._generations_backup_problem()
            if backup is not None:
                raise RecoveryError(f"{exc}; {backup}: lost the run's rescales (which "
                                    "generation holds which partitions from which input "
                                    "seq on); its logs are intact under upstream/ and "
                                    "output/") from exc
            raise CorruptionError(f"{exc}; 'cec recover --from-log {self.root} --repair' "
                                  f"restores it from {GENERATIONS_BACKUP}") from exc

    def _generations_backup_problem(self) -> str | None:
        """Why generations.toml.bak cannot stand in for generations.toml (None: it can)."""
        if not self.generations_backup.exists():
            return f"its backup {self.generations_backup} is missing"
        try:
            read_generations(self.generations_backup)
        except CorruptionError as exc:
            return f"its backup is damaged too ({exc})"
        return None

    @property
    def generation(self) -> int:
        """The current generation (0: never rescaled)."""
        return self.generations[-1].gen if self.generations else 0

    @property
    def cut(self) -> int | None:
        """The current generation's start cut (None: generation 0, the whole input)."""
        return self.generations[-1].cut if self.generation else None

    def output_logs(self, partitions: int) -> list[tuple[int, int, Path, int | None]]:
        """Every output log of every generation, oldest first: ``(gen, p, path, end)``
        with ``end`` the last output seq that belongs to the run (None: all, the
        current generation). ``partitions``: the current spec's (generation 0's when
        the run was never rescaled)."""
        gens = self.generations or (Generation(0, partitions),)
        logs: list[tuple[int, int, Path, int | None]] = []
        for i, g in enumerate(gens):
            ends = gens[i + 1].previous_ends if i + 1 < len(gens) else None
            logs += [(g.gen, p, self.output_of(g.gen, p), None if ends is None else ends[p])
                     for p in range(g.partitions)]
        return logs

    def write_generations(self, gens: tuple[Generation, ...]) -> None:
        """Store the generations durably (:func:`storage_log.durable.write_durable`):
        the commit point of a rescale; then its backup."""
        write_generations(self.generations_file, gens)
        write_generations(self.generations_backup, gens)

    def exists(self) -> bool:
        return self.run_file.exists()

    # ------------------------------------------------------------------ run.toml

    def write_run_file(self, spec: PipelineSpec, settings: RunSettings) -> None:
        self.write_run_text(run_text(spec, settings))

    def write_run_text(self, text: str) -> None:
        """Store a new run's run.toml (:func:`cec_spark.rundir.run_file.run_text`) and its
        backup."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.state_dir(0).mkdir(exist_ok=True)
        try:  # link, not rename: of two drivers racing for one directory, one wins
            write_durable(self.run_file, text, exclusive=True)
        except FileExistsError:
            raise UsageError(f"{self.root}: already holds a run (another `cec run` "
                             "started it first); resume it with 'cec recover --from-log "
                             f"{self.root}' or choose another --log-dir") from None
        write_durable(self.backup_file, text)

    def repair_files(self) -> list[str]:
        """``--repair``: put back the run's damaged small files from their copies
        (run.toml, generations.toml and their backups); what was done. CorruptionError
        when a file and its backup are both damaged."""
        done = [self.restore_run_file()]
        done += [what for what in (self._refresh_backup(), self._restore_generations())
                 if what is not None]
        return done

    def _refresh_backup(self) -> str | None:
        """A damaged or missing run.toml.bak written again from the intact run.toml."""
        try:
            text = self.backup_file.read_text(encoding="utf-8")
            bad = check_run_text(text, str(self.backup_file))
            if bad is None and CHECKSUM_PREFIX in text:
                return None
        except (OSError, UnicodeDecodeError) as exc:
            bad = f"{self.backup_file} cannot be read: {exc}"
        write_durable(self.backup_file, self.run_file.read_text(encoding="utf-8"))
        return f"wrote {self.backup_file} again from {RUN_FILE} ({bad or 'no checksum'})"

    def _restore_generations(self) -> str | None:
        """generations.toml or its backup, damaged, written again from the other."""
        main, copy = self.generations_file, self.generations_backup
        if not main.exists() and not copy.exists():
            return None
        try:
            if not main.exists():
                raise CorruptionError(f"{main} is missing")
            gens = read_generations(main)
        except CorruptionError as exc:
            backup = self._generations_backup_problem()
            if backup is not None:
                raise CorruptionError(f"{exc}; {backup}: the run's rescales are "
                                      "lost") from exc
            write_durable(main, copy.read_text(encoding="utf-8"))
            self.__dict__.pop("generations", None)
            return f"restored {main} from {copy} ({exc})"
        if self._generations_backup_problem() is None and \
                copy.read_bytes() == main.read_bytes():
            return None
        write_generations(copy, gens)
        return f"wrote {copy} again from {main}"

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
        write_durable(self.run_file, backup)
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
        return text, self.current_spec(spec), settings

    def current_spec(self, spec: PipelineSpec) -> PipelineSpec:
        """``spec`` with the current generation's partitions (run.toml keeps the
        partitions the run started with; a rescale records its own)."""
        if self.generation and self.generations[-1].partitions != spec.run.partitions:
            return rescaled_spec(spec, self.generations[-1].partitions)
        return spec

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

    def unneeded_damage(self, p: int, opened: Any) -> str | None:
        """What to say when partition ``p``'s upstream log is damaged where this
        recovery did not read it (None: it is not, or it was read).

        ``opened``: the ReconcileReport of the recovery's first writable open of the
        log. An open that rebuilt the index (a new host, the index removed) trusted
        the segments' side-files instead of reading them, so their frames are read
        here (checksums only): a later replay, rescale or time travel will need them.
        """
        if opened is None or not opened.rebuilt:
            return None
        bad = first_damage(self.upstream(p))
        if bad is None:
            return None
        segment, offset, invariant = bad
        return (f"partition {p}: the upstream log is damaged at {segment} byte {offset} "
                f"({invariant}); this recovery did not need those rows, a later replay, "
                "rescale or time travel will: 'cec recover --from-log "
                f"{self.root} --repair' reads them again from the source")

    # ------------------------------------------------------------------ drivers

    @property
    def drivers_dir(self) -> Path:
        return self.root / DRIVERS_DIR

    def driver_file(self, n: int) -> Path:
        """Driver ``n``'s record: its host, pid and start time."""
        return self.drivers_dir / f"{n:08d}"

    def take_driver(self) -> int:
        """A new driver number for this run: one more than any before, never reused;
        from the moment it is taken this process holds its lease (:meth:`driver_lease`,
        :mod:`cec_spark.rundir.lease`) until :meth:`end_driver` or its death."""
        while True:
            n = self.claim_driver(self.latest_driver())
            if n is not None:
                return n  # else another driver took it first: take the next

    def claim_driver(self, after: int) -> int | None:
        """Driver number ``after + 1`` (and its lease), or None when another process
        took it first: of several standbys racing to take over from a dead driver
        ``after``, exactly one wins (an exclusive hard link, as for ``run.toml``)."""
        self.drivers_dir.mkdir(exist_ok=True)
        info = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        n = after + 1
        try:
            write_durable(self.driver_file(n), json.dumps(info), exclusive=True)
        except FileExistsError:
            return None
        self._hold_driver(n)
        return n

    def _hold_driver(self, n: int) -> None:
        key = str(self.root)
        old = _DRIVER_LEASES.pop(key, None)
        if old is not None:  # this process's older driver of the run: superseded
            old[1].end("superseded", 2)
        _DRIVER_LEASES[key] = (n, Lease(self.driver_lease(n), {"driver": n}))

    def end_driver(self, n: int | None, outcome: str, code: int = 0, reason: str = "") -> None:
        """Driver ``n`` of this process ends by itself (``completed``, ``stopped``,
        ``failed``, ``superseded``): say so in its lease and let go of it."""
        held = _DRIVER_LEASES.get(str(self.root))
        if n is not None and held is not None and held[0] == n:
            del _DRIVER_LEASES[str(self.root)]
            held[1].end(outcome, code, reason)

    def driver_lease(self, n: int) -> Path:
        """Driver ``n``'s lease (:mod:`cec_spark.rundir.lease`)."""
        return self.drivers_dir / f"{n:08d}.live"

    @property
    def standbys_dir(self) -> Path:
        """``RUN/standbys/``: one lease per ``cec standby`` watching this run."""
        return self.root / STANDBYS_DIR

    def standby_lease(self, host: str, pid: int) -> Path:
        """The lease of standby ``host``/``pid``."""
        return self.standbys_dir / f"{host}-{pid}.live"

    def standbys(self) -> list[dict[str, Any]]:
        """The standbys of this run that are alive now (their lease beat within
        :data:`DEFAULT_LEASE_S` of this host's clock, or their pid lives here), with
        their ``state`` (``warming``, ``ready``, ``taking over``)."""
        try:
            names = sorted(os.listdir(self.standbys_dir))
        except OSError:
            return []
        found = []
        for name in names:
            if not name.endswith(".live"):
                continue
            rec = read_lease(self.standbys_dir / name)
            if rec is None or rec.get("ended"):
                continue
            fresh = time.time() - float(rec.get("at", 0)) <= DEFAULT_LEASE_S
            if same_machine(rec):
                fresh = pid_alive(int(rec.get("pid", -1)), rec.get("start")) and (
                    fresh or lock_state(self.standbys_dir / name) == "held")
            if fresh:
                found.append(rec)
        return found

    def latest_driver(self) -> int:
        """The newest driver number (0: none yet, a run from before driver numbers)."""
        try:
            names = os.listdir(self.drivers_dir)
        except FileNotFoundError:
            return 0
        return max((int(n) for n in names if n.isdigit()), default=0)

    def driver_info(self, n: int) -> dict[str, Any]:
        try:
            raw = json.loads(self.driver_file(n).read_text(encoding="utf-8"))
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
        return self.root / CONSUMERS_DIR

    def consumer_file(self, consumer: str) -> Path:
        """What ``consumer`` acknowledged."""
        return self.consumers_dir / f"{consumer}.json"

    def consumer_intent(self, consumer: str) -> Path:
        """A ``cec tail --consumer`` batch in flight (cec_spark.read.tail)."""
        return self.consumers_dir / f"{consumer}.pending.json"

    def consumer_acks(self, p: int) -> list[int]:
        """Per registered consumer, the output seq of partition ``p`` (of the current
        generation) it acknowledged (-1: none yet). Unreadable ack files count as
        nothing acknowledged."""
        try:
            names = sorted(n for n in os.listdir(self.consumers_dir) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        key = ack_key(self.generation, p)
        return [self.read_ack(name[:-len(".json")]).get(key, -1) for name in names]

    def read_ack(self, consumer: str) -> dict[str, int]:
        """What ``consumer`` acknowledged: the last output seq per :func:`ack_key`."""
        try:
            raw = json.loads(self.consumer_file(consumer).read_text("utf-8"))
            return {str(k): int(v) for k, v in raw["partitions"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def write_ack(self, consumer: str, acks: dict[str, int]) -> None:
        self.consumers_dir.mkdir(exist_ok=True)
        write_durable(self.consumer_file(consumer),
                      json.dumps({"consumer": consumer, "acked_at": time.time(),
                                  "partitions": dict(acks)}))

    # ------------------------------------------------------------------ state files

    def write_state(self, p: int, state: dict[str, Any]) -> None:
        write_advisory(self.state_file(p), state)

    def read_state(self, p: int) -> dict[str, Any]:
        return read_advisory(self.state_file(p))


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


def rescaled_spec(spec: PipelineSpec, partitions: int) -> PipelineSpec:
    """``spec`` with ``partitions``; a stored master that was the default for the old
    partition count (``local[P+2,3]``) becomes the default for the new one."""
    master = spec.run.master
    if master == default_master(spec.run.partitions):
        master = None
    return replace(spec, run=replace(spec.run, partitions=partitions, master=master))


def ack_key(gen: int, p: int) -> str:
    """The name of a partition's output log in a consumer's acks: ``"3"`` in generation
    0 (as before rescales existed), ``"g1/3"`` in generation 1."""
    return str(p) if gen == 0 else f"g{gen}/{p}"
