"""The example pipelines shipped with cec (package data of ``cli/examples``).

``cec examples`` lists them; ``cec examples copy DIR`` copies them (specs, their data
and the README that documents every field) into a directory, refusing to overwrite a
file that is already there.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from cec.errors import UsageError

PACKAGE = "cli.examples"


@dataclass(frozen=True)
class Example:
    name: str  # the file name, e.g. items.toml
    summary: str  # the spec's opening comment, first line


def _root() -> Traversable:
    return resources.files(PACKAGE)


def _files() -> list[Traversable]:
    return sorted((f for f in _root().iterdir()
                   if f.is_file() and not f.name.startswith(("_", "."))),
                  key=lambda f: f.name)


def list_examples() -> list[Example]:
    """Every example spec (``*.toml``) with the first line of its opening comment."""
    out = []
    for f in _files():
        if not f.name.endswith(".toml"):
            continue
        text = f.read_text()
        tomllib.loads(text)  # a shipped example is always valid TOML
        first = next((line.lstrip("# ").strip() for line in text.splitlines()
                      if line.startswith("#")), "")
        out.append(Example(f.name, first))
    return out


def copy_examples(target: Path) -> list[Path]:
    """Copy every example file into ``target`` (created if missing); never overwrites."""
    target = target.expanduser()
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: not a directory")
    files = _files()
    clash = [target / f.name for f in files if (target / f.name).exists()]
    if clash:
        raise UsageError(f"{clash[0]}: already exists (cec examples copy never overwrites; "
                         "choose an empty directory)")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for f in files:
        with resources.as_file(f) as src:
            shutil.copyfile(src, target / f.name)
        written.append(target / f.name)
    return written
