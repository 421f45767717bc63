"""Packed low-bit GEMV kernels: every backend equals the NumPy twin bit for bit."""

import numpy as np
import pytest

from pyaccel import kernels
from pyaccel.errors import ConfigError
from pyaccel.kernels import ffi, reference_gemv
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


def _c_paths():
    """(isa, threads) of every C kernel path this CPU runs (none without the C build)."""
    if not ffi.available:
        return []
    from pyaccel.kernels import ffi_gemv

    w, x = _data(1, 16, 0)
    paths = []
    for isa in ffi_gemv.ISAS:
        try:
            ffi_gemv.gemv_packed(*operands(encode(w, "int8")), x, isa=isa)
        except RuntimeError:
            continue  # this CPU lacks the instruction set
        paths += [(isa, 1), (isa, 2)]
    return paths


C_PATHS = _c_paths()
NEEDS = {"generic": "nothing", "avx2": "AVX2", "avx512": "AVX-512 F+BW+VBMI"}


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("fmt,bits", CASES)
def test_every_c_path_and_thread_count_matches_the_twin(fmt, bits, isa):
    """Generic C, AVX2 and AVX-512 decoders, 1 or 2 threads: the twin's bits. Rows around the
    4-row groups, columns around 16-lane groups, blocks and the 3/6-bit groups at a row's end.
    A path this machine cannot run is skipped with the reason (never dropped silently)."""
    if not ffi.available:
        pytest.skip("C kernels not built")
    if (isa, 1) not in C_PATHS:
        pytest.skip(f"this CPU or C build cannot run the {isa} path (needs {NEEDS[isa]} on x86)")
    from pyaccel.kernels import ffi_gemv

    sizes = [(1, 1), (3, 15), (4, 16), (5, 17), (7, 33), (9, 48), (6, 70), (13, 129), (8, 1100)]
    for i, (rows, cols) in enumerate(sizes):
        w, x = _data(rows, cols, 100 + i)
        ops = operands(encode(w, fmt, bits))
        want = reference_gemv.gemv_packed(*ops, x)
        for threads in (1, 2):
            got = ffi_gemv.gemv_packed(*ops, x, isa=isa, threads=threads)
            assert np.array_equal(got, want), (rows, cols, isa, threads)


@pytest.mark.parametrize("backend", kernels.available_backends())
@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_any_table_and_block_matches_the_twin(backend, bits):
    """Random packed bytes, a random table (mode 0) and random block scales, block sizes a
    multiple of 16 or not: every backend (and every C path) gives the twin's bits."""
    rng = np.random.default_rng(bits)
    paths = [(None, 0)] if backend != "c" else C_PATHS
    for rows, cols in ((3, 16), (6, 37), (5, 200), (9, 1030)):
        packed = rng.integers(0, 256, (rows, -(-cols * bits // 8)), dtype=np.uint8)
        lut = rng.standard_normal(1 << bits).astype(np.float32)
        x = rng.standard_normal(cols).astype(np.float32)
        rscale = rng.standard_normal(rows).astype(np.float32)
        for block in (0, 16, 32, 48, 10):
            bs = (
                rng.standard_normal((rows, -(-cols // block))).astype(np.float32) if block else None
            )
            args = (packed, bits, lut, bs, block, rscale, 0, x)
            want = reference_gemv.gemv_packed(*args)
            fn = kernels.get("gemv_packed", backend)
            for isa, threads in paths:
                got = fn(*args) if isa is None else fn(*args, isa=isa, threads=threads)
                assert np.array_equal(got, want), (rows, cols, block, isa, threads)


@pytest.mark.skipif(not C_PATHS, reason="C kernels not built")
def test_threads_do_not_change_the_bits_of_a_large_call():
    """Above the automatic threading threshold (2^20 elements): same bits as one thread."""
    from pyaccel.kernels import ffi_gemv

    w, x = _data(1030, 1100, 3)
    for fmt, bits in CASES:
        ops = operands(encode(w, fmt, bits))
        one = ffi_gemv.gemv_packed(*ops, x, threads=1)
        assert np.array_equal(ffi_gemv.gemv_packed(*ops, x), one), fmt
        assert np.array_equal(ffi_gemv.gemv_packed(*ops, x, threads=2), one), fmt
        assert np.array_equal(reference_gemv.gemv_packed(*ops, x), one), fmt


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


@pytest.mark.parametrize("bits", [4, 3])
@pytest.mark.parametrize("backend", kernels.available_backends())
def test_tables_of_few_significant_bits_match_the_twin(backend, bits):
    """4- and 3-bit tables whose floats end in 16 zero bits (int4's and hc1's integers, e2m1
    values, any value of at most 8 significant bits) take the AVX2 two-plane decoders when
    blocks are 16 or whole 32s (48: the byte-plane / permute ones): every path gives the twin's
    bits, whatever the shape, block or sign, up to a row's last byte."""
    rng = np.random.default_rng(44)
    paths = [(None, 0)] if backend != "c" else C_PATHS
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
    eight_bits = rng.integers(-255, 256, 16) * 2.0 ** rng.integers(-20, 20, 16)
    half = 1 << (bits - 1)
    tables = [np.arange(-half, half, dtype=np.float32),
              np.concatenate([e2m1[:half], -e2m1[:half]]),
              eight_bits[: 2 * half].astype(np.float32)]  # fmt: skip
    for lut in tables:
        for rows, cols in ((1, 32), (3, 40), (4, 48), (5, 64), (7, 95), (6, 1100), (3, 1056)):
            packed = rng.integers(0, 256, (rows, -(-cols * bits // 8)), dtype=np.uint8)
            x = rng.standard_normal(cols).astype(np.float32)
            rscale = rng.standard_normal(rows).astype(np.float32)
            for block in (0, 16, 32, 48, 64):
                bs = (
                    rng.standard_normal((rows, -(-cols // block))).astype(np.float32)
                    if block
                    else None
                )
                args = (packed, bits, lut, bs, block, rscale, 0, x)
                want = reference_gemv.gemv_packed(*args)
                fn = kernels.get("gemv_packed", backend)
                for isa, threads in paths:
                    got = fn(*args) if isa is None else fn(*args, isa=isa, threads=threads)
                    assert np.array_equal(got, want), (lut[:3], rows, cols, block, isa, threads)
