"""Packed low-bit GEMV: a :class:`~pyaccel.numerics.codecs.Packed` tensor times an fp32 vector,
reading the packed bytes directly (the kernels ``gemv_packed`` in pyaccel/kernels: NumPy twin,
Numba, C). The arithmetic order is fixed (16 fp32 lanes, pairwise lane sum; see
``kernels/reference_gemv.py``) so every backend gives the same bits, whatever the C kernel's
instruction set (generic, AVX2, AVX-512) or thread count (1 or 2)."""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..errors import ConfigError
from .codecs import E2M1_VALUES, E4M3_VALUES, Packed, bf16_decode

# formats whose packed values the kernels read
GEMV_FORMATS = ("int8", "int4", "int4-g32", "mxfp4", "nvfp4", "hc1", "fp8")


def _twos_table(bits: int) -> np.ndarray:
    codes = np.arange(1 << bits)
    return np.where(codes >= 1 << (bits - 1), codes - (1 << bits), codes).astype(np.float32)


def operands(p: Packed) -> tuple:
    """(packed, bits, lut, bscale, block, rscale, mode) of the kernel for ``p``."""
    ones = np.ones(p.rows, np.float32)
    if p.fmt == "int8":
        return p.values, 8, _twos_table(8), None, 0, bf16_decode(p.row_scales), 1
    if p.fmt == "hc1":
        return p.values, p.bits, _twos_table(p.bits), None, 0, bf16_decode(p.row_scales), 1
    if p.fmt == "fp8":
        return p.values, 8, E4M3_VALUES, None, 0, ones * np.float32(p.tensor_scale), 0
    if p.fmt.startswith("int4"):
        return p.values, 4, _twos_table(4), p.block_scale_values(), p.block, ones, 1
    if p.fmt == "mxfp4":
        return p.values, 4, E2M1_VALUES, p.block_scale_values(), p.block, ones, 0
    if p.fmt == "nvfp4":
        scale = ones * np.float32(p.tensor_scale)
        return p.values, 4, E2M1_VALUES, p.block_scale_values(), p.block, scale, 0
    raise ConfigError(f"no packed GEMV kernel for format '{p.fmt}'; have {GEMV_FORMATS}")


def gemv(p: Packed, x, backend: str | None = None) -> np.ndarray:
    """``decode(p) @ x`` in the kernels' fixed fp32 order, reading ``p``'s packed bytes."""
    x = np.ascontiguousarray(x, np.float32)
    if x.shape != (p.cols,):
        raise ConfigError(f"gemv: x has shape {x.shape}, the tensor has {p.cols} columns")
    return kernels.get("gemv_packed", backend)(*operands(p), x)
