"""Placing a model on a system (orchestration, above placers and engines): the kind's placer fits
layouts; where several fit on the same units (the wafer's strategies), the kind's engine times
each for one decode step at the workload's context and the fastest is kept. Placers never time
their layouts and engines never place: choosing by speed, here and in any later search, belongs
to this layer (beside ``results``, ``compare`` and ``sensitivity``).

A placer offers either ``place_auto(graph, system)`` and ``place_units(graph, system, units)``
(one layout per unit count), or ``layouts_auto`` and ``layouts_units`` (every layout that fits,
never empty) with ``label(placement)`` and ``with_reason(graph, system, placement, tried)``;
each layout is timed by the step driver on the kind's engine (:func:`sim.driver.step_cycles`).
A placer whose layouts come in families that differ in one whole number (stage count, grid
side) also offers ``family``, ``position`` and ``member``: the members between a family's ends
are then searched too (:mod:`pyaccel.layout_search`).
"""

from __future__ import annotations

from dataclasses import replace

from .errors import ConfigError, option
from .hw.spec import System
from .layout_search import search_families
from .place import placer_module
from .place.placement import Placement
from .place.slot import MAX_UNITS
from .sim.driver import step_cycles
from .sim.inputs import check_args, engine_module, run_graph
from .workload import Workload


def place(model, system: System, workload=None, graph=None) -> Placement:
    """Place ``model`` (a ModelConfig or DecodeGraph) on ``system`` for ``workload`` (default
    ``Workload()``); ``system.units`` may be ``"auto"`` (the fewest units that hold weights, KV
    cache and buffers in a valid layout). Raises :class:`PlacementError` naming the unit, the
    bytes it needs and has, and the unit count that would fit, when it cannot fit; arguments
    of another type raise :class:`ConfigError`."""
    workload = Workload() if workload is None else workload
    check_args("place()", model, system, workload)
    auto = system.units == "auto"
    if not auto and int(system.units) > MAX_UNITS:  # before a placer walks that many units
        raise ConfigError(
            f"{option('units', int(system.units))} is above the limit of {MAX_UNITS:,} units "
            "(far above any placer's largest layout)"
        )
    if graph is None:  # formats as SPEC §6 decides them: flag, etched, quantization_config, system
        graph = run_graph(model, system, workload, "place()")
    placer = placer_module(system.kind)
    if hasattr(placer, "layouts_auto"):  # several layouts may fit: keep the fastest
        if auto:
            layouts = placer.layouts_auto(graph, system)
        else:
            layouts = placer.layouts_units(graph, system, int(system.units))
        plc = fastest(graph, system, layouts, placer)
    elif auto:
        plc = placer.place_auto(graph, system)
    else:
        plc = placer.place_units(graph, system, int(system.units))
    # the basis lets check() (here and in users' tests) test every level against the system
    plc = replace(plc, basis=(graph, replace(system, units=plc.n_units)))
    plc.check()
    return plc


def fastest(graph, system: System, layouts: list[Placement], placer) -> Placement:
    """The layout of ``layouts`` (all on the same units) whose decode step at the workload's
    context takes the fewest cycles on the kind's engine (the first of equals), with the
    placer's reason naming every layout tried and its cycles. Where the placer's layouts come
    in families (``family``, ``position``, ``member``), the members between a family's ends
    are searched too (:mod:`pyaccel.layout_search`); a layout built twice is timed once."""
    engine = engine_module(system.kind)
    timed: list[tuple[str, int, Placement]] = []
    by_slots: dict = {}

    def time(plc: Placement) -> int:
        if plc.layers not in by_slots:
            by_slots[plc.layers] = step_cycles(engine, graph, system, plc, graph.context)
            timed.append((placer.label(plc), by_slots[plc.layers], plc))
        return by_slots[plc.layers]

    known = {id(plc): time(plc) for plc in layouts}
    if hasattr(placer, "member"):
        search_families(graph, system, layouts, placer, engine, time, known)
        timed.sort(key=_family_order(layouts, placer))  # each family's members in order
    best = min(timed, key=lambda t: t[1])  # the first of equals
    return placer.with_reason(graph, system, best[2], [(lab, c) for lab, c, _ in timed])


def _family_order(layouts, placer):
    """Sort key of a timed layout: its family's place among ``layouts`` (a layout of no family
    has a place of its own), then its position in the family."""
    rank: dict = {}
    for plc in layouts:
        rank.setdefault(_family_key(placer, plc), len(rank))

    def key(t) -> tuple:
        plc = t[2]
        fam = _family_key(placer, plc)
        return rank[fam], placer.position(plc) if fam[0] == "family" else 0

    return key


def _family_key(placer, plc) -> tuple:
    fam = placer.family(plc)
    return ("family", fam) if fam is not None else ("alone", id(plc))
