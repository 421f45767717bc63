"""LPU placer: each pipeline stage is a tensor-parallel group of ``tp`` chips, part of a node
(``tp`` divides the node's chips) or whole nodes of one rack (up to ``tp_max_chips``,
lpu.tp_width); stages are contiguous layer blocks balanced by resident bytes and laid node after
node across racks. Inside a chip, a layer's shard occupies a contiguous range of MEM slices
(recorded in the slot's region); the embedding table and the LM head are sharded by vocabulary
rows over the stage's chips like any row-split weight.

The placer offers layouts (every width that fits, with its fewest and its most stages, and
:func:`member` for the counts between) and the orchestration layer keeps the fastest
(:mod:`pyaccel.placing`); ``--units auto`` is the fewest chips that hold the model, searched by
speed on that count.

Capacity is one level, ``sram`` (220 MiB per chip), holding weights, KV cache and activation
buffers; there is no runtime reservation (no caches, no OS: the compiler owns every byte).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NoReturn

import numpy as np

from ..errors import CapacityError, PlacementError, option
from ..model.graph import ACT_BYTES
from ..units import fmt_bytes
from .common import (
    capped_partition,
    contiguous_partition,
    parts_text,
    resident_parts,
    shrink_hint,
    split_even,
)
from .experts import held, spread
from .kinds.lpu import TIME_SPLIT, LpuLayout, LpuRegion, unit_capacity
from .placement import LayerSlot, Placement


def tp_candidates(spec) -> list[int]:
    """Tensor-parallel widths, widest first: divisors of the chips in a node, and whole nodes
    whose count divides the rack's (so stages never straddle racks), up to ``tp_max_chips``
    (lpu.tp_width)."""
    p = spec.params
    node = int(p.chips_per_node)
    nodes = max(1, int(p.chips_per_rack) // node)
    widths = [node * g for g in range(nodes, 1, -1) if nodes % g == 0]
    widths += [t for t in range(node, 0, -1) if node % t == 0]
    return [t for t in widths if t <= int(p.tp_max_chips)]  # 1 always: tp_max_chips >= 1


def _buffer_bytes(graph, spec, layer) -> int:
    """Activation buffers a layer keeps on each chip: ``activation_buffers`` copies of the
    widest activation of its ops (in and out, double-buffered: lpu.activation_buffers)."""
    key = ("lpu_widest_activation", layer)  # asked for every layer of every candidate layout
    widest = graph.placer_memo.get(key)
    if widest is None:
        widest = max((max(op.n, op.k) for op in graph.ops_of(layer) if op.kind != "sampling"),
                     default=0)  # fmt: skip
        if layer == "head":
            widest = max(widest, graph.vocab)
        graph.placer_memo[key] = widest
    copies = max(1, int(spec.params.activation_buffers))
    return copies * ACT_BYTES * graph.workload.batch * widest


def _slot(graph, spec, layer, chips: list[int], stage: int, used: list[int],
          ep: bool = False) -> LayerSlot:  # fmt: skip
    tp = len(chips)
    experts = spread(graph.n_experts, tuple(chips)) if ep and layer in graph.moe_layers else ()
    if experts:
        w, kv = _shards(graph, layer, chips, experts)
    else:
        w, kv = _memo_shards(graph, layer, chips)
    buf = _buffer_bytes(graph, spec, layer)
    need_w, need_kv = graph.resident_bytes(layer)
    slice_bytes = int(spec.params.sram_bytes) // int(spec.params.mem_slices)
    first = used[0] // slice_bytes
    used[0] += max(w) + max(kv) + buf
    last = max(first, (used[0] - 1) // slice_bytes)
    region = LpuRegion(
        stage=stage,
        node=chips[0] // int(spec.params.chips_per_node),
        tp=tp,
        chips=(chips[0], chips[-1]),
        mem_slices=(first, last),
    )
    return LayerSlot(layer, tuple(chips), tuple(w), tuple(kv), (buf,) * tp, need_w, need_kv, region,
                     experts)  # fmt: skip


def _shards(graph, layer, chips: list[int], experts: tuple = ()) -> tuple[list, list]:
    """(weight bytes, KV bytes) ``layer`` puts on each chip of its stage."""
    tp = len(chips)
    w, kv = [0] * tp, [0] * tp
    for op in graph.ops_of(layer):
        # norms (replicated) are copied to every chip; everything else is sharded, the embedding
        # table by vocabulary rows; with expert parallelism experts stay whole on chips
        repl = op.split == "replicate" and op.kind != "embed"
        if op.expert and experts:
            one = op.resident_weight_bytes // graph.n_experts
            parts = [one * n for n in held(experts, chips)]
        elif repl:
            parts = [op.resident_weight_bytes] * tp
        else:
            parts = split_even(op.resident_weight_bytes, tp)
        for i, b in enumerate(parts):
            w[i] += b
        for i, b in enumerate(split_even(op.resident_kv_bytes, tp)):
            kv[i] += b
    return w, kv


def _stage_of(graph, spec, tp: int, units: int, stages: int | None,
              costs: tuple[int, ...] | None = None) -> list[int]:  # fmt: skip
    """Each layer key's stage: contiguous blocks balanced by resident bytes over ``stages``
    stages of ``tp`` chips (by default as many as ``units`` chips hold, at most one a key); with
    ``costs`` (each key's cycles on a stage of its own, :func:`keywise`), balanced by those
    within each chip's SRAM (by bytes where no split by cost holds them)."""
    keys = graph.layer_keys
    top = max(1, min(units // tp, len(keys)))
    n_stages = top if stages is None else max(1, min(stages, top))
    if costs is not None:
        split = _time_split(graph, spec, tp, n_stages, costs)
        if split is not None:
            return split
    # the same for every chip and stage count tried (buffers: the preset's copies)
    key = ("lpu_stage_sizes", tp, int(spec.params.activation_buffers))
    sizes = graph.placer_memo.get(key)
    if sizes is None:
        sizes = [sum(graph.resident_bytes(k)) + tp * _buffer_bytes(graph, spec, k) for k in keys]
        graph.placer_memo[key] = sizes
    # a search asks again for the same split (most widths and stage counts recur)
    split = graph.placer_memo.setdefault(("lpu_stage_split", *key[1:]), {})
    if n_stages not in split:
        split[n_stages] = contiguous_partition(sizes, n_stages)
    return list(split[n_stages])


def _time_split(graph, spec, tp: int, n_stages: int, costs: tuple) -> list[int] | None:
    """:func:`_stage_of` by ``costs``, kept per graph (a search asks again for a count)."""
    memo = graph.placer_memo.setdefault(("lpu_time_split", tp, costs), {})
    if n_stages not in memo:
        cap, _, reserved = unit_capacity(spec)
        room = cap["sram"] - reserved["sram"]
        memo[n_stages] = capped_partition(costs, n_stages, _chip_bytes(graph, spec, tp), room)
    hit = memo[n_stages]
    return None if hit is None else list(hit)


def fits(graph, spec, tp: int, units: int, stages: int | None = None, ep: bool = False) -> bool:
    """Whether :func:`build` ``(graph, spec, tp, units, stages=stages, ep=ep)`` has no
    shortfall, without building its slots: each chip's weights, KV and buffers summed per stage
    from the per-width shards (a search asks this of dozens of chip and stage counts)."""
    if ep and graph.moe_layers:  # experts whole on chips: their shares depend on the chip ids
        return not build(graph, spec, tp, units, stages=stages, ep=ep).shortfalls()
    stage_of = np.array(_stage_of(graph, spec, tp, units, stages))
    starts = np.flatnonzero(np.diff(stage_of, prepend=-1))  # contiguous blocks, one a stage
    used = np.add.reduceat(_chip_bytes(graph, spec, tp), starts, axis=0)
    cap, _, reserved = unit_capacity(spec)  # one level (sram) holds all three
    return bool((used + reserved["sram"] <= cap["sram"]).all())


def _chip_bytes(graph, spec, tp: int) -> np.ndarray:
    """Bytes each layer key puts on each chip of a ``tp``-chip stage (weights, KV and
    buffers): layers x chips, kept per graph, width and buffer count."""
    key = ("lpu_chip_bytes", tp, int(spec.params.activation_buffers))
    hit = graph.placer_memo.get(key)
    if hit is None:
        rows = []
        for layer in graph.layer_keys:
            w, kv = _memo_shards(graph, layer, list(range(tp)))
            rows.append(np.array(w, dtype=np.int64) + kv + _buffer_bytes(graph, spec, layer))
        hit = graph.placer_memo[key] = np.array(rows, dtype=np.int64).reshape(-1, tp)
    return hit


def _memo_shards(graph, layer, chips: list[int]) -> tuple[list, list]:
    """:func:`_shards` without experts, the same at every stage and layout of this width: kept
    per graph, and computed once per distinct set of op sizes (the decoder layers of a model
    hold the same ops)."""
    key = ("lpu_shards", layer, len(chips))
    hit = graph.placer_memo.get(key)
    if hit is None:
        sig = ("lpu_shard_sizes", len(chips), tuple(
            (op.split, op.kind, op.expert, op.resident_weight_bytes, op.resident_kv_bytes)
            for op in graph.ops_of(layer)
        ))  # fmt: skip
        hit = graph.placer_memo.get(sig)
        if hit is None:
            hit = graph.placer_memo[sig] = _shards(graph, layer, chips)
        graph.placer_memo[key] = hit
    return hit


def build(graph, spec, tp: int, units: int, reason: str = "", stages: int | None = None,
          ep: bool = False, costs: tuple[int, ...] | None = None):  # fmt: skip
    """Layers over ``stages`` stages of ``tp`` chips (by default as many as ``units`` chips
    hold, at most one stage per layer key; any chips left over stay idle); ``ep``: routed
    experts whole on the stage's chips (expert parallel); ``costs``: stages balanced by each
    key's cycles (:func:`_stage_of`) instead of its bytes."""
    keys = graph.layer_keys
    stage_of = _stage_of(graph, spec, tp, units, stages, costs)
    slots, used = [], {}
    for k, s in zip(keys, stage_of, strict=True):
        chips = list(range(s * tp, s * tp + tp))
        slots.append(_slot(graph, spec, k, chips, s, used.setdefault(s, [0]), ep))
    cap, level_of, reserved = unit_capacity(spec)
    return Placement(
        system=spec.name,
        kind="lpu",
        model=graph.model_name,
        n_units=units,
        capacity_bytes=cap,
        level_of=level_of,
        reserved_bytes=reserved,
        layers=tuple(slots),
        layout=LpuLayout(
            tp=tp,
            pp=max(stage_of) + 1,
            idle_chips=units - (max(stage_of) + 1) * tp,
            ep=tp if ep else None,
            split=None if costs is None else TIME_SPLIT,
        ),  # fmt: skip
        workload=graph.workload,
        reason=reason,
    )


def _fewest_stages(graph, spec, tp: int, top: Placement) -> Placement:
    """The layout of ``tp``-wide stages with the fewest stages that fits, given ``top``, the
    layout with the most stages, which fits (bisection: more stages hold fewer layers each)."""
    lo, hi = 1, top.layout.pp
    units, ep = top.n_units, bool(top.layout.ep)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(graph, spec, tp, units, stages=mid, ep=ep):
            hi = mid
        else:
            lo = mid + 1
    return top if lo == top.layout.pp else build(graph, spec, tp, units, stages=lo, ep=ep)


def layouts_on(graph, spec, units: int) -> list[Placement]:
    """The layouts a speed search times on ``units`` chips: for every tensor-parallel width
    that fits, the fewest stages that hold the model (the shortest path for a token) and the
    most stages the chips allow (the most micro-batches in flight); empty when none fits."""
    out = []
    for tp in tp_candidates(spec):
        for ep in _expert_layouts(graph, spec, tp):
            if tp > units:
                continue
            if not fits(graph, spec, tp, units, ep=ep):
                continue
            most = build(graph, spec, tp, units, ep=ep)
            few = _fewest_stages(graph, spec, tp, most)
            out.append(few)
            if most.layout.pp != few.layout.pp:
                out.append(most)
    return out


FAMILY_POSITION = "stages"  # a family's members differ in their pipeline stage count


def family(plc: Placement) -> tuple:
    """What a layout keeps when only its stage count changes (the speed search's family,
    :mod:`pyaccel.layout_search`): its tensor-parallel width and expert layout."""
    return (plc.layout.tp, plc.layout.ep)


def position(plc: Placement) -> int:
    """Where a layout stands in its :func:`family`: its pipeline stage count."""
    return plc.layout.pp


def member(graph, system, plc: Placement, stages: int,
           costs: tuple[int, ...] | None = None) -> Placement | None:  # fmt: skip
    """``plc``'s layout (its width and expert layout on its chips) over ``stages`` pipeline
    stages (by resident bytes, any count between the fewest and the most stages that fit also
    fits, since more stages hold fewer layers each); ``costs``: each layer key's cycles on a
    stage of its own (:func:`keywise`), to balance the stages by instead (None when that split
    leaves a chip short)."""
    lay = plc.layout
    out = build(graph, system.spec, lay.tp, plc.n_units, reason=plc.reason, stages=stages,
                ep=bool(lay.ep), costs=costs)  # fmt: skip
    return None if costs is not None and out.shortfalls() else out


def keywise(graph, system, plc: Placement) -> Placement:
    """``plc``'s width and expert layout with every layer key on a stage of its own, on as
    many chips as that takes (more than the system may have): a layout only for timing each
    key's work on such a stage, the ``costs`` of :func:`member`."""
    lay, n = plc.layout, len(graph.layer_keys)
    return build(graph, system.spec, lay.tp, lay.tp * n, stages=n, ep=bool(lay.ep))


def _expert_layouts(graph, spec, tp: int) -> tuple[bool, ...]:
    """Whether experts are split over a ``tp``-chip stage (False) or whole on its chips (True),
    as ``expert_layout`` allows: both for ``auto`` on a model with routed experts and 2+ chips a
    stage; with ``ep`` pinned, whole wherever a stage has 2+ chips."""
    mode = spec.params.expert_layout
    if not graph.moe_layers or mode == "tp":
        return (False,)
    if tp == 1:  # one chip holds every expert either way
        return () if mode == "ep" else (False,)
    return (True,) if mode == "ep" else (False, True)


def best_for(graph, spec, units: int) -> Placement | None:
    """The widest tensor-parallel layout on ``units`` chips that fits, or None (a capacity
    answer: the speed search is :func:`layouts_units`). Experts are split over a stage's
    chips, unless ``expert_layout = ep`` allows only whole experts on chips."""
    for tp in tp_candidates(spec):
        if tp > units:
            continue
        for ep in _capacity_layouts(graph, spec, tp):
            if fits(graph, spec, tp, units, ep=ep):
                return build(graph, spec, tp, units, ep=ep)
    return None


def _capacity_layouts(graph, spec, tp: int) -> tuple[bool, ...]:
    """The expert layouts a capacity answer tries on a ``tp``-chip stage: experts split
    (False), or whole on chips (True) where ``ep`` is pinned (none on one chip)."""
    if graph.moe_layers and spec.params.expert_layout == "ep":
        return _expert_layouts(graph, spec, tp)
    return (False,)


def _need(graph) -> int:
    return graph.total_resident_weight_bytes + graph.total_resident_kv_bytes


def fewest(graph, spec) -> Placement | None:
    """The placement on the fewest chips that hold weights, KV cache and buffers, or None."""
    floor = max(1, -(-_need(graph) // int(spec.params.sram_bytes)))
    # only whole stages of tp chips matter, and no layout has more stages than layer keys
    sizes = sorted({t * g for t in tp_candidates(spec) for g in range(1, len(graph.layer_keys) + 1)
                    if t * g >= floor})  # fmt: skip
    for units in sizes:
        plc = best_for(graph, spec, units)
        if plc is not None:
            return plc
    return None


def label(plc: Placement) -> str:
    """A layout's short name for the placement reason."""
    lay = plc.layout
    return (f"TP {lay.tp} x {lay.pp}" + (" (EP)" if lay.ep else "")
            + (" by time" if lay.split == TIME_SPLIT else ""))  # fmt: skip


def layouts_auto(graph, system) -> list[Placement]:
    """Every layout the speed search times on the fewest chips that hold weights, KV cache and
    buffers; raises naming the real cause when no chip count fits."""
    spec = system.spec
    plc = fewest(graph, spec)
    if plc is None and graph.moe_layers and spec.params.expert_layout == "ep":
        raise _no_expert_layout(graph, spec, "any number of")
    if plc is None:
        raise CapacityError(
            f"{graph.model_name} does not fit on any {spec.name} layout: "
            f"{no_fit_cause(graph, spec)}"
        )
    # the reason marks them so with_reason says why this count
    return [replace(p, reason=FEWEST) for p in layouts_on(graph, spec, plc.n_units)]


FEWEST = "fewest"


def layouts_units(graph, system, units: int) -> list[Placement]:
    """Every layout the speed search times on exactly ``units`` chips; raises with the chip,
    the bytes short and the unit count that would fit."""
    found = layouts_on(graph, system.spec, units)
    if found:
        return found
    if graph.moe_layers and system.spec.params.expert_layout == "ep":
        raise _no_expert_layout(graph, system.spec, str(units))
    _refuse(graph, system, units)


def _no_expert_layout(graph, spec, chips: str) -> PlacementError:
    """Why ``expert_layout = ep`` places nothing on ``chips`` chips, with the bytes of the
    largest whole expert of a layer against one chip's SRAM."""
    one: dict = {}  # layer -> resident bytes of one of its routed experts (all its matmuls)
    for op in graph.ops:
        if op.expert and op.resident_weight_bytes:
            one[op.layer] = one.get(op.layer, 0) + op.resident_weight_bytes // graph.n_experts
    expert = max(one.values(), default=0)
    return PlacementError(
        f"expert_layout = ep: no expert-parallel layout of {chips} {spec.name} chips holds "
        f"{graph.model_name} (2+ chips a stage, each expert whole on one chip; one expert of a "
        f"layer holds {fmt_bytes(expert)}, one chip {fmt_bytes(int(spec.params.sram_bytes))} "
        f"of SRAM); {option('overrides', 'expert_layout=auto')} (or tp)"
    )


def with_reason(graph, system, plc: Placement, tried) -> Placement:
    """``plc`` with why it was kept: the bytes, the chips, and every layout timed (``tried``:
    ``[(label, cycles)]``) with its cycles for one step."""
    spec = system.spec
    cap = int(spec.params.sram_bytes)
    units, t, pp = plc.n_units, plc.layout.tp, plc.layout.pp
    floor = max(1, -(-_need(graph) // cap))
    opts = "; ".join(f"{lab}: {c:,} cycles" for lab, c in tried)
    idle = f" ({units - pp * t} idle)" if units > pp * t else ""
    why = (
        f"{graph.model_name} needs {fmt_bytes(_need(graph))} resident (weights "
        f"{fmt_bytes(graph.total_resident_weight_bytes)} + KV "
        f"{fmt_bytes(graph.total_resident_kv_bytes)}); one {spec.name} chip holds "
        f"{fmt_bytes(cap)} of SRAM, so at least {floor}"
        + ("; the fewest chips that hold it" if plc.reason == FEWEST else "")
        + f"; on {units} chips each pipeline stage "
        f"is a tensor-parallel group of whole nodes of one rack or part of a node, holding "
        f"whole layers (plus activation buffers and norms copied to every chip), balanced by "
        f"their bytes or ('by time') by each one's cycles on a stage of its own; layouts that "
        f"fit, one step each: {opts}; kept {label(plc)} = {pp * t} chips{idle}"
    )
    return replace(plc, reason=why)


def no_fit_cause(graph, spec) -> str:
    """Why no chip count fits: the layer that overfills a chip even alone on a stage of the
    widest tensor-parallel group, its bytes per chip vs the SRAM, what they are made of, and
    what could shrink them."""
    widest = tp_candidates(spec)[0]
    failed = build(graph, spec, widest, widest * len(graph.layer_keys))
    unit, _, used, have = max(failed.shortfalls(), key=lambda x: x[2] - x[3])
    key = failed.layers_on(unit)[0]
    parts = resident_parts(graph, key)
    buf = _buffer_bytes(graph, spec, key)
    return (
        f"layer {key!r} alone needs {used:,} B ({fmt_bytes(used)}) on chip {unit} of a stage of "
        f"{widest} chips (the widest tensor-parallel group, lpu.tp_width), more than its "
        f"{have:,} B "
        f"({fmt_bytes(have)}) of SRAM; the layer holds {parts_text(parts)}, plus "
        f"{fmt_bytes(buf)} of activation buffers per chip, and a layer is not split across "
        f"stages, so no chip count fits; {shrink_hint(graph, parts, lambda g: fewest(g, spec))}"
    )


def _refuse(graph, system, units: int) -> NoReturn:
    """Raise why nothing fits on ``units`` chips: the widest layout's chip and bytes short,
    and the unit count that would fit (or why none does)."""
    spec = system.spec
    t = next(t for t in tp_candidates(spec) if t <= units)
    failed = build(graph, spec, t, units)
    plc = fewest(graph, spec)
    hint = (f"{option('units', plc.n_units)} would fit" if plc is not None
            else f"no chip count fits: {no_fit_cause(graph, spec)}")  # fmt: skip
    try:
        failed.check()
    except PlacementError as exc:
        raise PlacementError(
            f"{graph.model_name} does not fit on {units} {spec.name} chips (TP {t} x "
            f"{failed.layout.pp} stages): {exc}; {hint}"
        ) from None
    raise AssertionError("unreachable: a layout with shortfalls passed check()")
