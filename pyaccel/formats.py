"""The format vocabulary of SPEC §6 (bf16 ... hc1): names, aliases, bits per weight with scales,
block sizes, the arithmetic a machine uses, and which codec packs each (as data).

A leaf: it imports nothing of pyaccel but :mod:`pyaccel.errors` (itself a leaf). The packing code
lives in :mod:`pyaccel.numerics.codecs`, which looks formats up here by name.

A tensor is a ``rows x cols`` matrix with ``rows`` output channels and ``cols`` inputs; block and
group scales run along ``cols`` (the reduction dimension), as in GPTQ/AWQ, OCP MX and NVFP4.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError


@dataclass(frozen=True)
class Format:
    """A storage format: ``value_bits`` per element plus its scales.

    ``block`` elements along a row share one scale of ``block_scale_bits``; ``row_scale_bits`` is a
    per-output-channel scale; ``tensor_scale_bytes`` a per-tensor scale. ``compute`` names the
    arithmetic a machine uses for it (``bf16`` for weight-only formats that dequantise first).
    ``codec`` names the packing scheme of :mod:`pyaccel.numerics.codecs` that encodes it (one of
    :data:`CODECS`).
    """

    name: str
    value_bits: int
    block: int = 0
    block_scale_bits: int = 0
    row_scale_bits: int = 0
    tensor_scale_bytes: int = 0
    compute: str = "bf16"
    aliases: tuple[str, ...] = ()
    # Per-role value bits for mixed formats (hc1); roles not listed use ``value_bits``.
    role_bits: dict[str, int] = field(default_factory=dict)
    note: str = ""
    codec: str = ""

    def bits_for(self, role: str) -> int:
        """Value bits used for a tensor of ``role`` (``attn``, ``mlp``, ``expert``, ``head``)."""
        return self.role_bits.get(role, self.value_bits)

    def tensor_bytes(self, rows: int, cols: int, role: str = "mlp") -> int:
        """Bytes to store a ``rows x cols`` weight matrix in this format, scales included."""
        # integer ceilings (-(-a // b)) so ``rows`` may also be a NumPy integer array
        value_bytes = -(-(rows * cols * self.bits_for(role)) // 8)
        scale_bits = rows * self.row_scale_bits
        if self.block:
            scale_bits = scale_bits + rows * -(-cols // self.block) * self.block_scale_bits
        return value_bytes + -(-scale_bits // 8) + self.tensor_scale_bytes

    def bits_per_weight(self, role: str = "mlp", cols: int = 4096) -> float:
        """Average stored bits per weight of a ``cols x cols`` tensor (for tables and docs)."""
        return self.tensor_bytes(cols, cols, role) * 8 / (cols * cols)


# hc1 (Taalas HC1): mixed 3-bit / 6-bit per tensor. Which tensors get 6 bits is not public; the
# named assumption ``hc1.assignment`` keeps attention projections and the LM head at 6 bits (the
# small, error-sensitive tensors) and the MLP/expert tensors at 3 bits, with a 16-bit scale per
# output channel.
HC1_ASSUMPTION = (
    "hc1.assignment: attention projections and LM head at 6 bits, MLP and expert "
    "weights at 3 bits, one 16-bit scale per output channel (HC1's rule is not public)"
)

# The packing schemes of pyaccel.numerics.codecs, by the name a Format's ``codec`` gives.
CODECS = {
    "fp32": "fp32 values as stored",
    "bf16": "bf16 bit patterns, round to nearest even",
    "fp16": "IEEE fp16 bit patterns, round to nearest even",
    "e4m3-tensor": "OCP E4M3 codes with one fp32 scale per tensor, saturating",
    "int-row": "symmetric integers per output channel, bf16 scale per row",
    "int-row-packed": "symmetric 3/6-bit integers per output channel, a bit stream per row",
    "int-block": "symmetric 4-bit integers per block of inputs, bf16 scale per block",
    "e2m1-mx": "OCP MX E2M1 codes, E8M0 scale per block",
    "e2m1-nv": "NVFP4 E2M1 codes, E4M3 scale per block and fp32 per tensor",
}

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("fp32", 32, compute="fp32", codec="fp32"),
        Format("bf16", 16, compute="bf16", codec="bf16"),
        Format("fp16", 16, compute="fp16", codec="fp16"),
        Format(
            "fp8",
            8,
            tensor_scale_bytes=4,
            compute="fp8",
            aliases=("fp8-e4m3",),
            codec="e4m3-tensor",
        ),
        Format("int8", 8, row_scale_bits=16, compute="int8", codec="int-row"),
        Format(
            "int4", 4, block=128, block_scale_bits=16, aliases=("int4-g128",), codec="int-block"
        ),
        Format("int4-g32", 4, block=32, block_scale_bits=16, codec="int-block"),
        Format("mxfp4", 4, block=32, block_scale_bits=8, compute="fp4", codec="e2m1-mx"),
        Format(
            "nvfp4",
            4,
            block=16,
            block_scale_bits=8,
            tensor_scale_bytes=4,
            compute="fp4",
            codec="e2m1-nv",
        ),
        Format(
            "hc1",
            3,
            row_scale_bits=16,
            compute="hc1",
            role_bits={"attn": 6, "head": 6},
            note=HC1_ASSUMPTION,
            codec="int-row-packed",
        ),
    )
}

_ALIASES = {alias: f.name for f in FORMATS.values() for alias in f.aliases}


def get_format(name: str, what: str = "format") -> Format:
    """Look a format up by canonical name or alias; unknown names raise :class:`ConfigError`."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        known = ", ".join(sorted(FORMATS) + sorted(_ALIASES))
        raise ConfigError(f"unknown {what} '{name}'; known formats: {known}")
    return FORMATS[key]
