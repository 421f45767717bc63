"""The ml_dtypes fast paths of the bf16 / E4M3 / E2M1 codecs are bit-identical to their NumPy
reference twins on random values, every fp32 bit class and the special cases (NaN with sign and
payload, inf, subnormals of both formats, rounding ties, saturation)."""

import numpy as np
import pytest

from pyaccel.errors import ConfigError
from pyaccel.numerics import codecs as C


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype == np.float32 else np.uint8)


def _specials() -> np.ndarray:
    f32 = np.float32
    vals = [0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 6.0, -6.0, 448.0, -448.0,
            f32(np.finfo(np.float32).max), f32(np.finfo(np.float32).tiny), 1e-45, -1e-45,
            1e-40, 2.0**-9, 2.0**-10, 3 * 2.0**-11, 2.0**-7, 2.0**-6 * 0.875]  # fmt: skip
    # E4M3 ties: midpoints between neighbours (e.g. 1 + 1/16 between 1 and 1.125), saturation
    # edges (464 = 448 + half a step; 480 would be the next value)
    vals += [1.0625, 1.1875, 2.125, 0.5 + 1 / 32, 464.0, 465.0, 479.0, 480.0, 1e6, -1e6]
    # E2M1 ties: 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0 and their negatives; just past 6
    vals += [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -2.5, -5.0, 6.5, 7.0, -7.0]
    # bf16 ties: fp32 values exactly halfway between two bf16 values (odd and even LSB)
    for hi in (0x3F80, 0x3F81, 0xC2F1, 0x0001, 0x7F7F):
        vals.append(np.array([(hi << 16) | 0x8000], dtype=np.uint32).view(np.float32)[0])
    out = np.array(vals, dtype=np.float32)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FBFFFFF],
                    dtype=np.uint32).view(np.float32)  # fmt: skip
    return np.concatenate([out, nans])


def _random(n: int = 1 << 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    wide = rng.standard_normal(n) * np.exp2(rng.uniform(-140, 130, n))
    with np.errstate(over="ignore"):  # the widest values overflow to inf on purpose
        wide = wide.astype(np.float32)
    return np.concatenate([wide, rng.standard_normal(n).astype(np.float32)])


def _all_bit_classes(n: int = 1 << 16, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


INPUTS = {"specials": _specials(), "random": _random(), "bit patterns": _all_bit_classes()}


@pytest.mark.parametrize("name", list(INPUTS))
def test_bf16_bits_matches_reference(name):
    x = INPUTS[name]
    assert np.array_equal(C.bf16_bits(x), C.bf16_bits_reference(x))


@pytest.mark.parametrize("name", list(INPUTS))
def test_round_bf16_matches_reference(name):
    x = INPUTS[name]
    want = C.bf16_decode_reference(C.bf16_bits_reference(x))
    assert np.array_equal(_bits(C.round_bf16(x)), _bits(want))
    finite = x[np.isfinite(x)]  # the fast path (no NaN in the vector) on its own
    got = C.round_bf16(finite)
    assert np.array_equal(_bits(got), _bits(C.bf16_decode_reference(C.bf16_bits_reference(finite))))


def test_bf16_decode_matches_reference_on_every_pattern():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    assert np.array_equal(_bits(C.bf16_decode(every)), _bits(C.bf16_decode_reference(every)))


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e3])
def test_e4m3_encode_matches_reference(name, scale):
    with np.errstate(over="ignore", invalid="ignore"):
        x = (INPUTS[name] * np.float32(scale)).astype(np.float32)
    assert np.array_equal(C.e4m3_encode(x), C.e4m3_encode_reference(x))


def test_e4m3_round_trips_every_finite_code():
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
    assert np.array_equal(C.e4m3_encode(C.e4m3_decode(codes)), codes)


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("scale", [1.0, 1e-2, 1e2])
def test_e2m1_encode_matches_reference(name, scale):
    with np.errstate(over="ignore", invalid="ignore"):
        x = INPUTS[name] * np.float32(scale)
    x = x[~np.isnan(x)]
    assert np.array_equal(C.e2m1_encode(x), C.e2m1_encode_reference(x))


def test_e2m1_encode_of_nan_is_refused_like_the_reference():
    x = np.array([1.0, np.nan], dtype=np.float32)
    for enc in (C.e2m1_encode, C.e2m1_encode_reference):
        with pytest.raises(ConfigError, match="NaN"):
            enc(x)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4", "nvfp4", "bf16"])
def test_packed_formats_are_unchanged(fmt, monkeypatch):
    """Whole encode/decode of a tensor is bit-identical with the reference codecs swapped in."""
    w = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32) * 3
    w[0, :4] = [0.0, -0.0, 1e-30, -1e-30]
    fast = C.quantize(w, fmt)
    monkeypatch.setattr(C, "bf16_bits", C.bf16_bits_reference)
    monkeypatch.setattr(C, "bf16_decode", C.bf16_decode_reference)
    monkeypatch.setattr(C, "e4m3_encode", C.e4m3_encode_reference)
    monkeypatch.setattr(C, "e2m1_encode", C.e2m1_encode_reference)
    assert np.array_equal(_bits(fast), _bits(C.quantize(w, fmt)))


def test_scalar_inputs_keep_working():
    assert int(C.e4m3_encode(np.float32(1.0))) == int(C.e4m3_encode_reference(np.float32(1.0)))
    assert int(C.e2m1_encode(np.float32(-3.0))) == int(C.e2m1_encode_reference(np.float32(-3.0)))
