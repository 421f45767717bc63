"""Numba twin of :mod:`pyaccel.kernels.reference_pipeline` (``cache=True``)."""

from __future__ import annotations

import numba
import numpy as np

from . import checks


@numba.njit(cache=True)
def _rounds(occ, busy, lat, rounds, finish):  # pragma: no cover - compiled
    n_micro, n_stages = occ.shape
    stage_free = np.zeros(n_stages, dtype=np.int64)
    link_free = np.zeros(n_stages, dtype=np.int64)
    ready = np.zeros(n_micro, dtype=np.int64)
    for r in range(rounds):
        for m in range(n_micro):
            t = ready[m]
            for s in range(n_stages):
                if s > 0 or r > 0:
                    start = max(t, link_free[s])
                    link_free[s] = start + busy[m, s]
                    t = link_free[s] + lat[m, s]
                start = max(t, stage_free[s])
                stage_free[s] = start + occ[m, s]
                t = stage_free[s]
            finish[r, m] = t
            ready[m] = t


def micro_batch_rounds(occ, busy, lat, rounds):
    """Numba twin of :func:`pyaccel.kernels.reference_pipeline.micro_batch_rounds`."""
    checks.micro_batch_rounds(occ, busy, lat, rounds)
    arrs = [np.ascontiguousarray(a, dtype=np.int64) for a in (occ, busy, lat)]
    finish = np.zeros((int(rounds), arrs[0].shape[0]), dtype=np.int64)
    _rounds(*arrs, np.int64(rounds), finish)
    return finish
