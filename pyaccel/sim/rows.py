"""Distinct rows of a run's per-step arrays (steps x columns): consecutive steps often repeat,
so the repeats are dropped before the sort."""

from __future__ import annotations

from typing import Any


def unique_rows(rows) -> tuple[Any, Any]:
    """``numpy.unique(rows, axis=0, return_inverse=True)`` of a steps x columns int array
    whose consecutive rows often repeat (a run's steps): the repeats are dropped before the
    sort. Returns (the distinct rows, sorted; each row's index among them)."""
    import numpy as np

    if not len(rows):
        return rows[:0], np.zeros(0, dtype=np.int64)
    change = np.r_[True, (rows[1:] != rows[:-1]).any(axis=1)]
    distinct, which = np.unique(rows[change], axis=0, return_inverse=True)
    return distinct, which.ravel()[np.cumsum(change) - 1]
