"""Numba packed low-bit GEMV (twin: reference_gemv.gemv_packed; same order, bit for bit)."""

from __future__ import annotations

import numba
import numpy as np

from . import checks

LANES = 16


@numba.njit(cache=True)
def _code(row, j, bits):  # pragma: no cover - compiled
    off = j * bits
    byte = off >> 3
    word = np.uint32(row[byte])
    if byte + 1 < row.shape[0]:
        word |= np.uint32(row[byte + 1]) << np.uint32(8)
    return (word >> np.uint32(off & 7)) & np.uint32((1 << bits) - 1)


@numba.njit(cache=True)
def _finish(acc, scale):  # pragma: no cover - compiled
    h = LANES // 2
    while h:
        for i in range(h):
            acc[i] = acc[i] + acc[i + h]
        h //= 2
    return np.float32(scale * acc[0])


@numba.njit(cache=True)
def _gemv(out, packed, bits, lut, bscale, block, rscale, mode, x):  # pragma: no cover
    rows = packed.shape[0]
    cols = x.shape[0]
    full = cols - cols % LANES
    acc = np.zeros(LANES, np.float32)
    vals = np.zeros(LANES, np.float32)
    for r in range(rows):
        row = packed[r]
        acc[:] = 0
        for j0 in range(0, full, LANES):
            if bits == 8:
                if mode == 1:
                    for ln in range(LANES):
                        vals[ln] = np.float32(np.int8(row[j0 + ln]))
                else:
                    for ln in range(LANES):
                        vals[ln] = lut[row[j0 + ln]]
            elif bits == 4:
                b0 = j0 >> 1
                if mode == 1:
                    for ln in range(LANES // 2):
                        v = np.int32(row[b0 + ln])
                        vals[2 * ln] = np.float32(((v & 15) ^ 8) - 8)
                        vals[2 * ln + 1] = np.float32(((v >> 4) ^ 8) - 8)
                else:
                    for ln in range(LANES // 2):
                        v = row[b0 + ln]
                        vals[2 * ln] = lut[v & 15]
                        vals[2 * ln + 1] = lut[v >> 4]
            else:
                for ln in range(LANES):
                    vals[ln] = lut[_code(row, j0 + ln, bits)]
            if block:
                s = bscale[r, j0 // block]
                if block % LANES == 0:
                    for ln in range(LANES):
                        vals[ln] = vals[ln] * s
                else:
                    for ln in range(LANES):
                        vals[ln] = vals[ln] * bscale[r, (j0 + ln) // block]
            for ln in range(LANES):
                acc[ln] = acc[ln] + vals[ln] * x[j0 + ln]
        for j in range(full, cols):
            v = lut[_code(row, j, bits)]
            if block:
                v = v * bscale[r, j // block]
            acc[j - full] = acc[j - full] + v * x[j]
        out[r] = _finish(acc, rscale[r])
    return out


def gemv_packed(packed, bits, lut, bscale, block, rscale, mode, x) -> np.ndarray:
    """Numba twin of :func:`pyaccel.kernels.reference_gemv.gemv_packed`."""
    x = np.ascontiguousarray(x, np.float32)
    packed = np.ascontiguousarray(packed, np.uint8)
    checks.gemv_packed(packed, bits, lut, bscale, block, rscale, x)
    out = np.empty(packed.shape[0], np.float32)
    bs = np.ascontiguousarray(bscale if block else np.ones((1, 1)), np.float32)
    return _gemv(
        out,
        packed,
        int(bits),
        np.ascontiguousarray(lut, np.float32),
        bs,
        int(block),
        np.ascontiguousarray(rscale, np.float32),
        int(mode),
        x,
    )
