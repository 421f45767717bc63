"""Mesh latencies below a cycle (the what-if's halving of a 1-cycle hop) are simulated in
half-cycle ticks, not floored to zero (wafer.half_cycle_ticks)."""

from dataclasses import replace

import pytest

import pyaccel as pa
from pyaccel.sim.wafer.tasks import Costs, OpCost, multicast


def _costs(**sets):
    # fractional latencies come only from the what-if's scaling, which bypasses --set's checks
    return Costs.of(replace(pa.load_system("wse3").spec.params, **sets))


def test_ticks_keep_fractional_latencies():
    c = _costs()
    assert (c.tick, c.hop, c.ramp, c.pass_lat) == (1, 1, 2, 1)
    half = _costs(hop_latency_cycles=0.5, ramp_latency_cycles=1, stream_add_latency_cycles=0.5)
    assert (half.tick, half.hop, half.ramp, half.pass_lat) == (2, 1, 2, 1)
    quarter = _costs(hop_latency_cycles=0.25)
    assert (quarter.tick, quarter.hop, quarter.ramp) == (4, 1, 8)
    odd = _costs(hop_latency_cycles=0.3)  # no tick makes it whole: floored at the finest
    assert (odd.tick, odd.hop) == (4, 1)


def test_a_multicast_at_half_the_latencies_by_hand():
    # wse3 (4 B links, 4 B per element): 3 elements = 3 wavelets from PE 0 along a line of 3,
    # after 20 cycles of start overhead. Hop 1, ramps 2: out of PE 0 at 20 (+2), hops to PE 2
    # (+2), into it (+2): first wavelet at 26, last 2 cycles later: 28.
    # With hop 0.5 and ramps 1: 20 + 1 + 2 x 0.5 + 1 = 23, last at 25 (a wavelet still takes
    # a cycle per link). With the hops floored to zero it would have been 24.
    def run(**sets):
        cost = OpCost()
        multicast(cost, _costs(**sets), 3, 0, 3, 0, 0)
        return cost.cycles

    assert run() == 28
    assert run(hop_latency_cycles=0.5, ramp_latency_cycles=1) == 25


@pytest.mark.parametrize("system,model", [("wse3", "llama-3.1-8b"),
                                          ("wse2", "waferllm-8b-shapes")])  # fmt: skip
def test_no_what_if_more_than_doubles_the_speed(system, model):
    # doubling one class's rate can at most halve the step; with 1-cycle latencies floored to
    # zero the mesh_hop what-if claimed x3.9 (8B) and x6.2 (WaferLLM shapes)
    work = pa.Workload(tokens=2)
    sysm, mdl = pa.load_system(system), pa.load_model(model)
    tr = pa.emulate(mdl, sysm, pa.place(mdl, sysm, work), work)
    gains = {r.resource: r.gain for r in pa.Report.from_trace(tr).what_if}
    assert 1.2 < gains["mesh_hop"] <= 2.0
    assert max(gains.values()) <= 2.0
