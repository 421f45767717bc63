"""Placement of a model's layers on the units of a system, one placer per machine kind."""

from __future__ import annotations

from dataclasses import replace

from ..errors import EngineNotBuiltError
from ..hw.spec import System
from .placement import LayerSlot, Placement

__all__ = ["LayerSlot", "Placement", "place"]


def place(model, system: System, workload, graph=None) -> Placement:
    """Place ``model`` on ``system`` for ``workload``; ``system.units`` may be ``"auto"`` (the
    fewest units that hold weights, KV cache and buffers in a valid layout). Raises
    :class:`PlacementError` with the unit and bytes short when it cannot fit."""
    from ..model.graph import build_graph
    from ..workload import resolve_workload

    if graph is None:  # formats as SPEC §6 decides them: flag, etched, quantization_config, system
        work = resolve_workload(workload, model, system.spec).workload
        graph = build_graph(model, work, native_format=system.spec.native_format)
    placer = placer_module(system.kind)
    if system.units == "auto":
        plc = placer.place_auto(graph, system)
    else:
        plc = placer.place_units(graph, system, int(system.units))
    # the basis lets check() (here and in users' tests) test every level against the system
    plc = replace(plc, basis=(graph, replace(system, units=plc.n_units)))
    plc.check()
    return plc


def placer_module(kind: str):
    """The placer module ``pyaccel.place.<kind>``; kinds without one raise EngineNotBuiltError."""
    from importlib import import_module
    from importlib.util import find_spec

    name = f"pyaccel.place.{kind}"
    if find_spec(name) is None:
        raise EngineNotBuiltError(f"the {kind} placer and engine are not built yet")
    return import_module(name)
