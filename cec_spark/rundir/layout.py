"""The run directory (ARCHITECTURE §6): the one map of every path under it.

Every path under a run directory is built here (``tests/test_layers.py`` checks that no
other library module joins a run directory's entry name onto a path):

::

    RUN/
      run.toml             the resolved spec + a [cec] table of run settings + checksum
      run.toml.bak         its copy (cec recover --repair restores run.toml from it)
      source_files.json    the fingerprint of the bounded source a resumed ingest read
                           (cec_spark.source.fingerprint; before one: run.toml's)
      source_plan.json     the chunks of the bounded source the ingest reads, with its
                           files' sizes and times (cec_spark.source.stored)
      generations.toml     after a rescale (cec recover --partitions P'): the run's
                           generations; generation g >= 1 keeps its logs in
                           upstream/gNNNN/pNNNN, output/gNNNN/pNNNN, state/gNNNN/
      generations.toml.bak its copy (cec recover --repair restores it from it)
      upstream/p0000/      storage_log: partition 0's input stream (the ingest writes it)
      output/p0000/        storage_log: partition 0's operator output
      state/p0000.json     the operator task's live counters (progress display only)
      state/ingest.json    the stream-dir ingest task's figures (progress display only;
                           state/ingest.W.json of each task W when several ingest);
                           from generation 1 on both are in state/gNNNN/
      state/rto.json       the recovery-time objective's fixed cost and catch-up target
                           (the driver writes it, the tasks read it: cec_spark.run.rto)
      state/takeover.json  a standby's takeover timings (cec_spark.standby.standby)
      STOP                 present while a clean stop is requested (Ctrl-C)
      drivers/00000001     one file per driver that ran the run (cec run, cec recover,
                           a standby taking over), and 00000001.live: its lease
      standbys/H-PID.live  the lease of each `cec standby` watching the run
      standbys/H-PID.hot/  its hot operator tasks (hot_dir): go, their release
                           (standby_release), and pNNNN.json, how far each has
                           followed its output log (hot_report)
      consumers/NAME.json  what `cec export --consumer NAME` acknowledged (retention),
                           and NAME.pending.json: a `cec tail`'s batch in flight
      source/              a DataFrame run's staged input (the Python API)
      watchdog/H-PID.txt   a driver's thread stacks when it made no progress
                           (cec_spark.watchdog)
      metrics/cec.prom     the Prometheus textfile of the run (cec_spark.run.metrics)
      standby.log          the messages of the standby `cec run --standby` started
      handover/gNNNN/      while a rescale to generation NNNN runs: each old
                           partition's open windows for each new partition
                           (qNNNN-pNNNN.arrow, Arrow IPC; cec_spark.recover.rescale),
                           removed once generations.toml names the new generation

Only the paths are here (and which generation is current, which the paths of the
logs and state files depend on). What the files hold and who writes them:
``run.toml`` :mod:`~cec_spark.rundir.run_file`, ``generations.toml``
:mod:`~cec_spark.rundir.generations`, ``drivers/`` and ``standbys/``
:mod:`~cec_spark.rundir.drivers` (their leases :mod:`~cec_spark.rundir.lease`),
``consumers/`` :mod:`~cec_spark.rundir.acks`, the ``state/`` files
:mod:`~cec_spark.rundir.advisory` (JSON that nothing depends on for correctness),
``--repair`` :mod:`~cec_spark.rundir.repair`, who may use the directory
:mod:`~cec_spark.rundir.access`.

The imports point one way: each of those modules takes a :class:`RunLayout` and
imports it (``drivers.take_driver(layout)``, ``run_file.read_run_file(layout)``); the
layout imports none of them but :mod:`~cec_spark.rundir.generations`, which takes
paths, not a layout, and reads which generation is current (it imports only
:mod:`~cec_spark.rundir.checksum`, the small files' checksum line).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from cec_spark.rundir.generations import (
    GENERATIONS_BACKUP,
    GENERATIONS_FILE,
    Generation,
    load_generations,
)

__all__ = ["BACKUP_FILE", "BEFORE_RUN_FILE", "FOLDERS", "RUN_FILE", "SOURCE_DIR", "RunLayout"]

RUN_FILE = "run.toml"
BACKUP_FILE = "run.toml.bak"
STOP_FILE = "STOP"
SOURCE_FILES_FILE = "source_files.json"
SOURCE_PLAN_FILE = "source_plan.json"
SOURCE_CHUNKS_DIR = "source_chunks"
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
HANDOVER_DIR = "handover"
INGEST_STATE_FILE = "ingest.json"  # in the current generation's state/
RTO_FILE = "rto.json"  # in state/
TAKEOVER_FILE = "takeover.json"  # in state/
FOLDERS = frozenset({UPSTREAM_DIR, OUTPUT_DIR, STATE_DIR, DRIVERS_DIR, STANDBYS_DIR,
                     CONSUMERS_DIR, SOURCE_DIR, WATCHDOG_DIR, METRICS_DIR, HANDOVER_DIR,
                     SOURCE_CHUNKS_DIR})
"""Every folder a run directory may hold."""
BEFORE_RUN_FILE = frozenset({STATE_DIR, SOURCE_DIR})
"""What a driver creates in a new run directory before its run.toml (the state folder,
the Python API's staged DataFrame); run.toml's own temporary file is hidden
(``.run.toml.HOST.PID.tmp``)."""


@dataclass(frozen=True)
class RunLayout:
    """The paths of the run directory ``root`` (module docstring)."""

    root: Path

    # ------------------------------------------------------------------ small files

    @property
    def run_file(self) -> Path:
        return self.root / RUN_FILE

    @property
    def backup_file(self) -> Path:
        return self.root / BACKUP_FILE

    @property
    def generations_file(self) -> Path:
        return self.root / GENERATIONS_FILE

    @property
    def generations_backup(self) -> Path:
        return self.root / GENERATIONS_BACKUP

    @property
    def stop_file(self) -> Path:
        return self.root / STOP_FILE

    def exists(self) -> bool:
        return self.run_file.exists()

    # ------------------------------------------------------------------ logs and state

    def upstream(self, p: int) -> Path:
        """Partition ``p``'s upstream log in the current generation."""
        return self.upstream_of(self.generation, p)

    def output(self, p: int) -> Path:
        """Partition ``p``'s output log in the current generation."""
        return self.output_of(self.generation, p)

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

    def handover_dir(self, gen: int) -> Path:
        """A rescale to generation ``gen``: the open windows in transit."""
        return self.root / HANDOVER_DIR / f"g{gen:04d}"

    def handover_file(self, gen: int, old: int, new: int) -> Path:
        """Old partition ``old``'s open windows for new partition ``new``."""
        return self.handover_dir(gen) / f"q{old:04d}-p{new:04d}.arrow"

    def _gen_dir(self, kind: str, gen: int) -> Path:
        return self.root / kind if gen == 0 else self.root / kind / f"g{gen:04d}"

    def state_file(self, p: int) -> Path:
        """Partition ``p``'s operator task's state file in the current generation."""
        return self.state_dir(self.generation) / f"p{p:04d}.json"

    @property
    def ingest_state_file(self) -> Path:
        """The stream-dir ingest task's state file in the current generation."""
        return self.state_dir(self.generation) / INGEST_STATE_FILE

    def ingest_writer_state_file(self, w: int, writers: int) -> Path:
        """Long-lived stream ingest task ``w``'s state file, of ``writers`` tasks (one:
        :attr:`ingest_state_file`; several: ``state/ingest.W.json``)."""
        if writers == 1:
            return self.ingest_state_file
        return self.state_dir(self.generation) / f"ingest.{w}.json"

    @property
    def rto_file(self) -> Path:
        """``state/rto.json``: the objective's fixed cost and catch-up target."""
        return self.root / STATE_DIR / RTO_FILE

    @property
    def takeover_file(self) -> Path:
        """``state/takeover.json``: the last standby takeover's timings."""
        return self.root / STATE_DIR / TAKEOVER_FILE

    # ------------------------------------------------------------------ drivers, readers

    @property
    def drivers_dir(self) -> Path:
        return self.root / DRIVERS_DIR

    def driver_file(self, n: int) -> Path:
        """Driver ``n``'s record: its host, pid and start time."""
        return self.drivers_dir / f"{n:08d}"

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

    def hot_dir(self, host: str, pid: int) -> Path:
        """``standbys/HOST-PID.hot/``: the folder of that standby's hot operator tasks
        (:mod:`cec_spark.standby.hot`), which they watch: their release and their
        follow reports."""
        return self.standbys_dir / f"{host}-{pid}.hot"

    def standby_release(self, host: str, pid: int) -> Path:
        """``standbys/HOST-PID.hot/go``: the release of that standby's hot operator
        tasks."""
        return self.hot_dir(host, pid) / "go"

    def hot_report(self, host: str, pid: int, p: int) -> Path:
        """``standbys/HOST-PID.hot/pNNNN.json``: how far that standby's hot operator task
        of partition ``p`` has followed its output log."""
        return self.hot_dir(host, pid) / f"p{p:04d}.json"

    @property
    def consumers_dir(self) -> Path:
        return self.root / CONSUMERS_DIR

    def consumer_file(self, consumer: str) -> Path:
        """What ``consumer`` acknowledged (:mod:`cec_spark.rundir.acks`)."""
        return self.consumers_dir / f"{consumer}.json"

    def consumer_intent(self, consumer: str) -> Path:
        """A ``cec tail --consumer`` batch in flight (cec_spark.read.tail)."""
        return self.consumers_dir / f"{consumer}.pending.json"

    # ------------------------------------------------------------------ beside the run

    @property
    def source_files_file(self) -> Path:
        """The fingerprint of the source a resumed ingest read (cec_spark.source.fingerprint)."""
        return self.root / SOURCE_FILES_FILE

    @property
    def source_plan_file(self) -> Path:
        """The stored chunk plan of a bounded source (cec_spark.source.stored)."""
        return self.root / SOURCE_PLAN_FILE

    @property
    def source_chunks_dir(self) -> Path:
        """The reports of the chunks of a source planned by bytes, one a chunk, written
        by the task that read it: its rows and digest (cec_spark.source.chunk_report)."""
        return self.root / SOURCE_CHUNKS_DIR

    def source_chunk_report(self, index: int) -> Path:
        """Chunk ``index``'s report in :attr:`source_chunks_dir`."""
        return self.source_chunks_dir / f"c{index:08d}.json"

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

    @cached_property
    def generations(self) -> tuple[Generation, ...]:
        """The run's generations, oldest first (empty: never rescaled, generation 0
        only, with run.toml's partitions). Read once per RunLayout object
        (:func:`cec_spark.rundir.generations.load_generations`: a damaged file is
        CorruptionError or RecoveryError)."""
        return load_generations(self.generations_file, self.generations_backup, self.root)

    def forget_generations(self) -> None:
        """Read the generations again at the next look (after a repair wrote them)."""
        self.__dict__.pop("generations", None)

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
