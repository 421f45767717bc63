"""Numba twin of :mod:`pyaccel.kernels.reference_mesh` (``cache=True``, no fastmath)."""

from __future__ import annotations

import numba
import numpy as np

from . import checks


@numba.njit(cache=True)
def _mesh_run(
    task_pe,
    task_setup,
    task_stream,
    task_nwav,
    dep_ptr,
    dep_idx,
    path_ptr,
    path_link,
    link_lat,
    n_pes,
    pass_lat,
    head,
    tail,
    busy,
):  # pragma: no cover - compiled
    pe_free = np.zeros(n_pes, dtype=np.int64)
    link_free = np.zeros(link_lat.shape[0], dtype=np.int64)
    for i in range(task_pe.shape[0]):
        dep_head = 0
        dep_tail = 0
        n_deps = dep_ptr[i + 1] - dep_ptr[i]
        for j in range(dep_ptr[i], dep_ptr[i + 1]):
            d = dep_idx[j]
            if head[d] > dep_head:
                dep_head = head[d]
            if tail[d] > dep_tail:
                dep_tail = tail[d]
        pe = task_pe[i]
        setup = task_setup[i]
        if pe < 0:
            start = dep_head
            src_tail = dep_tail
        elif task_stream[i] != 0 and n_deps > 0:
            start = max(pe_free[pe] + setup, dep_head + pass_lat)
            src_tail = dep_tail + pass_lat
        else:
            start = max(pe_free[pe], dep_tail) + setup
            src_tail = start
        if pe >= 0:
            pe_free[pe] = start
        if path_ptr[i + 1] == path_ptr[i]:
            head[i] = start
            tail[i] = max(start, src_tail)
            continue
        n = task_nwav[i]
        t_head = start
        t_tail = src_tail
        for j in range(path_ptr[i], path_ptr[i + 1]):
            link = path_link[j]
            h_in = max(t_head, link_free[link])
            tail_in = max(h_in + n - 1, t_tail)
            link_free[link] = tail_in + 1
            busy[link] += tail_in + 1 - h_in
            t_head = h_in + link_lat[link]
            t_tail = tail_in + link_lat[link]
        head[i] = t_head
        tail[i] = t_tail


def mesh_run(
    task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr, path_link,
    link_lat, n_pes, pass_lat,
):  # fmt: skip
    """Numba twin of :func:`pyaccel.kernels.reference_mesh.mesh_run`."""
    checks.mesh_run(task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr,
                    path_link, link_lat, n_pes)  # fmt: skip
    n = len(task_pe)
    head = np.zeros(n, dtype=np.int64)
    tail = np.zeros(n, dtype=np.int64)
    busy = np.zeros(len(link_lat), dtype=np.int64)
    args = [
        np.ascontiguousarray(a, dtype=np.int64)
        for a in (task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr,
                  path_link, link_lat)
    ]  # fmt: skip
    _mesh_run(*args, np.int64(n_pes), np.int64(pass_lat), head, tail, busy)
    return head, tail, busy
