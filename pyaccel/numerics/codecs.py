"""Encode/decode of the SPEC §6 formats with their published rounding rules, into packed storage.

A weight tensor is ``rows x cols`` (output channels x inputs); blocks/groups run along ``cols``.

Rounding rules (all round-to-nearest, ties to even, as the specs say). bf16, E4M3 and E2M1
conversions run through ``ml_dtypes`` (its casts implement these rules); each has a
``*_reference`` twin spelling the rule out in NumPy, and tests hold the two bit-identical on
random and special values (NaN, inf, subnormals, ties).

- ``bf16``/``fp16``: IEEE round-to-nearest-even of the fp32 value.
- ``fp8`` (OCP FP8 E4M3, "FN": no infinities, max 448, S.1111.111 is NaN): per-tensor fp32 scale
  ``amax / 448``; out-of-range values saturate to +-448 (the OCP spec's saturating conversion).
- ``int8``: symmetric per output channel, scale ``bf16(amax_row / 127)``, codes in [-127, 127].
- ``int4``/``int4-g32``: symmetric per group of 128/32 inputs, bf16 scale ``amax_group / 7``, codes
  in [-8, 7] (two's complement nibbles, element 2j in the low nibble of byte j).
- ``mxfp4`` (OCP Microscaling Formats v1.0 §6.3): per 32-element block the shared scale is
  ``2^(floor(log2(amax)) - emax_elem)`` with ``emax_elem = 2`` for E2M1, stored as E8M0 (bias 127);
  elements ``x / X`` round to E2M1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6) and clamp at +-6.
- ``nvfp4`` (NVIDIA): fp32 tensor scale ``s_t = amax_tensor / (6 * 448)``; per 16-element block an
  E4M3 scale ``s_b = e4m3(amax_block / 6 / s_t)``; elements ``x / (s_b * s_t)`` round to E2M1.
- ``hc1``: per tensor 3 or 6 bits (``Format.bits_for(role)``), symmetric per output channel with a
  bf16 scale ``amax_row / (2^(b-1) - 1)``, codes in [-2^(b-1), 2^(b-1) - 1], packed as a
  little-endian bit stream per row (element j at bits j*b .. j*b+b-1 of the row).

Packed rows are padded to whole bytes (``tensor_bytes`` in pyaccel/formats.py counts the tensor as
one bit stream; the two agree whenever ``cols * bits`` is a multiple of 8).

Which scheme packs a format is data of the vocabulary (``Format.codec`` in :mod:`pyaccel.formats`);
this module looks it up there and holds one encoder per scheme.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ml_dtypes import bfloat16, float4_e2m1fn, float8_e4m3fn

from ..errors import ConfigError
from ..formats import Format, get_format

# --------------------------------------------------------------------------------------------
# bf16 / fp16


def bf16_bits(x) -> np.ndarray:
    """fp32 values -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN (quiet,
    sign and top payload bits kept). ml_dtypes rounds; bit-identical to
    :func:`bf16_bits_reference` (tests hold them to it)."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        out = f.astype(bfloat16).view(np.uint16)
    nan = np.isnan(f)
    if nan.any():  # ml_dtypes writes a canonical NaN; keep the value's own sign and payload
        u = f[nan].view(np.uint32)
        out[nan] = ((u >> 16) | 0x0040).astype(np.uint16)
    return out


def bf16_bits_reference(x) -> np.ndarray:
    """:func:`bf16_bits` spelled out on the fp32 bits (round half to even by adding 0x7FFF plus
    the kept LSB); the rule the fast path must match bit for bit."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)  # quiet NaN, sign kept
    return out


def bf16_decode(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) -> fp32 values (exact, NaN payloads kept)."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return b.view(bfloat16).astype(np.float32)


def bf16_decode_reference(bits) -> np.ndarray:
    """:func:`bf16_decode` as a 16-bit shift of the pattern into an fp32."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_bf16(x) -> np.ndarray:
    """fp32 values rounded to the nearest bf16 (ties to even), returned as fp32.

    This runs on every activation, mostly on short vectors where per-call overhead is the cost:
    one ml_dtypes round trip; NaN inputs take the exact path (:func:`bf16_bits`), which keeps
    each NaN's sign and payload."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    if f.size and np.isnan(f.max()):  # NaN propagates through max
        return bf16_decode(bf16_bits(f))
    return f.astype(bfloat16).astype(np.float32)


def round_fp16(x) -> np.ndarray:
    """fp32 values rounded to the nearest fp16 (IEEE, ties to even), returned as fp32."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


