"""How one value of a spec file is checked: by hand, with the messages the spec gives.

A check is a pydantic validator (a ``BeforeValidator`` or a plain function one is made
of) that nothing coerces: ``1`` is not ``true``, ``"4"`` is not ``4``. Its problem is a
:class:`Problem`. :mod:`cec.spec.tables` puts these checks on the fields of each table
(and checks what involves several fields there).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator

__all__ = ["OptText", "Problem", "Text", "boolean", "choice", "inline_table", "integer",
           "number", "spark_settings", "string"]


class Problem(ValueError):
    """A problem a validator found; ``fields`` continue pydantic's ``loc`` (a check on a
    whole table names the field it is about).

    Internal, so a ``ValueError`` and not a :class:`~cec.errors.CecError`: pydantic
    turns a ``ValueError`` raised in a validator into its ``ValidationError``, which
    :mod:`cec.spec.parse` turns into the one :class:`~cec.errors.SpecError` a user sees
    (naming the file and the field)."""

    def __init__(self, message: str, *fields: str) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


def string(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Problem(f"must be a non-empty string, got {value!r}")
    return value


def integer(minimum: int | None = None, maximum: int | None = None) -> BeforeValidator:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Problem(f"must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise Problem(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise Problem(f"must be <= {maximum}, got {value}")
        return value
    return BeforeValidator(check)


def number(*, positive: bool = True) -> BeforeValidator:
    """A finite number; positive, or (``positive=False``) >= 0."""
    def check(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Problem(f"must be a number, got {value!r}")
        if not math.isfinite(value) or (positive and value <= 0):
            raise Problem(f"must be a positive number, got {value!r}")
        if value < 0:
            raise Problem(f"must be >= 0, got {float(value)!r}")
        return float(value)
    return BeforeValidator(check)


def choice(choices: tuple[str, ...], *, of_strings: bool = True) -> BeforeValidator:
    """One of ``choices``; ``of_strings``: a value that is no string is told so first."""
    def check(value: object) -> str:
        if of_strings:
            string(value)
        if value not in choices:
            raise Problem(f"{value!r} is not one of {'|'.join(choices)}")
        return str(value)
    return BeforeValidator(check)


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise Problem(f"must be true or false, got {value!r}")
    return value


def inline_table(value: object) -> object:
    if not isinstance(value, dict):
        raise Problem('must be an inline table like { kind = "count", size = 10 }')
    return value


def spark_settings(value: object) -> tuple[tuple[str, str], ...]:
    """``[run.spark]``: Spark settings; dotted keys may be quoted or written as TOML dotted
    keys (``spark.driver.memory = "4g"`` is the same setting)."""
    if not isinstance(value, dict):
        raise Problem(f"must be a table, got {value!r}")
    flat: dict[str, str] = {}

    def walk(prefix: str, item: Any) -> None:
        if isinstance(item, dict):
            for k, v in item.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        if not prefix.startswith("spark."):
            raise Problem("not a Spark setting (Spark settings start with 'spark.'; "
                          'quote the key: "spark.driver.memory" = "4g")', prefix)
        if isinstance(item, bool):
            flat[prefix] = "true" if item else "false"
        elif isinstance(item, int | float | str):
            flat[prefix] = str(item)
        else:
            raise Problem(f"must be a string, number or boolean, got {item!r}", prefix)

    walk("", value)
    return tuple(flat.items())


Text = Annotated[str, BeforeValidator(string)]
OptText = Annotated[str | None, BeforeValidator(string)]
