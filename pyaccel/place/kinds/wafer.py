"""What a wafer placement records (WSE-2/WSE-3): each layer's PE rectangle on its wafer, the
layout's strategy, and the checks below one wafer.

Capacity: level ``sram`` is every usable PE's SRAM, with code and buffers reserved on every
usable PE. Finer checks: each PE rectangle holds, on its fullest PE, the largest weight tiles of
every layer interleaved on it, their KV-cache share and the PE's code and buffers — the placer's
own tiling (``pe_bytes``), not an average; rectangles lie inside the usable grid; distinct
rectangles on one wafer do not overlap (layers interleaved on one grid share one rectangle).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import PlacementError
from . import Record, ints, is_int, is_number, is_str, jfield, list_of
from .wafer_tiles import PeTiles


@dataclass(frozen=True)
class WaferRegion(Record):
    """One layer's place on a wafer: the ``rect`` of PEs ``(x0, y0, w, h)`` on wafer ``wafer``
    (its first unit when not recorded), laid out by ``strategy`` (``interleave`` over a
    ``grid`` of ``(w, h)`` PEs, ``layer_regions`` at ``scale`` x the fewest PEs that hold it,
    ``layer_groups`` over ``tiles`` ``(gx, gy)`` of the wafer). A MoE layer's ``expert_bands``
    ``(w, h, columns)``: each routed expert owns a ``w x h`` band of the rect, expert ``e`` in
    column ``e // rows`` and row ``e % rows`` of them (``rows = ceil(E / columns)``)."""

    strategy: str | None = jfield(is_str, "a placement strategy name")
    wafer: int | None = jfield(is_int, "a wafer index (integer)")
    rect: tuple[int, int, int, int] | None = jfield(ints(4), "[x0, y0, w, h] in PEs")
    grid: tuple[int, int] | None = jfield(ints(2), "[w, h] in PEs")
    scale: float | None = jfield(is_number, "a number (x the fewest PEs that hold the layer)")
    tiles: tuple[int, int] | None = jfield(ints(2), "[gx, gy] tiles of the wafer")
    expert_bands: tuple[int, int, int] | None = jfield(ints(3), "[w, h, columns] in PEs")


@dataclass(frozen=True)
class WaferLayout(Record):
    """A wafer placement's strategy on ``wafers`` wafers: the interleave ``grids`` per wafer
    ``(w, h)`` in PEs, the layer regions' ``region_scale``, or the layer groups' ``tiles``
    ``(gx, gy)`` (the first wafer's) and ``tiles_per_wafer``; ``expert_wafers``: the wafers of
    each group a MoE layer's routed experts are spread over (None: one)."""

    strategy: str | None = jfield(is_str, "a placement strategy name")
    wafers: int | None = jfield(is_int, "a wafer count (integer)")
    grids: tuple[tuple[int, int], ...] | None = jfield(list_of(ints(2)), "a list of [w, h]")
    region_scale: float | None = jfield(is_number, "a number")
    tiles: tuple[int, int] | None = jfield(ints(2), "[gx, gy]")
    tiles_per_wafer: tuple[tuple[int, int], ...] | None = jfield(
        list_of(ints(2)), "a list of [gx, gy]"
    )
    expert_wafers: int | None = jfield(is_int, "a wafer count (integer)")


REGION, LAYOUT = WaferRegion, WaferLayout


def capacity(system, graph=None) -> tuple[dict, dict, dict]:
    """(capacity, level of each category, runtime reserve) of one wafer: level ``sram`` is every
    usable PE's SRAM; code and buffers are reserved on every usable PE."""
    p = system.spec.params
    pes = int(p.usable_width_pes) * int(p.usable_height_pes)
    return (
        {"sram": pes * int(p.pe_sram_bytes)},
        dict.fromkeys(("weights", "kv", "buffers"), "sram"),
        {"sram": pes * (int(p.pe_code_bytes) + int(p.pe_buffer_bytes))},
    )


