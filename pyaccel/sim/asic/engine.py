"""Hardwired-weight ASIC engine (Taalas HC1 and dies etched with ``--etch``): a spatial pipeline.

Every op of the decode graph is a block of its own hardware, in graph order (mechanisms.md §B):

- a GEMV block reads its weights from mask ROM row by row, one row of every lane's bitline per
  cycle (products formed once per input by a shared multiplier bank), its output channels'
  partial sums meeting in adder trees (:mod:`pyaccel.place.kinds.asic_rom`: cells per weight,
  lanes, row reads and tree depth from the matrix's shape and bits), then a fixed drain latency;
  a loaded LoRA adapter streams from SRAM beside it (:mod:`.lora`);
- an attention block reads the user's K/V from its layer's SRAM banks (bytes over banks x port
  width) into MAC lanes sized to consume them, plus a softmax reduction tree;
- norms, RoPE, SiLU, residual adds and sampling are fused into the datapath (a pipeline depth
  and, where they reduce, a log2-depth tree);
- pipeline registers separate blocks; between dies an activation crosses the chip link.

Tokens of all users are interleaved: a block is busy with one token for its occupancy and takes
the next at once; a user's next token enters when its last one left the sampler. Step time
emerges from simulating every stage x token (:func:`pyaccel.kernels` ``asic_pipeline``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ...model.ops import ACT_BYTES, LOGIT_KINDS, rows_of
from ...place.kinds import asic_die as design
from ...place.kinds.asic_rom import tree_cycles
from ...trace import SpanColumns
from ...units import BITS_PER_BYTE, FLOPS_PER_MAC, cycles, transfer_cycles
from ..contract import SEQUENCES, PassTiming, StageOccupancy, StepShape
from . import experts, lora
from .spans import RowStages, step_spans

RESOURCES = ("rom_read", "mac_lanes", "kv_sram", "chip_link", "fixed_latency")
WHAT_IF = {
    "rom_read": (("rom_rows_per_cycle",), 2.0),
    "mac_lanes": (("attn_mac_factor",), 2.0),
    "kv_sram": (("kv_sram_port_bytes",), 2.0),
    "chip_link": (("chip_link_bytes_per_s",), 2.0),
    "fixed_latency": (
        (
            "matmul_latency_cycles",
            "vector_latency_cycles",
            "stage_register_cycles",
            "fused_op_busy_cycles",
            "chip_link_latency_s",
            "adder_tree_levels_per_cycle",
        ),
        (0.5, 0.5, 0.5, 0.5, 0.5, 2.0),
    ),
}
ASSUMPTIONS = (
    "asic.op_serial: each GEMV starts when the previous op's whole output is ready (a GEMV's "
    "outputs are complete only after its last ROM row); no wavefront overlap between blocks",
    "asic.cells_per_weight: a weight of b bits takes ceil(b / rom_bits_per_transistor) ROM cells "
    "(one cell selects one product), on consecutive rows of its lane's bitline",
    "asic.gemv_lanes: each output channel's inputs are split over lanes of rom_rows_per_bitline "
    "cells; all lanes of a block read in parallel and a channel's partial sums meet in an "
    "adder tree (one more level for twice the inputs or twice the cells per weight)",
    "asic.fused_vector_ops: norms, RoPE, SiLU*up, residual adds, softmax and argmax are applied "
    "as GEMV outputs stream out; they cost pipeline depth (+ a log2 reduction tree), not passes",
    "asic.rows_own_context: a sequence's rows of one step (a prompt chunk, a verify step) "
    "pass each attention block one after another, each reading the K/V of every token before "
    "it (the cached ones and the step's earlier rows, written as those passed the block) and "
    "writing its own: row j attends context + j + 1 tokens",
    "asic.kv_banks_per_layer: each die's KV SRAM banks are split evenly over its layers; a "
    "user's K/V of a layer is striped over all of that layer's banks",
    "asic.experts_parallel: routed experts are separate blocks; a token's top-k run in parallel "
    "and two users' tokens wait for each other only where their router picked the same expert "
    "(MoE etch only)",
    "asic.roofline: the lower bound credits each GEMV block with serving the step's whole batch "
    "in one ROM pass (the shared roofline sums one compute resource per unit); it holds each "
    "layer's attention to its K/V over that layer's own banks (and, with MLA, one pass of its "
    "absorbed weights), and each token to the latency of every chip-link stage it crosses "
    "(hops, gathers, combines)",
    "asic.spanning_layers: a layer larger than one die is split over several (GEMVs by output "
    "columns, experts whole, KV heads evenly); each split GEMV's output is all-gathered over "
    "the chip link ((s-1)/s of it into each die, one hop)",
    "asic.one_link_per_die: all chip-link transfers leaving a die share its one link, served "
    "in (step, user, stage) order; a spanning layer's gather holds the links of all its dies "
    "at once (each die sends its part)",
    *experts.ASSUMPTIONS,
    "asic.etch_same_die: a die designed with --etch keeps the etched chip's transistor budget, "
    "SRAM, ROM geometry, clock and power; it holds the layers whose ROM + lane logic fit the "
    "transistors left after its SRAM (converted to bytes at the model's mean cost per byte)",
    "asic.mult_banks_small: the shared multiplier bank forms 2^bits products for the ~k/R "
    "inputs a block reads per cycle (<0.1 % of logic, inside the non-lane share)",
    *lora.ASSUMPTIONS,
)


@dataclass(frozen=True)
class Stage:
    """One block of the pipeline (on one die, or split over the dies of a spanning layer, all
    busy together): its busy cycles per token and the latency after them; bytes and FLOPs are
    per token and per die. A ``routed`` stage runs, for each row, only on the units of the
    experts the row was routed to (:mod:`.experts`)."""

    name: str
    layer: object
    kind: str
    units: tuple[int, ...]
    resource: str
    occ: int
    lat: int
    n_bytes: int
    flops: int
    routed: bool = False  # runs on the units of the experts a row was routed to


def _c(x: float) -> int:
    return int(math.ceil(x))


class AsicCost:
    """Cycles of every block on one spec (integer cycles of its clock)."""

    def __init__(self, spec, graph):
        self.p, self.clock, self.graph = spec.params, spec.clock_hz, graph
        self.rows = int(self.p.rom_rows_per_bitline)
        self.reg = _c(self.p.stage_register_cycles)
        self.vec = _c(self.p.vector_latency_cycles)
        # one token row of one user (a step's rows each stream their user's K/V, at their own
        # context: asic.rows_own_context)
        self.one = replace(graph.workload, batch=1, step_tokens=1)
        self._macs: dict = {}

    def gemv(self, op, dies: tuple[int, ...], lora_banks: int = 0) -> Stage:
        """ROM row reads of one token through a GEMV block (or its LoRA adapter's SRAM reads,
        when longer), then its drain and adder tree. Experts are whole blocks run in parallel;
        a layer spanning ``s`` dies splits other GEMVs by output channels."""
        _, copies = design.gemv_shape(op)
        s = len(dies)
        block = design.op_block(op, self.graph.workload, self.p, 1 if copies > 1 else s)
        occ = _c(block.row_reads / self.p.rom_rows_per_cycle)
        adapter = lora.cycles(op, int(self.p.lora_rank), s, lora_banks, self.p)
        res = "kv_sram" if adapter > occ else "rom_read"
        b = rows_of(op, self.graph.workload)  # the rows that take the block (sampled rows)
        per_copy = (op.resident_weight_bytes or op.weight_bytes) // max(1, copies)
        tokens = max(1, op.m // b)  # routed experts: top-k copies per token
        return Stage(
            op.name,
            op.layer,
            op.kind,
            dies,
            res,
            max(occ, adapter),
            _c(self.p.matmul_latency_cycles) + tree_cycles(block.tree_levels, self.p) + self.reg,
            per_copy * tokens // s,
            op.flops // b // s,
        )

    def fused(self, op, dies: tuple[int, ...]) -> Stage:
        """A vector op fused into the datapath: ``fused_op_busy_cycles`` busy, then its pipeline
        depth (+ a tree)."""
        tree = tree_cycles(tree_depth(op), self.p)
        res = "rom_read" if op.kind == "embed" else "fixed_latency"
        b = rows_of(op, self.graph.workload)
        n_bytes = op.weight_bytes // b if op.kind == "embed" else 0
        busy = max(1, _c(self.p.fused_op_busy_cycles))
        return Stage(
            op.name, op.layer, op.kind, dies, res, busy, self.vec + tree + self.reg, n_bytes, 0
        )

    def attention(self, layer: int, context: int, dies: tuple[int, ...], banks: int) -> Stage:
        """One user's attention at ``context`` cached tokens: its share of K/V (KV heads split
        over a spanning layer's dies) over ``banks`` SRAM ports per die, MACs sized to consume
        them, absorbed MLA weights from ROM, softmax tree (:meth:`attention_over` at one
        context)."""
        occ, n_bytes, flops, kv_bound = self.attention_over(layer, np.array([context]), dies, banks)
        op = self.graph.attention_op(layer, context, self.one)
        tree = tree_cycles(tree_depth(op), self.p)
        res = "kv_sram" if kv_bound[0] else "mac_lanes"
        return Stage(op.name, layer, "attention", dies, res, int(occ[0]),
                     self.vec + tree + self.reg, int(n_bytes[0]), int(flops[0]))  # fmt: skip

    def attention_over(self, layer: int, contexts, dies: tuple[int, ...], banks: int) -> tuple:
        """One row's attention (as :meth:`attention`) at each of ``contexts`` cached tokens (an
        int64 array: a run's positions, a step's rows), all at once: int64 arrays of its busy
        cycles, K/V bytes and FLOPs per die, and whether its K/V reads (not its MACs) bound
        it."""
        s = len(dies)
        _, flops, kv_read, kv_write = self.graph.attention_counts(layer, contexts, self.one)
        kv = np.asarray(kv_read + kv_write, dtype=np.int64)
        flops = np.asarray(flops, dtype=np.int64)
        kv_c, mac_c = self.attention_cycles(kv, flops, layer, s, banks)
        rom_c = self.rows if self.graph.attention_op(layer, 0, self.one).params else 0
        occ = np.maximum(kv_c, mac_c).astype(np.int64) + rom_c
        return occ, kv // s, flops // s, kv_c >= mac_c

    def attention_cycles(self, kv, flops, layer: int, s: int, banks: int):
        """(K/V read cycles, MAC cycles) of one user's attention: ``kv`` bytes and ``flops``
        split over ``s`` dies (numbers or int64 arrays, one per step)."""
        port = banks * self.p.kv_sram_port_bytes
        lanes = self.mac_lanes(layer, banks)
        return np.ceil(kv / s / port), np.ceil(flops / FLOPS_PER_MAC / s / lanes)

    def mac_lanes(self, layer: int, banks: int) -> float:
        """Attention MAC lanes of a layer per die: KV elements per cycle from its ports x MACs
        per element (query heads sharing each K/V element) x ``attn_mac_factor``."""
        key = (self.graph.attention_group(layer), banks)
        if key in self._macs:
            return self._macs[key]
        graph = self.graph
        a0 = graph.attention_op(layer, 0, self.one).flops
        a1 = graph.attention_op(layer, 1, self.one).flops
        macs_per_elem = (a1 - a0) / FLOPS_PER_MAC / graph.attention.kv_elems_per_token
        bits = self.one.kv_format.bits_for("kv")
        elems = banks * self.p.kv_sram_port_bytes * BITS_PER_BYTE / bits
        self._macs[key] = max(1.0, elems * macs_per_elem * self.p.attn_mac_factor)
        return self._macs[key]

    def link(self, name: str, layer, dies: tuple[int, ...], n_bytes: int) -> Stage:
        """``n_bytes`` of one token's activations over a die's chip link (one hop)."""
        return Stage(
            name,
            layer,
            "chip_link",
            dies,
            "chip_link",
            transfer_cycles(n_bytes, self.p.chip_link_bytes_per_s, self.clock),
            cycles(self.p.chip_link_latency_s, self.clock) + self.reg,
            n_bytes,
            0,
        )


def tree_depth(op) -> int:
    """Levels of the log2 reduction tree a fused op or attention adds to its block's pipeline
    depth: a norm over its width, sampling's argmax over the vocabulary, attention's softmax
    over the tokens attended; 0 for ops that do not reduce (cycles)."""
    if op.op_class == "attention":
        width = op.k
    elif op.op_class in ("norm", "sampling"):
        width = op.k if op.kind == "sampling" else op.n
    else:
        return 0
    return math.ceil(math.log2(width)) if width > 1 else 0


def gather_bytes(op, s: int, hidden: int) -> int:
    """Bytes (per token) each die of a layer split over ``s`` dies receives after ``op``: the
    (s-1)/s of the op's output it lacks; routed experts stay on their dies until the combine
    of their down projection's partial sums (:func:`.experts.combine_stage`)."""
    if s == 1 or op.expert:
        return 0
    if op.kind == "embed":
        return ACT_BYTES * hidden * (s - 1) // s
    if op.op_class in design.ROM_CLASSES:
        return ACT_BYTES * op.n * (s - 1) // s
    return 0


