"""The wafer bound binds and is still a bound: it counts the hops each full-line all-reduce must
cross (the farthest PE's data over ``min(w, h) - 1`` hops of its region), an op's bytes over its
region's PEs and a token's hand-offs between wafers, and every emulated step stays at or above
it on every wafer preset x model preset that fits."""

import pytest

import pyaccel as pa
from pyaccel.model.config import preset_names
from pyaccel.place import wafer as wafer_placer
from pyaccel.report import Report
from pyaccel.sim import roofline
from pyaccel.sim.wafer import bound as wafer_bound

from conftest import bound_ratio

WAFERS = ("wse3", "wse2")
FAST_MODELS = ("tiny", "llama-2-7b", "llama-3.1-8b", "waferllm")  # the default suite's share


def _ratio(system, model, strategy="interleave", batch=1, context=64) -> float | None:
    return bound_ratio(system, model, "auto", batch, context, [f"placement_strategy={strategy}"])


@pytest.mark.parametrize("system", WAFERS)
@pytest.mark.parametrize("model", [m for m in preset_names() if m.startswith(FAST_MODELS)])
def test_emulated_at_or_above_the_bound(system, model):
    ratio = _ratio(system, model)
    assert ratio is None or ratio >= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("system", WAFERS)
@pytest.mark.parametrize("model", preset_names())
def test_emulated_at_or_above_the_bound_everywhere(system, model):
    for strategy in ("interleave", "layer_regions", "layer_groups"):
        for batch, context in ((1, 64), (8, 4096)):
            ratio = _ratio(system, model, strategy, batch, context)
            assert ratio is None or ratio >= 1.0, (strategy, batch, context)


def test_the_bound_binds_on_llama_8b():
    assert _ratio("wse3", "llama-3.1-8b") < 10  # x255 before it counted hops


def test_the_bound_binds_on_a_tiny_model():
    # tiny-llama sits on a small region: its ops are DSD issues, message starts and hops
    assert _ratio("wse3", "tiny-llama") < 10  # x105 with hops alone


def test_each_ops_floor_by_hand():
    """On tiny-llama's 4 x 4 region: a MeshGEMV issues one DSD at least, starts its
    all-reduce after one message start cost and carries the far PE's data over 3 hops; an
    elementwise op pays its issue and its task's activation message; the embedding only its
    issue (its multicast can start at once)."""
    work = pa.Workload(context=64, tokens=2)
    cfg, sysm = pa.load_model("tiny-llama"), pa.load_system("wse3", 1)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    # the interleave on the smallest grid that holds it (the speed search keeps a larger one)
    plc = min((p for p in wafer_placer.layouts_units(graph, sysm, 1)
               if p.layout.strategy == "interleave"), key=wafer_placer.position)  # fmt: skip
    p, clock = sysm.spec.params, sysm.spec.clock_hz
    rates = wafer_bound.rates(sysm.spec, work)
    slots = {s.layer: s for s in plc.layers}

    def floor_cycles(kind):
        op = next(o for o in graph.ops if o.kind == kind)
        assert slots[op.layer].region.rect[2:] == (4, 4)
        return {res: round(t * clock) for res, t in rates.latency_floor(op, slots[op.layer])}

    issue, message, hop = p.dsd_issue_cycles, p.message_overhead_cycles, p.hop_latency_cycles
    assert floor_cycles("qkv_proj") == {"fixed_latency": issue, "mesh_message": message,
                                        "mesh_hop": 3 * hop}  # fmt: skip
    assert floor_cycles("act") == {"fixed_latency": issue, "mesh_message": message}
    assert floor_cycles("embed") == {"fixed_latency": issue}


