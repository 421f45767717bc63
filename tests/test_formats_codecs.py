"""Encode/decode of the SPEC §6 formats: published rounding rules (hand cases), round trips of
representable values, monotone rounding, packing and byte accounting (hypothesis properties)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pyaccel.errors import ConfigError
from pyaccel.formats import CODECS, FORMATS, get_format
from pyaccel.numerics import codecs as c
from pyaccel.numerics.codecs import decode, encode, quantize

QUANT = ("fp8", "int8", "int4", "int4-g32", "mxfp4", "nvfp4", "hc1")
finite = st.floats(-1e4, 1e4, allow_nan=False, width=32)


# --- hand cases of the rounding rules -------------------------------------------------------


def test_bf16_round_to_nearest_even():
    # bf16 keeps 7 fraction bits: the ulp at 1.0 is 2^-7.
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa (1.0);
    # 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up to 1 + 2^-6.
    got = c.round_bf16(np.float32([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8)]))
    assert got.tolist() == [1.0, 1 + 2**-6, 1 + 2**-7, -1.0]
    assert np.isnan(c.round_bf16(np.float32([np.nan])))[0]


def test_e2m1_values_ties_and_saturation():
    assert c.E2M1_MAGNITUDES.tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    # ties: 0.25 -> 0 (code 0 even), 2.5 -> 2 (code 4), 5 -> 4 (code 6), 1.25 -> 1 (code 2);
    # 7 and 100 saturate to 6; signs kept.
    x = np.float32([0.25, 2.5, 5.0, 1.25, 7.0, 100.0, -5.0, 0.75])
    assert c.round_e2m1(x).tolist() == [0.0, 2.0, 4.0, 1.0, 6.0, 6.0, -4.0, 1.0]
    with pytest.raises(ConfigError):
        c.e2m1_encode(np.float32([np.nan]))


def test_e4m3_saturates_at_448_and_has_nan():
    # OCP E4M3FN: 0x7E = 1.75 * 2^8 = 448 is the largest finite value; 0x7F is NaN.
    assert c.e4m3_decode(np.uint8([0x7E]))[0] == 448.0
    assert np.isnan(c.e4m3_decode(np.uint8([0x7F, 0xFF]))).all()
    # 17 is halfway between 16 (code 0x58) and 18 (0x59): ties to even -> 16; 1000 -> 448
    assert c.e4m3_encode(np.float32([17, 1000, -1000, 2**-9])).tolist() == [0x58, 0x7E, 0xFE, 1]
    # smallest subnormal is 2^-9 (code 1); half of it ties to 0
    assert c.round_e4m3(np.float32([2**-10]))[0] == 0.0


def test_mxfp4_shared_scale_rule():
    # one 32-block with amax 5: floor(log2 5) = 2, emax(E2M1) = 2 -> X = 2^0 (E8M0 code 127);
    # 5 -> 4 (tie to even), 1.3 -> 1.5, -0.2 -> 0 (nearer than 0.5)
    w = np.zeros((1, 32), np.float32)
    w[0, :3] = [5.0, 1.3, -0.2]
    p = encode(w, "mxfp4")
    assert p.block_scales.tolist() == [[127]]
    assert decode(p)[0, :3].tolist() == [4.0, 1.5, -0.0]
    # amax 0.1: floor(log2 0.1) = -4 -> X = 2^-6; 0.1 / 2^-6 = 6.4 -> 6 -> 0.09375
    p = encode(np.full((1, 32), 0.1, np.float32), "mxfp4")
    assert p.block_scales[0, 0] == 127 - 6 and decode(p)[0, 0] == 6 * 2**-6


def test_nvfp4_two_level_scale():
    # tensor amax 6*448 = 2688 -> s_t = 1; block 0 amax 2688 -> s_b = e4m3(448) = 448;
    # block 1 amax 3 -> s_b = e4m3(0.5) = 0.5, so 3 -> 6 * 0.5 exactly and 1 -> 2 * 0.5
    w = np.zeros((1, 32), np.float32)
    w[0, 0], w[0, 16], w[0, 17] = 2688.0, 3.0, 1.0
    p = encode(w, "nvfp4")
    assert p.tensor_scale == 1.0
    assert c.e4m3_decode(p.block_scales).tolist() == [[448.0, 0.5]]
    assert decode(p)[0, [0, 16, 17]].tolist() == [2688.0, 3.0, 1.0]


def test_int_formats_symmetric_scales():
    # int8 row [127, -63.5, 0.4]: scale bf16(127/127) = 1 -> codes 127, -64 (tie to even), 0
    p = encode(np.float32([[127, -63.5, 0.4]]), "int8")
    assert p.values.view(np.int8).tolist() == [[127, -64, 0]]
    # int4 group of 128: amax 7 -> scale 1: 7, -3.5 -> -4 (tie to even), 2.5 -> 2, 0.2 -> 0
    q = quantize(np.float32([[7.0, -3.5, 2.5, 0.2] + [0] * 124]), "int4")
    assert q[0, :4].tolist() == [7.0, -4.0, 2.0, 0.0]
    # hc1 3-bit: amax 3 -> scale 1, codes in [-4, 3]; 6-bit: amax 31 -> scale 1
    assert quantize(np.float32([[3, -2.5, 1.4]]), "hc1", 3).tolist() == [[3, -2, 1]]
    assert quantize(np.float32([[31, -30.5, 1.5]]), "hc1", 6).tolist() == [[31, -30, 2]]


# --- properties --------------------------------------------------------------------------


def test_every_minifloat_code_round_trips():
    codes = np.arange(16, dtype=np.uint8)
    assert np.array_equal(c.e2m1_encode(c.e2m1_decode(codes))[codes != 8], codes[codes != 8])
    codes = np.array([i for i in range(256) if i & 0x7F != 0x7F], dtype=np.uint8)
    assert np.array_equal(c.e4m3_encode(c.e4m3_decode(codes)), codes)
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    vals = c.bf16_decode(bits)
    ok = ~np.isnan(vals)
    assert np.array_equal(c.bf16_bits(vals)[ok], bits[ok])


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, 40, elements=finite))
def test_element_rounding_is_monotone(x):
    xs = np.sort(x)
    for fn in (c.round_bf16, c.round_fp16, c.round_e4m3, c.round_e2m1):
        y = fn(np.clip(xs, -6e4, 6e4))
        assert np.all(np.diff(y) >= 0), fn.__name__


@settings(max_examples=40, deadline=None)
@given(arrays(np.float32, (3, 64), elements=finite), st.sampled_from(
    ["bf16", "fp16", "int8", "int4", "int4-g32", "mxfp4", "hc1"]))  # fmt: skip
def test_quantized_values_are_representable(w, fmt):
    """Round trip of representable values: what a format produced, it stores exactly."""
    once = quantize(np.clip(w, -6e4, 6e4), fmt)
    assert np.array_equal(quantize(once, fmt), once)


@pytest.mark.parametrize("amax", [8e-37, 3e-38, 1e-39, 1e-44])
@pytest.mark.parametrize("fmt", ["int8", "int4", "hc1"])
def test_tiny_rows_quantise_stably(amax, fmt):
    """Rows whose scale would be a bf16 subnormal are flushed to zero, so a second
    quantisation gives the same values (hypothesis once found int8 at amax 8e-37)."""
    w = np.array([[amax, -amax / 3, amax / 7, 0.0]], dtype=np.float32)
    once = quantize(w, fmt)
    assert np.array_equal(quantize(once, fmt), once)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([3, 4, 6, 8]), st.integers(1, 5), st.integers(1, 40), st.data())
def test_pack_unpack_inverse(bits, rows, cols, data):
    codes = data.draw(arrays(np.uint8, (rows, cols), elements=st.integers(0, 2**bits - 1)))
    packed = c.pack_bits(codes, bits)
    assert packed.shape == (rows, -(-cols * bits // 8))
    assert np.array_equal(c.unpack_bits(packed, bits, cols), codes)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_packed_bytes_match_the_timing_byte_count(fmt):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 256)).astype(np.float32)
    for role in ("mlp", "attn"):
        bits = get_format(fmt).bits_for(role)
        p = encode(w, fmt, bits if fmt == "hc1" else None)
        assert p.nbytes == get_format(fmt).tensor_bytes(8, 256, role)


@pytest.mark.parametrize("fmt", QUANT)
def test_error_shrinks_with_more_bits(fmt):
    rng = np.random.default_rng(4)
    w = rng.standard_normal((16, 256)).astype(np.float32)
    err = np.sqrt(np.mean((quantize(w, fmt) - w) ** 2))
    bf16_err = np.sqrt(np.mean((quantize(w, "bf16") - w) ** 2))
    assert bf16_err < err < 0.5


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ConfigError, match="unknown format"):
        encode(np.ones((2, 2)), "int3")
    with pytest.raises(ConfigError, match="3- or 6-bit"):
        encode(np.ones((2, 2)), "hc1", 5)


# --- the vocabulary is a leaf; every format names a codec that exists ------------------------


def test_every_format_names_a_codec_that_encodes_it():
    # a format added to the vocabulary without a packing scheme would fail only when a
    # functional run first met it
    for name, fmt in FORMATS.items():
        assert fmt.codec in CODECS, name
        assert fmt.codec in c._ENCODERS, name


def test_formats_units_and_errors_import_nothing_of_pyaccel_but_errors():
    import ast
    from pathlib import Path

    import pyaccel

    root = Path(pyaccel.__file__).parent
    for leaf in ("formats.py", "units.py", "errors.py"):
        tree = ast.parse((root / leaf).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = "." * node.level + (node.module or "")
                assert node.level == 0 or target == ".errors", (leaf, target)
                assert not target.startswith("pyaccel"), (leaf, target)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("pyaccel") for a in node.names), leaf
