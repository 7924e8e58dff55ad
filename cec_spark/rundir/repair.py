"""``cec recover --repair`` on a run directory's small files, and the advice a recovery
gives about damage it did not need to read.

The small files (``run.toml``, ``generations.toml``) each have a copy written beside
them (``.bak``); :func:`repair_files` puts back whichever of a pair is damaged from the
other, and fails (CorruptionError, exit 3) only when both are. The logs repair
themselves on their first writable open (storage_log's reconcile); what that open did
not read is checked by :func:`unneeded_damage`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cec_spark.rundir.generations import restore_generations
from cec_spark.rundir.run_file import refresh_backup, restore_run_file
from storage_log.reconcile import first_damage

if TYPE_CHECKING:
    from cec_spark.rundir.layout import RunLayout

__all__ = ["repair_files", "unneeded_damage"]


def repair_files(layout: RunLayout) -> list[str]:
    """``--repair``: put back the run's damaged small files from their copies
    (run.toml, generations.toml and their backups); what was done. CorruptionError
    when a file and its backup are both damaged."""
    done = [restore_run_file(layout)]
    done += [what for what in (refresh_backup(layout), _restore_generations(layout))
             if what is not None]
    return done


def _restore_generations(layout: RunLayout) -> str | None:
    done = restore_generations(layout.generations_file, layout.generations_backup)
    if done is not None:
        layout.forget_generations()
    return done


def unneeded_damage(layout: RunLayout, p: int, opened: Any) -> str | None:
    """What to say when partition ``p``'s upstream log is damaged where this recovery
    did not read it (None: it is not, or it was read).

    ``opened``: the ReconcileReport of the recovery's first writable open of the log.
    An open that rebuilt the index (a new host, the index removed) trusted the
    segments' side-files instead of reading them, so their frames are read here
    (checksums only): a later replay, rescale or time travel will need them.
    """
    if opened is None or not opened.rebuilt:
        return None
    bad = first_damage(layout.upstream(p))
    if bad is None:
        return None
    segment, offset, invariant = bad
    return (f"partition {p}: the upstream log is damaged at {segment} byte {offset} "
            f"({invariant}); this recovery did not need those rows, a later replay, "
            "rescale or time travel will: 'cec recover --from-log "
            f"{layout.root} --repair' reads them again from the source")
