"""Placement before timing (issue 13 item 5): the wafer placer offers every layout that fits and
never times them; the orchestration layer (pyaccel.placing) times each with the wafer engine for
one step at the workload's context and keeps the fastest (the first of equals)."""

from __future__ import annotations

import pytest

import pyaccel as pa
from pyaccel import placing
from pyaccel.place import wafer as placer
from pyaccel.sim import wafer as engine
from pyaccel.sim.driver import step_cycles


@pytest.fixture(scope="module")
def case():
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1)
    system = pa.load_system("wse3", "auto", ["placement_strategy=auto"])
    graph = pa.build_graph(model, work.resolved("bf16"))
    return model, work, system, graph


def test_the_placer_offers_every_layout_that_fits_untimed(case):
    _model, _work, system, graph = case
    layouts = placer.layouts_auto(graph, system)
    assert len(layouts) > 2 and len({p.n_units for p in layouts}) == 1
    assert {p.layout.strategy for p in layouts} == {"interleave", "layer_regions", "layer_groups"}
    assert all(p.reason == "" for p in layouts)  # no timing, so no reason yet
    assert layouts == placer.layouts_units(graph, system, layouts[0].n_units)


def test_place_keeps_the_fastest_layout(case):
    model, work, system, graph = case
    layouts = placer.layouts_auto(graph, system)
    cycles = [step_cycles(engine, graph, system, p, graph.context) for p in layouts]
    got = pa.place(model, system, work)
    want = layouts[cycles.index(min(cycles))]
    assert got.layers == want.layers and got.layout == want.layout
    assert got.reason.endswith(f"kept {placer.label(want)}")
    for p, c in zip(layouts, cycles, strict=True):
        assert f"{placer.label(p)}: {c:,} cycles" in got.reason


def test_equal_times_keep_the_first_offered(case, monkeypatch):
    _model, _work, system, graph = case
    layouts = placer.layouts_auto(graph, system)
    monkeypatch.setattr(placing, "step_cycles", lambda *args: 7)
    kept = placing.fastest(graph, system, layouts[::-1], placer)
    assert kept.layers == layouts[-1].layers
    # every layout offered is timed (and, the times being flat, interleave grids between)
    assert kept.reason.count(": 7 cycles") >= len(layouts)
    assert all(f"{placer.label(p)}: 7 cycles" in kept.reason for p in layouts)
