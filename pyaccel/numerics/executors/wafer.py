"""Wafer-scale arithmetic: GEMV tiled over the layer's PE rectangle, chain reduction in fp32.

Generic fallback until the wafer placer's regions are final: every matmul is tiled over the
layer's PE rectangle ``rect = [x0, y0, w, h]`` (or an interleave ``grid = [P, P]``); the inputs
are split into ``w`` column chunks, each PE column accumulates its chunk in fp32 and the partial
sums are reduced along the row in chain order (left to right), as MeshGEMV's pipelined reduction
does. Without a rectangle the op is computed on one PE group (stated in the output).
"""

from __future__ import annotations

from ..executor import Executor


class WaferExecutor(Executor):
    """Inputs split over the PE columns of each layer's region; fp32 chain reduction."""

    def describe(self) -> str:
        """The distinct PE-column counts over the placement's layers."""
        plc = self.placement
        widths = sorted({max(1, self.input_parts(plc.slot(s.layer))) for s in plc.layers})
        return f"wafer: GEMV inputs split over {widths} PE columns, chain reduction"

    def input_parts(self, slot) -> int:
        """The width of the region's rectangle, or ``P`` of a ``[P, P]`` interleave, else 1."""
        region = slot.region
        if region is not None and region.rect is not None:
            return region.rect[2]
        if region is not None and region.grid is not None:
            return region.grid[0]
        return 1
