"""Expert parallelism on GPUs (:mod:`pyaccel.place.gpu_ep`): attention data-parallel over a stage's
``ep`` GPUs, routed experts whole on them, tokens moved by all-to-all.

The pass's kernels are those of the busiest GPU's share of the micro-batch (``ceil(B / ep)``
sequences, tensor parallel 1: the driver gives that graph, ``data_parallel``, and each GPU's
sequences, :func:`pyaccel.batches.rank_shares`, which the placement's KV follows). Each MoE
layer's three expert kernels are re-costed every step from its routing: each GPU runs its own
experts on the (row, expert) pairs routed to them, reading the weights of its routed experts;
the slowest GPU's kernels stand for the layer (every GPU waits for the combine). A dispatch
all-to-all before them and a combine after move each row's hidden vector to every other GPU
that owns one of its experts and back, over NVLink at NCCL's effective rate, timed by the GPU
that sends or receives the most.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...model.ops import ACT_BYTES, shape_of
from ..contract import Exchange
from ..experts import busiest_link_rows_over, expert_load, expert_loads_over, fewest_owners, homes
from .cost import launch_s

DISPATCH, COMBINE = "dispatch", "combine"
A2A_KINDS = (DISPATCH, COMBINE)
EXPERT_KINDS = ("experts_gate_up_proj", "experts_act", "experts_down_proj")


def with_all_to_all(kernels: list, make) -> list:
    """``kernels`` with an empty dispatch before each MoE layer's expert kernels and an empty
    combine after them (``make(kind, layer, stage)`` builds one; a step fills them in)."""
    out = []
    for k in kernels:
        if k.kind == "experts_gate_up_proj":
            out.append(make(DISPATCH, k.layer, k.stage))
        out.append(k)
        if k.kind == "experts_down_proj":
            out.append(make(COMBINE, k.layer, k.stage))
    return out


class EpPlan:
    """Where each MoE layer's experts and a micro-batch's rows live on a stage's GPUs."""

    def __init__(self, graph, placement, ep: int):
        self.q = graph.workload.step_tokens
        self.ep, self.hidden, self.n_experts = ep, graph.hidden, graph.n_experts
        self.layers = graph.moe_layers
        # kernels by what they depend on: (id(op), pairs, experts, stage) of a GPU's expert
        # kernel, (kind, layer, stage, bytes) of an all-to-all; most steps repeat earlier ones
        self._kernels: dict = {}
        self.owner = {}
        for slot in placement.layers:
            if slot.layer in self.layers:
                first = slot.units[0]
                self.owner[slot.layer] = np.array(slot.expert_units, dtype=np.int64) - first

    def layer_kernels(self, cost, i: int, ops: dict, stage: int, picks, ranks) -> list:
        """The five kernels of MoE layer ``self.layers[i]`` at one step (dispatch, the slowest
        GPU's gate/up, activation and down projection, combine); ``ops`` the layer's expert ops
        by kind, ``picks`` the step's ``[rows, moe_layers, top_k]`` expert ids, ``ranks`` the
        micro-batch's sequences on each GPU of the stage (the driver's split, by which the
        placement laid out each GPU's KV cache)."""
        layer = self.layers[i]
        home = homes(ranks, self.q)
        load = expert_load(picks[:, i, :], home, self.owner[layer], self.ep)
        pairs, experts = load.pairs.tolist(), load.experts.tolist()
        per_gpu = [[self._expert_kernel(cost, ops[kind], pairs[u], experts[u], stage)
                    for kind in EXPERT_KINDS] for u in range(self.ep)]  # fmt: skip
        slowest = max(range(self.ep), key=lambda u: sum(k.cycles for k in per_gpu[u]))
        moved = load.busiest_link_rows() * ACT_BYTES * self.hidden
        a2a = [self._all_to_all(cost, kind, layer, stage, moved) for kind in (DISPATCH, COMBINE)]
        return [a2a[0], *per_gpu[slowest], a2a[1]]

    def layer_cycles_over(self, cost, i: int, ops: dict, stage: int, picks,
                          ranks) -> np.ndarray:  # fmt: skip
        """The five kernels' cycles of MoE layer ``self.layers[i]`` summed, at each step of
        ``picks`` (``[steps, rows, moe_layers, top_k]``), as :meth:`layer_kernels` gives them
        one step at a time (int64 ``[steps]``); ``ranks`` as there."""
        layer = self.layers[i]
        home = homes(ranks, self.q)
        load = expert_loads_over(picks[:, :, i, :], home, self.owner[layer], self.ep)
        # each GPU's three kernels by its (pairs, experts); the slowest GPU's sum counts
        span = self.n_experts + 1
        keys, which = np.unique(load.pairs * span + load.experts, return_inverse=True)
        shapes = [(ops[kind], shape_of(ops[kind])) for kind in EXPERT_KINDS]
        per_key = [sum(self._expert_cycles(cost, op, shape, p, e) for op, shape in shapes)
                   for p, e in (divmod(k, span) for k in keys.tolist())]  # fmt: skip
        slowest = np.asarray(per_key, dtype=np.int64)[which.reshape(load.pairs.shape)].max(axis=1)
        moved, at = np.unique(busiest_link_rows_over(load), return_inverse=True)
        a2a = [sum(self._all_to_all(cost, kind, layer, stage, m * ACT_BYTES * self.hidden).cycles
                   for kind in (DISPATCH, COMBINE)) for m in moved.tolist()]  # fmt: skip
        return slowest + np.asarray(a2a, dtype=np.int64)[at.ravel()]

    def _expert_kernel(self, cost, op, pairs: int, experts: int, stage: int):
        """The kernel of expert op ``op`` on a GPU with ``pairs`` (row, expert) pairs over
        ``experts`` routed experts (kept: the memo holds the op, so its id stays its own)."""
        key = (id(op), pairs, experts, stage)
        hit = self._kernels.get(key)
        if hit is None:
            kernel = cost.kernel(_on_gpu(op, pairs, experts, self.n_experts), stage)
            hit = self._kernels[key] = (op, kernel)
        return hit[1]

    def _expert_cycles(self, cost, op, shape: tuple, pairs: int, experts: int) -> int:
        """Cycles of :meth:`_expert_kernel`'s kernel, kept per op shape (``shape``, the
        :func:`~pyaccel.model.ops.shape_of` ``op``): alike layers' expert ops cost alike, and a
        kernel's cycles do not depend on its stage."""
        key = ("cycles", shape, pairs, experts)
        hit = self._kernels.get(key)
        if hit is None:
            kernel = cost.kernel(_on_gpu(op, pairs, experts, self.n_experts), 0)
            hit = self._kernels[key] = kernel.cycles
        return hit

    def _all_to_all(self, cost, kind: str, layer, stage: int, moved: int):
        """A dispatch or combine moving ``moved`` bytes through the busiest link (kept)."""
        key = (kind, layer, stage, moved)
        hit = self._kernels.get(key)
        if hit is None:
            hit = self._kernels[key] = cost.all_to_all(kind, layer, stage, moved)
        return hit


