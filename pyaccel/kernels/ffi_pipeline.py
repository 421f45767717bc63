"""C twin of :mod:`pyaccel.kernels.reference_pipeline` (cffi module built from
csrc/pipeline.c). A wafer run needs it on every step, so it must not pull in Numba's import."""

from __future__ import annotations

import numpy as np

from . import checks
from .ffi import available, ffi, lib
from .reference_pipeline import booking_capacity, relay_arrays

# Without the symbol (an older C build) this module offers nothing, so ``kernels.get`` falls
# through to Numba instead of losing the whole C backend.
HAS_PIPELINE = available and hasattr(lib, "pyaccel_micro_batch_rounds")


def _ptr(arr: np.ndarray):
    return ffi.cast("int64_t *", ffi.from_buffer(arr))


def _micro_batch_rounds(occ, busy, lat, rounds, relay=None):
    """C twin of :func:`pyaccel.kernels.reference_pipeline.micro_batch_rounds`."""
    checks.micro_batch_rounds(occ, busy, lat, rounds, relay)
    ins = [np.ascontiguousarray(a, dtype=np.int64) for a in (occ, busy, lat)]
    n_micro, n_stages = ins[0].shape
    ins += [np.ascontiguousarray(a, dtype=np.int64)
            for a in relay_arrays(n_micro, n_stages, relay)]  # fmt: skip
    finish = np.zeros((int(rounds), n_micro), dtype=np.int64)
    if finish.size == 0 or n_stages == 0:
        return finish
    scratch = [np.zeros(n_stages, dtype=np.int64) for _ in range(3)]
    cap = booking_capacity(n_micro, n_stages, ins[5])
    while True:
        booked = [np.zeros(n_stages * cap, dtype=np.int64) for _ in range(2)]
        outs = [_ptr(a) for a in (finish, *scratch, *booked)]
        status = lib.pyaccel_micro_batch_rounds(*outs, cap, *(_ptr(a) for a in ins), n_micro,
                                                n_stages, int(rounds))  # fmt: skip
        if status == 0:
            return finish
        if status != -1:
            raise MemoryError("micro_batch_rounds: no memory for its scratch")
        cap *= 2


if HAS_PIPELINE:
    micro_batch_rounds = _micro_batch_rounds
