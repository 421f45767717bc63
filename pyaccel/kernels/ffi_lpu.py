"""C twins of :mod:`pyaccel.kernels.reference_lpu` (cffi module built from csrc/lpu.c): an LPU run
needs them every step, so it must not pull in Numba's import."""

from __future__ import annotations

import numpy as np

from . import checks
from .ffi import available, ffi, lib

# Without the symbols (an older C build) this module offers nothing, so ``kernels.get`` falls
# through to Numba instead of losing the whole C backend.
HAS_LPU = available and hasattr(lib, "pyaccel_lpu_fragment_schedule")


def _i64(arr) -> np.ndarray:
    return np.ascontiguousarray(arr, dtype=np.int64)


def _ptr(arr: np.ndarray, kind: str = "int64_t *"):
    # an empty array still needs a valid address for cffi; the kernel never reads it
    return ffi.cast(kind, ffi.from_buffer(arr if arr.size else np.zeros(1, arr.dtype)))


def _list_schedule(resource, duration, latency, dep_ptr, dep_idx, n_resources):
    """C twin of :func:`pyaccel.kernels.reference_lpu.lpu_list_schedule`."""
    checks.lpu_list_schedule(resource, duration, latency, dep_ptr, dep_idx, n_resources)
    ins = [_i64(a) for a in (resource, duration, latency, dep_ptr, dep_idx)]
    n = len(ins[0])
    start = np.zeros(n, dtype=np.int64)
    free = np.zeros(max(int(n_resources), 1), dtype=np.int64)
    if n:
        lib.pyaccel_lpu_list_schedule(_ptr(start), _ptr(free), *(_ptr(a) for a in ins), n)
    return start


def _link_schedule(
    link, n_bytes, cut_through, dep_ptr, dep_idx, link_bytes_per_cycle, link_latency, vector_bytes
):
    """C twin of :func:`pyaccel.kernels.reference_lpu.lpu_link_schedule`."""
    checks.lpu_link_schedule(
        link, n_bytes, cut_through, dep_ptr, dep_idx, link_bytes_per_cycle, link_latency
    )
    link, n_bytes, dep_ptr, dep_idx, lat = (
        _i64(a) for a in (link, n_bytes, dep_ptr, dep_idx, link_latency)
    )
    cut = np.ascontiguousarray(cut_through, dtype=np.int8)
    bpc = np.ascontiguousarray(link_bytes_per_cycle, dtype=np.float64)
    n = len(link)
    start, end, arrive = (np.zeros(n, dtype=np.int64) for _ in range(3))
    free = np.zeros(max(len(bpc), 1), dtype=np.int64)
    if n:
        lib.pyaccel_lpu_link_schedule(
            _ptr(start), _ptr(end), _ptr(arrive), _ptr(free), _ptr(link), _ptr(n_bytes),
            _ptr(cut, "int8_t *"), _ptr(dep_ptr), _ptr(dep_idx), _ptr(bpc, "double *"),
            _ptr(lat), int(vector_bytes), n,
        )  # fmt: skip
    return start, end, arrive


def _fragment_schedule(resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out,
                       mark_ptr, mark_idx, seq_ptr, seq, n_resources, stats=None):  # fmt: skip
    """C twin of :func:`pyaccel.kernels.reference_lpu.lpu_fragment_schedule`. It memoises
    fragments by the relative state they start from (csrc/lpu.c); ``stats``, a dict, is given
    ``memo_hits``: the fragments the memo gave."""
    ins = [_i64(a) for a in (resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out,
                             mark_ptr, mark_idx, seq_ptr, seq)]  # fmt: skip
    checks.lpu_fragment_schedule(*ins, n_resources)
    cycles, marked, longest = _fragment_sizes(ins[5], ins[7], ins[9], ins[10])
    ready = np.empty(max(longest, 1), dtype=np.int64)  # the kernel writes before it reads
    free = np.zeros(max(int(n_resources), 1), dtype=np.int64)
    hits = np.zeros(1, dtype=np.int64)
    if len(cycles):
        lib.pyaccel_lpu_fragment_schedule(_ptr(cycles), _ptr(marked), _ptr(ready), _ptr(free),
                                          _ptr(hits), *(_ptr(a) for a in ins),
                                          len(ins[5]) - 1, len(cycles),
                                          int(n_resources))  # fmt: skip
    if stats is not None:
        stats["memo_hits"] = int(hits[0])
    return cycles, marked


def _fragment_sizes(frag_ptr, mark_ptr, seq_ptr, seq) -> tuple[np.ndarray, np.ndarray, int]:
    """(cycles, marked) output arrays of a fragment schedule, and its longest program."""
    length = np.r_[np.diff(frag_ptr)[seq], 0]  # a 0 past the end: reduceat's index limit
    per_program = np.add.reduceat(length, seq_ptr[:-1])
    per_program[np.diff(seq_ptr) == 0] = 0  # an empty program (reduceat gives the next's)
    n_marked = int(np.diff(mark_ptr)[seq].sum())
    return (np.zeros(len(seq_ptr) - 1, dtype=np.int64), np.zeros(n_marked, dtype=np.int64),
            int(per_program.max(initial=0)))  # fmt: skip


if HAS_LPU:
    lpu_list_schedule = _list_schedule
    lpu_link_schedule = _link_schedule
    lpu_fragment_schedule = _fragment_schedule
