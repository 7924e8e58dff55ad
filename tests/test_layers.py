"""The import contract: the layers of the design, bottom to top, and no arrow runs up.

``storage_log`` (the persistent log) → ``cec`` (records, windows, operators, policy,
spec: no Spark) → ``recovery`` (EC rebuild, replay) → ``cec_spark`` (the Spark runtime:
ingest, tasks, session, progress, and the library functions of the commands) → ``cli``
→ ``pyspark_cec`` (Spark's discovery of the ``cec`` data source: nothing imports it).
A module may import its own layer and the layers below it, never one above; every
``import`` counts, also one inside a function. The core layers must not import Spark.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("storage_log", "cec", "recovery", "cec_spark", "cli", "pyspark_cec")
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


MAX_LINES = 500  # issue 36: one job a module; one over 400 lines is split where it holds two


def test_no_library_module_is_over_500_lines() -> None:
    """Every module of the library layers is at most :data:`MAX_LINES` lines long; the
    message names each one over it with its line count."""
    over = [f"{path.relative_to(REPO)}: {lines} lines" for layer in LAYERS
            for path in _modules(layer)
            if (lines := len(path.read_text().splitlines())) > MAX_LINES]
    assert not over, (f"library modules over {MAX_LINES} lines (split each by its jobs):\n"
                      + "\n".join(over))


# The runtime's packages, bottom to top (cec_spark/__init__ says why): a module of one
# may import its own package, the ones before it here and the base modules, never one
# after it. ``api`` is the package at the top.
RUNTIME = ("report", "source", "rundir", "run", "ingest", "driver", "recover", "read",
           "standby", "api")
RUNTIME_BASE = {"errors", "watchdog"}


def _runtime_part(dotted: str) -> str | None:
    """The runtime package (or base module) a dotted cec_spark module belongs to."""
    parts = dotted.split(".")
    if parts[0] != "cec_spark" or len(parts) < 2:
        return None
    return parts[1]


def _runtime_imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "cec_spark":
                out += [(node.lineno, f"cec_spark.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def test_runtime_packages_import_downward() -> None:
    wrong = []
    for path in sorted((REPO / "cec_spark").rglob("*.py")):
        rel = path.relative_to(REPO)
        if rel.name == "__init__.py" and rel.parent.name == "cec_spark":
            continue  # the front page loads the API lazily
        here = _runtime_part(".".join(rel.with_suffix("").parts))
        assert here is not None
        for line, mod in _runtime_imports(path):
            there = _runtime_part(mod)
            if there is None or there in RUNTIME_BASE or there == here:
                continue
            if here in RUNTIME_BASE:
                wrong.append(f"{rel}:{line} (a base module) imports {mod}")
            elif there not in RUNTIME or RUNTIME.index(there) > RUNTIME.index(here):
                wrong.append(f"{rel}:{line} imports {mod} ({there} is above {here})")
    assert not wrong, "runtime packages must import downward:\n" + "\n".join(wrong)


def test_runtime_packages_have_front_pages() -> None:
    """Every runtime package's __init__ says what it owns and imports nothing (an
    executor importing one module must not load the driver's machinery)."""
    for name in RUNTIME[:-1]:
        init = REPO / "cec_spark" / name / "__init__.py"
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree) or ""
        assert "First read" in doc or "first read" in doc, f"{init}: no front page"
        if name != "report":  # report re-exports its small dataclass modules
            assert not [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
                        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")], init


@pytest.mark.parametrize("package", ["cec_spark/api", "cec_spark/driver", "cec_spark/recover",
                                     "cec_spark/report", "cec_spark/read", "cec_spark/rundir",
                                     "recovery"])
def test_no_import_circle_inside(package: str) -> None:
    """No two modules of a package import each other, directly or around a circle
    (every import counts, also one inside a function or under TYPE_CHECKING): the
    builder and the commands of ``api`` once did, and ``rundir``'s layout with the
    modules it called into."""
    folder = REPO / package
    dotted = ".".join(folder.relative_to(REPO).parts)
    mods = {f"{dotted}.{p.stem}": p for p in folder.glob("*.py") if p.stem != "__init__"}
    def imported(path: Path) -> set[str]:  # a module, or a module imported from a package
        out = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        return out

    graph = {name: {m for m in imported(path) if m in mods and m != name}
             for name, path in mods.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start] - seen:
            seen.add(nxt)
            if nxt == goal or reaches(nxt, goal, seen):
                return True
        return False

    circles = sorted(name for name in mods if reaches(name, name, set()))
    assert not circles, f"modules on an import circle: {circles}"


@pytest.mark.parametrize("package", [*(f"cec_spark/{n}" for n in RUNTIME), "cec_spark",
                                     "recovery", "storage_log", "cec", "cec/operator",
                                     "cec/spec", "cli"])
def test_front_pages_list_every_module(package: str) -> None:
    """A package's front page names each of its modules and sub-packages (as ``name``,
    ``name.py``, ``name/`` or :mod:`...name`), so a module added or moved is said
    where a reader starts."""
    folder = REPO / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    names = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    names += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    missing = [n for n in sorted(names)
               if not any(form in doc for form in (f"``{n}``", f"``{n}.py``", f"``{n}/``",
                                                    f".{n}`"))]
    assert not missing, f"{package}/__init__.py does not name {missing}"


def test_the_driver_jvm_log_configuration_is_where_the_session_points() -> None:
    """The log4j2 file the driver JVM is given sits beside run/session.py and ships in
    the wheel (moving session.py once left it behind: the JVM then printed its own
    start-up noise)."""
    import configparser

    from cec_spark.run.session import LOG4J

    assert LOG4J.is_file(), LOG4J
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    package = ".".join(LOG4J.parent.relative_to(REPO).parts)
    assert cfg["options.package_data"][package].strip() == LOG4J.name


# The run directory's entries (cec_spark/rundir/layout.py's map): a path under a run
# directory is built in cec_spark/rundir/ and nowhere else in the library.
def _run_dir_names() -> set[str]:
    """Every entry name the map defines: its folders and each upper-case name constant
    of ``layout`` (``RUN_FILE``, ``SOURCE_PLAN_FILE``, ``RTO_FILE`` ...), so that an
    entry added to the map is checked without a change here."""
    from cec_spark.rundir import layout

    names = {v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)}
    assert {"run.toml", "generations.toml", "STOP", "state"} <= names | layout.FOLDERS
    return {*layout.FOLDERS, *names}


