"""ASIC placer: layers as blocks of a spatial pipeline over one or more hardwired dies.

Without ``--etch`` the chip runs only the model (and weight format) it was etched with, all of it on
one die. With ``--etch`` dies of the same kind are designed for the requested model: each keeps the
etched chip's SRAM and ROM geometry and holds the contiguous run of layers whose ROM and lanes fit
its remaining transistors (:mod:`pyaccel.place.kinds.asic_die`); a layer larger than a die spans
several dies (its GEMVs split by output columns, its KV heads split). The KV cache of every layer
lives in its dies' SRAM banks; a workload whose cache does not fit raises
:class:`CapacityError` saying how many tokens (at this batch) or users (at this context) fit.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import CapacityError, PlacementError, option
from ..units import fmt_bytes
from .common import ahead_note, contiguous_partition
from .experts import spread
from .kinds import asic_die as design
from .kinds.asic import AsicLayout, AsicRegion, capacity, check_etch
from .placement import LayerSlot, Placement


def _sizes(graph) -> list[int]:
    return [graph.resident_bytes(k)[0] for k in graph.layer_keys]


def pack(sizes: list[int], cap: int) -> list[tuple[int, ...]]:
    """Dies of each layer, filling dies in order up to ``cap`` bytes; a layer larger than
    ``cap`` takes ``ceil(size / cap)`` dies of its own."""
    out: list[tuple[int, ...]] = []
    die, acc = 0, 0
    for size in sizes:
        if size > cap:
            first = die + 1 if acc else die
            span = -(-size // cap)
            out.append(tuple(range(first, first + span)))
            die, acc = first + span, 0
            continue
        if acc + size > cap:
            die, acc = die + 1, 0
        out.append((die,))
        acc += size
    return out


def n_dies(assign: list[tuple[int, ...]]) -> int:
    """Dies an assignment uses."""
    return max(d for dies in assign for d in dies) + 1


def assign_dies(graph, p, units: int | None = None) -> list[tuple[int, ...]]:
    """Dies of every layer key: the fewest dies (``units`` None), or a layout of at most
    ``units`` dies with the largest ROM load per die as small as packing allows."""
    sizes, cap = _sizes(graph), design.rom_capacity_bytes(graph, p)
    fewest = pack(sizes, cap)
    if units is None or units <= n_dies(fewest):
        return fewest
    if max(sizes) <= cap and units <= len(sizes):
        return [(s,) for s in contiguous_partition(sizes, units)]
    lo, hi = max(1, sum(sizes) // units), cap  # smallest die load that packs in <= units dies
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if n_dies(pack(sizes, mid)) <= units else (mid + 1, hi)
    return pack(sizes, lo)


def kv_bytes(graph, layers, batch: int, max_len: int, shares: dict | None = None) -> int:
    """Resident KV bytes of ``layers`` for ``batch`` users of ``max_len`` tokens kept, and the
    drafted positions a speculative workload's verification writes past them
    (``Workload.kv_len``; a layer spanning ``shares[layer]`` dies counts its share, rounded
    up)."""
    work = replace(graph.workload, batch=batch, context=max(0, max_len - 1), tokens=1)
    total = 0
    for k in layers:
        if isinstance(k, int):
            n = graph.attention_op(k, 0, work).resident_kv_bytes
            total += -(-n // (shares or {}).get(k, 1))
    return total


def _largest(fits, hi: int) -> int:
    """The largest n in [0, hi] with fits(n) (fits is monotone decreasing; fits(0) is True)."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _die_layers(graph, assign) -> dict[int, list]:
    out: dict[int, list] = {}
    for k, dies in zip(graph.layer_keys, assign, strict=True):
        for d in dies:
            out.setdefault(d, []).append(k)
    return out


def _kv_short(graph, system, assign):
    """(die, its layer keys, the fits(batch, tokens) test) of the first die whose SRAM cannot
    hold its layers' KV cache, or None."""
    p = system.spec.params
    avail = design.kv_sram_bytes(p) - p.lora_sram_bytes
    work = graph.workload
    shares = {k: len(d) for k, d in zip(graph.layer_keys, assign, strict=True)}
    for die, layers in sorted(_die_layers(graph, assign).items()):

        def fits(batch: int, length: int, layers=layers) -> bool:
            return kv_bytes(graph, layers, batch, length, shares) <= avail

        if not fits(work.batch, work.max_len):
            return die, layers, fits, shares
    return None


def check_kv(graph, system, assign) -> None:
    """Raise CapacityError when a die's SRAM cannot hold its layers' KV cache, saying how many
    tokens (at this batch) or users (at this context) fit."""
    short = _kv_short(graph, system, assign)
    if short is None:
        return
    die, layers, fits, shares = short
    p = system.spec.params
    avail = design.kv_sram_bytes(p) - p.lora_sram_bytes
    work = graph.workload
    b, n = work.batch, work.max_len
    need = kv_bytes(graph, layers, b, n, shares)
    tokens = _largest(lambda t: fits(b, t), n)
    users = _largest(lambda u: fits(u, n), b)
    where = f"die {die} ({len(layers)} layer keys)" if n_dies(assign) > 1 else "the chip"
    note = ahead_note(work)  # the drafted positions a verification writes, counted in ``need``
    more = f", or more dies ({option('units', n_dies(assign) + 1)} or more)" if system.etch else ""
    smaller = f"batch ({option('batch', b)}) or " if b > 1 else ""
    raise CapacityError(
        f"{graph.model_name} KV cache ({work.kv}) for batch {b} x {n} tokens (context "
        f"{work.context} + {work.tokens} generated{'; ' * bool(note)}{note}) needs "
        f"{fmt_bytes(need)} of SRAM on {where} of {system.name}, which holds "
        f"{fmt_bytes(avail)} for KV after {fmt_bytes(p.lora_sram_bytes)} for LoRA: at batch "
        f"{b} each user fits {tokens} tokens (context <= {max(0, tokens - work.tokens)} with "
        f"{option('tokens', work.tokens)}); at {n} tokens {users} user(s) fit. Try a smaller "
        f"{smaller}context ({option('context', work.context)}), or {option('kv', 'fp8')}{more}"
    )


