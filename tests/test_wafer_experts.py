"""Expert parallelism over wafers: a MoE model's layers on groups of wafers, each MoE layer's
experts spread over its group, the other ops replicated, and the partial sums combined over the
system I/O (``wafer.expert_combine``)."""

from __future__ import annotations

import json

import pytest

import pyaccel as pa
from pyaccel.errors import PlacementError
from pyaccel.model.graph import build_graph
from pyaccel.place import wafer as placer
from pyaccel.place.wafer_experts import ways
from pyaccel.sim.wafer.engine import COMBINE, WaferPass
from pyaccel.sim.wafer.experts import combine_cost
from pyaccel.units import cycles


def _system(units=2, grid=(12, 12), strategy="interleave", sets=()):
    over = [f"usable_width_pes={grid[0]}", f"usable_height_pes={grid[1]}",
            f"placement_strategy={strategy}", *sets]  # fmt: skip
    return pa.load_system("wse3", units=units, overrides=over)


def _graph(model="tiny-mixtral", batch=1):
    work = pa.Workload(batch=batch, context=64, tokens=1).resolved("bf16")
    return build_graph(pa.load_model(model), work)


def _ep(graph, system, units=2):
    return [p for p in placer.candidates(graph, system, units) if p.layout.expert_wafers]


def test_group_sizes_offered():
    assert ways(_graph("tiny-llama"), 8) == (1,)  # dense: no expert parallelism
    assert ways(_graph(), 8) == (1, 2, 4)  # 4 experts: at most 4 wafers a layer
    assert ways(_graph(), 6) == (1, 2, 3)


def test_experts_spread_over_a_group_by_hand():
    # tiny-mixtral layer 0 on the whole 12 x 12 grid of wafers 0 and 1: 221,952 B of weights,
    # of which routed experts 131,072 + 65,536 = 196,608 B (4 experts); each wafer holds the
    # 25,344 B of the rest and 2 experts, 98,304 B: 123,648 B; its KV cache on each
    graph = _graph()
    full = next(p for p in _ep(graph, _system()) if p.layout.grids[0] == (12, 12))
    slot = full.slot(0)
    assert slot.units == (0, 1) and slot.expert_units == (0, 0, 1, 1)
    assert slot.need_weight_bytes == 221_952
    assert slot.weight_bytes == (123_648, 123_648)
    assert slot.kv_bytes == (slot.need_kv_bytes,) * 2
    # two experts a region: two bands of 12 x 6 PEs
    assert slot.region.rect == (0, 0, 12, 12) and slot.region.expert_bands == (12, 6, 1)
    assert full.slot("embed").units == (0, 1) and not full.slot("embed").expert_units
    assert full.layout.expert_wafers == 2 and full.layout.grids == ((12, 12), (12, 12))
    back = pa.Placement.from_json(full.to_json())
    assert back.layout.expert_wafers == 2 and back.slot(0).expert_units == (0, 0, 1, 1)
    back.check(graph, _system())


def test_check_counts_the_experts_each_wafer_holds():
    # the smallest grid of the group holds 2 experts a PE band; all 4 on wafer 0 do not fit it
    graph, system = _graph(), _system()
    small = min(_ep(graph, system), key=lambda p: p.layout.grids[0])
    small.check(graph, system)
    from dataclasses import replace

    slots = [replace(s, expert_units=(0,) * 4) if s.expert_units else s for s in small.layers]
    crowded = replace(small, layers=tuple(slots))
    with pytest.raises(PlacementError, match="wafer 0 PE"):
        crowded.check(graph, system)


def test_combine_cost_by_hand():
    # 3 rows x 64 hidden x 2 B = 384 B from each of 2 wafers to the other: one crossing
    # latency and 384 B at the system I/O rate, on the wafer clock
    system = _system(units=2)
    p = system.spec.params
    wp_graph = _graph(batch=3)
    plc = _ep(wp_graph, system)[0]
    wp = WaferPass(wp_graph, system, plc)
    region = wp.regions[0]
    cost = combine_cost(wp.coster, p, region, 3, 64, 2)
    parts = dict(cost.parts)
    lat = cycles(p.system_io_latency_s, p.clock_hz)
    assert parts["wafer_io_latency"] == lat
    assert parts["wafer_io"] == cycles(p.system_io_latency_s + 384 / p.system_io_bytes_per_s,
                                       p.clock_hz) - lat  # fmt: skip
    # four wafers send three partial sums each: 3 x 384 B
    four = dict(combine_cost(wp.coster, p, region, 3, 64, 4).parts)
    assert four["wafer_io"] == cycles(p.system_io_latency_s + 1152 / p.system_io_bytes_per_s,
                                      p.clock_hz) - lat  # fmt: skip


def test_the_layer_waits_for_its_combine():
    graph, system = _graph(batch=3), _system()
    plc = _ep(graph, system)[0]
    wp = WaferPass(graph, system, plc)
    names = [e.name for e in wp.entries]
    for layer in graph.moe_layers:
        down = names.index(f"L{layer}.experts_down_proj")
        assert wp.entries[down + 1].kind == COMBINE
    rest = [e for e in wp.entries if e.kind != COMBINE]
    with_c, links = wp.stage_cycles(wp.entries)
    without, links_without = wp.stage_cycles(rest)
    added = sum(n for e in wp.entries if e.kind == COMBINE for _, n in e.cost.parts)
    assert sum(with_c) - sum(without) == added > 0  # in the stage, not an async crossing
    assert links == links_without


def test_spans_on_every_wafer_of_the_group_and_bytes_once(tmp_path):
    cfg = pa.load_model("tiny-mixtral")
    system = _system()
    work = pa.Workload(batch=2, context=64, tokens=2, weights="bf16")
    plc = _ep(build_graph(cfg, work.resolved("bf16")), system)[0]
    tr = pa.emulate(cfg, system, plc, work)
    ev = tr.events
    ops = [str(o) for o in ev["op"]]
    units = {u for o, u in zip(ops, ev["unit"], strict=True) if o == "L0.qkv_proj"}
    assert units == {0, 1}
    on_1 = [b for o, u, b in zip(ops, ev["unit"], ev["bytes"], strict=True) if u == 1]
    assert sum(on_1) == 0
    assert any(o.endswith("experts_down_proj.combine") for o in ops)
    assert any(a.startswith("wafer.expert_combine") for a in tr.assumptions)
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()


def test_auto_times_the_expert_layouts_too():
    cfg = pa.load_model("tiny-mixtral")
    plc = pa.place(cfg, _system(strategy="auto"), pa.Workload(batch=1, context=64))
    assert "experts over 2 wafers" in plc.reason


def test_kimi_k2_on_wafers_places_every_layer_and_expert():
    from typer.testing import CliRunner

    from pyaccel.cli import app

    args = ["place", "--system", "wse3", "--units", "auto", "--model", "kimi-k2", "--weights",
            "bf16", "--expert-weights", "int4-g32", "--json"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    layers = [s for s in rec["layers"] if isinstance(s["layer"], int)]
    assert len(layers) == 61
    assert all(len(s["expert_units"]) == 384 for s in layers[1:])  # layer 0 is dense
