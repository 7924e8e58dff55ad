"""What every report shares: pydantic reads each field's docstring; wall clocks as µs."""

from __future__ import annotations

from dataclasses import dataclass

# pydantic (used by cli/schema.py only, never at run time) reads each field's docstring:
# the one setting, declared where the recovery's results are (recovery.checkpoint)
from recovery.checkpoint import JSON_DOCS

__all__ = ["JSON_DOCS", "ErrorReport", "now_us"]


def now_us(wall_s: float | None) -> int | None:
    """A ``time.time()`` wall clock value as int64 microseconds."""
    return None if wall_s is None else round(wall_s * 1e6)




@dataclass(frozen=True)
class ErrorReport:
    """Any command given ``--json`` that fails: one line of JSON on stderr, nothing on
    stdout, and the exit status (2, 3, 4 or 5) of the error."""

    __pydantic_config__ = JSON_DOCS
    error: str
    """What is wrong, naming the file, offset, field, partition or host (the same
    sentence the command prints without --json)."""
    exit_code: int
    """The process exit status."""
    kind: str
    """The error's class, e.g. SpecError, CorruptLogError, RecoveryError."""

