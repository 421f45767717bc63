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
