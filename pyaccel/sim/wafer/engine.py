"""Wafer-scale SRAM mesh engine (Cerebras WSE-2/WSE-3, several CS systems joined by their I/O).

Weights live in the PEs' SRAM, tiled 2-D over the PE rectangle (region) of their layer (layer
regions) or of the whole wafer's grid (WaferLLM's interleave). Every op is a per-PE task (FMAC
lanes, 2x64-bit read + 1x64-bit write SRAM ports, DSD issue) followed by a mesh collective
simulated link by link (``mesh``): MeshGEMV all-reduces as WaferLLM's two-level streaming
chains, multicast broadcasts, point-to-point query shifts, each wavelet 32 bits per link per
cycle, one cycle per hop, a start overhead per message and links reserved first come first served.
Between regions the hidden vector is handed off over the mesh; between wafers over the system
I/O. A pass's stage cycles are the regions' times and its links the system I/O crossings between
wafers; the step driver simulates the micro-batches' schedule over both (the pass itself when one
micro-batch is in flight).

What does not depend on the context (every op but attention) is costed once per distinct
(op shape, region shape); attention is re-costed per step only when its tokens per PE change.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from ...model.ops import ACT_BYTES, TOKEN_ID_BYTES
from ...place.kinds.wafer import experts_held, wafer_of
from ...trace import LazyArrays
from ...units import ceil_div as _ceil
from ...units import cycles
from ..contract import (
    MICRO_BATCHES,
    PassTiming,
    RoutedSteps,
    StepShape,
    StepsTiming,
)
from .cost import RegionCoster
from .crossing import system_io_parts
from .entries import COMBINE, Entry, Region, add_entries, local_cycles
from .events import HEATMAPS, heatmaps, pass_spans
from .experts import ASSUMPTIONS as EXPERT_ASSUMPTIONS
from .experts import combine_cost
from .tasks import OpCost, multicast

RESOURCES = (
    "pe_compute",
    "pe_sram",
    "mesh_link",
    "mesh_hop",
    "mesh_message",
    "wafer_io",
    "wafer_io_latency",
    "host_io",
    "fixed_latency",
)
PIPELINE = MICRO_BATCHES
# Doubling a class's rate: factors keep integer fields integral (x2), except latencies (x0.5):
# the mesh's (hop, ramp, add) are simulated in half-cycle ticks (wafer.half_cycle_ticks), so a
# 1-cycle hop becomes half a cycle; the DSD issue cost is floored (2 cycles become 1).
WHAT_IF = {
    # the exp() polynomial runs on the FMAC datapath (wafer.exp_cost): twice the lanes, half
    # the cycles per element
    "pe_compute": (("fmac_fp16_per_cycle", "exp_cycles_per_elem"), (2, 0.5)),
    "pe_sram": (("sram_read_bytes_per_cycle", "sram_write_bytes_per_cycle"), 2),
    "mesh_link": (("link_bytes_per_cycle",), 2),
    "mesh_hop": (("hop_latency_cycles", "ramp_latency_cycles", "stream_add_latency_cycles"), 0.5),
    "mesh_message": (("message_overhead_cycles",), 0.5),
    "wafer_io": (("system_io_bytes_per_s",), 2.0),
    "wafer_io_latency": (("system_io_latency_s",), 0.5),
    "host_io": (("host_io_latency_s", "host_io_bytes_per_s", "host_sample_s"), (0.5, 2.0, 0.5)),
    "fixed_latency": (("dsd_issue_cycles",), 0.5),
}
ASSUMPTIONS = (
    "wafer.meshgemv: weights tiled 2-D over a region; the input slice replicated along one axis, "
    "partial sums all-reduced along the other (WaferLLM MeshGEMV); consecutive matmuls "
    "alternate axes so no transposes are needed",
    "wafer.tree_groups: all-reduces use WaferLLM's two-level streaming chains with about "
    "sqrt(line) groups (its configs: 15 groups at P=240 ... 24 at P=720), each group's root at "
    "its middle; the two-level scheme needs TWO_LEVEL_COLOURS = 10 routable colours per router "
    "(4 phase-1, 4 phase-2, 2 broadcast: mechanisms.md C.4), a one-level chain "
    "ONE_LEVEL_COLOURS = 6, counted against the colours the runtime leaves (colours - "
    "reserved_colours); a preset leaving fewer than 6 is refused",
    "wafer.shift_rounds: a GQA query shift sends each PE's slice over group - 1 distances; each "
    "distance in flight needs its own colour and a fabric queue at every sender and receiver, "
    "so at most min(colours - reserved_colours, fabric_queues - reserved_queues) run at once "
    "and the rest follow in rounds, one round after the other",
    "wafer.symmetric_lines: every row (column) of a region runs the same collective on its own "
    "links, so the line with the largest tiles is simulated and stands for all (exact for the "
    "slowest line under XY routing: the whole-grid simulation, grid.grid_sequence, finds every "
    "PE's result at the line-profile sum, tests/test_wafer_grid.py)",
    "wafer.ops_in_order: ops of a layer run one after another; a PE could start an op as soon "
    "as it holds the previous op's result, but each all-reduce's broadcast reaches the line "
    "ends last and the next all-reduce's chains start there, so the whole-grid simulation of "
    "that dataflow overlap saves at most 2 cycles per op (tests/test_wafer_grid.py), which "
    "the step leaves out",
    "wafer.ramp_rate: a PE's ramps in from and out to its router are separate links, each one "
    "wavelet per cycle (a PE takes in one wavelet and sends one per cycle, the contention term "
    "of Luczynski et al.'s model); a multicast's root sends once and routers copy the "
    "wavelets into their PEs, each copy crossing that PE's ramp",
    "wafer.accumulate_fp16: partial sums are 16-bit in SRAM (@fmach, ACC_BYTES = 2), so each "
    "FMAC reads the weight and the accumulator and writes the accumulator; arg-max reduces "
    "(value, index) pairs of 16-bit elements (ARGMAX_PAIR_ELEMS = 2)",
    "wafer.gqa_layout: q/k/v rows are ordered by KV group so a group's heads share a segment "
    "of the B axis; query slices are shifted inside it before the scores",
    "wafer.mla_absorbed: MLA decodes absorbed, its up-projections (the graph's "
    "attention.absorbed) tiled on the attention's region as the latent cache is, latent "
    "features along B: w_uk with its heads' query inputs along A, its partials (every head's "
    "slice of a PE's features) all-reduced along A, which hands each token's PEs the absorbed "
    "query; w_uv with its heads' outputs along A, reduced along B from the PE's share of the "
    "weighted sum. Each is a MeshGEMV task and all-reduce; its weights are SRAM bytes of the "
    "region's PEs (PeTiles.absorbed_tiles), so the placer holds them where they are timed",
    "wafer.embed_row_middle: the sampled token's embedding row sits, on average, at the middle "
    "of the embed region's B axis and is multicast from there",
    "wafer.moe_expert_regions: each routed expert owns a band of its layer's region; the step's "
    "active experts (the graph's expected distinct count, tokens spread evenly over them) run "
    "at once on their bands, then the top-k outputs are combined by an all-reduce along B",
    "wafer.half_cycle_ticks: when a mesh latency (hop, ramp, add) is a fraction of a cycle, "
    "as the what-if's halving makes a 1-cycle one, the mesh is simulated in ticks of 1/2 (or "
    "1/4: TICKS_PER_CYCLE = (1, 2, 4), the first that makes them whole, else floored at 1/4) "
    "cycle with every wavelet taking a whole cycle, and a wavelet's arrival is rounded up to "
    "a cycle",
    "wafer.io_crossings: each wafer-to-wafer crossing (and the loop back from the last wafer to "
    "the first) is a link of its own that carries one micro-batch at a time; a wafer works on "
    "the next micro-batch while its last output crosses (the driver's simulated schedule)",
    "wafer.region_handoff: the hidden vector moves between regions as one hop (vertical "
    "neighbours) or one region width (side by side) and is then multicast along B; between "
    "wafers it crosses the system I/O after the hops to and from the wafer edge",
    *EXPERT_ASSUMPTIONS,
)


class WaferPass:
    """The ops of one micro-batch's pass through every region, costed on ``system``."""

    PREFILL_STREAMS = True  # a prompt's chunks stream through the stages (pyaccel.prefill)

    def __init__(self, graph, system, placement):
        self.graph, self.spec = graph, system.spec
        self.coster = RegionCoster(self.spec, graph)
        self.regions = {s.layer: Region.of(s) for s in placement.layers}
        # a MoE layer spread over several wafers: its wafers, and a coster for its share of
        # the experts (larger bands)
        self.ep_wafers = {s.layer: len(s.units) for s in placement.layers if experts_held(s)}
        self.copies = {  # the other wafers of a layer on several
            s.layer: tuple(u for u in s.units if u != wafer_of(s))
            for s in placement.layers
            if len(s.units) > 1
        }
        self._costers = {
            s.layer: RegionCoster(self.spec, graph, experts_held(s))
            for s in placement.layers
            if experts_held(s)
        }
        order = []
        for key in graph.layer_keys:
            if self.regions[key] not in order:
                order.append(self.regions[key])
        self.stage_regions = order
        self.stage_of = {k: order.index(r) for k, r in self.regions.items()}
        self.entries, self.attention_at = self._build()
        self.n_units = placement.n_units
        self.strategy = placement.layout.strategy if placement.layout else None
        self._last: tuple = (None, (), ())
        self._delta_memo: dict = {}  # routed op -> (stage, cycles beyond the graph's own)
        self._fixed_sums: tuple | None = None  # stage sums of every entry but attention's

    def coster_of(self, key) -> RegionCoster:
        """The coster of a layer key's ops (its share of the experts where they are spread)."""
        return self._costers.get(key, self.coster)

    @property
    def n_stages(self) -> int:
        """Distinct regions the pass visits (pipeline stages)."""
        return len(self.stage_regions)

    def _build(self):
        graph, entries, attn = self.graph, [], {}
        self.expert_at = {}
        keys = graph.layer_keys
        entries += self._host_io(keys[0])
        entries += self._handoff(keys[-1], keys[0], loopback=True)
        for i, key in enumerate(keys):
            reg, axis = self.regions[key], 0
            coster = self.coster_of(key)
            for op in graph.ops_of(key):
                cost, new_axis = coster.op_cost(op, reg.w, reg.h, axis)
                if op.kind == "attention":
                    attn[op.layer] = (len(entries), axis)
                if op.expert:  # re-costed each step for the experts its router drew
                    self.expert_at[op.name] = (len(entries), axis)
                entries.append(
                    Entry(
                        op.layer,
                        op.name,
                        op.kind,
                        reg.wafer,
                        self.stage_of[key],
                        cost,
                        op.mem_bytes,
                        op.flops,
                        reg,
                    )  # fmt: skip
                )
                axis = new_axis
                if op.expert and op.reduces and key in self.ep_wafers:
                    entries.append(self._combine(key, op))
            if i + 1 < len(keys):
                entries += self._handoff(key, keys[i + 1])
        return entries, attn

    def _combine(self, key, op) -> Entry:
        """The cross-wafer combine after ``op``, the down projection of a MoE layer whose
        experts are spread over several wafers (wafer.expert_combine)."""
        reg, ep = self.regions[key], self.ep_wafers[key]
        rows = self.graph.workload.rows
        cost = combine_cost(self.coster, self.spec.params, reg, rows, self.graph.hidden, ep)
        n_bytes = (ep - 1) * rows * self.graph.hidden * ACT_BYTES
        return Entry(key, f"{op.name}.combine", COMBINE, reg.wafer, self.stage_of[key], cost,
                     n_bytes, 0, reg)  # fmt: skip

    def _host_io(self, first_key) -> list[Entry]:
        """The host transfers a pass waits on before its first op (wafer.host_io_async): each
        one SDK transaction's fixed cost plus the micro-batch's token ids over one channel;
        with host sampling (wafer.host_sampling) the transfer out carries the logits instead
        and the host's sampling time follows it."""
        p = self.spec.params
        n = int(p.host_transfers_per_step)
        if n <= 0:
            return []
        # token ids in for every row (step_tokens a sequence when verifying or prefilling);
        # out, the first transfer, for the rows the step samples (one a sequence in a prefill)
        work = self.graph.workload
        sizes = [TOKEN_ID_BYTES * work.logit_rows] + [TOKEN_ID_BYTES * work.rows] * (n - 1)
        host_s = 0.0
        if int(p.host_sampling):
            sizes[0] = ACT_BYTES * self.graph.vocab * work.logit_rows
            host_s = float(p.host_sample_s)
        rate, clock = p.host_io_bytes_per_s, p.clock_hz
        each = [cycles(p.host_io_latency_s + b / rate, clock) for b in sizes]
        cost = OpCost()
        cost.parts.append(("host_io", sum(each) + cycles(host_s, clock)))
        reg = self.regions[first_key]
        return [Entry(first_key, "host_io", "host_io", reg.wafer, self.stage_of[first_key],
                      cost, sum(sizes), 0, reg)]  # fmt: skip

    def _handoff(self, src_key, dst_key, loopback: bool = False) -> list[Entry]:
        """The hidden vector (or, looping back, the sampled token) from one region to the next."""
        a, b = self.regions[src_key], self.regions[dst_key]
        if a == b:
            return []
        c, p = self.coster.c, self.spec.params
        # the hidden states of every row, or the sampled token of each sampled row
        work = self.graph.workload
        m = work.logit_rows if loopback else work.rows
        elems = m if loopback else m * _ceil(self.graph.hidden, b.w)
        cost = OpCost()
        stage = self.stage_of[dst_key]
        name = "token_loopback" if loopback else f"handoff_{src_key}_{dst_key}"
        if a.wafer != b.wafer:
            out_hops = int(p.usable_width_pes) - (a.x0 + a.w)
            n_bytes = m * (1 if loopback else self.graph.hidden) * ACT_BYTES
            cost.parts += system_io_parts(c, p, out_hops, elems, n_bytes)
            lead = max(1, b.x0)
            cost.transfers += 1
        elif a.y0 + a.h == b.y0 or b.y0 + b.h == a.y0:
            lead = 1 + abs(a.x0 - b.x0)
        else:
            lead = abs(a.x0 - b.x0) + abs(a.y0 - b.y0)
        multicast(cost, c, b.h, 0, elems * max(1, _ceil(b.w, b.h)), 0, 1, lead=max(1, lead))
        return [Entry(dst_key, name, "handoff", b.wafer, stage, cost, 0, 0, b)]

    def group_key(self, layer: int) -> tuple:
        """A layer's attention costs the same on every region of one shape and input axis."""
        idx, axis = self.attention_at[layer]
        r = self.entries[idx].region
        return (r.w, r.h, axis)

    def at_step(self, step: StepShape, routed: bool = True) -> list[Entry]:
        """The pass with attention re-costed for the step's context, once per group (and, with
        ``routed``, its routed experts for the step's routing)."""
        out = list(self.entries)
        for idx, e in self._attention_at(step):
            out[idx] = e
        for op in (step.routed or {}).values() if routed else ():
            idx, cost = self._routed_cost(op)
            out[idx] = replace(out[idx], cost=cost, n_bytes=op.mem_bytes)
        return out

    def _attention_at(self, step: StepShape) -> list[tuple[int, Entry]]:
        """(entry index, entry) of every attention layer re-costed for the step's context,
        once per group."""
        out = []
        for g in step.groups():
            w, h, axis = g.key[1]
            cost, _ = self.coster.op_cost(g.op, w, h, axis)
            for layer in g.layers:
                idx = self.attention_at[layer][0]
                out.append((idx, replace(self.entries[idx], cost=cost, n_bytes=g.op.mem_bytes,
                                         flops=g.op.flops)))  # fmt: skip
        return out

    def _routed_cost(self, op) -> tuple[int, OpCost]:
        """(entry index, cost) of a routed-expert op on its layer's region."""
        idx, axis = self.expert_at[op.name]
        reg = self.entries[idx].region
        coster = self.coster_of(op.layer)
        return idx, coster.op_cost(op, reg.w, reg.h, axis)[0]

    def _routed_delta(self, step: StepShape, stage_c: list[int]) -> None:
        """Add to ``stage_c`` what the step's routed-expert ops cost beyond the graph's own
        (none of their cycles cross the system I/O)."""
        for op in (step.routed or {}).values():
            stage, extra = self._delta_of(op)
            stage_c[stage] += extra

    def _delta_of(self, op) -> tuple[int, int]:
        """(stage, cycles) a routed-expert op costs beyond the graph's own, kept per routing."""
        key = (op.name, op.hot_rows, op.weight_bytes)
        hit = self._delta_memo.get(key)
        if hit is None:
            idx, cost = self._routed_cost(op)
            base = self.entries[idx]
            hit = (base.stage, local_cycles(cost) - local_cycles(base.cost))
            self._delta_memo[key] = hit
        return hit

    def stage_cycles(self, entries: list[Entry]) -> tuple[list[int], list[tuple[int, int]]]:
        """Cycles each stage spends on one micro-batch, and ``(busy, latency)`` cycles of the
        system I/O crossing into each stage (into stage 0: the loop back), which the stage's
        wafer does not spend: it may work on the next micro-batch meanwhile."""
        sums = [0] * self.n_stages, [0] * self.n_stages, [0] * self.n_stages
        add_entries(sums, entries)
        out, busy, lat = sums
        return out, list(zip(busy, lat, strict=True))

    def _attention_stage_cycles(self, step: StepShape) -> tuple[list[int], list]:
        """:meth:`stage_cycles` of :meth:`at_step` without routing: the other entries' sums
        are kept, only the attention entries are re-costed and added (whole cycles: the same
        sums in any order)."""
        if self._fixed_sums is None:
            fixed = set(idx for idx, _ in self.attention_at.values())
            self._fixed_sums = [0] * self.n_stages, [0] * self.n_stages, [0] * self.n_stages
            add_entries(self._fixed_sums, [e for i, e in enumerate(self.entries)
                                            if i not in fixed])  # fmt: skip
        sums = tuple(list(x) for x in self._fixed_sums)
        add_entries(sums, [e for _, e in self._attention_at(step)])
        out, busy, lat = sums
        return out, list(zip(busy, lat, strict=True))

    def time(self, step: StepShape, events: bool) -> PassTiming:
        """Stage cycles at ``step``; spans, heatmaps and transfer counts when ``events``.
        Attention costs change only when some region's tokens per PE do
        (``ceil(attended / width)``), so other steps reuse the last stage cycles (unless their
        routed experts differ)."""
        # attention costs depend on the tokens each PE holds: ceil(attended / region width)
        key = tuple(-(-g.op.k // g.key[1][0]) for g in step.groups())
        if events or key != self._last[0]:  # attention re-costed; routed experts added below
            base, links = self._attention_stage_cycles(step)
            self._last = (key, tuple(base), tuple(links))
        stage_c, links = list(self._last[1]), self._last[2]
        self._routed_delta(step, stage_c)
        if not events:
            return PassTiming(tuple(stage_c), links=links)
        entries = self.at_step(step)
        transfers = {
            "step": step.index,
            "collectives": sum(e.cost.transfers for e in entries),
            "messages": sum(e.cost.messages for e in entries),
        }
        arrays = {}
        if step.arrays:  # made when read (plots): tens of MB of per-PE maps a run rarely draws
            arrays = LazyArrays(HEATMAPS, partial(heatmaps, self, entries, self.n_units,
                                                  self.spec.params))  # fmt: skip
        spans = pass_spans(entries, self.copies)
        return PassTiming(tuple(stage_c), spans, arrays, {"transfers": transfers}, links)

    def stage_cycles_over(self, contexts: np.ndarray, layout,
                          routed: RoutedSteps | None = None) -> StepsTiming:  # fmt: skip
        """Stage cycles and crossings of the pass at each of ``contexts``, as :meth:`time`
        gives them: re-costed only at the steps where some group's tokens per PE
        (``ceil(attended / region width)``) change, which split the run into segments;
        ``routed``: each step's routing, whose expert ops add what they cost beyond the
        graph's own (as in :meth:`time`)."""
        per_pe = [-(-self.graph.attention_counts(layers[0], contexts)[0] // key[1][0])
                  for key, layers in layout]  # fmt: skip
        keys = np.column_stack(per_pe) if per_pe else np.zeros((len(contexts), 0), np.int64)
        starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)])
        rows, links = [], []
        for i in starts.tolist():
            step = StepShape(self.graph, int(contexts[i]), self.group_key, layout=layout)
            base, crossing = self._attention_stage_cycles(step)
            rows.append(base)
            links.append(tuple(crossing))
        which = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(contexts)]))
        stage_c = np.asarray(rows, dtype=np.int64)[which]
        for _, _, versions, step_of in routed.op_versions(self.graph) if routed else ():
            deltas = [self._delta_of(v) for v in versions]
            extra = np.asarray([d[1] for d in deltas], dtype=np.int64)
            stage_c[:, deltas[0][0]] += extra[step_of]
        return StepsTiming(stage_c, links, None, which)

    def notes(self) -> dict:
        """The layout strategy and the regions the pass visits."""
        return {"strategy": self.strategy, "stages": self.n_stages}


pass_model = WaferPass


def n_stages(placement) -> int:
    """Pipeline stages a batch is split over: the distinct regions the layers occupy."""
    return len({Region.of(s) for s in placement.layers})
