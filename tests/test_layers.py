"""The import contract: the layers of the design, bottom to top, and no arrow runs up.

``storage_log`` (the persistent log) → ``cec`` (records, windows, operators, policy,
spec: no Spark) → ``recovery`` (EC rebuild, replay) → ``cec_spark`` (the Spark runtime:
ingest, tasks, session, progress, and the library functions of the commands) → ``cli``.
A module may import its own layer and the layers below it, never one above; every
``import`` counts, also one inside a function. The core layers must not import Spark.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("storage_log", "cec", "recovery", "cec_spark", "cli")
NO_SPARK = ("storage_log", "cec", "recovery")
# program entries, not library modules: nothing imports them
ENTRY_POINTS = {"cec/__main__.py"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def _modules(layer: str) -> list[Path]:
    return sorted((REPO / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_runs_up(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1:])
    wrong = [f"{path.relative_to(REPO)}:{line} imports {mod}"
             for path in _modules(layer) if str(path.relative_to(REPO)) not in ENTRY_POINTS
             for line, mod in _imports(path) if mod in above]
    assert not wrong, f"{layer} must not import a layer above it:\n" + "\n".join(wrong)


@pytest.mark.parametrize("layer", NO_SPARK)
def test_core_layers_do_not_import_spark(layer: str) -> None:
    wrong = [f"{path.relative_to(REPO)}:{line}" for path in _modules(layer)
             for line, mod in _imports(path) if mod in ("pyspark", "py4j")]
    assert not wrong, f"{layer} must run without Spark:\n" + "\n".join(wrong)


def test_every_package_is_a_layer() -> None:
    """A new top-level package must be placed in LAYERS (or be bench/tests/scripts)."""
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert packages - {"tests", "bench"} == set(LAYERS)


def test_the_wheel_holds_the_layers_and_nothing_else() -> None:
    """setup.cfg installs exactly the layers (not bench, not tests), each typed."""
    import configparser

    from setuptools import find_packages

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    include = cfg["options.packages.find"]["include"].split()
    found = find_packages(str(REPO), include=include)
    assert {p.split(".")[0] for p in found} == set(LAYERS)
    assert "cli.examples" in found  # the shipped examples are package data
    assert cfg["options.package_data"]["*"].strip() == "py.typed"
    for layer in LAYERS:
        assert (REPO / layer / "py.typed").is_file(), layer
