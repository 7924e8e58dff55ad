"""Small helpers shared by the paper's experiments: a log callback type and a median."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def median(values: Sequence[float]) -> float:
    vals = [float(v) for v in values if not math.isnan(float(v))]
    return statistics.median(vals) if vals else float("nan")
