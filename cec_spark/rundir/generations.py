"""``RUN/generations.toml``: the generations of a rescaled run (ARCHITECTURE §6).

Written once per rescale (``cec recover --partitions P'``), last, atomically, with a
copy (``generations.toml.bak``): its new text is the rescale's commit point. The text
is TOML signed like ``run.toml`` (an xxh64 checksum line, :mod:`checksum`); a damaged
file is CorruptionError (exit 3) and ``cec recover --repair`` restores it from its copy.

Below the layout: the functions here take the files' paths, and
:class:`~cec_spark.rundir.layout.RunLayout` reads the current generation through
:func:`load_generations`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from cec.errors import CorruptionError, RecoveryError
from cec_spark.rundir.checksum import (
    CHECKSUM_PREFIX,
    FORMAT_VERSION,
    check_run_text,
    sign_run_text,
)
from storage_log.durable import write_durable

GENERATIONS_FILE = "generations.toml"
GENERATIONS_BACKUP = "generations.toml.bak"


@dataclass(frozen=True)
class Generation:
    """One generation of a run: its partitions, from its start cut on.

    Generation 0 is the run as started (``run.toml``'s partitions). A rescale adds
    generation ``g``: its logs hold the results of the input after seq ``cut`` (every
    input at or before it is in generation ``g - 1``'s state and results), and
    ``previous_ends[q]`` is the last output seq of partition ``q`` of generation
    ``g - 1`` that belongs to the run (-1: none); rows after it (output of input after
    the cut, written before the rescale) are not results of the run.
    """

    gen: int
    partitions: int
    cut: int = -1
    chunk: int = -1  # the source chunk that ends at seq ``cut`` (-1: none)
    previous_ends: tuple[int, ...] = ()
    cut_ts: int = 0  # the handoff's ts: no input of this generation is older


def generations_text(gens: tuple[Generation, ...]) -> str:
    """The signed text of ``generations.toml``."""
    lines = ["# the generations of a rescaled run (cec recover --partitions); written once "
             "per rescale", f"format_version = {FORMAT_VERSION}", ""]
    for g in gens:
        lines += ["[[generation]]", f"gen = {g.gen}", f"partitions = {g.partitions}",
                  f"cut = {g.cut}", f"chunk = {g.chunk}",
                  f"previous_ends = [{', '.join(str(e) for e in g.previous_ends)}]",
                  f"cut_ts = {g.cut_ts}", ""]
    return sign_run_text("\n".join(lines))


def read_generations(path: Path) -> tuple[Generation, ...]:
    """The generations stored in ``path`` (none if it does not exist); a damaged file
    is CorruptionError (exit 3), naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptionError(f"{path}: cannot be read: {exc}") from exc
    bad = check_run_text(text, str(path))
    if bad is not None or CHECKSUM_PREFIX not in text:
        raise CorruptionError(f"{bad or f'{path}: no checksum line'}: the run's "
                              "generations (its rescales) cannot be trusted")
    try:
        raw = tomllib.loads(text)["generation"]
        gens = tuple(Generation(int(g["gen"]), int(g["partitions"]), int(g["cut"]),
                                int(g["chunk"]),
                                tuple(int(e) for e in g["previous_ends"]),
                                int(g.get("cut_ts", 0))) for g in raw)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptionError(f"{path}: damaged: {exc}") from exc
    for i, g in enumerate(gens):
        if g.gen != i or g.partitions < 1 or (i and len(g.previous_ends)
                                               != gens[i - 1].partitions):
            raise CorruptionError(f"{path}: generation {i} is inconsistent: {g}")
    return gens


def write_generations(path: Path, gens: tuple[Generation, ...]) -> None:
    write_durable(path, generations_text(gens))


def store_generations(main: Path, copy: Path, gens: tuple[Generation, ...]) -> None:
    """Store the generations durably (:func:`storage_log.durable.write_durable`) in
    ``main`` (``generations.toml``): the commit point of a rescale; then in its backup
    ``copy``."""
    write_generations(main, gens)
    write_generations(copy, gens)


def load_generations(main: Path, copy: Path, root: Path) -> tuple[Generation, ...]:
    """The generations of the run in ``root`` (``main``: its ``generations.toml``,
    ``copy``: the backup), oldest first (empty: never rescaled).

    A damaged ``generations.toml`` is CorruptionError (exit 3) naming ``cec recover
    --repair``, which restores it from its backup; with no intact backup it is
    RecoveryError (exit 4): the run's rescales are lost."""
    try:
        if not main.exists() and copy.exists():
            raise CorruptionError(f"{main} is missing (its backup is there: the run was "
                                  "rescaled)")
        return read_generations(main)
    except CorruptionError as exc:
        backup = backup_problem(copy)
        if backup is not None:
            raise RecoveryError(f"{exc}; {backup}: lost the run's rescales (which "
                                "generation holds which partitions from which input "
                                "seq on); its logs are intact under upstream/ and "
                                "output/") from exc
        raise CorruptionError(f"{exc}; 'cec recover --from-log {root} --repair' "
                              f"restores it from {GENERATIONS_BACKUP}") from exc


def backup_problem(copy: Path) -> str | None:
    """Why generations.toml.bak (``copy``) cannot stand in for generations.toml (None:
    it can)."""
    if not copy.exists():
        return f"its backup {copy} is missing"
    try:
        read_generations(copy)
    except CorruptionError as exc:
        return f"its backup is damaged too ({exc})"
    return None


def restore_generations(main: Path, copy: Path) -> str | None:
    """``--repair``: generations.toml (``main``) or its backup (``copy``), damaged,
    written again from the other; what was done (None: nothing to do)."""
    if not main.exists() and not copy.exists():
        return None
    try:
        if not main.exists():
            raise CorruptionError(f"{main} is missing")
        gens = read_generations(main)
    except CorruptionError as exc:
        backup = backup_problem(copy)
        if backup is not None:
            raise CorruptionError(f"{exc}; {backup}: the run's rescales are lost") from exc
        write_durable(main, copy.read_text(encoding="utf-8"))
        return f"restored {main} from {copy} ({exc})"
    if backup_problem(copy) is None and copy.read_bytes() == main.read_bytes():
        return None
    write_generations(copy, gens)
    return f"wrote {copy} again from {main}"
