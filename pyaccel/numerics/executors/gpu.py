"""GPU arithmetic: tensor-parallel ranks, bf16 all-reduce, native low-bit tensor-core formats.

Each tensor-parallel rank holds its slice of every op. Column-split ops (q/k/v, gate/up, the LM
head) compute each output on one rank, so splitting does not change their values. Row-split ops
(``o_proj``, ``down_proj``) give each rank a partial sum over its share of the inputs (fp32
accumulation, bf16 GEMM output) and a ring all-reduce adds the ranks' bf16 partials in rank order,
rounding to bf16 after every add (NCCL reduces in the tensor's dtype). Routed experts live on
ranks in contiguous blocks; each rank sums its experts' outputs and the ranks are all-reduced the
same way. Weight-only formats (int4, mxfp4 or nvfp4 on a GPU without FP4 tensor cores, hc1) are
dequantised to bf16 operands; formats the GPU multiplies natively (fp8, int8, fp4 when
``fp4_flops_per_s > 0``) quantise the activations too (per token).
"""

from __future__ import annotations

import numpy as np

from ..codecs import round_bf16
from ..executor import Executor

# the spec parameter that says the tensor cores multiply a compute format natively
_NATIVE_RATE = {"fp8": "fp8_flops_per_s", "int8": "int8_ops_per_s", "fp4": "fp4_flops_per_s"}


class GpuExecutor(Executor):
    """Tensor-parallel ranks (the layer's units), bf16 ring all-reduce in rank order."""

    def describe(self) -> str:
        """``gpu: TP <tp> ranks x PP <pp> stages`` from the placement's layout."""
        layout = self.placement.layout
        tp, pp = (layout.tp, layout.pp) if layout is not None else (None, None)
        return f"gpu: TP {tp or 1} ranks x PP {pp or 1} stages"

    def input_parts(self, slot) -> int:
        """One part per tensor-parallel rank (the layer's units)."""
        return len(slot.units)

    def splits_inputs(self, split: str) -> bool:
        """Only row splits give partial sums; column/vocab/head/expert splits leave each output
        on one rank."""
        return split == "row"

    def activation_format(self, fmt) -> str:
        """The weight format itself where the tensor cores multiply it natively, else bf16."""
        return fmt.name if self._native(fmt.compute) else ""

    def _native(self, compute: str) -> bool:
        """True when the GPU's tensor cores multiply this compute format natively."""
        p = self.system.spec.params
        rate = _NATIVE_RATE.get(compute)
        return rate is not None and float(getattr(p, rate, 0) or 0) > 0

    def reduce(self, partials: np.ndarray) -> np.ndarray:
        """Ring all-reduce of bf16 partials in rank order, rounding to bf16 after every add."""
        acc = round_bf16(partials[0])
        for p in partials[1:]:
            acc = round_bf16(acc + round_bf16(p))
        return acc

    def combine(self, n_parts: int, expert_ids: list[int], parts: list[np.ndarray]) -> np.ndarray:
        """Experts on ranks in contiguous blocks: per-rank fp32 sums, then the all-reduce."""
        n_exp = self.graph.n_experts
        ranks: dict[int, np.ndarray] = {}
        for e, p in zip(expert_ids, parts, strict=True):
            r = e * n_parts // n_exp
            ranks[r] = ranks[r] + p if r in ranks else p
        partials = np.stack([ranks[r] for r in sorted(ranks)])
        return self.reduce(partials)