def _rect(slot, wid: int, hgt: int) -> tuple[int, int, int, int]:
    rect = slot.region.rect if slot.region is not None else None
    if rect is None:
        raise PlacementError(
            f"layer {slot.layer!r} has no PE rectangle: region 'rect' must be [x0, y0, w, h] "
            f"in PEs, got {rect!r}"
        )
    x0, y0, w, h = rect
    if x0 < 0 or y0 < 0 or w < 1 or h < 1 or x0 + w > wid or y0 + h > hgt:
        raise PlacementError(
            f"layer {slot.layer!r}: PE rectangle {list(rect)} (x0, y0, w, h) is not inside the "
            f"usable {wid}x{hgt} PE grid"
        )
    return x0, y0, w, h


def wafer_of(slot) -> int:
    """The wafer a slot's region lies on (its first unit when not recorded)."""
    wafer = slot.region.wafer if slot.region is not None else None
    return slot.units[0] if wafer is None else wafer


def _checked_wafer(slot) -> int:
    wafer = wafer_of(slot)
    if wafer not in slot.units:
        raise PlacementError(
            f"layer {slot.layer!r}: region wafer {wafer!r} is not among its units "
            f"{list(slot.units)}"
        )
    return wafer


def _keys(keys) -> str:
    if len(keys) <= 4:
        return ", ".join(map(repr, keys))
    return f"{keys[0]!r}..{keys[-1]!r} ({len(keys)} layers)"


def experts_held(slot) -> int | None:
    """The most routed experts one wafer of ``slot`` holds when its experts are spread over
    several wafers (None: one wafer holds them all)."""
    if len(slot.units) < 2 or not slot.expert_units:
        return None
    return max(slot.expert_units.count(u) for u in slot.units)


def check(plc, graph, system) -> None:
    """Per PE (fullest PE of every rectangle) and rectangle overlap (see module). A slot on
    several wafers (its experts spread over them) keeps its rectangle on each."""
    p = system.spec.params
    wid, hgt = int(p.usable_width_pes), int(p.usable_height_pes)
    groups: dict[tuple, list] = {}
    here: dict[tuple, int] = {}
    for s in plc.layers:
        first, rect = _checked_wafer(s), _rect(s, wid, hgt)
        for wafer in s.units if len(s.units) > 1 else (first,):
            groups.setdefault((wafer, rect), []).append(s.layer)
            if s.expert_units:  # the most experts a region of this rectangle holds
                n = experts_held(s) or graph.n_experts
                here[(wafer, rect)] = max(here.get((wafer, rect), 0), n)
    code, buf, cap = int(p.pe_code_bytes), int(p.pe_buffer_bytes), int(p.pe_sram_bytes)
    for (wafer, (x0, y0, w, h)), keys in groups.items():
        ops = [op for k in keys for op in graph.ops_of(k)]
        largest, kv = PeTiles(graph, here.get((wafer, (x0, y0, w, h)))).pe_bytes(ops, w, h)
        need = largest + kv + code + buf
        if need > cap:
            # tiles are split with the remainder first, so the rectangle's first PE is fullest
            raise PlacementError(
                f"{plc.system} wafer {wafer} PE ({x0}, {y0}), the fullest of the {w}x{h} PE "
                f"rectangle at ({x0}, {y0}) holding layer {_keys(keys)}, needs {need:,} B: "
                f"largest weight tiles {largest:,} B + KV-cache share {kv:,} B + code {code:,} B "
                f"+ buffers {buf:,} B, more than its {cap:,} B of SRAM (short {need - cap:,} B)"
            )
    _check_overlap(plc, groups)


def _check_overlap(plc, groups: dict) -> None:
    by_wafer: dict[int, list] = {}
    for (wafer, rect), keys in groups.items():
        by_wafer.setdefault(wafer, []).append((rect, keys))
    for wafer, rects in by_wafer.items():
        rects.sort()
        for i, ((ax, ay, aw, ah), ka) in enumerate(rects):
            for (bx, by, bw, bh), kb in rects[i + 1 :]:
                if bx >= ax + aw:  # sorted by x0: no later rectangle reaches back into this one
                    break
                if by < ay + ah and ay < by + bh:
                    raise PlacementError(
                        f"{plc.system} wafer {wafer}: PE rectangles of layer {_keys(ka)} "
                        f"{[ax, ay, aw, ah]} and layer {_keys(kb)} {[bx, by, bw, bh]} overlap "
                        f"from PE ({max(ax, bx)}, {max(ay, by)}); layers sharing PEs must "
                        "share one rectangle (interleaved)"
                    )
