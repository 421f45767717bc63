"""LoRA adapters on a hardwired die: their A and B matrices in SRAM beside the ROM GEMV they adapt.

A rank-``r`` adapter on a projection ``W`` (``N`` outputs x ``K`` inputs) adds ``B (A x)``: ``A``
is ``r x K``, ``B`` is ``N x r``, both bf16 (``asic.lora_bf16``). The adapter path runs beside
the ROM read of ``W`` on the same input: ``A``'s bytes stream from the adapter's SRAM banks at
their ports' rate into MAC lanes sized to consume them, its ``r`` dot products meet in an adder
tree, then ``B``'s bytes stream the same way; the sum joins ``W x`` as it drains. The GEMV block
is busy for the longer of the two paths (one token). Which projections carry an adapter follows
PEFT's default for Llama (``asic.lora_targets``).
"""

from __future__ import annotations

import math

from ...errors import ConfigError
from ...model.ops import ACT_BYTES
from ...place.kinds.asic_rom import ceil_log2, tree_cycles
from ...units import fmt_bytes

# PEFT's default LoRA target modules for Llama are q_proj and v_proj (peft/utils/other.py,
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["llama"]); in pyaccel's graph they are the
# first and third tensors of the fused qkv_proj.
LORA_TARGETS = {"qkv_proj": (0, 2)}
LORA_BYTES = ACT_BYTES  # bf16 adapter weights (asic.lora_bf16)

ASSUMPTIONS = (
    "asic.lora_targets: a loaded adapter (--set lora_rank=R) adapts q_proj and v_proj, PEFT's "
    "default target modules for Llama; other projections run from ROM alone",
    "asic.lora_bf16: adapter matrices are bf16 in the die's LoRA SRAM, each layer's targets "
    "given equal shares of its banks; a layer split over dies keeps all of A and its share of B",
)


def targets(op) -> tuple[tuple[int, int], ...]:
    """The ``(rows, cols)`` tensors of ``op`` that carry an adapter."""
    picks = LORA_TARGETS.get(op.kind, ())
    return tuple(op.tensors[i] for i in picks if i < len(op.tensors))


def adapter_bytes(op, rank: int, split: int = 1) -> int:
    """Bytes of ``op``'s adapters one die holds: all of A, its ``1/split`` of B's rows."""
    return sum(rank * (cols + -(-rows // split)) * LORA_BYTES for rows, cols in targets(op))


def banks_per_target(graph, placement, p) -> dict:
    """SRAM banks each adapted tensor of each layer streams from: a die's LoRA banks split
    evenly over the adapted tensors of the layers it holds. Raises ConfigError when a die's
    adapters do not fit its LoRA SRAM."""
    rank = int(p.lora_rank)
    if not rank:
        return {}
    per_die: dict[int, list] = {}
    for slot in placement.layers:
        for d in slot.units:
            per_die.setdefault(d, []).append(slot)
    banks = int(p.lora_sram_bytes) // int(p.kv_sram_bank_bytes)
    out: dict = {}
    for die, slots in sorted(per_die.items()):
        ops = [o for s in slots for o in graph.ops_of(s.layer) if targets(o)]
        need = sum(adapter_bytes(o, rank, len(_units(placement, o.layer))) for o in ops)
        if need > p.lora_sram_bytes:
            raise ConfigError(
                f"lora_rank = {rank}: die {die}'s adapters need {fmt_bytes(need)}, more than "
                f"lora_sram_bytes = {fmt_bytes(p.lora_sram_bytes)} (at most rank "
                f"{rank * p.lora_sram_bytes // need})"
            )
        n_targets = sum(len(targets(o)) for o in ops)
        for o in ops:
            out[o.layer] = min(out.get(o.layer, banks), max(1, banks // max(1, n_targets)))
    return out


def _units(placement, layer) -> tuple[int, ...]:
    return next(tuple(s.units) for s in placement.layers if s.layer == layer)


def cycles(op, rank: int, split: int, banks: int, p) -> int:
    """Busy cycles of ``op``'s adapter path for one token: per adapted tensor, A's bytes over
    its banks' ports, the tree joining each of its ``rank`` dot products, then B's share of
    rows; the tensors' paths run side by side on their own banks (cycles)."""
    if not rank or not banks:
        return 0
    rate = banks * p.kv_sram_port_bytes
    per_cycle = max(1, int(rate // LORA_BYTES))  # A elements consumed a cycle
    worst = 0
    for rows, cols in targets(op):
        a = math.ceil(rank * cols * LORA_BYTES / rate)
        tree = tree_cycles(ceil_log2(min(cols, per_cycle)), p)
        b = math.ceil(-(-rows // split) * rank * LORA_BYTES / rate)
        worst = max(worst, a + tree + b)
    return worst