def kv_banks_of(placement, p) -> dict:
    """KV SRAM banks each layer has on each of its dies: a die's banks split evenly over the
    transformer layers it holds (``asic.kv_banks_per_layer``); computed from the placement so
    a hand-written one needs no bank counts."""
    per_die: dict[int, int] = {}
    for s in placement.layers:
        if isinstance(s.layer, int):
            for d in s.units:
                per_die[d] = per_die.get(d, 0) + 1
    total = design.kv_banks(p)
    return {
        s.layer: total // max(per_die[d] for d in s.units) if isinstance(s.layer, int) else 0
        for s in placement.layers
    }


def build_stages(graph, spec, placement) -> tuple[list[Stage], list[tuple]]:
    """The pipeline's stages in order, and (stage index, layer, dies, kv banks) of every
    attention stage (their occupancy is re-costed per step)."""
    cost = AsicCost(spec, graph)
    dies_of = {s.layer: tuple(s.units) for s in placement.layers}
    banks_of = kv_banks_of(placement, spec.params)
    lora_of = lora.banks_per_target(graph, placement, spec.params)
    hidden = graph.hidden
    stages: list[Stage] = []
    attn: list[tuple] = []
    ops = graph.ops
    for i, op in enumerate(ops):
        dies = dies_of[op.layer]
        if op.op_class == "attention":
            attn.append((len(stages), op.layer, dies, banks_of[op.layer]))
            stages.append(cost.attention(op.layer, graph.context, dies, banks_of[op.layer]))
        elif op.op_class in design.ROM_CLASSES:
            stages.append(cost.gemv(op, dies, lora_of.get(op.layer, 0)))
        else:
            stages.append(cost.fused(op, dies))
        if op.expert:  # a block per expert (asic.experts_parallel)
            stages[-1] = replace(stages[-1], routed=True)
        gather = gather_bytes(op, len(dies), hidden)
        if gather:
            stages.append(cost.link(f"{op.name}.gather", op.layer, dies, gather))
        if op.expert and op.reduces and len(dies) > 1:
            stages.append(experts.combine_stage(cost, op, dies, ACT_BYTES * hidden))
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        if nxt is not None and set(dies_of[nxt.layer]) != set(dies):
            name = f"link_die{dies[-1]}_die{dies_of[nxt.layer][0]}"
            stages.append(cost.link(name, op.layer, dies[-1:], ACT_BYTES * hidden))
    return stages, attn


