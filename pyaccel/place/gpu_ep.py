"""GPU expert parallelism (EP): attention data-parallel over a stage's GPUs, routed experts spread
whole over them (vLLM's ``--data-parallel-size N --enable-expert-parallel``; SGLang's DP
attention with EP MoE).

Each of a stage's ``ep`` GPUs keeps every weight but the routed experts (attention, norms,
routers, shared experts, dense MLPs, embedding, head), the KV cache of the sequences it is home
to (:func:`pyaccel.batches.rank_totals`: each micro-batch split over the ranks as the step
driver splits it, the totals differing by at most one) and ``E/ep`` whole experts of every
MoE layer (:func:`~pyaccel.place.experts.spread`). The engine moves each token to the GPUs
holding its experts and back (dispatch and combine all-to-all over NVLink). A layer's region
records tensor-parallel rank 0 alone: every GPU runs the layer's attention by itself.
"""

from __future__ import annotations

from ..batches import rank_totals
from ..hw.spec import HardwareSpec
from .common import contiguous_partition
from .experts import held, spread
from .kinds.gpu import GpuLayout, GpuRegion, unit_capacity
from .placement import LayerSlot, Placement


def ep_widths(graph, spec: HardwareSpec, units: int) -> list[int]:
    """EP widths for exactly ``units`` GPUs of a model with routed experts: ``ep`` GPUs a stage
    inside one node (2 or more, at most one expert each at least), ``units / ep`` stages, widest
    first; none for a dense model."""
    if not graph.moe_layers:
        return []
    node = int(spec.params.gpus_per_node)
    n_blocks = len(graph.layer_keys)
    return [e for e in range(min(node, graph.n_experts, units), 1, -1)
            if units % e == 0 and units // e <= n_blocks]  # fmt: skip


def _slot(graph, layer, ranks: list[int], stage: int, seqs: tuple[int, ...]) -> LayerSlot:
    """One layer on a stage's ``ranks``: replicated weights, experts whole, KV of ``seqs``
    sequences on each rank."""
    ep, batch = len(ranks), graph.workload.batch
    experts = spread(graph.n_experts, tuple(ranks)) if layer in graph.moe_layers else ()
    counts = held(experts, ranks) if experts else [0] * ep
    w, kv = [0] * ep, [0] * ep
    for op in graph.ops_of(layer):
        for i in range(ep):
            if op.expert:
                w[i] += op.resident_weight_bytes // graph.n_experts * counts[i]
            else:
                w[i] += op.resident_weight_bytes
            kv[i] += op.resident_kv_bytes // batch * seqs[i]
    need_w, need_kv = graph.resident_bytes(layer)
    return LayerSlot(layer, tuple(ranks), tuple(w), tuple(kv), (0,) * ep, need_w, need_kv,
                     GpuRegion(stage=stage, tp_ranks=(0,)), experts)  # fmt: skip


def build(graph, spec: HardwareSpec, ep: int, pp: int, reason: str = "") -> Placement:
    """The EP placement of ``graph`` on ``ep x pp`` GPUs (unit = stage * ep + rank)."""
    keys = graph.layer_keys
    stages = contiguous_partition([sum(graph.resident_bytes(k)) for k in keys], pp)
    # the sequences each rank is home to over a step, as the step driver splits the batch
    seqs = rank_totals(graph.workload.batch, pp, ep)
    slots = tuple(
        _slot(graph, k, [s * ep + r for r in range(ep)], s, seqs)
        for k, s in zip(keys, stages, strict=True)
    )
    layout = GpuLayout(tp=1, pp=pp, stages=max(stages) + 1, ep=ep)
    return gpu_placement(graph, spec, slots, layout, reason)


def gpu_placement(graph, spec: HardwareSpec, slots, layout: GpuLayout, reason: str) -> Placement:
    """A GPU placement of ``graph`` from its layer slots and layout (``layout.width`` GPUs a
    stage), with one GPU's capacity."""
    cap, level_of, reserved = unit_capacity(spec)
    return Placement(
        system=spec.name,
        kind="gpu",
        model=graph.model_name,
        n_units=layout.width * layout.pp,
        capacity_bytes=cap,
        level_of=level_of,
        reserved_bytes=reserved,
        layers=slots,
        layout=layout,
        workload=graph.workload,
        reason=reason,
    )


def best_for(graph, spec: HardwareSpec, units: int) -> Placement | None:
    """The widest EP layout of exactly ``units`` GPUs that fits, or None."""
    for ep in ep_widths(graph, spec, units):
        plc = build(graph, spec, ep, units // ep)
        if not plc.shortfalls():
            return plc
    return None
