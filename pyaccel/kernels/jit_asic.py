"""Numba version of the ASIC spatial-pipeline simulation (``cache=True``, no fastmath)."""

from __future__ import annotations

import numba
import numpy as np

from . import checks
from .reference_asic import compact_occupancy, expert_units


@numba.njit(cache=True)
def _asic_pipeline(base, cols, col_of, lat, res, n_users, record, finish, starts, group,
                   ex_layer, picks, ex_unit, n_units, tail):  # pragma: no cover  # fmt: skip
    n_steps, n_stages = record.shape[0], base.shape[0]
    free = np.zeros(n_units, dtype=np.int64)
    ready = np.zeros(n_users, dtype=np.int64)
    r = 0
    for t in range(n_steps):
        rec = record[t]
        for u in range(n_users):
            tt = ready[u - u % group]
            at = t + u % group  # row j of a group: j positions on (its context j longer)
            stop = n_stages if u % group == group - 1 else tail
            if rec:
                for s in range(stop, n_stages):  # stages the row skips
                    starts[r, u, s] = -1
            for s in range(stop):
                i = ex_layer[s]
                start = tt
                busy = base[s] if col_of[s] < 0 else cols[at, col_of[s]]
                if i < 0:
                    for j in range(res.shape[1]):  # every unit the stage takes (-1: none)
                        unit = res[s, j]
                        if unit >= 0:
                            start = start if start > free[unit] else free[unit]
                else:
                    for j in range(picks.shape[3]):  # experts sharing a unit: same max
                        unit = ex_unit[s, picks[t, u, i, j]]
                        start = start if start > free[unit] else free[unit]
                if rec:
                    starts[r, u, s] = start
                if i < 0:
                    for j in range(res.shape[1]):
                        if res[s, j] >= 0:
                            free[res[s, j]] = start + busy
                else:
                    for j in range(picks.shape[3]):
                        free[ex_unit[s, picks[t, u, i, j]]] = start + busy
                tt = start + busy + lat[s]
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
    tail: int | None = None,
):
    """Numba twin of :func:`pyaccel.kernels.reference_asic.asic_pipeline`."""
    if not isinstance(occ, tuple):
        occ = np.ascontiguousarray(occ, dtype=np.int64)
    lat = np.ascontiguousarray(lat, dtype=np.int64)
    res = np.ascontiguousarray(res, dtype=np.int64)
    record = np.ascontiguousarray(record, dtype=np.bool_)
    checks.asic_pipeline(occ, lat, res, n_users, record, group, routes, tail)
    ex_layer, picks, ex_unit = expert_units(res, routes)
    n_units = checks.asic_units(res, ex_layer, picks, ex_unit)
    ex_layer = np.ascontiguousarray(ex_layer, dtype=np.int64)
    ex_unit = np.ascontiguousarray(ex_unit, dtype=np.int64)
    picks = np.ascontiguousarray(
        picks if picks is not None else np.zeros((0, 0, 0, 0)), dtype=np.int64
    )
    base, cols, col_of = compact_occupancy(occ)
    finish = np.zeros((len(record), n_users), dtype=np.int64)
    starts = np.zeros((int(record.sum()), n_users, len(base)), dtype=np.int64)
    res = np.ascontiguousarray(res[:, None] if res.ndim == 1 else res)  # a row of units a stage
    _asic_pipeline(base, cols, col_of, lat, res, int(n_users), record, finish, starts,
                   int(group), ex_layer, picks, ex_unit, n_units,
                   len(base) if tail is None else int(tail))  # fmt: skip
    return finish, starts
