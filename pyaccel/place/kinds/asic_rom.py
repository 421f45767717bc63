"""ROM organisation of a hardwired die's GEMV blocks: cells, lanes, row reads and adder trees.

One GEMV ``y = W x`` reads a weight matrix of ``N`` output channels x ``K`` inputs (the
``(rows, cols)`` of :mod:`pyaccel.formats`) at ``b`` bits per weight (mechanisms.md §B):

- a weight of ``b`` bits takes ``c = ceil(b / rom_bits_per_transistor)`` ROM cells: a cell
  selects one precomputed product (multiply by routing), so a 3-bit weight takes one 4-bit cell
  and a 6-bit weight two (its high and low halves, on consecutive rows of one bitline; the high
  half's products arrive shifted) (``asic.cells_per_weight``);
- a lane's bitline has ``R = rom_rows_per_bitline`` cells, so it holds ``P = R // c`` inputs of
  one output channel; each channel's ``K`` inputs are split over ``S = ceil(K / P)`` lanes
  (lanes per matrix ``N x S``), every lane of the block reading its cells in parallel, one row
  (``rom_rows_per_cycle``) a cycle: ``min(K, P) x c`` row reads;
- a channel's ``S`` partial sums meet in an adder tree of ``ceil(log2 S)`` levels,
  ``adder_tree_levels_per_cycle`` levels a clock cycle (a latency, pipelined across tokens).

So twice the inputs ``K`` (or twice the bits) means twice the lanes per channel and one more tree
level; below ``P`` inputs the row reads themselves shrink. Twice the output channels ``N`` is
twice the lanes at the same time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...units import BITS_PER_BYTE

ROUTER_BITS = 16  # routers stay 16-bit (pyaccel.model.graph: SMALL_PARAM_BYTES)
ROM_CLASSES = ("matmul", "router")


@dataclass(frozen=True)
class GemvBlock:
    """The ROM array of one copy of a GEMV (one expert, or the whole matrix) on one die.

    ``lanes``: MSA lanes (bitlines with a sense path and accumulator); ``row_reads``: ROM rows
    every lane reads for one token (cycles at one row a cycle); ``tree_levels``: adder-tree
    levels joining an output channel's partial sums; ``cells``: ROM cells of the weights."""

    lanes: int
    row_reads: int
    tree_levels: int
    cells: int


def cells_per_weight(bits: int, p) -> int:
    """ROM cells one weight of ``bits`` takes (cells)."""
    return max(1, math.ceil(bits / p.rom_bits_per_transistor))


def op_bits(op, work) -> int:
    """Value bits per weight of a ROM op in ``work``'s formats (routers stay 16-bit)."""
    if op.role == "router" or not op.role:
        return ROUTER_BITS
    fmt = work.expert_weights_format if op.expert else work.weights_format
    return fmt.bits_for(op.role)


def gemv_block(tensors, bits: int, p, split: int = 1) -> GemvBlock:
    """The ROM array of ``tensors`` (``(rows, cols)`` sharing one input) at ``bits`` per weight,
    with the output channels split over ``split`` dies (this die's share)."""
    c = cells_per_weight(bits, p)
    per_lane = max(1, int(p.rom_rows_per_bitline) // c)
    lanes = reads = levels = cells = 0
    for rows, cols in tensors:
        mine = -(-rows // split)
        segs = -(-cols // per_lane)
        lanes += mine * segs
        reads = max(reads, min(cols, per_lane) * c)
        levels = max(levels, ceil_log2(segs))
        cells += mine * cols * c
    return GemvBlock(lanes, reads, levels, cells)


def shapeless_block(weights: int, p) -> GemvBlock:
    """A ROM block known only by its weight count (MLA's absorbed up-projections inside
    attention): full bitlines of ``R`` one-cell weights, no tree."""
    rows = int(p.rom_rows_per_bitline)
    return GemvBlock(math.ceil(weights / rows), rows, 0, weights)


def ceil_log2(n: int) -> int:
    """Levels of a binary tree over ``n`` leaves."""
    return math.ceil(math.log2(n)) if n > 1 else 0


def tree_cycles(levels: int, p) -> int:
    """Clock cycles ``levels`` adder-tree levels take (cycles)."""
    return math.ceil(levels / p.adder_tree_levels_per_cycle)


def gemv_shape(op) -> tuple[int, int]:
    """(weights of one copy, copies) of an op read from ROM: experts have one copy per expert,
    a tied LM head reads the embedding table (one copy); MLA attention reads its absorbed
    up-projections."""
    if op.op_class == "attention":
        return (op.params, 1) if op.params else (0, 0)
    if op.op_class not in ROM_CLASSES:
        return 0, 0
    one = op.n * op.k
    return one, max(1, round(op.params / one)) if op.params else 1


def op_block(op, work, p, split: int = 1) -> GemvBlock | None:
    """The ROM array of one copy of ``op`` (None for ops that read no ROM weights)."""
    one, _ = gemv_shape(op)
    if not one:
        return None
    if not op.tensors:
        return shapeless_block(-(-one // split), p)
    return gemv_block(op.tensors, op_bits(op, work), p, split)


def lanes_of(op, work, p) -> int:
    """MSA lanes of an op's block on one die holding all of it: lanes of a copy x copies."""
    block = op_block(op, work, p)
    return block.lanes * gemv_shape(op)[1] if block else 0


def rom_cells(op, work, p) -> float:
    """ROM cells (transistors) of everything ``op`` stores: its weights at ``c`` cells each,
    and the rest of its resident bits (scales, biases, tables) packed at the cell's width."""
    stored = op.resident_weight_bytes * BITS_PER_BYTE
    block = op_block(op, work, p) if op.tensors else None
    if block is None:
        return stored / p.rom_bits_per_transistor
    copies = gemv_shape(op)[1]
    weights = copies * sum(r * c for r, c in op.tensors)
    value_bits = weights * op_bits(op, work)
    return copies * block.cells + max(0, stored - value_bits) / p.rom_bits_per_transistor
