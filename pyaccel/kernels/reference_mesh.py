"""NumPy/Python twin of the wafer mesh engine: PE tasks and wavelet messages over mesh links.

The executable specification that ``jit_mesh.mesh_run`` (Numba) and ``ffi_mesh.mesh_run`` (C)
match exactly. Units: integer cycles and wavelets.

A *task* runs on a PE (``pe >= 0``) or is a router forward (``pe < 0``, a multicast hop that no
PE program touches). It may send one message of ``n_wavelets`` over a path of link ids. Tasks are
processed in index order (every dependency has a smaller index): that order is the priority of
the greedy list schedule, and links are reserved first come, first served in it.

- Non-streaming task: starts ``setup`` cycles after its PE is free and every dependency's last
  wavelet has arrived (store and forward; ``setup`` is local compute plus the task start).
- Streaming task (a PE adding incoming wavelets to its own and forwarding them, WaferLLM's
  ``@faddh(fabout, fabin, local)``): its PE gets ready ``setup`` cycles after it is free, and its
  first wavelet leaves ``pass_lat`` cycles after the dependencies' first wavelets arrive; its last
  wavelet cannot leave before the dependencies' last wavelet arrived plus ``pass_lat``.
- Router forward: leaves as the dependency's wavelets arrive (no PE, no added latency).

A message's head enters each link of its path when the link is free (wormhole/cut-through, links
reserved for the whole message); a link carries one wavelet per cycle, so a message occupies it
for at least ``n_wavelets`` cycles; each link adds ``link_lat[link]`` cycles (the hop latency;
zero for the ramp into a PE). ``head``/``tail`` are the arrival cycles of the first and last
wavelet at the end of the path (for a task without a path: its start).
"""

from __future__ import annotations

import numpy as np

from . import checks


def mesh_run(
    task_pe: np.ndarray,
    task_setup: np.ndarray,
    task_stream: np.ndarray,
    task_nwav: np.ndarray,
    dep_ptr: np.ndarray,
    dep_idx: np.ndarray,
    path_ptr: np.ndarray,
    path_link: np.ndarray,
    link_lat: np.ndarray,
    n_pes: int,
    pass_lat: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulate the tasks in order; returns (head arrival, tail arrival) per task and the cycles
    each link was reserved (all int64)."""
    checks.mesh_run(task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr,
                    path_link, link_lat, n_pes)  # fmt: skip
    n_tasks, n_links = len(task_pe), len(link_lat)
    head = np.zeros(n_tasks, dtype=np.int64)
    tail = np.zeros(n_tasks, dtype=np.int64)
    busy = np.zeros(n_links, dtype=np.int64)
    pe_free = [0] * n_pes
    link_free = [0] * n_links
    for i in range(n_tasks):
        deps = dep_idx[dep_ptr[i] : dep_ptr[i + 1]].tolist()
        dep_head = max((int(head[d]) for d in deps), default=0)
        dep_tail = max((int(tail[d]) for d in deps), default=0)
        pe, setup = int(task_pe[i]), int(task_setup[i])
        if pe < 0:  # router forward: no PE program, no added latency
            start, src_tail = dep_head, dep_tail
        elif task_stream[i] and deps:
            start = max(pe_free[pe] + setup, dep_head + pass_lat)
            src_tail = dep_tail + pass_lat
        else:
            start = max(pe_free[pe], dep_tail) + setup
            src_tail = start
        if pe >= 0:
            pe_free[pe] = start
        path = path_link[path_ptr[i] : path_ptr[i + 1]].tolist()
        if not path:
            head[i], tail[i] = start, max(start, src_tail)
            continue
        n = int(task_nwav[i])
        t_head, t_tail = start, src_tail
        for link in path:
            h_in = max(t_head, link_free[link])
            tail_in = max(h_in + n - 1, t_tail)
            link_free[link] = tail_in + 1
            busy[link] += tail_in + 1 - h_in
            t_head, t_tail = h_in + int(link_lat[link]), tail_in + int(link_lat[link])
        head[i], tail[i] = t_head, t_tail
    return head, tail, busy
