"""C packed low-bit GEMV via cffi (twin: reference_gemv.gemv_packed; same order, bit for bit)."""

from __future__ import annotations

import numpy as np

from . import checks
from .ffi import ffi, lib

# instruction-set paths of the C kernel (csrc/gemv.c); "best" is what the CPU has
ISAS = {"best": -1, "generic": 0, "avx2": 1, "avx512": 2}


def _ptr(kind: str, arr: np.ndarray):
    return ffi.cast(kind, ffi.from_buffer(arr))


def gemv_packed(
    packed, bits, lut, bscale, block, rscale, mode, x, isa="best", threads=0
) -> np.ndarray:
    """C twin of :func:`pyaccel.kernels.reference_gemv.gemv_packed`. ``isa`` (a key of ``ISAS``)
    forces one of the C kernel's paths, ``threads`` a thread count (0: automatic, at most 2);
    both are for tests, the bits never change. A path this CPU cannot run raises RuntimeError."""
    x = np.ascontiguousarray(x, np.float32)
    packed = np.ascontiguousarray(packed, np.uint8)
    lut = np.ascontiguousarray(lut, np.float32)
    checks.gemv_packed(packed, bits, lut, bscale, block, rscale, x)
    rows, cols = packed.shape[0], x.shape[0]
    bs = np.ascontiguousarray(bscale if block else np.ones((rows, 1)), np.float32)
    rs = np.ascontiguousarray(rscale, np.float32)
    out = np.empty(rows, np.float32)
    ran = lib.pyaccel_gemv_packed_isa(
        _ptr("float *", out),
        _ptr("uint8_t *", packed),
        rows,
        packed.shape[1],
        int(bits),
        _ptr("float *", lut),
        _ptr("float *", bs),
        bs.shape[1],
        int(block),
        _ptr("float *", rs),
        int(mode),
        _ptr("float *", x),
        cols,
        ISAS[isa],
        int(threads),
    )
    if ran < 0:
        raise RuntimeError(f"this CPU cannot run the C GEMV kernel's {isa} path")
    return out
