"""Placing a model on a system (orchestration, above placers and engines): the kind's placer fits
layouts; where several fit on the same units (the wafer's strategies), the kind's engine times
each for one decode step at the workload's context and the fastest is kept. Placers never time
their layouts and engines never place: choosing by speed, here and in any later search, belongs
to this layer (beside ``results``, ``compare`` and ``sensitivity``).

A placer offers either ``place_auto(graph, system)`` and ``place_units(graph, system, units)``
(one layout per unit count), or ``layouts_auto`` and ``layouts_units`` (every layout that fits,
never empty) with ``label(placement)`` and ``with_reason(graph, system, placement, tried)``;
each layout is timed by the step driver on the kind's engine (:func:`sim.driver.step_cycles`).
A placer whose layouts come in families that differ only in their pipeline stage count also
offers ``family(placement)`` and ``restaged(graph, system, placement, stages)``: the counts
between a family's fewest and most stages are then searched too.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import ConfigError, option
from .hw.spec import System
from .place import placer_module
from .place.placement import Placement
from .place.slot import MAX_UNITS
from .sim.driver import stage_cycles_of, step_cycles
from .sim.inputs import check_args, engine_module, run_graph
from .sim.pipeline import micro_batch_sizes
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
    placer's reason naming every layout tried and its cycles. Where the placer can restage a
    layout (``family`` and ``restaged``), stage counts between a family's fewest and most are
    searched too (:func:`_search_stages`)."""
    engine = engine_module(system.kind)
    timed: list[tuple[str, int, Placement]] = []
    by_slots: dict = {}  # a layout built again (another split that came out the same): once

    def time(plc: Placement) -> int:
        if plc.layers not in by_slots:
            by_slots[plc.layers] = step_cycles(engine, graph, system, plc, graph.context)
            timed.append((placer.label(plc), by_slots[plc.layers], plc))
        return by_slots[plc.layers]

    known = {id(plc): time(plc) for plc in layouts}
    if hasattr(placer, "restaged"):
        _search_stages(graph, system, layouts, placer, engine, time, known)
        timed.sort(key=_family_order(layouts, placer))  # each family's counts in order
    best = min(timed, key=lambda t: t[1])  # the first of equals
    return placer.with_reason(graph, system, best[2], [(lab, c) for lab, c, _ in timed])


def _family_order(layouts, placer):
    """Sort key of a timed layout: its family's place among ``layouts``, then its stages."""
    rank: dict = {}
    for plc in layouts:
        rank.setdefault(placer.family(plc), len(rank))
    return lambda t: (rank[placer.family(t[2])], _pp(t[2]))


def _search_stages(graph, system, layouts, placer, engine, time, known: dict) -> None:
    """Time (with ``time``) the stage counts :func:`_stage_counts` visits between the fewest
    and the most stages of each family of ``layouts`` (``known``: their cycles by id)."""
    families: dict = {}
    for plc in layouts:
        families.setdefault(placer.family(plc), []).append(plc)
    for members in families.values():
        few, most = min(members, key=_pp), max(members, key=_pp)
        # with one micro-batch a step is one pass through every stage: more stages only add
        # hops, so the fewest is fastest and the counts between need no timing
        if len(micro_batch_sizes(graph.workload.batch, engine.n_stages(most))) < 2:
            continue
        memo = {_pp(few): known[id(few)], _pp(most): known[id(most)]}
        _stage_counts(lambda pp, few=few: time(placer.restaged(graph, system, few, pp)),
                      _pp(few), _pp(most), memo)  # fmt: skip
        costs = _key_cycles(graph, system, placer, engine, few)
        if costs is not None:
            _stage_counts(_by_costs(graph, system, placer, few, costs, time),
                          _pp(few), _pp(most), {})  # fmt: skip


def _key_cycles(graph, system, placer, engine, plc) -> tuple[int, ...] | None:
    """Each layer key's cycles on a stage of its own of ``plc``'s family (the placer's
    ``keywise`` layout, timed by the step driver at the workload's context), or None where the
    placer or engine has no such layout or times."""
    keywise = getattr(placer, "keywise", None)
    if keywise is None:
        return None
    one = keywise(graph, system, plc)
    wide = replace(system, units=one.n_units)  # as many units as one key a stage takes
    costs = stage_cycles_of(engine, graph, wide, one, graph.context)
    return None if costs is None else tuple(costs)


def _by_costs(graph, system, placer, plc, costs: tuple, time):
    """``cycles(pp)`` of ``plc``'s family over ``pp`` stages balanced by ``costs`` (timed with
    ``time``); a split that leaves a chip short is never the fastest."""

    def cycles(pp: int) -> int:
        out = placer.restaged(graph, system, plc, pp, costs)
        return _NEVER if out is None else time(out)

    return cycles


_NEVER = 2**62  # the cycles of a layout that cannot run: slower than any that can


def _pp(plc: Placement) -> int:
    return plc.layout.pp


def _stage_counts(cycles, lo: int, hi: int, memo: dict[int, int]) -> dict[int, int]:
    """``memo`` (stage count -> cycles, holding ``lo`` and ``hi`` or empty) grown with the counts a
    golden-section search between ``lo`` and ``hi`` visits for the fewest ``cycles(pp)``, each
    asked once: about 1.44 log2(hi - lo) + 2 counts. The step over stage counts falls while
    more micro-batches overlap and smaller blocks shorten the busiest stage, then rises with
    the extra hops, so it is searched as unimodal; ties keep the fewer stages (a plateau that
    falls further on can hide a better count), and the last window of at most four counts is
    timed whole."""

    def f(pp: int) -> int:
        if pp not in memo:
            memo[pp] = cycles(pp)
        return memo[pp]

    inv_phi = (5**0.5 - 1) / 2
    a, b = lo, hi
    while b - a > 3:
        c, d = b - round((b - a) * inv_phi), a + round((b - a) * inv_phi)
        if c >= d:  # rounding met in the middle: two neighbours tell which side falls
            c, d = (a + b) // 2, (a + b) // 2 + 1
        if f(c) <= f(d):
            b = d
        else:
            a = c
    for pp in sorted({lo, hi, *range(a, b + 1)}):
        f(pp)
    return memo
