"""Numba versions of the LPU engine's hot loops (``cache=True``, no fastmath); twins of
:mod:`pyaccel.kernels.reference_lpu`."""

from __future__ import annotations

import math

import numba
import numpy as np

from . import checks


@numba.njit(cache=True)
def _list_schedule(resource, duration, latency, dep_ptr, dep_idx, n_resources):  # pragma: no cover
    n = resource.shape[0]
    start = np.zeros(n, dtype=np.int64)
    free = np.zeros(max(n_resources, 1), dtype=np.int64)
    for i in range(n):
        ready = 0
        for q in range(dep_ptr[i], dep_ptr[i + 1]):
            j = dep_idx[q]
            t = start[j] + duration[j] + latency[j]
            if t > ready:
                ready = t
        r = resource[i]
        if r >= 0:
            if free[r] > ready:
                ready = free[r]
            free[r] = ready + duration[i]
        start[i] = ready
    return start


@numba.njit(cache=True)
def _link_schedule(
    link, n_bytes, cut, dep_ptr, dep_idx, bpc, lat, vector_bytes
):  # pragma: no cover
    n = link.shape[0]
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    arrive = np.zeros(n, dtype=np.int64)
    free = np.zeros(bpc.shape[0], dtype=np.int64)
    for i in range(n):
        lk = link[i]
        ready = 0
        floor_end = 0
        for q in range(dep_ptr[i], dep_ptr[i + 1]):
            j = dep_idx[q]
            if cut[i]:
                lj = link[j]
                first = min(vector_bytes, n_bytes[j])
                first_c = np.int64(math.ceil(first / bpc[lj]))
                t = start[j] + first_c + lat[lj]
                if t > ready:
                    ready = t
                if arrive[j] > floor_end:
                    floor_end = arrive[j]
            else:
                if arrive[j] > ready:
                    ready = arrive[j]
        s = max(ready, free[lk])
        e = max(s + np.int64(math.ceil(n_bytes[i] / bpc[lk])), floor_end)
        start[i] = s
        end[i] = e
        arrive[i] = e + lat[lk]
        free[lk] = e
    return start, end, arrive


def _i64(a):
    return np.ascontiguousarray(a, dtype=np.int64)


def lpu_list_schedule(resource, duration, latency, dep_ptr, dep_idx, n_resources):
    """Numba twin of :func:`pyaccel.kernels.reference_lpu.lpu_list_schedule`."""
    checks.lpu_list_schedule(resource, duration, latency, dep_ptr, dep_idx, n_resources)
    return _list_schedule(
        _i64(resource), _i64(duration), _i64(latency), _i64(dep_ptr), _i64(dep_idx),
        int(n_resources),
    )  # fmt: skip


def lpu_link_schedule(
    link, n_bytes, cut_through, dep_ptr, dep_idx, link_bytes_per_cycle, link_latency, vector_bytes
):
    """Numba twin of :func:`pyaccel.kernels.reference_lpu.lpu_link_schedule`."""
    checks.lpu_link_schedule(
        link, n_bytes, cut_through, dep_ptr, dep_idx, link_bytes_per_cycle, link_latency
    )
    return _link_schedule(
        _i64(link), _i64(n_bytes), np.ascontiguousarray(cut_through, dtype=np.bool_),
        _i64(dep_ptr), _i64(dep_idx),
        np.ascontiguousarray(link_bytes_per_cycle, dtype=np.float64), _i64(link_latency),
        int(vector_bytes),
    )  # fmt: skip
