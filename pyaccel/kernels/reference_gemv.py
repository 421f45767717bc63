"""NumPy twin (the specification) of the packed low-bit GEMV kernels.

``y = gemv_packed(packed, bits, lut, bscale, block, rscale, mode, x)`` computes, for every row r
of a packed ``rows x cols`` weight tensor (``bits`` per element, little-endian bit stream per
row, rows padded to whole bytes; see numerics/codecs.py)::

    acc[0..16) = 0                                   # 16 fp32 lanes
    for j in 0..cols:  acc[j % 16] += (lut[code(r, j)] * bscale[r, j // block]) * x[j]
    y[r] = rscale[r] * tree(acc)                     # lanes added pairwise: +8, +4, +2, +1

in fp32 with every multiply and add rounded (no fused multiply-add). ``lut`` maps a code to its
value (E2M1 values, or the sign-extended integer); ``block == 0`` means no block scales (the factor
is 1). ``mode`` (1: ``lut`` is the two's complement integer table) lets fast kernels compute the
value arithmetically; the result is the same. The C and Numba kernels must match this bit for bit.

Fast kernels may evaluate this order in any way that rounds the same operations: the C kernel
(csrc/gemv.c) keeps the 16 lanes in one or two SIMD registers, computes ``lut[c] * bscale`` once
per block for all 16 codes (the same rounded products), processes 4 rows at a time and splits
rows over up to 2 threads; no operation is fused, reassociated or skipped.
"""

from __future__ import annotations

import numpy as np

from . import checks

LANES = 16


def unpack_codes(packed: np.ndarray, bits: int, cols: int) -> np.ndarray:
    """Codes ``rows x cols`` (uint8) from a packed bit stream per row."""
    stream = np.unpackbits(np.asarray(packed, np.uint8), axis=1, bitorder="little")
    planes = stream[:, : cols * bits].reshape(packed.shape[0], cols, bits)
    return (planes.astype(np.uint16) << np.arange(bits, dtype=np.uint16)).sum(axis=2)


def gemv_packed(packed, bits, lut, bscale, block, rscale, mode, x) -> np.ndarray:
    """Reference packed GEMV (see the module docstring); returns fp32 ``[rows]``."""
    del mode  # the table already holds the values
    x = np.asarray(x, np.float32)
    checks.gemv_packed(packed, bits, lut, bscale, block, rscale, x)
    cols = x.shape[0]
    rows = packed.shape[0]
    vals = np.asarray(lut, np.float32)[unpack_codes(packed, bits, cols)]
    if block:
        vals = vals * np.repeat(np.asarray(bscale, np.float32), block, axis=1)[:, :cols]
    prod = vals * x
    n_chunks = -(-cols // LANES)
    padded = np.zeros((rows, n_chunks * LANES), np.float32)
    padded[:, :cols] = prod
    chunks = padded.reshape(rows, n_chunks, LANES)
    acc = np.zeros((rows, LANES), np.float32)
    for c in range(n_chunks):
        acc = acc + chunks[:, c, :]
    half = LANES // 2
    while half:
        acc = acc[:, :half] + acc[:, half : 2 * half]
        half //= 2
    return (np.asarray(rscale, np.float32) * acc[:, 0]).astype(np.float32)