def _split(total: int, parts: int) -> tuple[int, ...]:
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def build(graph, system, assign, reason: str = "") -> Placement:
    """The placement of ``graph`` with layer key ``i`` on dies ``assign[i]``."""
    p = system.spec.params
    rows = int(p.rom_rows_per_bitline)
    cap, level_of, reserved = capacity(system, graph)
    banks_per_die = design.kv_banks(p)
    attn_on = {
        d: sum(isinstance(k, int) for k in ks) for d, ks in _die_layers(graph, assign).items()
    }
    slots = []
    for k, dies in zip(graph.layer_keys, assign, strict=True):
        w, kv = graph.resident_bytes(k)
        banks = banks_per_die // max(attn_on[d] for d in dies) if isinstance(k, int) else 0
        lanes = sum(design.lanes_of(o, graph.workload, p) for o in graph.ops_of(k))
        region = AsicRegion(dies=tuple(dies), block=str(k), rom_rows=rows, lanes=lanes,
                            kv_banks_per_die=banks)  # fmt: skip
        # a MoE layer spanning dies keeps its experts whole, in blocks over them
        experts = spread(graph.n_experts, dies) if len(dies) > 1 and k in graph.moe_layers else ()
        slots.append(LayerSlot(k, dies, _split(w, len(dies)), _split(kv, len(dies)),
                               (0,) * len(dies), w, kv, region, experts))  # fmt: skip
    count = n_dies(assign)
    return Placement(
        system=system.name,
        kind="asic",
        model=graph.model_name,
        n_units=count,
        capacity_bytes=cap,
        level_of=level_of,
        reserved_bytes=reserved,
        layers=tuple(slots),
        layout=AsicLayout(
            dies=count,
            etched=bool(system.etch),
            rom_rows_per_bitline=rows,
            lanes=sum(s.region.lanes for s in slots),
            kv_sram_bytes=int(design.kv_sram_bytes(p)),
            kv_banks_per_die=int(banks_per_die),
            spanning_layers=tuple(str(s.layer) for s in slots if len(s.units) > 1),
            weights=graph.workload.weights,
        ),
        workload=graph.workload,
        reason=reason,
    )


def _kv_fits(graph, system, assign) -> bool:
    return _kv_short(graph, system, assign) is None


def _one_die(graph) -> list[tuple[int, ...]]:
    return [(0,)] * len(graph.layer_keys)


def place_auto(graph, system) -> Placement:
    """One chip for the etched model; with ``--etch`` the fewest dies that hold the ROM and the
    workload's KV cache (up to one die per layer key beyond the ROM's)."""
    check_etch(graph, system)
    if not system.etch:
        check_kv(graph, system, _one_die(graph))
        return build(
            graph,
            system,
            _one_die(graph),
            f"{system.name} is {graph.model_name} etched on one chip",
        )
    p = system.spec.params
    assign = assign_dies(graph, p)
    rom_dies = n_dies(assign)
    limit = rom_dies + len(graph.layer_keys)
    units = rom_dies
    while units < limit and not _kv_fits(graph, system, assign):
        units += 1
        assign = assign_dies(graph, p, units)
    check_kv(graph, system, assign)  # raises with the numbers at the largest layout tried
    cap = design.rom_capacity_bytes(graph, p)
    why = (
        f"{option('etch', True)}: {graph.model_name} at {graph.workload.weights} needs "
        f"{fmt_bytes(graph.total_resident_weight_bytes)} of ROM; a die of this kind keeps "
        f"{fmt_bytes(design.kv_sram_bytes(p))} SRAM and has {design.die_logic_budget(p):.3g} "
        f"transistors left for ROM + lanes = {fmt_bytes(cap)} of this model's weights, so "
        f"{rom_dies} die(s) for the ROM"
        + (f", {n_dies(assign)} to hold the KV cache" if n_dies(assign) > rom_dies else "")
    )
    return build(graph, system, assign, why)


def place_units(graph, system, units: int) -> Placement:
    """``units`` dies (fewer when layers spanning dies pack into fewer); without ``--etch``
    only 1 (the chip holds the whole model)."""
    check_etch(graph, system)
    if not system.etch:
        if units != 1:
            raise PlacementError(
                f"{system.name} holds all of {graph.model_name} on one chip; "
                f"{option('units', units)} would be independent replicas (run each with a "
                f"batch of its own): use {option('units', 1)}"
            )
        return place_auto(graph, system)
    p = system.spec.params
    need = n_dies(assign_dies(graph, p))
    if units < need:
        raise PlacementError(
            f"{graph.model_name} at {graph.workload.weights} needs "
            f"{fmt_bytes(graph.total_resident_weight_bytes)} of ROM; one etched die holds "
            f"{fmt_bytes(design.rom_capacity_bytes(graph, p))}: {option('units', need)} would fit"
        )
    assign = assign_dies(graph, p, units)
    check_kv(graph, system, assign)
    note = "" if n_dies(assign) == units else f" (its layers pack into {n_dies(assign)})"
    return build(graph, system, assign, f"{option('units', units)} {option('etch', True)}{note}")
