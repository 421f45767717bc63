"""Capacity checks below the unit: every level a layer can overflow (SPEC §2, ``check()``).

A unit's totals (``Placement.shortfalls``) cover HBM per GPU and ROM and SRAM per ASIC die. Finer
levels need the graph and the system:

- wafer: each PE rectangle holds, on its fullest PE, the largest weight tiles of every layer
  interleaved on it, their KV-cache share and the PE's code and buffers — the placer's own tiling
  (``RegionCoster.pe_bytes``), not an average; rectangles lie inside the usable grid; distinct
  rectangles on one wafer do not overlap (layers interleaved on one grid share one rectangle).
- LPU: each layer's MEM slice range on each chip holds its bytes there, packed in slice order
  after the layers before it, as the placer lays them out.
"""

from __future__ import annotations

from ..errors import PlacementError


def capacity_of(system, graph=None) -> tuple[dict, dict, dict] | None:
    """(capacity per level, level of each category, runtime reserve per level) of one unit of
    ``system``, from the placer of its kind; None where the graph is needed and not given."""
    from . import placer_module

    return placer_module(system.kind).capacity(system, graph)


def check_levels(plc, graph, system) -> None:
    """Raise :class:`PlacementError` at the first finer level that overflows (see module)."""
    if plc.kind != system.kind:
        raise PlacementError(
            f"a {plc.kind} placement cannot be checked against {system.name}, a {system.kind}"
        )
    if plc.kind == "wafer":
        check_wafer(plc, graph, system)
    elif plc.kind == "lpu":
        _check_stages(plc, required=False)
        check_lpu(plc, system)
    elif plc.kind == "gpu":
        _check_stages(plc, required=True)
    elif plc.kind == "asic":
        from .asic import check_etch

        check_etch(graph, system)
        if not system.etch and plc.n_units != 1:
            raise PlacementError(
                f"{system.name} holds all of {graph.model_name} on one chip; a placement of "
                f"{plc.n_units} units needs --etch (dies designed for the model)"
            )


def _check_stages(plc, required: bool) -> None:
    """A slot's pipeline ``stage`` (which the engine orders by) is an integer in range."""
    for s in plc.layers:
        stage = s.region.get("stage")
        if stage is None and not required:
            continue
        if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < plc.n_units:
            raise PlacementError(
                f"layer {s.layer!r}: region 'stage' must be a pipeline stage 0..{plc.n_units - 1}, "
                f"got {stage!r}"
            )


# ----------------------------------------------------------------------------- wafer


def _rect(slot, wid: int, hgt: int) -> tuple[int, int, int, int]:
    rect = slot.region.get("rect")
    ok = isinstance(rect, (list, tuple)) and len(rect) == 4
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) for v in rect):
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


def _wafer_of(slot) -> int:
    wafer = slot.region.get("wafer", slot.units[0])
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


def check_wafer(plc, graph, system) -> None:
    """Per PE (fullest PE of every rectangle) and rectangle overlap (see module)."""
    from ..sim.wafer_cost import RegionCoster

    p = system.spec.params
    wid, hgt = int(p.usable_width_pes), int(p.usable_height_pes)
    groups: dict[tuple, list] = {}
    for s in plc.layers:
        groups.setdefault((_wafer_of(s), _rect(s, wid, hgt)), []).append(s.layer)
    code, buf, cap = int(p.pe_code_bytes), int(p.pe_buffer_bytes), int(p.pe_sram_bytes)
    coster = RegionCoster(system.spec, graph)
    for (wafer, (x0, y0, w, h)), keys in groups.items():
        ops = [op for k in keys for op in graph.ops_of(k)]
        tiles, kv = coster.pe_bytes(ops, w, h)
        need = tiles + kv + code + buf
        if need > cap:
            # tiles are split with the remainder first, so the rectangle's first PE is fullest
            raise PlacementError(
                f"{plc.system} wafer {wafer} PE ({x0}, {y0}), the fullest of the {w}x{h} PE "
                f"rectangle at ({x0}, {y0}) holding layer {_keys(keys)}, needs {need:,} B: "
                f"largest weight tiles {tiles:,} B + KV-cache share {kv:,} B + code {code:,} B "
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


# ----------------------------------------------------------------------------- LPU


def _slices(slot, n_slices: int) -> tuple[int, int] | None:
    rng = slot.region.get("mem_slices")
    if rng is None:
        return None
    ok = isinstance(rng, (list, tuple)) and len(rng) == 2
    if ok and all(isinstance(v, int) and not isinstance(v, bool) for v in rng):
        first, last = rng
        if 0 <= first <= last < n_slices:
            return first, last
    raise PlacementError(
        f"layer {slot.layer!r}: mem_slices {rng!r} must be [first, last] with "
        f"0 <= first <= last <= {n_slices - 1}"
    )


def check_lpu(plc, system) -> None:
    """Each layer's MEM slices on each chip hold its bytes there (see module)."""
    p = system.spec.params
    n_slices = int(p.mem_slices)
    per = int(p.sram_bytes) // n_slices
    chips: dict[int, list] = {}
    for s in plc.layers:
        rng = _slices(s, n_slices)
        if rng is None:
            continue
        for i, chip in enumerate(s.units):
            n = s.weight_bytes[i] + s.kv_bytes[i] + s.buffer_bytes[i]
            chips.setdefault(chip, []).append((rng, n, s.layer))
    for chip, items in sorted(chips.items()):
        end = 0
        for (first, last), n, key in sorted(items, key=lambda t: t[0][0]):
            start = max(end, first * per)
            end = start + n
            if end > (last + 1) * per:
                after = " after the layers before it" if start > first * per else ""
                raise PlacementError(
                    f"{plc.system} chip {chip} MEM slices {first}..{last} ({last - first + 1} x "
                    f"{per:,} B) cannot hold layer {key!r}: its {n:,} B (weights, KV cache, "
                    f"buffers){after} run from byte {start:,} into slice {(end - 1) // per}, "
                    f"{end - (last + 1) * per:,} B past the end of slice {last}"
                )