# --------------------------------------------------------------------------------------------
# small floats: E2M1 (FP4) and E4M3 (FP8), sign-magnitude codes


def _minifloat_table(exp_bits: int, man_bits: int, bias: int, n_codes: int) -> np.ndarray:
    """Magnitudes of the first ``n_codes`` non-negative codes (monotone in the code)."""
    vals = []
    for code in range(n_codes):
        e, m = code >> man_bits, code & ((1 << man_bits) - 1)
        if e == 0:
            vals.append(m / (1 << man_bits) * 2.0 ** (1 - bias))
        else:
            vals.append((1 + m / (1 << man_bits)) * 2.0 ** (e - bias))
    return np.array(vals, dtype=np.float64)


# E2M1: 3 magnitude bits, bias 1, no inf/NaN: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
E2M1_MAGNITUDES = _minifloat_table(2, 1, 1, 8)
# E4M3 (OCP "FN"): codes 0..126 finite (max 448), 127 is NaN.
E4M3_MAGNITUDES = _minifloat_table(4, 3, 7, 127)
E4M3_MAX = 448.0
E2M1_MAX = 6.0


def _round_to_table(mag: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the nearest table entry to each magnitude (ties to the even code), saturating
    at the largest entry. ``table`` is sorted ascending and indexed by code."""
    a = np.asarray(mag, dtype=np.float64)
    lo = np.clip(np.searchsorted(table, a, side="right") - 1, 0, len(table) - 1)
    hi = np.minimum(lo + 1, len(table) - 1)
    d_lo = a - table[lo]
    d_hi = table[hi] - a
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return np.where((hi > lo) & take_hi, hi, lo).astype(np.uint8)


def _minifloat_encode(x, table: np.ndarray, sign_bit: int, nan_code: int | None) -> np.ndarray:
    """Reference encoder: nearest table entry (ties to the even code), saturating, sign bit
    set for negative values (and -0); NaN -> ``nan_code``."""
    f = np.asarray(x, dtype=np.float32)
    nan = np.isnan(f)
    if nan.any() and nan_code is None:
        raise ConfigError("cannot encode NaN in a format without NaN (E2M1)")
    codes = _round_to_table(np.abs(np.where(nan, 0, f)), table)
    codes = codes | np.where(np.signbit(f), np.uint8(1 << sign_bit), np.uint8(0))
    if nan.any():
        codes[nan] = nan_code
    return codes.astype(np.uint8)


def _saturating_cast(x, dtype, limit: float) -> tuple[np.ndarray, np.ndarray]:
    """(codes, NaN mask) of fp32 ``x`` cast by ml_dtypes to ``dtype`` (RNE) after clamping to
    +-``limit``: the OCP saturating conversion (ml_dtypes alone would overflow to NaN)."""
    f = np.asarray(x, dtype=np.float32)
    nan = np.isnan(f)
    with np.errstate(invalid="ignore"):
        codes = np.asarray(np.clip(f, -limit, limit)).astype(dtype).view(np.uint8)
    return codes, nan


def e2m1_encode(x) -> np.ndarray:
    """fp32 -> E2M1 codes (uint8 in 0..15, bit 3 = sign), RNE, saturating at +-6. ml_dtypes
    rounds; bit-identical to :func:`e2m1_encode_reference`."""
    codes, nan = _saturating_cast(x, float4_e2m1fn, E2M1_MAX)
    if nan.any():
        raise ConfigError("cannot encode NaN in a format without NaN (E2M1)")
    return codes


def e2m1_encode_reference(x) -> np.ndarray:
    """:func:`e2m1_encode` as a nearest-value search over the eight E2M1 magnitudes."""
    return _minifloat_encode(x, E2M1_MAGNITUDES, 3, None)


E2M1_VALUES = np.concatenate([E2M1_MAGNITUDES, -E2M1_MAGNITUDES]).astype(np.float32)


def e2m1_decode(codes) -> np.ndarray:
    """E2M1 codes (0..15) -> fp32 values."""
    return E2M1_VALUES[np.asarray(codes, dtype=np.uint8) & 0xF]


def e4m3_encode(x) -> np.ndarray:
    """fp32 -> OCP E4M3 codes (uint8), RNE, saturating at +-448; NaN -> 0x7F (either sign).
    ml_dtypes rounds; bit-identical to :func:`e4m3_encode_reference`."""
    codes, nan = _saturating_cast(x, float8_e4m3fn, E4M3_MAX)
    if nan.any():
        codes[nan] = 0x7F
    return codes


def e4m3_encode_reference(x) -> np.ndarray:
    """:func:`e4m3_encode` as a nearest-value search over the 127 finite E4M3 magnitudes."""
    return _minifloat_encode(x, E4M3_MAGNITUDES, 7, 0x7F)


E4M3_VALUES = np.concatenate([E4M3_MAGNITUDES, [np.nan], -E4M3_MAGNITUDES, [np.nan]]).astype(
    np.float32
)


def e4m3_decode(codes) -> np.ndarray:
    """OCP E4M3 codes (uint8) -> fp32 values (0x7F/0xFF are NaN)."""
    return E4M3_VALUES[np.asarray(codes, dtype=np.uint8)]


def round_e4m3(x) -> np.ndarray:
    """fp32 values rounded to E4M3 (saturating), as fp32."""
    return e4m3_decode(e4m3_encode(x))


def round_e2m1(x) -> np.ndarray:
    """fp32 values rounded to E2M1 (saturating), as fp32."""
    return e2m1_decode(e2m1_encode(x))


def e8m0_decode(codes) -> np.ndarray:
    """E8M0 scale codes (biased exponent, bias 127; 255 is NaN) -> fp32 powers of two."""
    c = np.asarray(codes, dtype=np.int64)
    out = np.ldexp(np.float64(1.0), c - 127).astype(np.float32)
    return np.where(c == 255, np.float32(np.nan), out)


# --------------------------------------------------------------------------------------------
# bit packing


def pack_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack ``rows x cols`` unsigned codes (< 2^bits) into a little-endian bit stream per row:
    element j occupies bits j*bits .. j*bits+bits-1; rows are padded to whole bytes."""
    c = np.asarray(codes, dtype=np.uint8)
    rows, cols = c.shape
    # bit k of element j -> stream bit j*bits + k
    bit_planes = ((c[:, :, None] >> np.arange(bits, dtype=np.uint8)) & 1).reshape(rows, -1)
    return np.packbits(bit_planes, axis=1, bitorder="little")


def unpack_bits(packed: np.ndarray, bits: int, cols: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``rows x cols`` unsigned codes (uint8)."""
    p = np.asarray(packed, dtype=np.uint8)
    stream = np.unpackbits(p, axis=1, bitorder="little")[:, : cols * bits]
    planes = stream.reshape(p.shape[0], cols, bits).astype(np.uint8)
    return (planes << np.arange(bits, dtype=np.uint8)).sum(axis=2, dtype=np.uint8)


def to_twos(q: np.ndarray, bits: int) -> np.ndarray:
    """Signed integer codes -> their ``bits``-bit two's complement patterns (uint8)."""
    return (np.asarray(q, dtype=np.int16) & ((1 << bits) - 1)).astype(np.uint8)


def from_twos(u: np.ndarray, bits: int) -> np.ndarray:
    """``bits``-bit two's complement patterns -> signed integers (int8)."""
    v = np.asarray(u, dtype=np.int16)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v).astype(np.int8)


# --------------------------------------------------------------------------------------------
# packed tensors


@dataclass(frozen=True)
class Packed:
    """A weight tensor in a packed format.

    ``values`` holds the packed element codes (uint8 rows of ``bits`` per element; uint16 bit
    patterns for bf16/fp16; fp32 for fp32). ``block_scales`` holds raw scale codes per
    ``rows x ceil(cols / block)`` (uint16 bf16 for int4, uint8 E8M0 for mxfp4, uint8 E4M3 for
    nvfp4), ``row_scales`` bf16 bit patterns per row (int8, hc1), ``tensor_scale`` an fp32 scale
    (fp8, nvfp4; 1.0 otherwise).
    """

    fmt: str
    rows: int
    cols: int
    bits: int
    values: np.ndarray
    block: int = 0
    block_scales: np.ndarray | None = None
    row_scales: np.ndarray | None = None
    tensor_scale: float = 1.0

    @property
    def codec(self) -> str:
        """The packing scheme of this tensor's format (``Format.codec``)."""
        return get_format(self.fmt).codec

    @property
    def nbytes(self) -> int:
        """Bytes of packed values and scales as stored here."""
        n = self.values.nbytes + get_format(self.fmt).tensor_scale_bytes
        for s in (self.block_scales, self.row_scales):
            if s is not None:
                n += s.nbytes
        return n

    def block_scale_values(self) -> np.ndarray:
        """Block scales as fp32 (``rows x n_blocks``)."""
        codec = self.codec
        if codec == "int-block":
            return bf16_decode(self.block_scales)
        if codec == "e2m1-mx":
            return e8m0_decode(self.block_scales)
        return e4m3_decode(self.block_scales)

    def codes(self) -> np.ndarray:
        """Element values before scaling, as fp32 (``rows x cols``): integers for int/hc1
        formats, E2M1/E4M3 values for the float ones."""
        codec = self.codec
        if codec in ("fp32", "bf16", "fp16"):
            return decode(self)
        if codec == "int-row":
            return self.values.view(np.int8).astype(np.float32)
        if codec == "e4m3-tensor":
            return e4m3_decode(self.values)
        raw = unpack_bits(self.values, self.bits, self.cols)
        if codec in ("e2m1-mx", "e2m1-nv"):
            return e2m1_decode(raw)
        return from_twos(raw, self.bits).astype(np.float32)


def _blocks(w: np.ndarray, block: int) -> tuple[np.ndarray, int]:
    """``w`` padded with zeros to whole blocks and viewed ``rows x n_blocks x block``."""
    rows, cols = w.shape
    nb = -(-cols // block)
    pad = np.zeros((rows, nb * block), dtype=np.float32)
    pad[:, :cols] = w
    return pad.reshape(rows, nb, block), nb


def _expand(scales: np.ndarray, block: int, cols: int) -> np.ndarray:
    return np.repeat(scales, block, axis=1)[:, :cols]


def _safe(scale: np.ndarray) -> np.ndarray:
    return np.where(scale == 0, np.float32(1.0), scale).astype(np.float32)


_BF16_MIN_NORMAL = np.float32(2.0**-126)


def _int_symmetric(amax: np.ndarray, qmax: int):
    """bf16 scale bits and fp32 scale (never 0) of a symmetric quantiser with codes to qmax.

    A scale below bf16's smallest normal (2**-126) is flushed to zero, as hardware with
    flush-to-zero stores it: a subnormal scale would not survive a second quantisation."""
    raw = (amax / np.float32(qmax)).astype(np.float32)
    raw = np.where(raw < _BF16_MIN_NORMAL, np.float32(0.0), raw)
    scale_bits = bf16_bits(raw)
    scale = _safe(bf16_decode(scale_bits))
    return scale_bits, scale


def _encode_fp8(name: str, a: np.ndarray, fmt: Format, bits) -> Packed:
    rows, cols = a.shape
    amax = float(np.max(np.abs(a))) if a.size else 0.0
    scale = np.float32(amax / E4M3_MAX) if amax > 0 else np.float32(1.0)
    return Packed(name, rows, cols, 8, e4m3_encode(a / scale), tensor_scale=float(scale))


def _encode_int8(name: str, a: np.ndarray, fmt: Format, bits) -> Packed:
    rows, cols = a.shape
    sbits, s = _int_symmetric(np.max(np.abs(a), axis=1), 127)
    q = np.clip(np.rint(a / s[:, None]), -127, 127).astype(np.int8)
    return Packed(name, rows, cols, 8, q.view(np.uint8), row_scales=sbits)


def _encode_hc1(name: str, a: np.ndarray, fmt: Format, bits) -> Packed:
    rows, cols = a.shape
    b = 3 if bits is None else int(bits)
    if b not in (3, 6):
        raise ConfigError(f"hc1 tensors are 3- or 6-bit, got {b}")
    qmax = (1 << (b - 1)) - 1
    sbits, s = _int_symmetric(np.max(np.abs(a), axis=1), qmax)
    q = np.clip(np.rint(a / s[:, None]), -qmax - 1, qmax)
    return Packed(name, rows, cols, b, pack_bits(to_twos(q, b), b), row_scales=sbits)


def _encode_int4(name: str, a: np.ndarray, fmt: Format, bits) -> Packed:
    rows, cols = a.shape
    blk, _ = _blocks(a, fmt.block)
    sbits, s = _int_symmetric(np.max(np.abs(blk), axis=2), 7)
    q = np.clip(np.rint(a / _expand(s, fmt.block, cols)), -8, 7)
    return Packed(name, rows, cols, 4, pack_bits(to_twos(q, 4), 4), fmt.block, sbits)


def _encode_mxfp4(name: str, a: np.ndarray, fmt: Format, bits) -> Packed:
    rows, cols = a.shape
    blk, _ = _blocks(a, fmt.block)
    amax = np.max(np.abs(blk), axis=2)
    _, e = np.frexp(amax.astype(np.float64))  # amax = m * 2^e, m in [0.5, 1)
    shared = np.clip(e - 1 - 2, -127, 127)  # floor(log2 amax) - emax_elem(E2M1) = 2
    codes = np.where(amax > 0, shared + 127, 0).astype(np.uint8)
    x = a / _expand(e8m0_decode(codes), fmt.block, cols)
    return Packed(name, rows, cols, 4, pack_bits(e2m1_encode(x), 4), fmt.block, codes)


def _encode_nvfp4(name: str, a: np.ndarray, fmt: Format, bits) -> Packed:
    rows, cols = a.shape
    blk, _ = _blocks(a, fmt.block)
    amax = np.max(np.abs(blk), axis=2)
    t_amax = float(np.max(amax)) if amax.size else 0.0
    s_t = np.float32(t_amax / (E2M1_MAX * E4M3_MAX)) if t_amax > 0 else np.float32(1.0)
    sb_codes = e4m3_encode(amax / np.float32(E2M1_MAX) / s_t)
    denom = _safe(e4m3_decode(sb_codes) * s_t)
    x = a / _expand(denom, fmt.block, cols)
    values = pack_bits(e2m1_encode(x), 4)
    return Packed(name, rows, cols, 4, values, fmt.block, sb_codes, tensor_scale=float(s_t))


# One encoder per packing scheme (``Format.codec``): (name, fp32 rows x cols, format, hc1 bits).
_ENCODERS = {
    "fp32": lambda name, a, fmt, bits: Packed(name, *a.shape, 32, a.copy()),
    "bf16": lambda name, a, fmt, bits: Packed(name, *a.shape, 16, bf16_bits(a)),
    "fp16": lambda name, a, fmt, bits: Packed(
        name, *a.shape, 16, a.astype(np.float16).view(np.uint16)
    ),
    "e4m3-tensor": _encode_fp8,
    "int-row": _encode_int8,
    "int-row-packed": _encode_hc1,
    "int-block": _encode_int4,
    "e2m1-mx": _encode_mxfp4,
    "e2m1-nv": _encode_nvfp4,
}


def encode(w, fmt_name: str, bits: int | None = None) -> Packed:
    """Quantise an fp32 ``rows x cols`` tensor (1-D is one row) to ``fmt_name`` in packed
    storage. ``bits`` selects hc1's width (3 or 6; default 3)."""
    fmt = get_format(fmt_name)
    a = np.asarray(w, dtype=np.float32)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ConfigError(f"encode: expected a 2-D tensor, got shape {a.shape}")
    encoder = _ENCODERS.get(fmt.codec)
    if encoder is None:
        raise ConfigError(f"encode: no codec for format '{fmt.name}'")
    return encoder(fmt.name, a, fmt, bits)


def decode(p: Packed) -> np.ndarray:
    """The fp32 ``rows x cols`` tensor a packed tensor represents."""
    codec = p.codec
    if codec == "fp32":
        return p.values.astype(np.float32)
    if codec == "bf16":
        return bf16_decode(p.values)
    if codec == "fp16":
        return p.values.view(np.float16).astype(np.float32)
    codes = p.codes()
    if codec == "e4m3-tensor":
        return codes * np.float32(p.tensor_scale)
    if p.row_scales is not None:
        return codes * bf16_decode(p.row_scales)[:, None]
    scales = _expand(p.block_scale_values(), p.block, p.cols)
    out = codes * scales
    if codec == "e2m1-nv":
        out = out * np.float32(p.tensor_scale)
    return out.astype(np.float32)


def quantize(w, fmt_name: str, bits: int | None = None) -> np.ndarray:
    """``decode(encode(w))``: what the tensor becomes when stored in ``fmt_name``."""
    a = np.asarray(w, dtype=np.float32)
    out = decode(encode(a, fmt_name, bits))
    return out.reshape(a.shape)


def round_activations(x, compute: str) -> np.ndarray:
    """Activations as a unit holds them for ``compute``: bf16/fp16 rounding or fp32 unchanged."""
    if compute == "fp16":
        return round_fp16(x)
    if compute == "fp32":
        return np.asarray(x, dtype=np.float32)
    return round_bf16(x)
