"""Placement of a model's layers on the units of a system, one placer per machine kind."""

from __future__ import annotations

from ..errors import EngineNotBuiltError
from ..hw.spec import System
from .placement import LayerSlot, Placement

__all__ = ["LayerSlot", "Placement", "place"]


def place(model, system: System, workload, graph=None) -> Placement:
    """Place ``model`` on ``system`` for ``workload``; ``system.units`` may be ``"auto"`` (the
    fewest units that hold weights, KV cache and buffers in a valid layout). Raises
    :class:`PlacementError` with the unit and bytes short when it cannot fit."""
    from ..model.graph import build_graph

    graph = graph or build_graph(model, workload, native_format=system.spec.native_format)
    if system.kind == "gpu":
        from . import gpu

        plc = (
            gpu.place_auto(graph, system.spec)
            if system.units == "auto"
            else gpu.place_units(graph, system.spec, int(system.units))
        )
    else:
        raise EngineNotBuiltError(
            f"the {system.kind} placer and engine are not built yet (system {system.name})"
        )
    plc.check(graph)
    return plc