def _arrays(graph, placement, stages, attn, occ, visits, last_step_cycles: int) -> dict:
    """Per-block and per-SRAM-bank detail (heatmap-style arrays, indexed like
    ``graph.layer_keys`` unless named per die): busy cycles of each block over the run, the KV
    banks of each layer (per die), the K/V bytes each of its banks serves per token and the
    banks' busy share in the last step; KV bytes and fill of each die's SRAM. ``visits``: the
    rows of a step that take each stage (``q`` a sequence, each at its own position of
    ``occ``)."""
    keys = list(graph.layer_keys)
    pos = {str(k): i for i, k in enumerate(keys)}
    q = graph.workload.step_tokens
    busy = np.zeros(len(keys), dtype=np.int64)
    for st, c in zip(stages, occ.totals(q) * visits // q, strict=True):
        busy[pos[str(st.layer)]] += int(c)
    banks = np.zeros(len(keys), dtype=np.int64)
    per_bank = np.zeros(len(keys), dtype=np.int64)
    bank_busy = np.zeros(len(keys), dtype=np.float64)
    last = occ._replace(cols=occ.cols[len(occ.cols) - q :]).totals(q)  # the last step's rows
    for idx, layer, _dies, n_banks in attn:
        i = pos[str(layer)]
        banks[i] = n_banks
        per_bank[i] = stages[idx].n_bytes // max(1, n_banks)
        bank_busy[i] = last[idx] * visits[idx] / q / max(1, last_step_cycles)
    kv = np.zeros(placement.n_units, dtype=np.int64)
    for slot in placement.layers:
        for unit, n in zip(slot.units, slot.kv_bytes, strict=True):
            kv[unit] += n
    return {
        "block_busy_cycles": busy,
        "kv_banks_per_block": banks,
        "kv_bytes_per_bank_per_token": per_bank,
        "kv_bank_busy_share_last_step": bank_busy,
        "kv_sram_bytes_per_die": kv,
        "kv_sram_fill_per_die": kv / max(1, placement.capacity_bytes["kv_sram"]),
    }


PIPELINE = SEQUENCES


def n_stages(placement) -> int:
    """Blocks are stages of one sequence's pass; the batch is never split into micro-batches."""
    return 1


class AsicPipeline:
    """One user's token through every block, in graph order (the driver runs all users' tokens
    through it with the ``asic_pipeline`` kernel)."""

    def __init__(self, graph, system, placement):
        self.graph, self.spec, self.placement = graph, system.spec, placement
        self.stages, attn = build_stages(graph, system.spec, placement)
        self.attn = attn
        self.attn_of = {layer: (idx, dies, banks) for idx, layer, dies, banks in attn}
        self.cost = AsicCost(system.spec, graph)
        moe = {layer: i for i, layer in enumerate(graph.moe_layers)}
        self._experts = np.array(
            [moe[st.layer] if st.routed else -1 for st in self.stages], dtype=np.int64
        )
        homes = experts.homes(placement, graph.n_experts)
        self._units = experts.hardware_ids(self.stages, homes, graph.n_experts)

    def sampled_from(self) -> int | None:
        """The first stage only a sequence's sampled row takes (its LM head and sampling blocks
        and the links after them, when a prompt chunk samples one row a sequence), or None
        when every row takes every stage."""
        work = self.graph.workload
        if work.logit_rows == work.rows:
            return None
        return next(i for i, st in enumerate(self.stages) if st.kind in LOGIT_KINDS)

    def visits(self, n_rows: int) -> np.ndarray:
        """How many of a step's ``n_rows`` rows take each stage (:meth:`sampled_from`)."""
        out = np.full(len(self.stages), n_rows, dtype=np.int64)
        tail = self.sampled_from()
        if tail is not None:
            work = self.graph.workload
            out[tail:] = n_rows * work.logit_rows // work.rows
        return out

    def expert_stages(self) -> np.ndarray:
        """Each stage's MoE layer index when it is routed (a block per expert,
        asic.experts_parallel; or the combine over the links of the experts' dies), else -1."""
        return self._experts

    def expert_hardware(self) -> np.ndarray:
        """``[stage, expert]``: the unit a routed stage takes for each expert."""
        return self._units[1]

    def group_key(self, layer: int) -> tuple:
        """A layer's attention costs the same on as many dies with as many KV banks."""
        _, dies, banks = self.attn_of[layer]
        return (len(dies), banks)

    def occupancy(self, first: StepShape, n_positions: int) -> StageOccupancy:
        """Busy cycles of every stage per token at each position (a step's row, its context
        one token longer than the position before): fixed blocks' every position, an attention
        block's a column (costed once per group the driver gives)."""
        base = np.array([s.occ for s in self.stages], dtype=np.int64)
        cols, col_stage = [], []
        positions = first.context + np.arange(n_positions, dtype=np.int64)
        for g in first.groups():
            _, dies, banks = self.attn_of[g.layers[0]]
            col = self.cost.attention_over(g.layers[0], positions, dies, banks)[0]
            for layer in g.layers:
                cols.append(col)
                col_stage.append(self.attn_of[layer][0])
        cols = np.column_stack(cols) if cols else np.zeros((n_positions, 0), dtype=np.int64)
        return StageOccupancy(base, cols, np.array(col_stage, dtype=np.int64))

    def latencies(self) -> np.ndarray:
        """Each block's drain latency after its busy cycles."""
        return np.array([s.lat for s in self.stages], dtype=np.int64)

    def hardware(self) -> np.ndarray:
        """Each stage's hardware units, a row each (-1 padding): chip-link stages of a die share
        its link, a gather takes the links of all the layer's dies."""
        return self._units[0]

    def spans(self, step: StepShape, starts) -> SpanColumns:
        """Every row's spans at ``step``; ``starts[u, s]``: stage ``s``'s start for row ``u``,
        whose attention blocks read the K/V of its own context (a sequence's ``j``-th row of
        the step: ``step.context + j``)."""
        q = self.graph.workload.step_tokens
        contexts = step.context + np.arange(len(starts), dtype=np.int64) % q
        idx, cols, memo = [], [], {}
        for layer, (i, dies, banks) in self.attn_of.items():
            key = (self.graph.attention_group(layer), len(dies), banks)
            if key not in memo:  # layers alike cost alike
                memo[key] = self.cost.attention_over(layer, contexts, dies, banks)
            idx.append(i)
            cols.append(memo[key])
        per_row = RowStages.of(idx, cols)
        return step_spans(self.stages, starts, per_row)

    def extras(self, occ, last_step_cycles: int, n_users: int) -> PassTiming:
        """The die design, the pipeline's shape and its per-block and per-bank arrays."""
        p, lat = self.spec.params, self.latencies()
        notes = dict(
            dies=self.placement.n_units,
            stages=len(self.stages),
            rom_rows_per_bitline=int(p.rom_rows_per_bitline),
            lanes=(self.placement.layout.lanes if self.placement.layout else None) or 0,
            kv_sram_bytes=int(design.kv_sram_bytes(p)),
            die_design=design.etched_budget(p).lines(),
            pass_cycles=int(occ.row(0).sum() + lat.sum()),
            bottleneck_stage=self.stages[int(np.argmax(occ.row(-1)))].name,
        )
        arrays = _arrays(self.graph, self.placement, self.stages, self.attn, occ,
                         self.visits(n_users), last_step_cycles)  # fmt: skip
        return PassTiming((), (), arrays, notes)


pass_model = AsicPipeline
