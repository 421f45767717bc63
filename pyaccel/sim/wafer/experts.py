"""The combine of a MoE layer whose routed experts are spread over several wafers
(:mod:`pyaccel.place.wafer_experts`): each wafer's partial sum of the experts it ran crosses the
system I/O to the group's other wafers, which add it in.

Units: cycles of the wafer clock; bytes.
"""

from __future__ import annotations

from ...model.ops import ACT_BYTES
from ...units import ceil_div
from .cost import OpCost, local, multicast
from .crossing import system_io_parts

ASSUMPTIONS = (
    "wafer.expert_combine: a MoE layer spread over several wafers replicates its other ops on "
    "each (no dispatch: the hidden vector is on every wafer when the router picks); after the "
    "down projection each wafer sends its partial sum (every row's, zero or not) to each of "
    "the group's other wafers over its own system I/O, one crossing latency and (wafers - 1) "
    "x rows x hidden x 2 B at system_io_bytes_per_s, after hops to the wafer edge and before a "
    "multicast along B and the adds; the layer waits for it",
)


def combine_cost(coster, p, region, rows: int, hidden: int, ep: int) -> OpCost:
    """Cycles of the combine on ``region`` (:class:`Region`) of a layer over ``ep`` wafers for
    ``rows`` token rows of ``hidden`` activations: to the east edge, across, back along B."""
    c = coster.c
    elems = rows * ceil_div(hidden, region.w)  # each PE's slice of the rows' hidden vectors
    cost = OpCost()
    out_hops = int(p.usable_width_pes) - (region.x0 + region.w)
    cost.parts += system_io_parts(c, p, out_hops, elems, (ep - 1) * rows * hidden * ACT_BYTES)
    cost.transfers += 1
    spread = elems * max(1, ceil_div(region.w, region.h))
    multicast(cost, c, region.h, 0, spread, 0, 1, lead=max(1, region.x0))
    cost.add_local(local(coster.c, lane_ops=(ep - 1) * elems, rd=(ep - 1) * ACT_BYTES * elems,
                         wr=ACT_BYTES * elems))  # fmt: skip
    return cost
