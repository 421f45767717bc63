"""C twin of :mod:`pyaccel.kernels.reference_mesh` (cffi module built from csrc/mesh.c)."""

from __future__ import annotations

import numpy as np

from . import checks
from .ffi import available, ffi, lib

# Without the symbol (an older C build) this module offers nothing, so ``kernels.get`` falls
# through to Numba instead of losing the whole C backend.
HAS_MESH = available and hasattr(lib, "pyaccel_mesh_run")


def _ptr(arr: np.ndarray):
    return ffi.cast("int64_t *", ffi.from_buffer(arr))


def _mesh_run(
    task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr, path_link,
    link_lat, n_pes, pass_lat,
):  # fmt: skip
    """C twin of :func:`pyaccel.kernels.reference_mesh.mesh_run`."""
    checks.mesh_run(task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr,
                    path_link, link_lat, n_pes)  # fmt: skip
    ins = [
        np.ascontiguousarray(a, dtype=np.int64)
        for a in (task_pe, task_setup, task_stream, task_nwav, dep_ptr, dep_idx, path_ptr,
                  path_link, link_lat)
    ]  # fmt: skip
    n, n_links = len(ins[0]), len(ins[8])
    head = np.zeros(n, dtype=np.int64)
    tail = np.zeros(n, dtype=np.int64)
    busy = np.zeros(n_links, dtype=np.int64)
    pe_free = np.zeros(max(1, int(n_pes)), dtype=np.int64)
    link_free = np.zeros(max(1, n_links), dtype=np.int64)
    # keep at least one element so from_buffer never sees an empty array
    ins = [a if len(a) else np.zeros(1, dtype=np.int64) for a in ins]
    outs = [a if len(a) else np.zeros(1, dtype=np.int64) for a in (head, tail, busy)]
    rc = lib.pyaccel_mesh_run(
        *(_ptr(a) for a in outs), _ptr(pe_free), _ptr(link_free), *(_ptr(a) for a in ins),
        n, n_links, int(n_pes), int(pass_lat),
    )  # fmt: skip
    if rc != 0:
        raise ValueError("mesh_run: a dependency, PE or link index is out of range")
    return head, tail, busy


if HAS_MESH:
    mesh_run = _mesh_run


HAS_TASKS = available and hasattr(lib, "pyaccel_allreduce_tasks")


def _task_arrays(cap_tasks: int, cap_deps: int, cap_links: int) -> dict:
    z = np.zeros
    return {
        "pe": z(cap_tasks, np.int64), "setup": z(cap_tasks, np.int64),
        "stream": z(cap_tasks, np.int64), "nwav": z(cap_tasks, np.int64),
        "dep_ptr": z(cap_tasks + 1, np.int64), "dep_idx": z(max(1, cap_deps), np.int64),
        "path_ptr": z(cap_tasks + 1, np.int64), "path_link": z(max(1, cap_links), np.int64),
    }  # fmt: skip


_ORDER = ("pe", "setup", "stream", "nwav", "dep_ptr", "dep_idx", "path_ptr", "path_link")


def _trimmed(a: dict, counts: np.ndarray) -> dict:
    """The kernel arrays cut to what the builder wrote (copies: the capacity is released)."""
    tasks, deps, links = (int(c) for c in counts[:3])
    size = {"dep_ptr": tasks + 1, "path_ptr": tasks + 1, "dep_idx": deps, "path_link": links}
    return {k: a[k][: size.get(k, tasks)].copy() for k in _ORDER}


def _allreduce_tasks(n: int, seg: int, two_level: bool, broadcast: bool):
    """C twin of ``sim.wafer.mesh._allreduce_template``'s Tasks build (the readable version):
    the kernel arrays of the all-reduces of a line of ``n`` PEs in segments of ``seg``, setup
    cycles and wavelets as slots; returns (arrays, arrive per PE, messages)."""
    n, seg = int(n), int(seg)
    if n < 1 or seg < 1:
        raise ValueError(f"allreduce_tasks: a line of {n} PEs in segments of {seg}")
    cap_tasks, cap_links = 3 * n + 8, 8 * n + 8
    a = _task_arrays(cap_tasks, 4 * cap_tasks, cap_links)
    arrive, counts = np.zeros(n, np.int64), np.zeros(4, np.int64)
    scratch = np.zeros(3 * min(seg, n), np.int64)
    rc = lib.pyaccel_allreduce_tasks(
        *(_ptr(a[k]) for k in _ORDER), _ptr(arrive), _ptr(counts), n, _ptr(scratch), seg,
        int(bool(two_level)), int(bool(broadcast)), cap_tasks, 4 * cap_tasks, cap_links,
    )  # fmt: skip
    if rc != 0:
        raise ValueError("allreduce_tasks: the task list outgrew its arrays")
    return _trimmed(a, counts), arrive, int(counts[3])


def _multicast_tasks(n: int, root: int, lead: int):
    """C twin of ``sim.wafer.mesh._multicast_template``'s Tasks build: a multicast from PE
    ``root`` over a line of ``n`` PEs, fed from ``lead`` PEs before it when ``lead`` > 0;
    returns (arrays, messages)."""
    n, root, lead = int(n), int(root), int(lead)
    if n < 1 or not 0 <= root < n or lead < 0:
        raise ValueError(f"multicast_tasks: root {root} of a line of {n} PEs, lead {lead}")
    m = n + lead
    cap_tasks, cap_links = 2 * m + 8, 4 * m + 8
    a = _task_arrays(cap_tasks, cap_tasks, cap_links)
    counts = np.zeros(4, np.int64)
    rc = lib.pyaccel_multicast_tasks(
        *(_ptr(a[k]) for k in _ORDER), _ptr(counts), n, root, lead, cap_tasks, cap_tasks,
        cap_links,
    )  # fmt: skip
    if rc != 0:
        raise ValueError("multicast_tasks: the task list outgrew its arrays")
    return _trimmed(a, counts), int(counts[3])


if HAS_TASKS:
    allreduce_tasks = _allreduce_tasks
    multicast_tasks = _multicast_tasks
