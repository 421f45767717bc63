"""pytest helpers for users' placement tests (SPEC §8); failures name the unit and the bytes."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import PlacementError
from .place.placement import keys_text
from .units import fmt_bytes


def assert_fits(plc, graph=None, system=None) -> None:
    """Every unit, and every finer level a layer can overflow, holds what is placed on it:
    HBM per GPU, ROM and SRAM per ASIC die, each MEM slice range of an LPU chip, each PE of a
    wafer (largest tile + KV share + code and buffers) with no overlapping PE rectangles. The
    system and graph default to those the placement was made for (``pa.place``) or loaded
    against (``Placement.from_json``); with a graph, every layer is covered once."""
    try:
        plc.check(graph, system)
    except PlacementError as exc:
        raise AssertionError(str(exc)) from None


def assert_layers_on(plc, unit: int, layers: Iterable) -> None:
    """Each of ``layers`` has ``unit`` among its units (keys as the placement has them:
    decoder layers are ints, plus ``"embed"`` and ``"head"``)."""
    layers = list(layers)
    keys = plc.layer_keys()
    unknown = [layer for layer in layers if layer not in keys]
    if unknown:
        raise AssertionError(
            f"layer key(s) {unknown[:8]} are not placed on {plc.system}; valid keys: "
            f"{keys_text(keys)}"
        )
    missing = [layer for layer in layers if unit not in plc.units_of(layer)]
    if missing:
        where = {str(layer): list(plc.units_of(layer)) for layer in missing[:8]}
        raise AssertionError(
            f"layers {missing[:8]} are not on unit {unit} of {plc.system}; they are on {where}"
        )


def assert_balanced(plc, tolerance: float) -> None:
    """Resident bytes per unit (weights + KV + buffers) within ``tolerance`` (a fraction) of the
    mean over units."""
    used = [sum(plc.unit_bytes(u).values()) for u in range(plc.n_units)]
    mean = sum(used) / len(used)
    worst = max(range(len(used)), key=lambda u: abs(used[u] - mean))
    off = abs(used[worst] - mean)
    if mean and off > tolerance * mean:
        raise AssertionError(
            f"unit {worst} of {plc.system} holds {fmt_bytes(used[worst])} "
            f"({used[worst]:,} B), {off:,.0f} B ({off / mean:.1%}) from the mean "
            f"{fmt_bytes(mean)}; tolerance {tolerance:.1%}"
        )