def _on_gpu(op, pairs: int, experts: int, n_experts: int):
    """``op`` (an expert op of the share graph) as a GPU runs it: its ``pairs`` (row, expert)
    pairs, and the weights of its ``experts`` routed experts."""
    flops, act = (getattr(op, f) // max(1, op.m) * pairs for f in ("flops", "act_bytes"))
    weights = op.resident_weight_bytes // n_experts * experts
    return replace(op, m=pairs, flops=flops, act_bytes=act, weight_bytes=weights, hot_rows=0)


def exchanges(p, graph, placement) -> tuple[Exchange, ...]:
    """``BoundRates.exchanges``: each expert-parallel MoE layer's dispatch and combine, as the
    engine runs them (:meth:`GpuCost.all_to_all`): a launch and NVLink's small-message latency
    (``sync``), then the bytes of the GPU that sends (dispatch) or receives (combine) the
    most, here at NVLink's peak rate per direction. Whatever the routing, a row's experts
    live on at least ``d`` GPUs (:func:`~pyaccel.sim.experts.fewest_owners`), at most one of
    them its home, so the home of the most sequences (``ceil(B / ep)`` of the graph's batch)
    sends ``d - 1`` copies of each of its rows (``hidden`` x 2 B) and receives as many partial
    sums back. Nothing goes into the GPUs' NVLink totals: how many sequences each GPU is home
    to over a step's passes follows the driver's micro-batches, which an engine leaves alone.

    Not achievable by construction where routing spreads a row's experts over more GPUs than
    the fewest that hold them (top_k experts on top_k GPUs: mixtral on 8 GPUs sends 1 copy
    a row here, ~1.75 under uniform routing), or piles rows onto one GPU's experts (the
    engine times the GPU that receives the most), and the engine moves bytes at NCCL's
    effective rate, below the peak."""
    lay = placement.layout
    if not lay.ep:
        return ()
    work = graph.workload
    busiest = -(-work.batch // lay.ep)
    floor = tuple(sorted({"launch": launch_s(p), "sync": float(p.nvlink_latency_s)}.items()))
    row_bytes = work.step_tokens * ACT_BYTES * graph.hidden
    out = []
    for slot in placement.layers:
        if not slot.expert_units:
            continue
        copies = max(0, fewest_owners(graph.top_k, slot.expert_units) - 1)
        link_s = busiest * copies * row_bytes / p.nvlink_bytes_per_s
        out += [Exchange(f"L{slot.layer}.{kind}", slot.layer, tuple(slot.units), floor, link_s, 0.0)
                for kind in A2A_KINDS]  # fmt: skip
    return tuple(out)
