"""Hardwired-ASIC arithmetic: etched integer weights times int8 activations, exact sums.

Each layer's block multiplies its etched integer weights (``hc1``: 3/6-bit codes with a
per-channel scale; ``int8``) by activations quantised to ``asic_act_bits`` (8) bits per token,
accumulates exactly in integers and rescales once per output. Float formats on an asic are
bf16-operand matmuls on one block (inputs not split).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..codecs import bf16_decode
from ..executor import Executor

# HC1's activation width (named assumption numerics.asic_int8_activations); 0 = bf16 operands
ASIC_ACT_BITS = 8
# the weight formats the etched blocks hold as integer codes
_INTEGER_FORMATS = ("hc1", "int8")


def integer_matmul(
    x: np.ndarray, codes_t: np.ndarray, row_scale: np.ndarray, act_bits: int = 8
) -> np.ndarray:
    """Per-token symmetric ``act_bits`` activations times integer weight codes, summed exactly,
    rescaled once per output."""
    qmax = np.float32((1 << (act_bits - 1)) - 1)
    amax = np.max(np.abs(x), axis=-1, keepdims=True).astype(np.float32)
    s = np.where(amax > 0, amax / qmax, np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(x / s), -qmax, qmax).astype(np.float64)
    acc = q @ codes_t  # exact: integer products and sums far below 2^53
    return (acc.astype(np.float32) * s) * row_scale


class AsicExecutor(Executor):
    """One etched block per layer; integer weight formats on the integer datapath.

    ``asic_act_bits`` (option of ``functional_metrics``): the activation width in bits; 0 runs
    bf16 operands instead.
    """

    def __init__(self, graph, system, placement, asic_act_bits: int = ASIC_ACT_BITS, **options):
        super().__init__(graph, system, placement, **options)
        self.act_bits = asic_act_bits

    def describe(self) -> str:
        """The fixed description of the etched datapath."""
        return "asic: one etched block per layer, integer accumulation"

    def custom_matmul(self, fmt, packed):
        """The integer datapath for integer formats (when ``act_bits`` > 0)."""
        if fmt.name not in _INTEGER_FORMATS or not self.act_bits:
            return None
        codes_t = packed.codes().T.astype(np.float64)
        return partial(integer_matmul, codes_t=codes_t, row_scale=bf16_decode(packed.row_scales),
                       act_bits=self.act_bits)  # fmt: skip
