"""What a partition's recovery did: the ``recovery`` layer's own classes, read back.

The facts (footprints, extent, replay, phases, rates) are declared once, where the
recovery computes them, with the docstring under each field that ``docs/JSON.md``
shows: :class:`recovery.explain.RecoveryExplain` and its parts
(:class:`~recovery.checkpoint.Footprint`, :class:`~recovery.checkpoint.ExtentMetrics`,
:class:`~recovery.upstream.ReplayStats`, :class:`~recovery.explain.Phase`,
:class:`~recovery.explain.RateModel`). A task's explain crosses from the executor to
the driver as JSON; :func:`recovery_of` reads it back.
"""

from __future__ import annotations

from typing import Any

from recovery.explain import RecoveryExplain


def recovery_of(raw: dict[str, Any] | None) -> RecoveryExplain | None:
    """A task's recovery from its JSON (``RecoveryExplain.to_dict``); None stays None."""
    return None if raw is None else RecoveryExplain.from_dict(raw)
