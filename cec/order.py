"""Stable orders of integer arrays in linear time, where their range allows.

``np.argsort(kind="stable")`` sorts 8- and 16-bit integers by a counting (radix) sort
and wider ones by a merge sort. Keys whose range fits 16 bits (a partition number) or
32 bits (item ids) are ordered by one or two 16-bit passes instead: the same order, 3
to 6 times sooner on the hot paths that use it (the ingest's split of a batch by
partition, ``cec export``'s order by key). Pure: numpy only.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def stable_order(key: npt.NDArray[np.integer]) -> I64:
    """``np.argsort(key, kind="stable")`` for integers, by radix where their range fits
    32 bits: numpy sorts 16-bit integers by a counting sort, so two stable passes (low
    then high half) order a range of up to 2^32 in linear time. 3 M keys over 100 k
    ids: 0.13 s instead of 0.38 s."""
    if key.size < 2:
        return np.arange(key.size)
    lo, hi = int(key.min()), int(key.max())
    span = hi - lo
    if span >= 1 << 32:
        return np.argsort(key, kind="stable")
    k = key - np.array(lo, key.dtype) if lo else key
    if span < 1 << 8:
        return np.argsort(k.astype(np.uint8), kind="stable")
    if span < 1 << 16:
        return np.argsort(k.astype(np.uint16), kind="stable")
    k32 = k.astype(np.uint32)
    order = np.argsort((k32 & 0xFFFF).astype(np.uint16), kind="stable")
    high = (k32[order] >> 16).astype(np.uint16)
    return order[np.argsort(high, kind="stable")]
