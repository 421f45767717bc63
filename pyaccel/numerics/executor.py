"""The interface of one machine kind's arithmetic on one placement (functional execution).

The shared executor (``numerics/execute.py``) runs the decode through a placement and calls the
reference ops; everything that depends on the machine kind is asked of an :class:`Executor`:

- how many ways a layer's matmul inputs are split (``input_parts``) and for which tensor-parallel
  splits (``splits_inputs``);
- how the partial sums of a split matmul are added (``reduce``: order and number format) and how
  routed experts' outputs are summed (``combine``);
- how activations are quantised on the way into a matmul (``activation_format``), or whether the
  kind multiplies the packed weights on a datapath of its own (``custom_matmul``);
- how the partition reads in the output (``describe``).

The defaults are a machine that does not split: bf16 activations, fp32 partial sums added in chain
order, experts summed in top-k order. One module per kind in ``numerics/executors/`` subclasses
it; the kind registry (``hw/kinds.py``) names the class of each ``placement.kind``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np


class Executor(ABC):
    """Arithmetic of one machine kind on one placement; built once per functional run.

    ``options`` are the keyword options of ``functional_metrics`` (one call serves every kind,
    so a kind ignores the options it does not read).
    """

    # named assumptions of this kind's arithmetic, listed after the shared ones in
    # ``functional_assumptions`` (the gpu, asic and wafer ones are in the shared list, which
    # every kind's output has carried since before the per-kind modules)
    ASSUMPTIONS: tuple[str, ...] = ()

    def __init__(self, graph, system, placement, **options):
        self.graph, self.system, self.placement = graph, system, placement

    @abstractmethod
    def describe(self) -> str:
        """The partition as the output states it (``functional_partition``)."""

    def input_parts(self, slot) -> int:
        """How many ways a matmul's inputs are split on the layer ``slot`` (a ``LayerSlot``);
        values below 1 count as 1."""
        return 1

    def splits_inputs(self, split: str) -> bool:
        """True when an op of tensor-parallel ``split`` (``col``, ``row``, ``replicate``,
        ``experts``, ``vocab``, ``heads``) gives each part a partial sum over its inputs."""
        return True

    def activation_format(self, fmt) -> str:
        """The format the activation operand is quantised to per token ("" = bf16) for weights
        in ``fmt`` (a ``Format``)."""
        return ""

    def custom_matmul(self, fmt, packed) -> Callable[[np.ndarray], np.ndarray] | None:
        """``x [tokens, k] -> y [tokens, n]`` computed on the packed weights (``Packed``) by a
        datapath of the kind's own, or None for the shared path (dequantised weights, inputs
        split ``input_parts`` ways, partial sums added by ``reduce``)."""
        return None

    def reduce(self, partials: np.ndarray) -> np.ndarray:
        """Sum partial sums ``[parts, tokens, n]`` over axis 0: fp32, in chain order."""
        return np.cumsum(partials, axis=0, dtype=np.float32)[-1]

    def combine(self, n_parts: int, expert_ids: list[int], parts: list[np.ndarray]) -> np.ndarray:
        """Sum of one token's routed experts' weighted outputs ``parts`` (top-k order; experts
        ``expert_ids``) on a layer split ``n_parts`` ways."""
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out
