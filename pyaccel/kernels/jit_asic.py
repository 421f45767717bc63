"""Numba version of the ASIC spatial-pipeline simulation (``cache=True``, no fastmath)."""

from __future__ import annotations

import numba
import numpy as np

from . import checks


@numba.njit(cache=True)
def _asic_pipeline(occ, lat, res, n_users, record, finish, starts, group, ex_layer, picks,
                   n_units):  # pragma: no cover  # fmt: skip
    n_steps, n_stages = occ.shape
    free = np.zeros(n_units, dtype=np.int64)
    ready = np.zeros(n_users, dtype=np.int64)
    r = 0
    for t in range(n_steps):
        rec = record[t]
        for u in range(n_users):
            tt = ready[u - u % group]
            for s in range(n_stages):
                i = ex_layer[s]
                start = tt
                if i < 0:
                    start = tt if tt > free[res[s]] else free[res[s]]
                else:
                    for j in range(picks.shape[3]):
                        unit = res[s] + picks[t, u, i, j]
                        start = start if start > free[unit] else free[unit]
                if rec:
                    starts[r, u, s] = start
                if i < 0:
                    free[res[s]] = start + occ[t, s]
                else:
                    for j in range(picks.shape[3]):
                        free[res[s] + picks[t, u, i, j]] = start + occ[t, s]
                tt = start + occ[t, s] + lat[s]
            finish[t, u] = tt
        for u in range(0, n_users, group):  # a sequence's rows all wait for its last one
            last = finish[t, u]
            for v in range(u + 1, min(u + group, n_users)):
                last = finish[t, v] if finish[t, v] > last else last
            ready[u] = last
        if rec:
            r += 1


def asic_pipeline(
    occ: np.ndarray,
    lat: np.ndarray,
    res: np.ndarray,
    n_users: int,
    record: np.ndarray,
    group: int = 1,
    routes=None,
):
    """Numba twin of :func:`pyaccel.kernels.reference_asic.asic_pipeline`."""
    occ = np.ascontiguousarray(occ, dtype=np.int64)
    lat = np.ascontiguousarray(lat, dtype=np.int64)
    res = np.ascontiguousarray(res, dtype=np.int64)
    record = np.ascontiguousarray(record, dtype=np.bool_)
    checks.asic_pipeline(occ, lat, res, n_users, record, group, routes)
    if routes is None:
        ex_layer = np.full(occ.shape[1], -1, dtype=np.int64)
        picks = np.zeros((0, 0, 0, 0), dtype=np.int64)
    else:
        ex_layer = np.ascontiguousarray(routes[0], dtype=np.int64)
        picks = np.ascontiguousarray(routes[1], dtype=np.int64)
    n_units = checks.asic_units(res, ex_layer, picks if routes is not None else None)
    finish = np.zeros((occ.shape[0], n_users), dtype=np.int64)
    starts = np.zeros((int(record.sum()), n_users, occ.shape[1]), dtype=np.int64)
    _asic_pipeline(occ, lat, res, int(n_users), record, finish, starts, int(group), ex_layer,
                   picks, n_units)  # fmt: skip
    return finish, starts
