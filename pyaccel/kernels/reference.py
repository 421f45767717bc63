"""Plain NumPy/Python versions of every kernel: the executable specification the fast ones match."""

from __future__ import annotations

import numpy as np

from . import checks


def interval_union(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length covered by the union of half-open intervals ``[starts[i], ends[i])`` (int64 cycles),
    given sorted by start. Empty intervals (end <= start) cover nothing."""
    checks.interval_union(starts, ends)
    covered: list[list[int]] = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e <= s:
            continue
        if covered and s <= covered[-1][1]:
            covered[-1][1] = max(covered[-1][1], e)
        else:
            covered.append([s, e])
    return sum(e - s for s, e in covered)
