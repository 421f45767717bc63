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


@numba.njit(cache=True)
def _fragment_schedule(
    resource,
    duration,
    latency,
    dep_ptr,
    dep_idx,
    frag_ptr,
    frag_out,
    mark_ptr,
    mark_idx,
    seq_ptr,
    seq,
    n_marked,
    n_resources,
):  # pragma: no cover
    cycles = np.zeros(seq_ptr.shape[0] - 1, dtype=np.int64)
    marked = np.zeros(n_marked, dtype=np.int64)
    ready_at = np.zeros(1, dtype=np.int64)
    free = np.zeros(max(n_resources, 1), dtype=np.int64)
    m = 0
    for s in range(cycles.shape[0]):
        n = 0
        for k in range(seq_ptr[s], seq_ptr[s + 1]):
            n += frag_ptr[seq[k] + 1] - frag_ptr[seq[k]]
        if n > ready_at.shape[0]:
            ready_at = np.zeros(n, dtype=np.int64)
        base, prev_out, done, i = 0, -1, 0, 0
        free[:] = 0
        for k in range(seq_ptr[s], seq_ptr[s + 1]):
            f = seq[k]
            for p in range(frag_ptr[f], frag_ptr[f + 1]):
                ready = 0
                for q in range(dep_ptr[p], dep_ptr[p + 1]):
                    d = dep_idx[q]
                    t = ready_at[prev_out] if d == -2 else ready_at[base + d]
                    if t > ready:
                        ready = t
                r = resource[p]
                if r >= 0:
                    if free[r] > ready:
                        ready = free[r]
                    free[r] = ready + duration[p]
                ready_at[i] = ready + duration[p] + latency[p]
                if ready_at[i] > done:
                    done = ready_at[i]
                i += 1
            for q in range(mark_ptr[f], mark_ptr[f + 1]):
                p = frag_ptr[f] + mark_idx[q]
                marked[m] = ready_at[base + mark_idx[q]] - latency[p] - duration[p]
                m += 1
            prev_out = base + frag_out[f]
            base = i
        cycles[s] = done
    return cycles, marked


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


def lpu_fragment_schedule(resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out,
                          mark_ptr, mark_idx, seq_ptr, seq, n_resources):  # fmt: skip
    """Numba twin of :func:`pyaccel.kernels.reference_lpu.lpu_fragment_schedule`."""
    ins = [_i64(a) for a in (resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out,
                             mark_ptr, mark_idx, seq_ptr, seq)]  # fmt: skip
    checks.lpu_fragment_schedule(*ins, n_resources)
    n_marked = int(np.diff(ins[7])[ins[10]].sum())
    return _fragment_schedule(*ins, n_marked, int(n_resources))
