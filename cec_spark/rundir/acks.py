"""Consumers' acknowledgements: what each ``cec export --consumer NAME`` (or ``cec tail
--consumer NAME``) has taken of the output, kept in ``RUN/consumers/NAME.json``.

The file is JSON, replaced whole and durably at each ack::

    {"consumer": NAME, "acked_at": UNIX_S, "partitions": {KEY: SEQ, ...}}

``KEY`` names an output log (:func:`ack_key`), ``SEQ`` the last output seq taken. The
operator tasks keep every output record after the lowest ack of their log (output
retention, :mod:`cec_spark.rundir.retention`).
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

from storage_log.durable import write_durable

if TYPE_CHECKING:
    from cec_spark.rundir.layout import RunLayout

__all__ = ["ack_key", "consumer_acks", "read_ack", "write_ack"]


def ack_key(gen: int, p: int) -> str:
    """The name of a partition's output log in a consumer's acks: ``"3"`` in generation
    0 (as before rescales existed), ``"g1/3"`` in generation 1."""
    return str(p) if gen == 0 else f"g{gen}/{p}"


def consumer_acks(layout: RunLayout, p: int) -> list[int]:
    """Per registered consumer, the output seq of partition ``p`` (of the current
    generation) it acknowledged (-1: none yet). Unreadable ack files count as nothing
    acknowledged."""
    try:
        names = sorted(n for n in os.listdir(layout.consumers_dir) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    key = ack_key(layout.generation, p)
    return [read_ack(layout, name[:-len(".json")]).get(key, -1) for name in names]


def read_ack(layout: RunLayout, consumer: str) -> dict[str, int]:
    """What ``consumer`` acknowledged: the last output seq per :func:`ack_key`."""
    try:
        raw = json.loads(layout.consumer_file(consumer).read_text("utf-8"))
        return {str(k): int(v) for k, v in raw["partitions"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def write_ack(layout: RunLayout, consumer: str, acks: dict[str, int]) -> None:
    layout.consumers_dir.mkdir(exist_ok=True)
    write_durable(layout.consumer_file(consumer),
                  json.dumps({"consumer": consumer, "acked_at": time.time(),
                              "partitions": dict(acks)}))