# The numbered and suffixed entries of the map, written as f-strings: ``pNNNN``,
# ``gNNNN``, ``qNNNN-pNNNN.arrow`` (``:04d``), ``drivers/NNNNNNNN`` (``:08d``), and the
# names ending as its files do (``H-PID.live``, ``H-PID.hot``, ``pNNNN.json``,
# ``H-PID.txt``, ``NAME.pending.json``).
RUN_DIR_NUMBERS = {"04d", "08d"}
RUN_DIR_SUFFIXES = (".json", ".live", ".hot", ".txt")


def _run_dir_fstring(node: ast.JoinedStr) -> bool:
    """An f-string that names a numbered or suffixed entry of the run directory."""
    specs = {"".join(str(c.value) for c in v.format_spec.values
                     if isinstance(c, ast.Constant))
             for v in node.values
             if isinstance(v, ast.FormattedValue) and isinstance(v.format_spec, ast.JoinedStr)}
    last = node.values[-1] if node.values else None
    tail = last.value if isinstance(last, ast.Constant) and isinstance(last.value, str) else ""
    return bool(specs & RUN_DIR_NUMBERS) or tail.endswith(RUN_DIR_SUFFIXES)


def _paths_built(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each ``x / "name"``, ``"name" / x``, ``x.joinpath("name")``,
    ``Path(x, "name")`` or ``os.path.join(x, "name")`` with ``name`` a run-directory
    entry, or an f-string such as ``f"p{p:04d}.json"`` (:func:`_run_dir_fstring`)."""
    def entry(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in names:
            return node.value
        if isinstance(node, ast.JoinedStr) and _run_dir_fstring(node):
            return ast.unparse(node)
        return None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [(node.lineno, n) for n in (entry(node.left), entry(node.right)) if n]
        elif isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if called in ("joinpath", "Path", "PurePath", "join"):
                found += [(node.lineno, n) for n in map(entry, node.args) if n]
    return found


def test_the_run_directory_map_finds_hand_built_paths() -> None:
    """The check below sees each way of joining an entry name onto a path."""
    code = ('root / "STOP"; "state" / x; root.joinpath("drivers"); Path(root, "run.toml")\n'
            'os.path.join(root, "consumers"); root / "elsewhere"; f(root, "state")\n'
            'go.parent / f"p{p:04d}.json"; d / f"{n:08d}"; d / f"{host}-{pid}.live"\n'
            'd / f"jvm-{key}.jsa"; d / f"run-{n:06d}.arrow"; d / f".{name}.{pid}.tmp"')
    got = _paths_built(ast.parse(code), _run_dir_names())
    assert got == [(1, "STOP"), (1, "state"), (1, "drivers"), (1, "run.toml"),
                   (2, "consumers"), (3, "f'p{p:04d}.json'"), (3, "f'{n:08d}'"),
                   (3, "f'{host}-{pid}.live'")]


def test_run_directory_paths_are_built_in_rundir_only() -> None:
    """Every path under a run directory comes from :class:`RunLayout` (its docstring is
    the one map): no library module outside ``cec_spark/rundir/`` joins an entry name of
    the run directory (``"state"``, ``"STOP"``, ``"run.toml"`` ...) onto a path."""
    names = _run_dir_names()
    wrong = [f"{path.relative_to(REPO)}:{line} builds RUN/{name} by hand"
             for layer in ("cec_spark", "cli") for path in _modules(layer)
             if "rundir" not in path.relative_to(REPO).parts
             for line, name in _paths_built(ast.parse(path.read_text(), str(path)), names)]
    assert not wrong, "use the RunLayout's paths (cec_spark/rundir/layout.py):\n" + \
        "\n".join(wrong)


# A name with one leading underscore is its module's own: no library module imports one
# from another library module (make it public where it is used across modules, or move
# the code). An exception would be listed here, "importer.py: module._name", with why;
# there is none.
PRIVATE_IMPORTS_ALLOWED: set[str] = set()


def _private_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, "module._name") of each ``from X import _name`` (one leading underscore,
    not a dunder) with X a module of the library layers, or a relative import."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = "." * node.level + (node.module or "")
        if node.level == 0 and module.split(".")[0] not in LAYERS:
            continue
        found += [(node.lineno, f"{module}.{a.name}") for a in node.names
                  if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_the_private_import_check_finds_them() -> None:
    code = ("from cec_spark.ingest.writer import _UpstreamWriter, chunk_writer\n"
            "from .check import _plan_file\nfrom os import _exit\n"
            "from cec import __version__\nimport cec_spark._private\n"
            "def f():\n    from recovery.ec import _footprints")
    assert _private_imports(ast.parse(code)) == [
        (1, "cec_spark.ingest.writer._UpstreamWriter"), (2, ".check._plan_file"),
        (7, "recovery.ec._footprints")]


def test_no_library_module_imports_a_private_name_of_another() -> None:
    """No module of the library layers imports another library module's underscore
    name (:data:`PRIVATE_IMPORTS_ALLOWED` lists the exceptions: none)."""
    wrong = [f"{rel}:{line} imports {name}"
             for layer in LAYERS for path in _modules(layer)
             for rel in [path.relative_to(REPO)]
             for line, name in _private_imports(ast.parse(path.read_text(), str(path)))
             if f"{rel}: {name}" not in PRIVATE_IMPORTS_ALLOWED]
    assert not wrong, ("private names imported across modules (make them public where "
                       "they are used, or move the code):\n" + "\n".join(wrong))
