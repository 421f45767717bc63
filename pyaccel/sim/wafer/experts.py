"""The combine of a MoE layer whose routed experts are spread over several wafers
(:mod:`pyaccel.place.wafer_experts`): each wafer's partial sum of the experts it ran crosses the
system I/O to the group's other wafers, which add it in.

Units: cycles of the wafer clock; bytes.
"""

from __future__ import annotations

from ...model.ops import ACT_BYTES
from ...place.kinds.wafer import experts_held
from ...units import ceil_div
from ..contract import Exchange
from ..experts import fewest_owners
from .crossing import system_io_parts
from .tasks import OpCost, local, multicast

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


def combines(p, graph, placement) -> tuple[Exchange, ...]:
    """``BoundRates.exchanges``: the combine of each MoE layer spread over ``ep`` wafers, after
    its expert down projection (named as the engine names it): one system I/O crossing's
    latency (``wafer_io_latency``), then partial sums (``hidden`` x 2 B a row) received at the
    system I/O rate. Every wafer needs every row's sum; a row's experts live on at least
    ``d`` wafers (:func:`~pyaccel.sim.experts.fewest_owners`), so every wafer receives at
    least ``d - 1`` partial sums a row and the wafers together ``d (ep - 1)``, the busiest at
    least their mean: ``d (ep - 1) / ep`` a row.

    Not achievable by construction: the engine sends every row's partial sum to every other
    wafer, zero or not (``ep - 1`` a row, wafer.expert_combine), after hops to the wafer edge
    and before a multicast and the adds, which the bound leaves out."""
    rows = graph.workload.rows
    out = []
    for slot in placement.layers:
        if not experts_held(slot):
            continue
        ep, d = len(slot.units), fewest_owners(graph.top_k, slot.expert_units)
        row_s = rows * ACT_BYTES * graph.hidden / p.system_io_bytes_per_s
        down = next(op for op in graph.ops_of(slot.layer) if op.expert and op.reduces)
        out.append(Exchange(f"{down.name}.combine", slot.layer, tuple(slot.units),
                            (("wafer_io_latency", float(p.system_io_latency_s)),),
                            d * (ep - 1) / ep * row_s, (d - 1) * row_s))  # fmt: skip
    return tuple(out)
