"""The ASIC engine's lower bound: peak ROM, SRAM and link rates, and each block's drain floor."""

from __future__ import annotations

import math

from ...place.kinds import asic_die as design
from ...place.kinds.asic_rom import tree_cycles
from ...units import BITS_PER_BYTE, FLOPS_PER_MAC
from ..contract import BoundRates
from .engine import tree_depth


def _c(x: float) -> int:
    return int(math.ceil(x))


def rates(spec, work) -> BoundRates:
    """Peak rates for the lower bound. ``mem`` (named ``kv_sram``: it bounds attention): every
    KV SRAM port of a die plus every ROM column read each cycle (lanes bounded by the die's logic
    budget, at the format's widest weights + 1 bit for scales); ``compute`` (named ``rom_read``:
    a GEMV's lanes are its ROM columns): a GEMV block's row reads, credited with the whole batch
    in one pass (``asic.roofline``); ``link``: the chip link."""
    from ...formats import get_format

    p, f = spec.params, spec.clock_hz
    widest = 0
    for fmt in (work.weights_format, work.expert_weights_format):
        fmt = fmt or get_format(spec.native_format)
        widest = max(widest, fmt.value_bits, *fmt.role_bits.values())
    lanes_max = design.die_logic_budget(p) * p.lane_logic_share / p.lane_transistors
    rom_bw = lanes_max * p.rom_rows_per_cycle * (widest + 1) / BITS_PER_BYTE * f
    sram_bw = design.kv_banks(p) * p.kv_sram_port_bytes * f

    def compute(op) -> float:
        one, copies = design.gemv_shape(op)
        if op.op_class not in design.ROM_CLASSES or not one:
            return 0.0
        # one copy's weights in its row reads (the block's MACs a cycle), every copy at once
        block = design.op_block(op, work, p)
        macs = copies * one * p.rom_rows_per_cycle / block.row_reads
        return FLOPS_PER_MAC * macs * f * max(1, op.m)

    return BoundRates(rom_bw + sram_bw, "kv_sram", compute, "rom_read", p.chip_link_bytes_per_s,
                      "chip_link", _drain_floor(spec, work), latency_serial=True,
                      floor_place=_nothing)  # fmt: skip


def _nothing(slot) -> None:
    """What of a slot the drain floor reads: nothing (a block's drain is the op's own)."""
    return None


def _drain_floor(spec, work):
    """``latency_s(op, slot)`` for the bound: the latency every token waits after a block's busy
    cycles (s, class ``fixed_latency``): a GEMV's drain, a fused op's or attention's pipeline
    depth and reduction tree, and the pipeline register after each block. A block drains after
    it is busy and the next block starts on the whole output (``asic.op_serial``), so the floor
    is serial with the op's work (chip-link hops between dies are not graph ops: none here);
    a GEMV's adder tree is part of its drain."""
    p, clock = spec.params, spec.clock_hz
    reg = _c(p.stage_register_cycles)

    def latency_s(op, slot) -> float:
        if op.op_class in design.ROM_CLASSES:
            block = design.op_block(op, work, p)
            depth = _c(p.matmul_latency_cycles) + tree_cycles(block.tree_levels if block else 0, p)
        else:
            depth = _c(p.vector_latency_cycles) + tree_cycles(tree_depth(op), p)
        return (depth + reg) / clock

    return latency_s
