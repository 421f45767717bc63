"""C packed low-bit GEMV via cffi (twin: reference_gemv.gemv_packed; same order, bit for bit)."""

from __future__ import annotations

import numpy as np

from .ffi import ffi, lib


def _ptr(kind: str, arr: np.ndarray):
    return ffi.cast(kind, ffi.from_buffer(arr))


def gemv_packed(packed, bits, lut, bscale, block, rscale, mode, x) -> np.ndarray:
    """C twin of :func:`pyaccel.kernels.reference_gemv.gemv_packed`."""
    x = np.ascontiguousarray(x, np.float32)
    packed = np.ascontiguousarray(packed, np.uint8)
    lut = np.ascontiguousarray(lut, np.float32)
    rows, cols = packed.shape[0], x.shape[0]
    if packed.shape[1] * 8 < cols * int(bits):
        raise ValueError("packed rows are shorter than cols * bits")
    bs = np.ascontiguousarray(bscale if block else np.ones((rows, 1)), np.float32)
    rs = np.ascontiguousarray(rscale, np.float32)
    out = np.empty(rows, np.float32)
    lib.pyaccel_gemv_packed(
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
    )
    return out
