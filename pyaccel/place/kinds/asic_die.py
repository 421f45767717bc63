"""Die design of a hardwired-weight ASIC, derived from its transistor budget (no fitted factor).
Spine geometry of the ASIC kind: the placer sizes dies with it, a placement's ROM and SRAM
capacity per die come from it, and the ASIC engine reads the same lanes, banks and budget.

Mechanism (mechanisms.md §B): every weight sits in mask ROM beside its block; a shared multiplier
bank forms input x every weight value and each ROM cell routes the matching product into a
multiply-select-add (MSA) lane. ROM is read row by row; how a GEMV's weights fill cells, lanes
and adder trees is :mod:`pyaccel.place.kinds.asic_rom`. Budget of one die::

    transistors = ROM (cells: ceil(bits / rom_bits_per_transistor) per weight, the rest packed)
                + logic (lanes x lane_transistors / lane_logic_share)
                + SRAM (kv_sram_bytes x 8 x sram_transistors_per_bit)

For the etched model the SRAM is what the budget leaves (unless the preset states it); a die
designed with ``--etch`` keeps that SRAM and ``R``, and holds as many layers as its ROM + lane
logic fit in the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ...errors import ConfigError, option
from ...units import BITS_PER_BYTE, UM2_PER_MM2, fmt_bytes
from .asic_rom import ROM_CLASSES, gemv_shape, lanes_of, op_block, rom_cells

__all__ = ["ROM_CLASSES", "gemv_shape", "lanes_of", "op_block"]


def logic_per_lane(p) -> float:
    """Logic transistors a lane costs with its share of the die's other logic."""
    return p.lane_transistors / p.lane_logic_share


def layer_cost(graph, layer, p) -> float:
    """Transistors a layer's ROM cells and lane logic take on a die."""
    ops, work = graph.ops_of(layer), graph.workload
    rom = sum(rom_cells(o, work, p) for o in ops)
    lanes = sum(lanes_of(o, work, p) for o in ops)
    return rom + lanes * logic_per_lane(p)


@dataclass(frozen=True)
class Budget:
    """Transistor budget of one die holding a whole model (the etched chip)."""

    model: str
    weights_format: str
    transistors: float
    rom_bits: int
    rom_transistors: float
    lanes: int
    logic_transistors: float
    sram_transistors: float
    kv_sram_bytes: int
    sram_area_mm2: float
    die_area_mm2: float

    def lines(self) -> list[str]:
        """The arithmetic, one step a line."""
        return [
            f"ROM: {self.rom_bits:,} bits of {self.model} at {self.weights_format} -> "
            f"{self.rom_transistors:.3g} transistors",
            f"lanes: {self.lanes:,} MSA lanes -> {self.logic_transistors:.3g} logic transistors",
            f"SRAM: {self.transistors:.3g} - ROM - logic = {self.sram_transistors:.3g} "
            f"transistors -> {fmt_bytes(self.kv_sram_bytes)}",
            f"area check: the SRAM takes {self.sram_area_mm2:.0f} of {self.die_area_mm2:.0f} mm^2",
        ]


def budget(graph, p) -> Budget:
    """Split one die's transistors between ``graph``'s ROM, its lanes and the SRAM left over."""
    bits = graph.total_resident_weight_bytes * BITS_PER_BYTE
    rom = sum(rom_cells(o, graph.workload, p) for o in graph.ops)
    lanes = sum(lanes_of(o, graph.workload, p) for o in graph.ops)
    logic = lanes * logic_per_lane(p)
    sram_t = p.transistors - rom - logic
    sram = max(0, int(sram_t // (BITS_PER_BYTE * p.sram_transistors_per_bit)))
    return Budget(
        graph.model_name,
        graph.workload.weights,
        p.transistors,
        bits,
        rom,
        lanes,
        logic,
        sram_t,
        sram,
        sram * BITS_PER_BYTE * p.sram_um2_per_bit / UM2_PER_MM2,
        p.die_area_mm2,
    )


@lru_cache(maxsize=32)
def etched_budget(p) -> Budget:
    """The budget of the chip as etched: its model at its format on one die."""
    from ...model.config import load_model
    from ...model.graph import build_graph
    from ...workload import Workload

    model = load_model(p.etched_model)
    work = Workload(batch=1, context=0, tokens=1, weights=p.etched_format)
    return budget(build_graph(model, work, native_format=p.etched_format), p)


def kv_sram_bytes(p) -> int:
    """SRAM per die for KV cache and LoRA: the preset's value, or (0) what the etched chip's
    transistor budget leaves after ROM and lanes. Raises ConfigError when nothing is left."""
    if p.kv_sram_bytes:
        return int(p.kv_sram_bytes)
    b = etched_budget(p)
    if b.kv_sram_bytes <= p.lora_sram_bytes:
        raise ConfigError(
            f"the die's {p.transistors:.3g} transistors leave no KV SRAM: "
            + "; ".join(b.lines())
            + " (raise rom_rows_per_bitline or lane_logic_share, or set the KV SRAM: "
            + f"{option('overrides', 'kv_sram_bytes=BYTES')})"
        )
    return b.kv_sram_bytes


def die_logic_budget(p) -> float:
    """Transistors of one die left for ROM and lane logic once its SRAM is built."""
    return p.transistors - kv_sram_bytes(p) * BITS_PER_BYTE * p.sram_transistors_per_bit


def rom_capacity_bytes(graph, p) -> int:
    """ROM bytes one die of this design holds for ``graph``: the die's transistors left after
    its SRAM, converted at the model's average transistor cost (ROM + lane logic) per byte."""
    total_bytes = graph.total_resident_weight_bytes
    total_cost = sum(layer_cost(graph, k, p) for k in graph.layer_keys)
    budget = die_logic_budget(p)
    if budget <= 0:
        raise ConfigError(
            f"transistors = {p.transistors:.3g}: the die's SRAM ({kv_sram_bytes(p):,} B at "
            f"{p.sram_transistors_per_bit} transistors a bit) takes them all, none is left for "
            "ROM and lanes (raise transistors or lower kv_sram_bytes)"
        )
    return int(budget * total_bytes / total_cost)


def kv_banks(p) -> int:
    """SRAM banks per die that hold KV cache (LoRA's share excluded)."""
    return max(1, (kv_sram_bytes(p) - p.lora_sram_bytes) // p.kv_sram_bank_bytes)


def with_derived(p):
    """``p`` with ``kv_sram_bytes`` filled in (for reports)."""
    return replace(p, kv_sram_bytes=kv_sram_bytes(p))
