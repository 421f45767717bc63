"""Numba twin of :mod:`pyaccel.kernels.reference_pipeline` (``cache=True``)."""

from __future__ import annotations

import numba
import numpy as np

from . import checks
from .reference_pipeline import booking_capacity, relay_arrays


@numba.njit(cache=True)
def _forget(bs, be, n, s, before):  # pragma: no cover - compiled
    drop = 0
    while drop < n[s] and be[s, drop] <= before:
        drop += 1
    if drop:
        bs[s, : n[s] - drop] = bs[s, drop : n[s]].copy()
        be[s, : n[s] - drop] = be[s, drop : n[s]].copy()
        n[s] -= drop


@numba.njit(cache=True)
def _book(bs, be, n, s, earliest, length, before):  # pragma: no cover - compiled
    _forget(bs, be, n, s, before)
    if n[s] >= bs.shape[1]:
        return -1
    x, at = earliest, 0
    for i in range(n[s]):
        if be[s, i] <= x:
            at += 1
            continue
        if bs[s, i] >= x + length:
            break
        x = be[s, i]
        at += 1
    bs[s, at + 1 : n[s] + 1] = bs[s, at : n[s]].copy()
    be[s, at + 1 : n[s] + 1] = be[s, at : n[s]].copy()
    bs[s, at] = x
    be[s, at] = x + length
    n[s] += 1
    return x + length


@numba.njit(cache=True)
def _rounds(occ, busy, lat, roff, rbusy, ptr, ws, we, rounds, finish, bs, be):  # pragma: no cover
    n_micro, n_stages = occ.shape
    stage_free = np.zeros(n_stages, dtype=np.int64)
    link_free = np.zeros(n_stages, dtype=np.int64)
    n = np.zeros(n_stages, dtype=np.int64)
    ready = np.zeros(n_micro, dtype=np.int64)
    for r in range(rounds):
        for m in range(n_micro):
            t = ready[m]
            for s in range(n_stages):
                if s > 0 or r > 0:
                    start = max(t, link_free[s])
                    link_free[s] = start + busy[m, s]
                    t = link_free[s]
                    if rbusy[m, s]:
                        t = _book(bs, be, n, s, start + roff[m, s], rbusy[m, s], start)
                        if t < 0:
                            return -1
                    t += lat[m, s]
                start = max(t, stage_free[s])
                stage_free[s] = start + occ[m, s]
                t = stage_free[s]
                k = m * n_stages + s
                if ptr[k + 1] > ptr[k]:
                    _forget(bs, be, n, s, link_free[s])
                for j in range(ptr[k], ptr[k + 1]):
                    if n[s] >= bs.shape[1]:
                        return -1
                    bs[s, n[s]] = start + ws[j]
                    be[s, n[s]] = start + we[j]
                    n[s] += 1
            finish[r, m] = t
            ready[m] = t
    return 0


def micro_batch_rounds(occ, busy, lat, rounds, relay=None):
    """Numba twin of :func:`pyaccel.kernels.reference_pipeline.micro_batch_rounds`."""
    checks.micro_batch_rounds(occ, busy, lat, rounds, relay)
    arrs = [np.ascontiguousarray(a, dtype=np.int64) for a in (occ, busy, lat)]
    n_micro, n_stages = arrs[0].shape
    rel = [np.ascontiguousarray(a, dtype=np.int64) for a in relay_arrays(n_micro, n_stages, relay)]
    finish = np.zeros((int(rounds), n_micro), dtype=np.int64)
    cap = booking_capacity(n_micro, n_stages, rel[2])
    while True:
        bs = np.zeros((n_stages, cap), dtype=np.int64)
        be = np.zeros((n_stages, cap), dtype=np.int64)
        if _rounds(*arrs, *rel, np.int64(rounds), finish, bs, be) == 0:
            return finish
        cap *= 2