@pytest.mark.parametrize("hop, line_cycles", [(0.5, 1), (0.25, 0), (0.75, 2)])
def test_a_fractional_hop_floors_the_lines_sum_not_each_hop(hop, line_cycles):
    """A mesh latency of a fraction of a cycle (--set, the mesh_hop what-if) is exact in ticks
    and the engine floors a line's sum: over tiny-llama's 3-hop lines 3 x 0.5 = 1.5 -> 1 cycle,
    3 x 0.25 -> 0, 3 x 0.75 = 2.25 -> 2, where flooring each hop first gave 0; and the step
    and every kind stay at or above their bounds."""
    work = pa.Workload(context=64, tokens=2)
    cfg = pa.load_model("tiny-llama")
    sysm = pa.load_system("wse3", 1, overrides=[f"hop_latency_cycles={hop}"])
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = min((p for p in wafer_placer.layouts_units(graph, sysm, 1)
               if p.layout.strategy == "interleave"), key=wafer_placer.position)  # fmt: skip
    op = next(o for o in graph.ops if o.kind == "qkv_proj")
    slot = next(s for s in plc.layers if s.layer == op.layer)
    assert slot.region.rect[2:] == (4, 4)
    floor = dict(wafer_bound.rates(sysm.spec, work).latency_floor(op, slot))
    assert round(floor.get("mesh_hop", 0.0) * sysm.spec.clock_hz) == line_cycles
    tr = pa.emulate(cfg, sysm, plc, work)
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()
    kinds = Report.from_trace(tr, what_if=False).by_kind
    assert all(r.ratio is None or r.ratio >= 1.0 for r in kinds)


def test_the_bound_waits_for_each_wafer_crossing():
    # llama-3.1-70b on 4 wse3 holds its layers in 4 contiguous blocks, one a wafer: a token
    # crosses 3 hand-offs, each at least the system I/O's 2 us and 8,192 x 2 B at 150 GB/s
    work = pa.Workload(context=64, tokens=2)
    cfg, sysm = pa.load_model("llama-3.1-70b"), pa.load_system("wse3", units=4)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    p = sysm.spec.params
    assert (p.system_io_latency_s, p.system_io_bytes_per_s, graph.hidden) == (2e-6, 150e9, 8192)
    crossings = wafer_bound.rates(sysm.spec, graph.workload).pass_floor_s
    want = 3 * (2e-6 + 8192 * 2 / 150e9)
    assert crossings(graph, plc) == pytest.approx(want, rel=1e-12)
    tr = pa.emulate(cfg, sysm, plc, work)
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()
    # the report's hand-off row is bounded by them (in whole cycles) and stays above them
    row = next(r for r in pa.Report.from_trace(tr, what_if=False).by_kind if r.kind == "handoff")
    assert row.bound_s == pytest.approx(want, abs=1.0 / tr.clock_hz)
    assert row.ratio >= 1.0
    one = pa.load_model("llama-3.1-8b")
    one_wafer = pa.place(one, pa.load_system("wse3", units=1), work)
    assert crossings(pa.build_graph(one, work), one_wafer) == 0


def test_an_ops_bytes_are_read_by_its_regions_pes_only():
    # layer_regions puts llama-3.1-8b's layer 0 on a 139 x 139 rect of PEs: its gate/up
    # projection's 4,096 x 28,672 x 2 B are read by those 19,321 PEs at 16 B a cycle at
    # 850 MHz (0.89 us), not by the whole wafer's (the pooled rate the wafer's total keeps)
    work = pa.Workload(context=1024, tokens=2)
    cfg = pa.load_model("llama-3.1-8b")
    sysm = pa.load_system("wse3", overrides=["placement_strategy=layer_regions"])
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    p = sysm.spec.params
    assert (p.sram_read_bytes_per_cycle, p.clock_hz) == (16, 850e6)
    assert plc.slot(0).region.rect[2:] == (139, 139)
    roof = roofline.roofline(graph, sysm, plc, work)
    gate_up = next(b for b in roof.ops if b.op == "L0.gate_up_proj")
    want = 4096 * 28672 * 2 / (139 * 139 * 16 * 850e6)
    assert gate_up.resource == "pe_sram"
    assert gate_up.seconds == pytest.approx(want, rel=1e-12)
    assert gate_up.times["pe_sram"] < want / 40  # the pooled term: the whole wafer's PEs
    total = sum(b.times.get("pe_sram", 0.0) for b in roof.ops)
    assert roof.resource_s["pe_sram"] == pytest.approx(total, rel=1e-12)
