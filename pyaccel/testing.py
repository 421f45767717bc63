"""pytest helpers for users' placement tests (SPEC §8); failures name the unit and the bytes.

A failed check raises ``AssertionError`` (pytest shows its message); an argument of the wrong
type or value (not a placement, a unit that is not an integer, a tolerance that is not a finite
fraction >= 0) raises :class:`~pyaccel.errors.ConfigError`, so that a mistyped test fails
instead of passing.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from .errors import ConfigError, PlacementError
from .place.placement import Placement, keys_text
from .units import as_int, fmt_bytes


def assert_fits(plc, graph=None, system=None) -> None:
    """Every unit, and every finer level a layer can overflow, holds what is placed on it:
    HBM per GPU, ROM and SRAM per ASIC die, each MEM slice range of an LPU chip, each PE of a
    wafer (largest tile + KV share + code and buffers) with no overlapping PE rectangles. The
    system and graph default to those the placement was made for (``pa.place``) or loaded
    against (``Placement.from_json``); with a graph, every layer is covered once. The failure
    names the unit (PE, slice), the bytes it needs and has (B)."""
    _placement(plc, "assert_fits")
    try:
        plc.check(graph, system)
    except PlacementError as exc:
        raise AssertionError(str(exc)) from None


def assert_layers_on(plc, unit: int, layers: Iterable | int | str) -> None:
    """Each of ``layers`` has ``unit`` (an index 0 .. units - 1) among its units. Keys as the
    placement has them: decoder layers are ints, plus ``"embed"`` and ``"head"``; one key
    alone may be given as it is (``assert_layers_on(plc, 0, "embed")``)."""
    _placement(plc, "assert_layers_on")
    index = as_int(unit)
    if index is None:
        raise ConfigError(
            f"assert_layers_on(): unit must be an integer index 0..{plc.n_units - 1}, got {unit!r}"
        )
    layers = [layers] if isinstance(layers, (int, str)) else list(layers)
    keys = plc.layer_keys()
    unknown = [layer for layer in layers if layer not in keys]
    if unknown:
        raise AssertionError(
            f"layer key(s) {unknown[:8]} are not placed on {plc.system}; valid keys: "
            f"{keys_text(keys)}"
        )
    if not 0 <= index < plc.n_units:
        raise AssertionError(
            f"unit {index} is not one of the placement's {plc.n_units} {plc.unit_noun}(s) "
            f"of {plc.system} (0..{plc.n_units - 1})"
        )
    missing = [layer for layer in layers if index not in plc.units_of(layer)]
    if missing:
        where = {str(layer): list(plc.units_of(layer)) for layer in missing[:8]}
        raise AssertionError(
            f"layers {missing[:8]} are not on unit {index} of {plc.system}; they are on {where}"
        )


def assert_balanced(plc, tolerance: float) -> None:
    """Resident bytes per unit (weights + KV + buffers, B) within ``tolerance`` (a fraction,
    e.g. 0.05 for 5 %) of the mean over units. The failure names the unit furthest from the
    mean, its bytes and how far off it is."""
    _placement(plc, "assert_balanced")
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
        raise ConfigError(
            f"assert_balanced(): tolerance must be a number (a fraction, e.g. 0.05), "
            f"got {tolerance!r}"
        )
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ConfigError(
            f"assert_balanced(): tolerance must be a finite fraction >= 0 (e.g. 0.05), "
            f"got {tolerance!r}"
        )
    used = [sum(plc.unit_bytes(u).values()) for u in range(plc.n_units)]
    mean = sum(used) / len(used)
    # the furthest from the mean; of two as far (two units), the fuller one
    worst = max(range(len(used)), key=lambda u: (abs(used[u] - mean), used[u]))
    off = abs(used[worst] - mean)
    if mean and off > tolerance * mean:
        side = "above" if used[worst] > mean else "below"
        raise AssertionError(
            f"unit {worst} of {plc.system} holds {fmt_bytes(used[worst])} "
            f"({used[worst]:,} B), {off:,.0f} B ({off / mean:.1%}) {side} the mean "
            f"{fmt_bytes(mean)} ({mean:,.0f} B); tolerance {tolerance:.1%}"
        )


def _placement(plc, helper: str) -> None:
    """``plc`` is a :class:`Placement`, or ConfigError naming the helper and what it got."""
    if not isinstance(plc, Placement):
        raise ConfigError(
            f"{helper}(): plc must be a Placement: pa.place(...) or "
            f"pa.Placement.from_json(FILE); got {type(plc).__name__}"
        )
