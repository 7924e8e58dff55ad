"""Who may use a run directory: a host that sees it (:func:`check_visible`, on each
executor before it writes) and a user who owns it (:func:`check_owner`, before a
resume runs its ``[filter]`` again)."""

from __future__ import annotations

import os
import socket
import tomllib
from typing import TYPE_CHECKING

from cec.errors import UsageError
from cec_spark.errors import RunNotVisibleError

if TYPE_CHECKING:
    from cec_spark.rundir.layout import RunLayout

__all__ = ["check_owner", "check_visible"]


def check_visible(layout: RunLayout, run_id: str | None) -> None:
    """On an executor: this host sees the run the driver created (same run id).

    Raises :class:`RunNotVisibleError` naming this host, the path and the cause.
    """
    root, run_file = layout.root, layout.run_file
    where = f"host {socket.gethostname()} (pid {os.getpid()}, cwd {os.getcwd()})"
    if not root.is_absolute():
        raise RunNotVisibleError(f"{where}: the run directory {root} is a relative "
                                 "path (the driver resolves it; is this an old driver?)")
    if not root.is_dir():
        raise RunNotVisibleError(f"{where}: cannot see the run directory {root} (is "
                                 "it on a file system every host mounts at that path?)")
    try:
        text = run_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise RunNotVisibleError(f"{where}: cannot read {run_file}: "
                                 f"{exc.strerror or exc}") from exc
    if run_id is None:
        return
    try:
        found = tomllib.loads(text).get("cec", {}).get("run_id")
    except tomllib.TOMLDecodeError as exc:
        raise RunNotVisibleError(f"{where}: {run_file} is damaged: {exc}") from exc
    if found != run_id:
        raise RunNotVisibleError(f"{where}: {run_file} belongs to run {found}, not "
                                 f"to this run {run_id} (another run in the same "
                                 "directory, or a host that sees a different directory "
                                 "at this path)")


def check_owner(layout: RunLayout, trust: bool) -> None:
    """A run directory is code (``[filter].where`` is Spark SQL that a resume runs
    again): refuse one whose run.toml another user owns, unless ``trust``."""
    if trust or not hasattr(os, "getuid"):
        return
    try:
        owner = layout.run_file.stat().st_uid
    except OSError:
        return  # read_run_file names what is missing
    if owner != os.getuid():
        raise UsageError(f"{layout.run_file} belongs to uid {owner}, not to you (uid "
                         f"{os.getuid()}): resuming a run executes its [filter] as Spark "
                         "SQL; pass --trust if you trust who wrote it")
