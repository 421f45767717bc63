"""C twin of :mod:`pyaccel.kernels.reference_asic` (cffi module built from csrc/asic.c): an ASIC
run needs it every step, so it must not pull in Numba's import."""

from __future__ import annotations

import numpy as np

from . import checks
from .ffi import available, ffi, lib
from .reference_asic import compact_occupancy, expert_units

# Without the symbol (an older C build) this module offers nothing, so ``kernels.get`` falls
# through to Numba instead of losing the whole C backend.
HAS_ASIC = available and hasattr(lib, "pyaccel_asic_pipeline")


def _ptr(arr: np.ndarray, kind: str = "int64_t *"):
    return ffi.cast(kind, ffi.from_buffer(arr))


def _asic_pipeline(occ, lat, res, n_users, record, group=1, routes=None, tail=None):
    """C twin of :func:`pyaccel.kernels.reference_asic.asic_pipeline`."""
    checks.asic_pipeline(occ, lat, res, n_users, record, group, routes, tail)
    base, cols, col_of = compact_occupancy(occ)
    lat = np.ascontiguousarray(lat, dtype=np.int64)
    res = np.asarray(res, dtype=np.int64)
    res = np.ascontiguousarray(res[:, None] if res.ndim == 1 else res)  # a row of units a stage
    record = np.ascontiguousarray(record, dtype=np.int8)
    ex_layer, picks, ex_unit = expert_units(res[:, 0], routes)
    n_units = checks.asic_units(res, ex_layer, picks, ex_unit)
    ex_layer = np.ascontiguousarray(ex_layer, dtype=np.int64)
    ex_unit = np.ascontiguousarray(ex_unit, dtype=np.int64)
    picks = np.ascontiguousarray(
        picks if picks is not None else np.zeros((0, 0, 0, 0)), dtype=np.int64
    )
    n_steps, n_stages = len(record), len(base)  # cols: a row a position (steps + group - 1)
    finish = np.zeros((n_steps, int(n_users)), dtype=np.int64)
    starts = np.zeros((int(record.sum()), int(n_users), n_stages), dtype=np.int64)
    scratch = np.zeros(max(1, n_units), dtype=np.int64), np.zeros(max(1, int(n_users)), np.int64)
    if finish.size == 0 or n_stages == 0:
        return finish, starts
    lib.pyaccel_asic_pipeline(
        _ptr(finish), _ptr(starts), _ptr(scratch[0]), _ptr(scratch[1]), _ptr(base),
        _ptr(np.zeros(1, np.int64) if cols.size == 0 else cols), _ptr(col_of), cols.shape[1],
        _ptr(lat),
        _ptr(res), res.shape[1], _ptr(record, "int8_t *"), _ptr(ex_layer),
        _ptr(np.zeros(1, np.int64) if picks.size == 0 else picks), picks.shape[2], picks.shape[3],
        _ptr(np.zeros(1, np.int64) if ex_unit.size == 0 else ex_unit), ex_unit.shape[1],
        n_steps, n_stages, int(n_users), int(group), n_stages if tail is None else int(tail),
    )  # fmt: skip
    return finish, starts


if HAS_ASIC:
    asic_pipeline = _asic_pipeline
