"""Wafer placer (WSE-2/WSE-3): layer regions pipelined across the wafer, WaferLLM's whole-grid
interleave, or layer groups between the two; contiguous layer blocks per wafer when one wafer is
not enough.

Strategies (the preset's ``placement_strategy``, ``--set placement_strategy=NAME``):

- ``layer_regions``: each layer (and the embedding and LM head) its own PE rectangle, in
  serpentine vertical strips; at batch 1 one region works at a time.
- ``interleave``: every layer of a wafer tiled over the same grid and run in turn (WaferLLM).
- ``layer_groups``: the wafer cut into ``gx x gy`` equal tiles (serpentine order); contiguous
  blocks of layers (the largest block's resident bytes as small as possible, as for wafers),
  each interleaved over one tile. One tile is the
  whole-grid interleave; one layer per tile is close to layer regions. Between the two, lines are
  shorter than the whole grid's and each PE's share of a layer's work is smaller than in a
  region of its own.

Capacity: every PE keeps ``pe_code_bytes + pe_buffer_bytes`` for code and buffers (the preset's
named assumptions), so a wafer's level ``sram`` holds ``usable PEs x pe_sram_bytes`` with that
reservation on every usable PE. A region must also hold, on its fullest PE, the weight tiles of
its ops and its share of the KV cache at ``batch x (context + tokens)`` (``PeTiles.pe_bytes``).

``auto``: the layouts that fit (interleave on the smallest grid that holds the block and on the
whole wafer, layer regions at a few sizes from the smallest that holds each layer up to 8x that,
layer groups at a few tile counts) are offered by :func:`layouts_auto` / :func:`layouts_units`;
the orchestration layer (:func:`pyaccel.placing.place`) times each for one step at the workload's
context with the wafer engine and keeps the fastest. The placer never times them. A named
strategy offers only its own layouts. The two interleave layouts are the ends of a family
(:func:`family`, :func:`position`, :func:`member`): the grids between them are searched too
(:mod:`pyaccel.layout_search`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NoReturn

from ..errors import PlacementError, option
from ..units import fmt_bytes
from .common import contiguous_partition, parts_text, resident_parts, shrink_hint, split_even
from .kinds.wafer import WaferLayout, capacity
from .placement import LayerSlot, Placement
from .wafer_experts import experts_here, group_wafers, layer_slot, ways
from .wafer_fit import Fitter as _Fitter
from .wafer_fit import pe_budget as _budget
from .wafer_fit import smallest_grid as _interleave
from .wafer_fit import usable as _usable

MAX_UNITS = 256
REGION_SCALES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
GROUP_COUNTS = (2, 3, 4, 6, 8, 9, 12, 16, 24, 32)  # tiles per wafer tried by layer_groups


def _layer_regions(fit: _Fitter, keys, scale: float) -> dict | None:
    """Each key its own rectangle in vertical strips (serpentine, so consecutive regions are
    vertical neighbours except at a strip change); ``scale`` x the fewest PEs that hold it."""
    wid, hgt = _usable(fit.p)
    needs = {k: fit.min_pes([k]) for k in keys}
    typical = sorted(needs.values())[len(needs) // 2]
    strip = max(1, min(wid, round(math.sqrt(scale * typical))))
    out, sx, y, n_strip = {}, 0, 0, 0
    for k in keys:
        w, h = _shape(fit, k, scale * needs[k], strip, hgt)
        if w is None:
            return None
        if w > strip or y + h > hgt:  # close the current strip
            if y > 0:
                sx, y, n_strip = sx + strip, 0, n_strip + 1
        if sx + w > wid:
            return None
        if w > strip:  # a region spanning several strips owns them
            out[k] = (sx, 0, w, h)
            sx, n_strip = sx + w, n_strip + 1
            continue
        y0 = y if n_strip % 2 == 0 else hgt - y - h  # serpentine
        out[k] = (sx, y0, w, h)
        y += h
    return out


def _shape(fit: _Fitter, key, want: float, strip: int, hgt: int):
    """(w, h) of one key's region: ``strip`` wide (or several strips when taller than the
    wafer), grown until its fullest PE holds its tiles and KV share; (None, None) if it cannot."""
    wid = _usable(fit.p)[0]
    w = strip * max(1, math.ceil(want / (strip * hgt)))
    h = math.ceil(want / w)
    while not fit.fits([key], w, h):
        if h < hgt:
            h = min(hgt, h + max(1, h // 16))
        elif w + strip <= wid:
            w, h = w + strip, math.ceil(want / (w + strip))
        else:
            return None, None
    return w, h


def _cut(wid: int, hgt: int, g: int) -> tuple[int, int]:
    """The ``gx x gy`` cut of a ``wid x hgt`` grid into ``g`` tiles whose tiles are closest to
    square (the shortest longest line)."""
    cuts = [(gx, g // gx) for gx in range(1, g + 1) if g % gx == 0 and gx <= wid and g // gx <= hgt]
    return min(cuts, key=lambda t: abs(math.log((wid / t[0]) / (hgt / t[1]))))


def _tiles(wid: int, hgt: int, gx: int, gy: int) -> list[tuple[int, int, int, int]]:
    """The ``gx x gy`` tiles of the grid as (x0, y0, w, h), in serpentine order (down the first
    column of tiles, up the next), so consecutive tiles are neighbours."""
    out, x0 = [], 0
    for i, w in enumerate(split_even(wid, gx)):
        col, y0 = [], 0
        for h in split_even(hgt, gy):
            col.append((x0, y0, w, h))
            y0 += h
        out += col[::-1] if i % 2 else col
        x0 += w
    return out


def _layer_groups(fit: _Fitter, keys, gx: int, gy: int) -> dict | None:
    """Each key's tile: ``gx x gy`` tiles, contiguous blocks of keys whose largest resident bytes
    are as small as possible, one block interleaved over each tile; None if some tile's PEs
    cannot hold their block."""
    wid, hgt = _usable(fit.p)
    sizes = [sum(fit.graph.resident_bytes(k)) for k in keys]
    stage = contiguous_partition(sizes, gx * gy)
    tiles = _tiles(wid, hgt, gx, gy)
    for s in range(max(stage) + 1):
        block = [k for k, st in zip(keys, stage, strict=True) if st == s]
        if not fit.fits(block, tiles[s][2], tiles[s][3]):
            return None
    return {k: tiles[s] for k, s in zip(keys, stage, strict=True)}


def _slot(graph, key, wafer: int, rect, strategy: str, **extra) -> LayerSlot:
    return layer_slot(graph, key, (wafer,), rect, strategy, **extra)


def _placement(graph, system, units: int, slots, layout: WaferLayout, reason="") -> Placement:
    cap, level_of, reserved = capacity(system)
    return Placement(
        system=system.spec.name,
        kind="wafer",
        model=graph.model_name,
        n_units=units,
        capacity_bytes=cap,
        level_of=level_of,
        reserved_bytes=reserved,
        layers=tuple(slots),
        layout=layout,
        workload=graph.workload,
        reason=reason,
    )


def _blocks(graph, units: int) -> list[list]:
    keys = list(graph.layer_keys)
    sizes = [sum(graph.resident_bytes(k)) for k in keys]
    stage = contiguous_partition(sizes, units)
    return [[k for k, s in zip(keys, stage, strict=True) if s == u] for u in range(units)]


def _strategy(system) -> str:
    return str(system.spec.params.placement_strategy)


def candidates(graph, system, units: int, fit: _Fitter | None = None) -> list[Placement]:
    """Every layout of the system's strategy (all of them for ``auto``) that fits on exactly
    ``units`` wafers (contiguous layer blocks), for a MoE model also with its experts spread
    over groups of wafers (:mod:`.wafer_experts`); ``fit``, a fitter of the same graph and
    system kept across calls, saves re-fitting the layers a search tries again."""
    out = []
    for ep in ways(graph, units):
        if fit is None or ep > 1:
            fit = _Fitter(graph, system, experts_here(graph, ep))
        out += _candidates(graph, system, units, fit, ep)
    return out


def _candidates(graph, system, units: int, fit: _Fitter, ep: int) -> list[Placement]:
    """The layouts of :func:`candidates` with each block of layers on a group of ``ep`` wafers
    (the same rectangles on each)."""
    groups = units // ep
    blocks = _blocks(graph, groups)
    if any(not b for b in blocks):
        return []
    want = _strategy(system)
    out = []

    def placement(strategy, rects, extra, **layout):
        slots = [
            layer_slot(graph, k, group_wafers(g, ep), rects[g][k], strategy, **extra(g))
            for g, b in enumerate(blocks)
            for k in b
        ]
        lay = WaferLayout(strategy=strategy, wafers=units, expert_wafers=ep if ep > 1 else None,
                          **layout)  # fmt: skip
        return _placement(graph, system, units, slots, lay)

    def per_wafer(values):  # a group's value on each of its wafers
        return tuple(tuple(values[u // ep]) for u in range(units))

    smallest = None
    if want in ("auto", "interleave"):
        smallest = _every(_interleave(fit, b) for b in blocks)
    if smallest is not None:
        full = [_usable(fit.p)] * groups
        # the smallest grid has the shortest lines, the whole wafer the smallest tiles
        for grids in (smallest, full) if full != smallest else (smallest,):
            rects = [dict.fromkeys(b, (0, 0, *grids[g])) for g, b in enumerate(blocks)]
            out.append(placement("interleave", rects, lambda g, gr=grids: {"grid": tuple(gr[g])},
                                 grids=per_wafer(grids)))  # fmt: skip
    for scale in REGION_SCALES if want in ("auto", "layer_regions") else ():
        rects = _every(_layer_regions(fit, b, scale) for b in blocks)
        if rects is None:
            break
        out.append(placement("layer_regions", rects, lambda g, s=scale: {"scale": s},
                             region_scale=scale))  # fmt: skip
    wid, hgt = _usable(fit.p)
    for n in GROUP_COUNTS if want in ("auto", "layer_groups") else ():
        if n > max(len(b) for b in blocks):
            break
        # a wafer holding fewer blocks than n tiles gets one tile per block it holds
        cuts = [_cut(wid, hgt, min(n, len(b))) for b in blocks]
        rects = _every(_layer_groups(fit, b, *cut) for b, cut in zip(blocks, cuts, strict=True))
        if rects is None:
            continue
        out.append(placement("layer_groups", rects, lambda g, c=cuts: {"tiles": tuple(c[g])},
                             tiles=tuple(cuts[0]), tiles_per_wafer=per_wafer(cuts)))  # fmt: skip
    return [plc for plc in out if not plc.shortfalls()]


def _every(results) -> list | None:
    """Each block's layout in a list, or None at the first block without one (the blocks after
    it are not fitted)."""
    out = []
    for r in results:
        if r is None:
            return None
        out.append(r)
    return out


FAMILY_POSITION = "grid"  # an interleave family's members differ in their grids' long side


def family(plc: Placement) -> tuple | None:
    """The speed search's family of an interleave layout (:mod:`pyaccel.layout_search`): its
    wafers' grids grow together from the smallest that holds each block to the whole wafer,
    its expert layout kept; None for the other strategies (their sizes are all offered)."""
    lay = plc.layout
    return ("interleave", lay.expert_wafers) if lay.strategy == "interleave" else None


def position(plc: Placement) -> int:
    """Where an interleave layout stands in its :func:`family`: the least long side of its
    wafers' grids (grids grow as squares to the wafer's short side, then along its long one)."""
    return min(max(g) for g in plc.layout.grids)


def member(graph, system, base: Placement, side: int, costs=None) -> Placement | None:
    """``base`` (the interleave on each block's smallest grid) with every wafer's grid grown
    to at least the grid of long side ``side`` on the same path (:func:`.wafer_fit.grid_path`:
    ``side`` x ``side`` up to the short side, then the short side by ``side``): a larger grid
    holds what a smaller one does. None where a wafer is short; ``costs`` play no part (a
    wafer's layers share the grid in turn)."""
    wid, hgt = _usable(system.spec.params)
    short = min(wid, hgt)
    grown = (side, side) if side <= short else ((side, short) if wid >= hgt else (short, side))
    grids = tuple(tuple(g) if max(g) >= side else grown for g in base.layout.grids)
    slots = [layer_slot(graph, s.layer, s.units, (0, 0, *grids[s.units[0]]), "interleave",
                        grid=grids[s.units[0]])
             for s in base.layers]  # fmt: skip
    out = _placement(graph, system, base.n_units, slots, replace(base.layout, grids=grids))
    return None if out.shortfalls() else out


def label(plc: Placement) -> str:
    """A layout's short name for the placement reason (strategy and size, and the wafers a MoE
    layer's experts are spread over)."""
    lay = plc.layout
    ep = f", experts over {lay.expert_wafers} wafers" if lay.expert_wafers else ""
    if lay.strategy == "layer_regions":
        return f"layer_regions x{lay.region_scale:g}{ep}"
    if lay.strategy == "layer_groups":
        gx, gy = lay.tiles
        return f"layer_groups {gx}x{gy} tiles{ep}"
    g = lay.grids[0]
    return f"interleave {g[0]}x{g[1]}{ep}"


def with_reason(graph, system, plc: Placement, tried) -> Placement:
    """``plc``, one of the layouts offered on its wafer count, with the reason it was kept: the
    bytes, the wafers, and every layout that fits with its cycles for one step (``tried``:
    ``[(label, cycles)]`` in the order offered, timed by the orchestration layer)."""
    return replace(plc, reason=_why(graph, system, plc.n_units, plc, tried))


def _why(graph, system, units: int, plc: Placement, tried) -> str:
    p = system.spec.params
    wid, hgt = _usable(p)
    need = graph.total_resident_weight_bytes + graph.total_resident_kv_bytes
    per = wid * hgt * _budget(p)
    opts = "; ".join(f"{label}: {t:,} cycles" for label, t in tried)
    return (
        f"{graph.model_name} needs {fmt_bytes(need)} resident; one {system.spec.name} holds "
        f"{fmt_bytes(per)} in {wid}x{hgt} PEs x {_budget(p):,} B (48 KiB minus code and "
        f"buffers); {units} wafer(s) with contiguous layer blocks; placement_strategy "
        f"{_strategy(system)}, layouts that fit, one step each: {opts}; kept {label(plc)}"
    )


def _floor(graph, system) -> int:
    """The fewest wafers whose PE budgets add up to the resident bytes."""
    p = system.spec.params
    wid, hgt = _usable(p)
    need = graph.total_resident_weight_bytes + graph.total_resident_kv_bytes
    return max(1, math.ceil(need / (wid * hgt * _budget(p))))


def _on_fewest(graph, system) -> list[Placement]:
    """Every layout of the system's strategy on the fewest wafers where one fits ([] when no
    count up to MAX_UNITS does).

    Wafer counts are tried in turn from the byte floor, not bisected: the layer blocks are cut
    again for each count, so a count that fits does not make the next one fit (contiguous
    blocks are not nested, and fewer bytes need not mean a lighter fullest PE). A count that
    does not fit costs little: one fitter serves every count, each layer fitted once per
    region, and each strategy gives a count up at its first block that does not fit."""
    fit = _Fitter(graph, system)
    for units in range(_floor(graph, system), MAX_UNITS + 1):
        found = candidates(graph, system, units, fit)
        if found:
            return found
    return []


def layouts_auto(graph, system) -> list[Placement]:
    """Every layout that fits on the fewest wafers that hold the model, for the orchestration
    layer to time and keep the fastest (the placer never times them); raises
    :class:`PlacementError` saying why when no wafer count fits."""
    if not _layers_fit_alone(graph, system):
        raise PlacementError(_too_big(graph, system))
    found = _on_fewest(graph, system)
    if not found:
        raise PlacementError(
            f"{graph.model_name} does not fit on {MAX_UNITS} {system.spec.name} wafers"
        )
    return found


def _layers_fit_alone(graph, system) -> bool:
    """Whether every layer, alone on a whole wafer, fits its PEs (then one layer per wafer
    fits)."""
    fit = _Fitter(graph, system)
    wid, hgt = _usable(fit.p)
    return all(fit.fits([k], wid, hgt) for k in graph.layer_keys)


def _fewest(graph, system) -> Placement | None:
    """The placement on the fewest wafers, or None when no count fits."""
    if not _layers_fit_alone(graph, system):
        return None
    found = _on_fewest(graph, system)
    return found[0] if found else None


def _too_big(graph, system) -> str:
    """Why no wafer count fits: the largest layer that overfills the PEs of a whole wafer alone,
    its fullest PE's bytes vs the PE budget, what it is made of, and what could shrink it."""
    fit = _Fitter(graph, system)
    wid, hgt = _usable(fit.p)
    key = max(graph.layer_keys, key=lambda k: fit.pe_use([k], wid, hgt))
    use, parts = fit.pe_use([key], wid, hgt), resident_parts(graph, key)
    hint = shrink_hint(graph, parts, lambda g: _fewest(g, system),
                       lambda g: _layers_fit_alone(g, system))  # fmt: skip
    return (
        f"{graph.model_name} layer {key!r} alone does not fit one {system.spec.name}: over the "
        f"whole {wid}x{hgt} PE grid its fullest PE needs {use:,} B of weight tiles and KV "
        f"cache, more than the {fit.budget:,} B each PE has after code and buffers; the layer "
        f"holds {parts_text(parts)}, and a layer split across wafers is not modelled, so no "
        f"wafer count fits; {hint}"
    )


def _fit_hint(graph, system) -> str:
    """``units=N would fit`` for the system's strategy, or why no count does."""
    try:
        return f"{option('units', layouts_auto(graph, system)[0].n_units)} would fit"
    except PlacementError as exc:
        return f"no wafer count fits with placement_strategy = {_strategy(system)} ({exc})"


def layouts_units(graph, system, units: int) -> list[Placement]:
    """Every layout that fits on exactly ``units`` wafers, for the orchestration layer to time
    and keep the fastest; raises with the wafer and bytes short and the unit count that would
    fit (or, for a named strategy, the strategies that do fit)."""
    found = candidates(graph, system, units)
    if found:
        return found
    _refuse(graph, system, units)


def _refuse(graph, system, units: int) -> NoReturn:
    """Raise why no layout fits on ``units`` wafers (see :func:`layouts_units`)."""
    name, strat = f"{units} {system.spec.name} wafer(s)", _strategy(system)
    n_keys = len(graph.layer_keys)
    if units > n_keys:
        raise PlacementError(
            f"{graph.model_name}: {name} for {n_keys} layer blocks (embedding, "
            f"{graph.n_layers} layers, LM head): a layer split across wafers is not "
            f"modelled, so at most {option('units', n_keys)}"
        )
    if strat != "auto":
        auto = replace(system, spec=system.spec.with_params(placement_strategy="auto"))
        others = sorted({c.layout.strategy for c in candidates(graph, auto, units)})
        if others:
            verb = "does" if len(others) == 1 else "do"
            raise PlacementError(
                f"{graph.model_name}: no {strat} layout fits on {name} (placement_strategy = "
                f"{strat}), but {' and '.join(others)} {verb}: "
                f"{option('overrides', 'placement_strategy=auto')}; "
                f"for {strat}, {_fit_hint(graph, system)}"
            )
    hint = _fit_hint(graph, system)
    blocks = _blocks(graph, units)
    wid, hgt = _usable(system.spec.params)
    fit = _Fitter(graph, system)
    worst = max(range(len(blocks)), key=lambda u: fit.pe_use(blocks[u], wid, hgt))
    use = fit.pe_use(blocks[worst], wid, hgt)
    slots = [
        _slot(graph, k, u, (0, 0, wid, hgt), "interleave", grid=(wid, hgt))
        for u, b in enumerate(blocks)
        for k in b
    ]
    failed = _placement(graph, system, units, slots, WaferLayout(strategy="interleave"))
    try:
        failed.check()
    except PlacementError as exc:
        raise PlacementError(f"{graph.model_name} does not fit on {name}: {exc}; {hint}") from None
    if use <= fit.budget:  # the bytes fit the whole grid, yet no layout does
        raise PlacementError(
            f"{graph.model_name}: no layout fits on {name} (placement_strategy = {strat}); {hint}"
        )
    raise PlacementError(
        f"{graph.model_name} does not fit on {name}: wafer {worst}'s fullest PE needs "
        f"{use:,} B of tiles and KV cache over its whole {wid}x{hgt} grid, "
        f"{use - fit.budget:,} B more than the {fit.budget:,} B left per PE after code and "
        f"buffers; {hint}"
    )
