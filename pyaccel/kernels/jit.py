"""Numba versions of the kernels (``cache=True``, no fastmath); the only module importing numba."""

from __future__ import annotations

import numba
import numpy as np

from . import checks


@numba.njit(cache=True)
def _interval_union(starts, ends):  # pragma: no cover - compiled
    total = 0
    cur_s = 0
    cur_e = 0
    is_open = False
    for i in range(starts.shape[0]):
        s = starts[i]
        e = ends[i]
        if e <= s:
            continue
        if not is_open or s > cur_e:
            if is_open:
                total += cur_e - cur_s
            cur_s = s
            cur_e = e
            is_open = True
        elif e > cur_e:
            cur_e = e
    if is_open:
        total += cur_e - cur_s
    return total


def interval_union(starts: np.ndarray, ends: np.ndarray) -> int:
    """Numba twin of :func:`pyaccel.kernels.reference.interval_union`."""
    checks.interval_union(starts, ends)
    return int(_interval_union(starts, ends))
