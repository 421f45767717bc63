"""The wafer engine's lower bound: the SRAM read rate and FMAC rate of every usable PE, the
system I/O for cross-wafer bytes, each op's bytes at its layer region's SRAM rate, each op's
latency floor (DSD issue, message starts, a full line's hops), and a token's hand-offs between
wafers."""

from __future__ import annotations

import math
from functools import partial
from itertools import pairwise

from ...model.ops import ACT_BYTES
from ...place.kinds.wafer import wafer_of
from ...units import FLOPS_PER_MAC
from ..contract import BoundRates
from .experts import combines


def rates(spec, work) -> BoundRates:
    """Peak rates for the lower bound: the SRAM read bandwidth and FMAC rate of every usable PE
    of a wafer, and the system I/O for cross-wafer traffic (bandwidth only, by design); each
    op's latency floor, its bytes at its layer region's SRAM rate, a token's hand-offs
    between wafers on the chain, and the expert combines of a layer over several wafers."""
    p = spec.params
    pes = int(p.usable_width_pes) * int(p.usable_height_pes)
    mem = pes * float(p.sram_read_bytes_per_cycle) * p.clock_hz
    flops = pes * float(p.fmac_fp16_per_cycle) * FLOPS_PER_MAC * p.clock_hz

    def compute(op) -> float:
        return flops if op.op_class in ("matmul", "attention", "router") else 0.0

    return BoundRates(mem, "pe_sram", compute, "pe_compute", float(p.system_io_bytes_per_s),
                      "wafer_io", _latency_floor(p), "mesh_hop",
                      region_bytes_per_s=partial(_region_rate, p),
                      pass_floor_s=partial(_wafer_crossings, p), pass_kind="handoff",
                      pass_resource="wafer_io_latency", reduce_units=_one_wafer,
                      exchanges=partial(combines, p))  # fmt: skip


def _one_wafer(slot) -> int:
    """``reduce_units``: an op's partial outputs are summed on one wafer; a layer on several
    (its experts spread over an expert-parallel group) runs its other ops whole on each, and
    its experts' partial sums cross in the combine (:func:`.experts.combines`)."""
    return 1


def _region_rate(p, slot, placement) -> float | None:
    """``region_bytes_per_s``: a layer's weights and KV sit on its region's PEs only, so its
    ops read them at those PEs' SRAM rate (bytes/s per wafer); None without a recorded rect."""
    rect = slot.region.rect if slot.region is not None else None
    if not rect:
        return None
    return rect[2] * rect[3] * float(p.sram_read_bytes_per_cycle) * p.clock_hz


def _wafer_crossings(p, graph, placement) -> float:
    """``pass_floor_s``: one token's hand-offs from wafer to wafer between its layers, each at
    least the system I/O crossing's latency and the token's ``hidden`` x 2 B at the system I/O
    rate (s); the hops to and from the wafer edges and the sampled token's way back are the
    engine's (:meth:`WaferPass._handoff`)."""
    wafer = {s.layer: wafer_of(s) for s in placement.layers}
    crossings = sum(wafer[a] != wafer[b] for a, b in pairwise(graph.layer_keys))
    each = p.system_io_latency_s + ACT_BYTES * graph.hidden / p.system_io_bytes_per_s
    return crossings * each


# op classes whose every emulation ends in an all-reduce (with its broadcast) over a whole line
# of their region: a MeshGEMV, a norm's sum of squares, attention's reductions along A
_FULL_LINE_ALLREDUCE = ("matmul", "router", "norm", "attention")
# op classes every emulation of which runs at least one all-reduce (or reduce) of some line
_ANY_ALLREDUCE = (*_FULL_LINE_ALLREDUCE, "sampling")


def _latency_floor(p):
    """``latency_s(op, slot)`` for the bound (s, by class). Every op's PE task issues at least
    one DSD instruction (``fixed_latency``). An op that all-reduces starts its messages only
    after one message start cost (``mesh_message``), and an elementwise op pays its task's
    activation messages (wafer.elementwise_activation). An all-reduce with its broadcast over a
    line of ``n`` PEs carries the far end's data across ``n - 1`` hops, and every line of a
    ``w x h`` region is at least ``min(w, h)`` long, so such an op waits at least
    ``min(w, h) - 1`` hop latencies (``mesh_hop``); ops that reduce only inside heads or expert
    bands, multicast from the middle or reduce without a broadcast are given no hops (their
    lines can be shorter). Costs are floored to whole cycles as the engine floors them; a line's
    hops as a whole, since the engine keeps a fractional hop latency exact in ticks and floors
    only the line's sum (wafer.half_cycle_ticks)."""
    clock = float(p.clock_hz)
    hop_cycles = float(p.hop_latency_cycles)
    issue_s = math.floor(float(p.dsd_issue_cycles)) / clock
    message_s = math.floor(float(p.message_overhead_cycles)) / clock
    activation_s = math.floor(float(p.elementwise_task_messages)) * message_s

    def latency_s(op, slot) -> dict:
        floor = {"fixed_latency": issue_s}
        if op.op_class in _ANY_ALLREDUCE:
            floor["mesh_message"] = message_s
        elif op.op_class != "embedding":
            floor["mesh_message"] = activation_s
        per_head_norm = op.op_class == "norm" and op.split == "heads"
        rect = slot.region.rect if slot.region is not None else None
        full_line = op.op_class in _FULL_LINE_ALLREDUCE and not (op.expert or per_head_norm)
        if full_line and rect:
            floor["mesh_hop"] = math.floor((min(rect[2], rect[3]) - 1) * hop_cycles) / clock
        return floor

    return latency_s
