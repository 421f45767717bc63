"""NumPy/Python twins of the LPU engine's hot loops (the executable specification).

Both loops are *static-order* schedules, as a compiler-fixed TSP program is: every functional
slice (or C2C link) executes its instructions (transfers) in the order the compiler listed them,
so each start time is a max over earlier finishes. All times are integer cycles.
"""

from __future__ import annotations

import math

import numpy as np

from . import checks


def lpu_list_schedule(
    resource: np.ndarray,
    duration: np.ndarray,
    latency: np.ndarray,
    dep_ptr: np.ndarray,
    dep_idx: np.ndarray,
    n_resources: int,
) -> np.ndarray:
    """Start cycle of every instruction of a list schedule with resource reservation.

    Instructions come in the compiler's priority order (every dependency lists an earlier index).
    Instruction ``i`` occupies ``resource[i]`` (``-1``: none, a pure delay) for ``duration[i]``
    cycles; its result is usable ``latency[i]`` cycles after it ends. It starts at the earliest
    cycle when all its dependencies ``dep_idx[dep_ptr[i]:dep_ptr[i+1]]`` are usable and its
    resource's previous reservation has ended (in-order per resource, no back-filling).
    """
    checks.lpu_list_schedule(resource, duration, latency, dep_ptr, dep_idx, n_resources)
    n = len(resource)
    start = np.zeros(n, dtype=np.int64)
    free = [0] * n_resources
    for i in range(n):
        ready = 0
        for j in dep_idx[dep_ptr[i] : dep_ptr[i + 1]].tolist():
            ready = max(ready, int(start[j] + duration[j] + latency[j]))
        r = int(resource[i])
        if r >= 0:
            ready = max(ready, free[r])
            free[r] = ready + int(duration[i])
        start[i] = ready
    return start


def lpu_link_schedule(
    link: np.ndarray,
    n_bytes: np.ndarray,
    cut_through: np.ndarray,
    dep_ptr: np.ndarray,
    dep_idx: np.ndarray,
    link_bytes_per_cycle: np.ndarray,
    link_latency: np.ndarray,
    vector_bytes: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, arrive) cycles of C2C transfers in the compiler's fixed order.

    Transfer ``i`` sends ``n_bytes[i]`` over ``link[i]``: it serialises for
    ceil(bytes / bytes-per-cycle) cycles and its last byte arrives the link's latency later.
    A dependency ``j`` gates it at ``arrive[j]`` (store-and-forward: data computed from j), or,
    when ``cut_through[i]``, once j's first vector has arrived (a chip relaying a stream: its
    last byte still cannot leave before j's last byte has arrived). Each link carries its
    transfers one after another in list order.
    """
    checks.lpu_link_schedule(
        link, n_bytes, cut_through, dep_ptr, dep_idx, link_bytes_per_cycle, link_latency
    )
    n = len(link)
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    arrive = np.zeros(n, dtype=np.int64)
    free = [0] * len(link_bytes_per_cycle)
    for i in range(n):
        lk = int(link[i])
        bpc = float(link_bytes_per_cycle[lk])
        ready, floor_end = 0, 0
        for j in dep_idx[dep_ptr[i] : dep_ptr[i + 1]].tolist():
            if cut_through[i]:
                lj = int(link[j])
                first = min(vector_bytes, int(n_bytes[j]))
                first_c = math.ceil(first / float(link_bytes_per_cycle[lj]))
                ready = max(ready, int(start[j]) + first_c + int(link_latency[lj]))
                floor_end = max(floor_end, int(arrive[j]))
            else:
                ready = max(ready, int(arrive[j]))
        s = max(ready, free[lk])
        e = max(s + math.ceil(int(n_bytes[i]) / bpc), floor_end)
        start[i], end[i], arrive[i] = s, e, e + int(link_latency[lk])
        free[lk] = e
    return start, end, arrive
