"""The ASIC engine's lower bound: peak ROM, SRAM and link rates, each layer's own KV banks for its
attention, each block's drain floor, and the chip-link stages a token crosses between ops."""

from __future__ import annotations

import math

from ...model.ops import ACT_BYTES
from ...place.kinds import asic_die as design
from ...place.kinds.asic_rom import tree_cycles
from ...units import BITS_PER_BYTE
from ..contract import BoundRates
from .engine import gather_bytes, kv_banks_of, tree_depth


def _c(x: float) -> int:
    return int(math.ceil(x))


def rates(spec, work) -> BoundRates:
    """Peak rates for the lower bound. ``mem`` (named ``kv_sram``: it bounds attention): every
    KV SRAM port of a die plus every ROM column read each cycle (lanes bounded by the die's logic
    budget, at the format's widest weights + 1 bit for scales); ``compute`` (named ``rom_read``:
    a GEMV's lanes are its ROM columns): a GEMV block's row reads, credited with the whole batch
    in one pass (``asic.roofline``), and not shortened when a layer spans dies (its output
    channels split, each lane keeps its row reads); ``link``: the chip link. A layer's own K/V
    is striped over its banks only (``asic.kv_banks_per_layer``): its attention's KV bytes are
    bounded by those banks' ports as well (:func:`_layer_kv_rate`)."""
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
        one, _ = design.gemv_shape(op)
        if op.op_class not in design.ROM_CLASSES or not one:
            return 0.0
        # one pass of a copy's block (its row reads) serves the op's whole batch, and every
        # copy reads at once (experts are blocks of their own): the op's FLOPs in one pass,
        # however its routed rows spread over the copies (copies x one copy's MACs would
        # credit each row with every expert's block)
        block = design.op_block(op, work, p)
        return op.flops * p.rom_rows_per_cycle * f / block.row_reads

    return BoundRates(rom_bw + sram_bw, "kv_sram", compute, "rom_read", p.chip_link_bytes_per_s,
                      "chip_link", _drain_floor(spec, work), latency_serial=True,
                      floor_place=_nothing, kv_bytes_per_s=_layer_kv_rate(p, f),
                      pass_floor_s=_link_waits(spec), pass_kind="chip_link",
                      compute_splits=False)  # fmt: skip


def _link_waits(spec):
    """``pass_floor_s(graph, placement)``: the chip-link stages one token passes between its
    ops, as the engine inserts them (s): each pays the link's latency and a pipeline register;
    a hop between dies (consecutive ops on different dies) also its activations (``hidden`` x
    2 B) over the link, and a spanning layer's gather after a column-split op (each die
    receiving the output it lacks) its bytes too. A row-split op's gather and an expert
    combine carry only the latency here: their bytes are the op's own link term."""
    p, clock = spec.params, spec.clock_hz
    wait = p.chip_link_latency_s + _c(p.stage_register_cycles) / clock
    rate = p.chip_link_bytes_per_s

    def floor(graph, placement) -> float:
        dies_of = {s.layer: set(s.units) for s in placement.layers}
        ops, total = graph.ops, 0.0
        for i, op in enumerate(ops):
            s = len(dies_of[op.layer])
            gather = gather_bytes(op, s, graph.hidden)
            if gather:
                total += wait + (0.0 if op.reduces else gather / rate)
            if op.expert and op.reduces and s > 1:  # the combine of the experts' partial sums
                total += wait
            if i + 1 < len(ops) and dies_of[ops[i + 1].layer] != dies_of[op.layer]:
                total += wait + ACT_BYTES * graph.hidden / rate
        return total

    return floor


def _nothing(slot) -> None:
    """What of a slot the drain floor reads: nothing (a block's drain is the op's own; the
    layer's KV banks reach the bound through ``kv_bytes_per_s``, keyed on their own)."""
    return None


def _layer_kv_rate(p, clock_hz: float):
    """``kv_bytes_per_s(slot, placement)``: the ports of the KV SRAM banks a transformer layer
    has on each of its dies (the engine's :func:`~.engine.kv_banks_of`: a die's banks split
    evenly over its layers) x bytes a port moves a cycle x the clock (bytes/s per die); None
    for blocks without KV (embedding, LM head). The banks of a placement are counted once."""
    banks_in: dict = {}

    def rate(slot, placement) -> float | None:
        key = id(placement)
        if key not in banks_in:
            banks_in.clear()  # one placement per bound: keep only the latest
            banks_in[key] = (placement, kv_banks_of(placement, p))
        banks = banks_in[key][1].get(slot.layer, 0)
        return banks * p.kv_sram_port_bytes * clock_hz if banks else None

    return rate


def _drain_floor(spec, work):
    """``latency_s(op, slot)`` for the bound: the latency every token waits after a block's busy
    cycles (s, class ``fixed_latency``): a GEMV's drain, a fused op's or attention's pipeline
    depth and reduction tree, and the pipeline register after each block. A block drains after
    it is busy and the next block starts on the whole output (``asic.op_serial``), so the floor
    is serial with the op's work (chip-link hops between dies are not graph ops: the pass
    floor, :func:`_link_waits`, counts them); a GEMV's adder tree is part of its drain.

    MLA attention (absorbed up-projections in ROM) also waits for one pass of that block's row
    reads (class ``rom_read``): the value up-projection applies to the attention's output, so
    it follows the K/V reads (the engine reads the whole bitline, ``rom_rows_per_bitline``; the
    bound the block's own row reads, never more)."""
    p, clock = spec.params, spec.clock_hz
    reg = _c(p.stage_register_cycles)

    def latency_s(op, slot) -> dict:
        if op.op_class in design.ROM_CLASSES:
            block = design.op_block(op, work, p)
            depth = _c(p.matmul_latency_cycles) + tree_cycles(block.tree_levels if block else 0, p)
        else:
            depth = _c(p.vector_latency_cycles) + tree_cycles(tree_depth(op), p)
        out = {"fixed_latency": (depth + reg) / clock}
        if op.op_class == "attention" and op.params:
            reads = design.op_block(op, work, p).row_reads / p.rom_rows_per_cycle
            out["rom_read"] = min(float(p.rom_rows_per_bitline), reads) / clock
        return out

    return latency_s
