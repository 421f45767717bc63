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


INPUT = -2  # a fragment's dependency on the previous fragment's output (sim.lpu.program.INPUT)


def lpu_fragment_schedule(
    resource: np.ndarray,
    duration: np.ndarray,
    latency: np.ndarray,
    dep_ptr: np.ndarray,
    dep_idx: np.ndarray,
    frag_ptr: np.ndarray,
    frag_out: np.ndarray,
    mark_ptr: np.ndarray,
    mark_idx: np.ndarray,
    seq_ptr: np.ndarray,
    seq: np.ndarray,
    n_resources: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(cycles of each program, start cycles of the marked instructions) of programs joined
    from a pool of fragments, each list-scheduled on its own (:func:`lpu_list_schedule`) from
    cycle 0 with every resource free.

    The pool holds fragments end to end: fragment ``f`` is instructions
    ``frag_ptr[f]:frag_ptr[f + 1]`` (resource, duration, latency, CSR dependencies), each
    dependency an index into its own fragment (``>= 0``, earlier than the instruction) or
    ``INPUT`` (-2): the output of the fragment before it in the program. Fragment ``f``'s
    output is its instruction ``frag_out[f]``, and it marks its instructions
    ``mark_idx[mark_ptr[f]:mark_ptr[f + 1]]`` (indices in the fragment). Program ``s`` is
    fragments ``seq[seq_ptr[s]:seq_ptr[s + 1]]`` in order; its first fragment must not take an
    input. A program's cycles are the latest cycle any of its results is usable (0 when
    empty); the marked starts come program by program, fragment by fragment, in mark order.
    """
    checks.lpu_fragment_schedule(
        resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out, mark_ptr, mark_idx,
        seq_ptr, seq, n_resources,
    )  # fmt: skip
    cycles, marked = [], []
    for s in range(len(seq_ptr) - 1):
        frags = seq[seq_ptr[s] : seq_ptr[s + 1]]
        res, dur, lat, ptr, idx = _joined(
            resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out, frags
        )
        start = lpu_list_schedule(res, dur, lat, ptr, idx, n_resources)
        cycles.append(int((start + dur + lat).max()) if len(start) else 0)
        base = 0
        for f in np.asarray(frags).tolist():
            marked += [int(start[base + i]) for i in mark_idx[mark_ptr[f] : mark_ptr[f + 1]]]
            base += int(frag_ptr[f + 1] - frag_ptr[f])
    return np.array(cycles, dtype=np.int64), np.array(marked, dtype=np.int64)


def _joined(resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out, frags):
    """One program's instructions as a plain list schedule's arrays: the fragments' copied end
    to end, local dependencies moved by the fragment's place, ``INPUT`` taken by the previous
    fragment's output."""
    res, dur, lat, deps = [], [], [], []
    prev_out = -1
    for f in np.asarray(frags).tolist():
        lo, hi, base = int(frag_ptr[f]), int(frag_ptr[f + 1]), len(res)
        for p in range(lo, hi):
            res.append(int(resource[p]))
            dur.append(int(duration[p]))
            lat.append(int(latency[p]))
            local = dep_idx[dep_ptr[p] : dep_ptr[p + 1]].tolist()
            deps.append([prev_out if d == INPUT else base + d for d in local])
        prev_out = base + int(frag_out[f])
    ptr = np.zeros(len(res) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.array([j for d in deps for j in d], dtype=np.int64)
    return (np.array(res, dtype=np.int64), np.array(dur, dtype=np.int64),
            np.array(lat, dtype=np.int64), ptr, idx)  # fmt: skip
