"""LPU-chain arithmetic: a layer spread over ``n`` chips splits each matmul's inputs ``n`` ways.

Generic fallback: fp32 partial sums added in chip order (the base rule of
:class:`~pyaccel.numerics.executor.Executor`).
"""

from __future__ import annotations

from ..executor import Executor


class LpuExecutor(Executor):
    """Inputs split over the layer's chips; fp32 partials added in chip order."""

    def describe(self) -> str:
        """The fallback description (inputs over the layer's units)."""
        return "lpu: inputs split over the layer's lpu units, fp32 partials"

    def input_parts(self, slot) -> int:
        """One part per chip holding the layer."""
        return len(slot.units)
