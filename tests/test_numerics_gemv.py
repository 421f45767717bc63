"""Packed low-bit GEMV kernels: every backend equals the NumPy twin bit for bit."""

import numpy as np
import pytest

from pyaccel import kernels
from pyaccel.errors import ConfigError
from pyaccel.kernels import reference_gemv
from pyaccel.numerics.codecs import decode, encode
from pyaccel.numerics.gemv import gemv, operands

CASES = [("int8", None), ("int4", None), ("int4-g32", None), ("mxfp4", None), ("nvfp4", None),
         ("hc1", 3), ("hc1", 6), ("fp8", None)]  # fmt: skip


def _data(rows, cols, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    return w, rng.standard_normal(cols).astype(np.float32)


@pytest.mark.parametrize("backend", kernels.available_backends())
@pytest.mark.parametrize("fmt,bits", CASES)
def test_gemv_matches_the_twin_exactly(backend, fmt, bits):
    # column counts: below one lane group, ragged tails, and past the C kernel's 1024 chunk
    for i, cols in enumerate((8, 16, 40, 160, 1100)):
        w, x = _data(5, cols, i)
        p = encode(w, fmt, bits)
        want = reference_gemv.gemv_packed(*operands(p), x)
        assert np.array_equal(gemv(p, x, backend), want), (cols, backend)


def test_twin_is_the_decoded_matrix_product():
    w, x = _data(7, 96, 9)
    for fmt, bits in CASES:
        p = encode(w, fmt, bits)
        assert np.allclose(gemv(p, x, "numpy"), decode(p) @ x, rtol=1e-5, atol=1e-4)


def test_lane_order_hand_case():
    """16 lanes, pairwise sum. Row: 2^24 then sixteen 1s (17 columns), x = 1.
    Lane 0 holds elements 0 and 16: 2^24 + 1 is a tie at ulp 2 -> 2^24 (even); lanes 1..15 = 1.
    Tree +8: lane 0 = 2^24 + 1 -> 2^24, lanes 1..7 = 2. +4: lane 0 = 2^24 + 2, lanes 1..3 = 4.
    +2: lane 0 = 2^24 + 6, lane 1 = 8. +1: 2^24 + 14.
    (A sequential fp32 sum loses every +1 and gives 2^24: the lane order is visible.)"""
    lut = np.arange(256, dtype=np.float32)
    lut[200] = 2.0**24
    codes = np.ones((1, 17), np.uint8)
    codes[0, 0] = 200
    y = reference_gemv.gemv_packed(codes, 8, lut, None, 0, np.ones(1, np.float32), 0,
                                   np.ones(17, np.float32))  # fmt: skip
    assert y[0] == 2.0**24 + 14


def test_gemv_rejects_wrong_shapes_and_formats():
    w, x = _data(3, 32, 1)
    with pytest.raises(ConfigError, match="columns"):
        gemv(encode(w, "int8"), x[:16])
    with pytest.raises(ConfigError, match="no packed GEMV kernel"):
        gemv(encode(w, "bf16"), x)
