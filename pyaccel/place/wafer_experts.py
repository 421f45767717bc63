"""Expert parallelism over wafers: a MoE model's layer blocks on groups of wafers, each MoE
layer's routed experts spread over the wafers of its group.

Every wafer of a group keeps the same regions (the same PE rectangles): each holds the group's
layers whole except their routed experts, of which it holds its share (``spread``: contiguous
blocks). Attention, norms, shared experts, the router, embedding and LM head are replicated:
each wafer computes them for the same tokens, so a token's hidden vector is already on every
wafer of the group when the router picks its experts (no dispatch), and the partial sums of
the experts each wafer ran are combined over the system I/O (the engine's
``wafer.expert_combine``). With fewer experts a region, each expert's band of it is larger.
"""

from __future__ import annotations

from ..units import ceil_div
from .experts import held, spread
from .kinds.wafer import WaferRegion
from .kinds.wafer_tiles import PeTiles
from .placement import LayerSlot

# wafers a MoE layer's experts may be spread over (the placer offers those dividing the count)
EP_WAYS = (2, 3, 4, 6, 8, 12, 16)


def ways(graph, units: int) -> tuple[int, ...]:
    """The expert-parallel group sizes offered on ``units`` wafers: 1 (no expert parallelism)
    and, for a MoE model, each ``EP_WAYS`` size that divides ``units`` with at least as many
    experts a layer."""
    if not graph.moe_layers:
        return (1,)
    return (1, *(k for k in EP_WAYS if units % k == 0 and k <= graph.n_experts))


def experts_here(graph, ep: int) -> int | None:
    """Routed experts per region of a MoE layer spread over ``ep`` wafers (None: all)."""
    return ceil_div(graph.n_experts, ep) if ep > 1 and graph.moe_layers else None


def group_wafers(group: int, ep: int) -> tuple[int, ...]:
    """The wafers of group ``group`` of ``ep`` consecutive wafers."""
    return tuple(range(group * ep, (group + 1) * ep))


def layer_slot(graph, key, wafers: tuple[int, ...], rect, strategy: str, **extra) -> LayerSlot:
    """``key`` on the same rectangle of each of ``wafers`` (one wafer: the layer alone there):
    its routed experts spread over them (:func:`spread`), every other weight and its KV cache
    on each. Per-wafer bytes add up to more than the layer's own where parts are replicated."""
    need_w, need_kv = graph.resident_bytes(key)
    experts: tuple[int, ...] = ()
    weights = (need_w,) * len(wafers)
    if key in graph.moe_layers:  # each expert's band of the rect (the engine's expert_regions)
        tiles = PeTiles(graph, experts_here(graph, len(wafers)))
        extra["expert_bands"] = tiles.expert_regions(rect[2], rect[3])
        experts = spread(graph.n_experts, wafers)
        routed = sum(op.resident_weight_bytes for op in graph.ops_of(key) if op.expert)
        shares = [ceil_div(routed * n, graph.n_experts) for n in held(experts, wafers)]
        weights = tuple(need_w - routed + share for share in shares)
    region = WaferRegion(strategy=strategy, wafer=wafers[0], rect=tuple(rect), **extra)
    n = len(wafers)
    return LayerSlot(key, tuple(wafers), weights, (need_kv,) * n, (0,) * n, need_w, need_kv,
                     region, experts)  # fmt: skip
