"""The one error tree (docs/ARCHITECTURE.md §8, :mod:`cec.errors`).

Every exception class declared in ``storage_log``, ``cec``, ``recovery`` and
``cec_spark`` is found by importing every module; each one a user can meet is a
:class:`~cec.errors.CecError`, declared in its package's ``errors`` module, with an
exit status of the documented table, declared once (on the class that introduces it).
The internal ones, named here, say in their docstring why they never reach a user; a
private class (``_Name``) is internal to its module by its name, and says in its
docstring what it becomes.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import cec.errors
import storage_log.errors
from cec.errors import EXIT_STATUSES, CecError, CorruptionError, UsageError

LAYERS = ("storage_log", "cec", "recovery", "cec_spark")
ERROR_MODULES = {f"{layer}.errors" for layer in LAYERS}
# exceptions that never reach a user: caught and turned into a CecError (or a rebuilt
# cache) by their callers; each docstring says why it is not a CecError
INTERNAL = {"storage_log.framing.FrameError", "storage_log.index.IndexCorrupt",
            "cec.spec.values.Problem", "cec_spark.source.times.TimeValueError"}


def _modules() -> Iterator[str]:
    for layer in LAYERS:
        yield layer
        package = importlib.import_module(layer)
        for info in pkgutil.walk_packages(package.__path__, f"{layer}."):
            if not info.name.endswith("__main__"):  # a program: it would run the CLI
                yield info.name


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class declared (not imported) in a module of the four layers."""
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, BaseException)
                    and obj.__module__ == name):
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


CLASSES = _exception_classes()
PRIVATE = {name for name, cls in CLASSES.items() if cls.__name__.startswith("_")}
USER_FACING = {name: cls for name, cls in CLASSES.items()
               if name not in INTERNAL and name not in PRIVATE}


def test_the_walk_finds_every_error_module_and_the_internal_ones() -> None:
    modules = {cls.__module__ for cls in USER_FACING.values()}
    assert modules == ERROR_MODULES, modules
    assert set(CLASSES) >= INTERNAL
    assert len(USER_FACING) >= 27, sorted(USER_FACING)  # 27 when this was written


@pytest.mark.parametrize("name", sorted(USER_FACING))
def test_a_user_facing_error_is_under_the_root_with_a_documented_exit_status(
        name: str) -> None:
    cls = USER_FACING[name]
    assert issubclass(cls, CecError), f"{name} is not under cec.errors.CecError"
    assert cls.__module__ in ERROR_MODULES, f"{name}: declare it in its package's errors"
    assert cls.exit_code in EXIT_STATUSES and cls.exit_code not in (0, 130), name
    # the tree in cec.errors' docstring names every class (the one place it is drawn)
    assert cls.__name__ in (cec.errors.__doc__ or ""), f"{name} missing from the tree"


@pytest.mark.parametrize("name", sorted(USER_FACING))
def test_an_exit_status_is_declared_once(name: str) -> None:
    """A class declares ``exit_code`` only where it changes it; the rest inherit it."""
    cls = USER_FACING[name]
    if "exit_code" not in vars(cls):
        return
    inherited = next((vars(base)["exit_code"] for base in cls.__mro__[1:]
                      if "exit_code" in vars(base)), None)
    assert inherited != vars(cls)["exit_code"], f"{name} repeats its parent's exit_code"


@pytest.mark.parametrize("name", sorted(INTERNAL))
def test_an_internal_exception_says_why_it_is_no_user_error(name: str) -> None:
    cls = CLASSES[name]
    assert not issubclass(cls, CecError), name
    assert "internal" in (cls.__doc__ or "").lower(), f"{name}: say why it is internal"


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_a_private_exception_says_what_it_becomes(name: str) -> None:
    assert not issubclass(CLASSES[name], CecError), f"{name}: a CecError is public"
    assert (CLASSES[name].__doc__ or "").strip(), f"{name}: say what it becomes"


def test_one_root_with_its_documented_home() -> None:
    assert cec.errors.CecError is storage_log.errors.CecError
    assert cec.errors.UsageError is storage_log.errors.UsageError
    # a bad call to the log is a usage error like a bad spec; a damaged log is damage
    assert issubclass(storage_log.errors.LogUsageError, UsageError)
    assert issubclass(storage_log.errors.CorruptLogError, CorruptionError)
    assert not issubclass(storage_log.errors.LogWriteError, CorruptionError)
    assert storage_log.errors.LogWriteError.exit_code == 3
    assert storage_log.errors.StorageLogError.exit_code == 1
