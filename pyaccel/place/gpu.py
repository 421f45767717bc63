"""GPU placer: tensor parallel (TP) inside a node, pipeline stages (PP) across nodes.

TP width divides the KV heads (GQA: each rank keeps whole KV heads; MLA: the attention heads,
with the latent KV cache replicated on every rank as vLLM does) and fits in one NVLink node.
Pipeline stages are contiguous layer blocks balanced by resident bytes.

``--units auto`` widens TP inside a node before it adds a pipeline stage, as serving engines
deploy (vLLM and SGLang: tensor parallel within a node, pipeline parallel across nodes): a
layout with two or more stages uses the widest TP the model allows, so a model too big for
one GPU runs on a whole node's TP group before it is split into stages (SPEC §3: pipeline
stages beyond one node). ``--units N`` takes the widest TP that divides N and fits.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import CapacityError, PlacementError, option
from ..hw.spec import HardwareSpec
from ..units import fmt_bytes
from . import gpu_ep
from .common import (
    ahead_note,
    contiguous_partition,
    kv_capacity_message,
    parts_text,
    resident_parts,
    shrink_hint,
    split_even,
)
from .kinds.gpu import GpuLayout, GpuRegion
from .placement import LayerSlot, Placement

MAX_UNITS = 4096


def tp_candidates(graph, spec: HardwareSpec) -> list[int]:
    """TP widths allowed for this model on this GPU: divisors of the KV heads (MLA: heads) that
    fit in one node, widest first."""
    att = graph.attention
    heads = att.n_heads if att.latent else att.n_kv_heads
    node = int(spec.params.gpus_per_node)
    return [t for t in range(min(heads, node), 0, -1) if heads % t == 0]


def layouts(graph, spec: HardwareSpec, units: int) -> list[tuple[int, int]]:
    """Valid (tp, pp) layouts for exactly ``units`` GPUs, widest TP first."""
    n_blocks = len(graph.layer_keys)
    return [
        (t, units // t)
        for t in tp_candidates(graph, spec)
        if units % t == 0 and units // t <= n_blocks
    ]


def _slot(graph, layer, ranks: list[int], stage: int, mla: bool) -> LayerSlot:
    tp = len(ranks)
    w, kv = [0] * tp, [0] * tp
    for op in graph.ops_of(layer):
        for i, b in enumerate(_split(op.resident_weight_bytes, tp, op.split == "replicate")):
            w[i] += b
        kv_repl = mla and op.kind == "attention"
        for i, b in enumerate(_split(op.resident_kv_bytes, tp, kv_repl)):
            kv[i] += b
    need_w, need_kv = graph.resident_bytes(layer)
    return LayerSlot(
        layer,
        tuple(ranks),
        tuple(w),
        tuple(kv),
        (0,) * tp,
        need_w,
        need_kv,
        GpuRegion(stage=stage, tp_ranks=tuple(range(tp))),
    )


def _split(total: int, parts: int, replicated: bool) -> list[int]:
    return [total] * parts if replicated else split_even(total, parts)


def build(graph, spec: HardwareSpec, tp: int, pp: int, reason: str = "") -> Placement:
    """The placement of ``graph`` on ``tp x pp`` GPUs (unit = stage * tp + rank)."""
    keys = graph.layer_keys
    sizes = [sum(graph.resident_bytes(k)) for k in keys]
    stages = contiguous_partition(sizes, pp)
    mla = graph.attention.latent
    slots = tuple(
        _slot(graph, k, [s * tp + r for r in range(tp)], s, mla)
        for k, s in zip(keys, stages, strict=True)
    )
    layout = GpuLayout(tp=tp, pp=pp, stages=max(stages) + 1)
    return gpu_ep.gpu_placement(graph, spec, slots, layout, reason)


def _fits(plc: Placement) -> bool:
    return not plc.shortfalls()


def auto_layouts(graph, spec: HardwareSpec, units: int) -> list[tuple[int, int]]:
    """The layouts ``--units auto`` may use on exactly ``units`` GPUs: one stage of any TP
    width, or several stages of the widest TP (TP within a node before PP)."""
    widest = tp_candidates(graph, spec)[0]
    return [(t, p) for t, p in layouts(graph, spec, units) if p == 1 or t == widest]


def best_for(graph, spec: HardwareSpec, units: int, auto: bool = False) -> Placement | None:
    """The widest-TP layout of exactly ``units`` GPUs that fits (with ``auto``, only among
    :func:`auto_layouts`), or None."""
    options = auto_layouts(graph, spec, units) if auto else layouts(graph, spec, units)
    for tp, pp in options:
        plc = build(graph, spec, tp, pp)
        if _fits(plc):
            return plc
    return None


def _usable(spec: HardwareSpec) -> int:
    return int(spec.params.hbm_capacity_bytes) - int(spec.params.runtime_reserved_bytes)


def place_auto(graph, system) -> Placement:
    """The fewest GPUs in a valid TP x PP layout that hold weights, KV cache and buffers."""
    spec = system.spec
    need = graph.total_resident_weight_bytes + graph.total_resident_kv_bytes
    floor = max(1, -(-need // max(1, _usable(spec))))
    for units in range(floor, MAX_UNITS + 1):
        plc = best_for(graph, spec, units, auto=True)
        if plc is not None:
            t, p = plc.layout.tp, plc.layout.pp
            why = (
                f"{graph.model_name} needs {fmt_bytes(need)} resident (weights "
                f"{fmt_bytes(graph.total_resident_weight_bytes)} + KV "
                f"{fmt_bytes(graph.total_resident_kv_bytes)}); one {spec.name} holds "
                f"{fmt_bytes(_usable(spec))} after the runtime's reservation, so at least "
                f"{floor}; TP must divide {_heads_text(graph)} and fit one node of "
                f"{int(spec.params.gpus_per_node)} GPUs, and replicated parts (norms, "
                f"routers{', MLA latent cache' if graph.attention.latent else ''}) "
                f"take room on every rank, and TP widens within a node before a pipeline "
                f"stage is added: TP {t} x PP {p} = {units} is the fewest that fits"
            )
            return Placement(**{**plc.__dict__, "reason": why})
    raise PlacementError(
        f"{graph.model_name} does not fit on any {spec.name} layout: {_no_fit_cause(graph, spec)}"
    )


def _fewest(graph, spec: HardwareSpec) -> Placement | None:
    """The layout on the fewest GPUs that fits, or None."""
    if not _any_fits(graph, spec):  # one build answers "none" before the count search
        return None
    need = graph.total_resident_weight_bytes + graph.total_resident_kv_bytes
    for units in range(max(1, -(-need // max(1, _usable(spec)))), MAX_UNITS + 1):
        plc = best_for(graph, spec, units)
        if plc is not None:
            return plc
    return None


def _any_fits(graph, spec: HardwareSpec) -> bool:
    """Whether any layout of at most ``MAX_UNITS`` GPUs fits, i.e. :func:`_fewest` finds one:
    the roomiest does, the widest TP with as many stages as the layers and ``MAX_UNITS`` allow
    (a GPU's share only shrinks with TP and with stages). One build, where ``_fewest`` may try
    thousands: the KV-capacity bisection of a failed run's message asks it ~40 times."""
    widest = tp_candidates(graph, spec)[0]
    return _fits(build(graph, spec, widest, min(len(graph.layer_keys), MAX_UNITS // widest)))


def _no_fit_cause(graph, spec: HardwareSpec) -> str:
    """Why no GPU count fits: the layer that overfills a GPU even alone on a stage at the
    widest TP, or more GPUs than the placer tries; its bytes, their parts and the flag that
    could shrink them (tried)."""

    def fewest(g):
        return _fewest(g, spec)

    def can_fit(g) -> bool:
        return _any_fits(g, spec)

    widest = tp_candidates(graph, spec)[0]
    failed = build(graph, spec, widest, len(graph.layer_keys))
    short = failed.shortfalls()
    if not short:
        need = graph.total_resident_weight_bytes + graph.total_resident_kv_bytes
        parts = {}
        for k in graph.layer_keys:
            for name, n in resident_parts(graph, k).items():
                parts[name] = parts.get(name, 0) + n
        return (
            f"it needs {need:,} B ({fmt_bytes(need)}) resident, more than {MAX_UNITS} GPUs "
            f"hold at {fmt_bytes(_usable(spec))} each after the runtime's reservation "
            f"({parts_text(parts)}); {shrink_hint(graph, parts, fewest, can_fit)}"
        )
    unit, level, used, have = max(short, key=lambda x: x[2] - x[3])
    key = failed.layers_on(unit)[0]
    parts = resident_parts(graph, key)
    stage, rank = divmod(unit, widest)
    return (
        f"layer {key!r} alone needs {used:,} B ({fmt_bytes(used)}, runtime reserve included) "
        f"of {level} on one GPU at TP {widest} (the widest: it divides "
        f"{_heads_text(graph)} and fits one node; tried with one layer block a pipeline stage, "
        f"TP {widest} x PP {len(graph.layer_keys)}: TP rank {rank} of stage {stage}), more "
        f"than its {have:,} B "
        f"({fmt_bytes(have)}); the layer holds {parts_text(parts)}, and a layer is not split "
        f"across pipeline stages, so no GPU count fits; "
        f"{shrink_hint(graph, parts, fewest, can_fit)}"
    )


def _heads_text(graph) -> str:
    att = graph.attention
    return f"{att.n_heads} heads (MLA)" if att.latent else f"{att.n_kv_heads} KV heads"


def place_units(graph, system, units: int) -> Placement:
    """The best layout on exactly ``units`` GPUs; raises with the bytes short and the unit
    count that would fit."""
    spec = system.spec
    options = layouts(graph, spec, units)
    if not options:
        raise PlacementError(_no_layout_message(graph, spec, units))
    plc = best_for(graph, spec, units)
    if plc is not None:
        t, p = plc.layout.tp, plc.layout.pp
        return Placement(**{**plc.__dict__, "reason": f"{option('units', units)}: TP {t} x PP {p}"})
    tp, pp = options[0]
    failed = build(graph, spec, tp, pp)
    plc = _fewest(graph, spec)
    fit = (
        f"{option('units', plc.n_units)} would fit"
        if plc
        else f"no GPU count fits: {_no_fit_cause(graph, spec)}"
    )
    kv = _kv_message(graph, spec, units) if plc else None  # else the cause says it
    try:
        failed.check()
    except PlacementError as exc:
        text = (f"{graph.model_name} does not fit on {units} {spec.name} (TP {tp} x PP {pp}): "
                f"{exc}; {fit}")  # fmt: skip
        if kv:
            raise CapacityError(f"{text}; {kv}") from None
        raise PlacementError(text) from None
    raise AssertionError("unreachable: a layout with shortfalls passed check()")


def _no_layout_message(graph, spec: HardwareSpec, units: int) -> str:
    """Why ``units`` GPUs make no TP x PP layout: the widest TP width that divides ``units``
    needs more pipeline stages than the model has layer blocks, and the nearest unit counts
    that do make one."""
    widths, n_blocks = tp_candidates(graph, spec), len(graph.layer_keys)
    t = next(t for t in widths if units % t == 0)  # TP 1 always divides
    rule = (
        f"{units} {spec.name} GPUs allow no TP x PP layout for {graph.model_name}: GPUs = TP x "
        f"PP, TP one of {widths} (it divides {_heads_text(graph)} and fits a node of "
        f"{int(spec.params.gpus_per_node)}), PP at most {n_blocks} (its layer blocks: a layer "
        "is not split across pipeline stages)"
    )
    why = f"; at TP {t}, the widest dividing {units}, PP would be {units // t:,} > {n_blocks}"
    below = next((n for n in range(min(units, widths[0] * n_blocks), 0, -1)
                  if layouts(graph, spec, n)), None)  # fmt: skip
    above = next((n for n in range(units + 1, widths[0] * n_blocks + 1)
                  if layouts(graph, spec, n)), None)  # fmt: skip
    near = " or ".join(option("units", n) for n in (below, above) if n is not None)
    return f"{rule}{why}; the nearest counts that do: {near}"


def _kv_message(graph, spec: HardwareSpec, units: int) -> str | None:
    """How many users or tokens fit on ``units`` GPUs when only the KV cache is too big."""
    work = graph.workload

    def fits(batch: int, max_len: int) -> bool:
        context = max(0, max_len - work.tokens)
        trial = replace(work, batch=batch, context=context, tokens=max_len - context)
        return best_for(graph.with_workload(trial, 0), spec, units) is not None

    return kv_capacity_message(fits, work.batch, work.max_len, ahead_note(work))


# ---- expert layouts: the speed search (pyaccel.placing) times each that fits ----


def layouts_auto(graph, system) -> list[Placement]:
    """The layouts ``--units auto`` times: the TP x PP layout on the fewest GPUs that fit and,
    for a model with routed experts, the EP layout on as many GPUs where it fits
    (``expert_layout``: ``auto`` both, ``tp``: the first; ``ep``: the EP layout on the fewest
    GPUs that hold one)."""
    if graph.moe_layers and system.spec.params.expert_layout == "ep":
        return [_ep_auto(graph, system)]
    return _with_experts(graph, system, place_auto(graph, system))


def _ep_auto(graph, system) -> Placement:
    """The EP layout on the fewest GPUs that hold one (2 or more a stage, at most a node's,
    at most one stage a layer key), or a refusal naming what every GPU must hold."""
    spec = system.spec
    need = graph.total_resident_weight_bytes + graph.total_resident_kv_bytes
    floor = max(1, -(-need // max(1, _usable(spec))))  # (one GPU has no EP width: skipped)
    top = int(spec.params.gpus_per_node) * len(graph.layer_keys)
    why = (f"{graph.model_name} needs {fmt_bytes(need)} resident; expert_layout = ep: "
           f"the fewest {spec.name} GPUs an expert-parallel layout holds it on")  # fmt: skip
    for units in range(floor, top + 1):
        plc = _ep(graph, system, units, why)
        if plc is not None:
            return plc
    raise PlacementError(
        f"expert_layout = ep: no expert-parallel layout of any number of {spec.name} GPUs "
        f"holds {graph.model_name} (attention and dense weights are copied to every GPU of a "
        f"stage); {option('overrides', 'expert_layout=auto')} (or tp)"
    )


def layouts_units(graph, system, units: int) -> list[Placement]:
    """The layouts timed on exactly ``units`` GPUs (as :func:`layouts_auto`)."""
    try:
        plc = place_units(graph, system, units)
    except PlacementError:
        ep = _ep(graph, system, units, option("units", units))
        if ep is None or system.spec.params.expert_layout == "tp":
            raise
        return [ep]
    return _with_experts(graph, system, plc)


def _with_experts(graph, system, plc: Placement) -> list[Placement]:
    mode = system.spec.params.expert_layout
    if mode == "tp" or not graph.moe_layers:
        return [plc]
    ep = _ep(graph, system, plc.n_units, plc.reason)
    if mode == "ep":
        if ep is None:
            raise PlacementError(
                f"expert_layout = ep: no expert-parallel layout of {plc.n_units} "
                f"{system.spec.name} GPUs holds {graph.model_name} (attention and dense weights "
                f"are copied to every GPU of a stage); "
                f"{option('overrides', 'expert_layout=auto')} (or tp)"
            )
        return [ep]
    return [plc, ep] if ep is not None else [plc]


def _ep(graph, system, units: int, reason: str) -> Placement | None:
    plc = gpu_ep.best_for(graph, system.spec, units)
    if plc is None:
        return None
    each = graph.n_experts // plc.layout.ep
    why = (f"{reason}; as expert parallel: {label(plc)} (attention data-parallel, each GPU "
           f"holding {each}+ whole experts of every MoE layer)")  # fmt: skip
    return replace(plc, reason=why)


def label(plc: Placement) -> str:
    """A layout's short name for the placement reason."""
    lay = plc.layout
    head = f"EP {lay.ep}" if lay.ep else f"TP {lay.tp}"
    return f"{head} x PP {lay.pp}"


def with_reason(graph, system, plc: Placement, tried) -> Placement:
    """``plc`` with why it was kept: its unit count's reason and, when experts could be laid
    out both ways, each layout's cycles for one step."""
    if len(tried) <= 1:
        return plc
    opts = "; ".join(f"{lab}: {c:,} cycles" for lab, c in tried)
    why = (f"{plc.reason}; routed experts split with TP or whole on GPUs with attention "
           f"data-parallel (EP), one step each: {opts}; kept {label(plc)}")  # fmt: skip
    return replace(plc, reason=why)
