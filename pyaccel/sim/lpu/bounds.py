"""The LPU's lower-bound rates: its peak MEM, MXM and C2C rates and each op's pipeline
latency floor (the engine module's ``rates``)."""

from __future__ import annotations

from ...units import FLOPS_PER_MAC
from ..contract import BoundRates
from .fragments import _COLLECTIVE_STEPS
from .kinds import TRANSITS_PER_C2C
from .net import Network
from .plans import gemv_share, plan_kinds
from .program import ChipModel
from .stages import n_stages


def rates(spec, work) -> BoundRates:
    """Peak rates for the lower bound: SRAM = every MEM slice reading one vector per cycle,
    MXM = all planes' MACs in the operand format, link = all of a chip's C2C links."""
    p = spec.params
    clock = spec.clock_hz
    mem = float(p.mem_slices) * float(p.vector_bytes) * clock
    side = float(p.mxm_dim) / max(1.0, float(p.mxm_operand_bytes))
    mxm = FLOPS_PER_MAC * float(p.mxm_planes) * side * side * clock

    def compute(op) -> float:
        return mxm if op.op_class in ("matmul", "attention", "router") else 0.0

    link = float(p.c2c_bytes_per_s) * float(p.c2c_links)
    chip = ChipModel.from_params(p)
    return BoundRates(mem, "lpu_mem", compute, "lpu_mxm", link, "c2c_link",
                      _pipeline_floor(spec), floor_place=_chips,
                      own_work_s=_weight_installs(chip, clock),
                      pass_floor_s=_stage_hops(spec, chip), pass_kind="stage_hop",
                      pass_resource="c2c_latency")  # fmt: skip


def _weight_installs(chip: ChipModel, clock_hz: float):
    """``own_work_s(op, slot)``: a GEMV's weight installs on one chip of its ``tp``-wide group
    (s): its share of the weights in blocks of the MXM's side squared (:func:`.plans.op_plan`,
    as the engine plans it), round-robin over the planes, each plane installing its blocks one
    after another, each at least as long as with every stream one plane can take alone
    (``install_cycles_alone``), and all of them no faster than the chip's install streams
    together; 0 for other ops. (The engine's planes share a hemisphere's streams in fixed
    parts, ``install_cycles``; the bound does not assume that split, so more planes or streams
    never raise it, SPEC §9.)"""

    def installs(op, slot) -> float:
        if op.op_class not in ("matmul", "router"):
            return 0.0
        blocks = max(1, -(-gemv_share(op, len(slot.units)) // chip.block_weights))
        per_plane = -(-blocks // chip.planes) * chip.install_cycles_alone
        chip_wide = -(-blocks * chip.block_install_vectors // chip.install_vectors_per_cycle)
        return max(per_plane, chip_wide) / clock_hz

    return installs


def _stage_hops(spec, chip: ChipModel):
    """``pass_floor_s(graph, placement)``: the hops one token crosses from the first pipeline
    stage to the last (s), each at least one C2C hop latency and the stream transit to the
    ports and from them (the engine's :class:`~.hops.StageHops` adds the bytes, the relay to
    the next stage's other chips and, after the last stage, the sampled token's way back)."""
    each = Network(spec.params, spec.clock_hz).latency + TRANSITS_PER_C2C * chip.transit

    def floor(graph, placement) -> float:
        return (n_stages(placement) - 1) * each / spec.clock_hz

    return floor


def _chips(slot) -> int:
    """What of a slot the pipeline floor reads: its number of chips (TP width)."""
    return len(slot.units)


def _pipeline_floor(spec):
    """``latency_s(op, slot)`` for the bound: the cycles an op's result takes to come out after
    its input arrives on a program with no other work, the sum over its plan's steps (s, class
    ``fixed_latency``): a GEMV's one MXM cycle, the MXM latency and the stream transit; a VXM
    pass's cycle, latency and transit; a reduction's VXM pass then per round an SXM transpose
    and a VXM add, each with its latency and transit; a MEM write's cycle and transit; a
    collective on a group of two or more chips one C2C hop latency (plus the all-reduce's one
    VXM cycle) and the transit to the C2C ports and back. Every step of an op waits on the one
    before (``lpu.layer_order``), and the latencies follow the cycles that issue them, so the
    floor is serial with the op's slice occupancy; it is taken as the larger of the two only,
    because weight installs, the op's largest work term, run ahead of the op."""
    chip = ChipModel.from_params(spec.params)
    hop = Network(spec.params, spec.clock_hz).latency
    gemv = 1 + chip.mxm_latency + chip.transit
    vector = 1 + chip.vxm_latency + chip.transit
    sxm_pass = chip.sxm_pass + chip.sxm_latency + chip.transit
    round_trip = sxm_pass + 1 + chip.vxm_latency + chip.transit
    reduce = 1 + chip.vxm_latency + chip.reduce_rounds * round_trip
    memio = 1 + chip.transit
    collective = hop + TRANSITS_PER_C2C * chip.transit
    cycles = {"gemv": gemv, "xgemv": gemv, "vector": vector, "reduce": reduce, "memio": memio,
              "allreduce": collective + 1, "allgather": collective,
              "broadcast": collective, "seqreduce": collective + 1}  # fmt: skip

    def latency_s(op, slot) -> float:
        tp = len(slot.units)
        total = sum(cycles[k] for k in plan_kinds(op, tp) if tp > 1 or k not in _COLLECTIVE_STEPS)
        return total / spec.clock_hz

    return latency_s
