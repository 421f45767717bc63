"""A PE's fabric budgets on the wafer: the colours and queues the SDK's runtime keeps, the GQA
shift's rounds they force, and the refusals when too little is left."""

import pytest

import pyaccel as pa
from pyaccel.errors import ConfigError
from pyaccel.model.graph import build_graph
from pyaccel.sim.wafer.cost import RegionCoster
from pyaccel.sim.wafer.flows import line_flows, line_shift, shift_flows
from pyaccel.sim.wafer.tasks import Costs


def _shift_flows(h, seg, step, shifts):
    # the reference: segment by segment, PE by PE, shift by shift (wrapping in the segment)
    flows = []
    for lo in range(0, h, seg):
        size = min(h, lo + seg) - lo
        for j in range(size):
            for s in shifts:
                dst = (j + s * step) % size
                if dst != j:
                    flows.append((lo + j, lo + dst))
    return tuple(flows)


def _costs(**sets):
    return Costs.of(pa.load_system("wse3", overrides=sets).spec.params)


def test_colours_and_queues_the_runtime_leaves():
    c = _costs()
    # wse3: 24 colours - 4 kept (memcpy's 21-23, the launch colour) = 20 >= 10: two-level;
    # 8 queues - 2 kept by memcpy = 6 shifts in flight at once
    assert c.two_level and c.shifts_at_once == 6
    assert _costs(reserved_colours=15).two_level is False  # 9 left: one-level chains only
    assert _costs(reserved_colours=18).shifts_at_once == 6
    assert _costs(reserved_colours=17, fabric_queues=16).shifts_at_once == 7  # colours bind
    w2 = Costs.of(pa.load_system("wse2").spec.params)
    assert w2.shifts_at_once == 5  # 6 queues, memcpy keeps 1


def test_too_few_colours_or_queues_are_refused():
    with pytest.raises(ConfigError, match=r"colours - reserved_colours = 5"):
        _costs(reserved_colours=19)
    with pytest.raises(ConfigError, match="reserved_queues"):
        pa.load_system("wse3", overrides={"reserved_queues": 8})


def test_one_shift_round_by_hand():
    # Line of 4 PEs, one segment, shift by 1 (0->1, 1->2, 2->3, 3->0), 1 wavelet, 20-cycle
    # start, hop 1, ramps 2: east flows leave at 20, out of the PE +2, one hop +1, in +2 = 25;
    # 3 -> 0 crosses 3 hops west: 20 + 2 + 3 + 2 = 27.
    flows = _shift_flows(4, 4, 1, (1,))
    assert flows == ((0, 1), (1, 2), (2, 3), (3, 0))
    assert line_flows(4, flows, 1, 20, 1, 2)[0] == 27
    # Shift by 2: 0->2 and 1->3 share link 1->2: 0->2 holds it at 23, 1->3 enters at 24 and
    # arrives 24 + 1 + 1 + 2 = 28; 2->0 and 3->1 share 2->1 likewise and end at 26.
    assert line_flows(4, _shift_flows(4, 4, 1, (2,)), 1, 20, 1, 2)[0] == 28
    # Shift by 3: 0->3 crosses 3 hops east (27), the others one hop west (25).
    assert line_flows(4, _shift_flows(4, 4, 1, (3,)), 1, 20, 1, 2)[0] == 27


@pytest.mark.parametrize(
    "h,seg,step,shifts",
    [(4, 4, 1, (1,)), (4, 4, 1, (1, 2, 3)), (10, 4, 1, (1, 2, 3)), (11, 3, 2, (1, 2)),
     (7, 7, 7, (1,)), (1, 1, 1, (1,)), (137, 17, 2, (1, 2, 3, 4, 5, 6, 7)), (9, 9, 3, ())],
)  # fmt: skip
def test_shift_flows_are_the_reference_loop(h, seg, step, shifts):
    got = shift_flows(h, seg, step, shifts)
    assert got.dtype.name == "int64" and got.shape[1:] == (2,)
    assert tuple(map(tuple, got.tolist())) == _shift_flows(h, seg, step, shifts)
    if len(got):  # the cached shift is line_flows of those flows
        want = line_flows(h, _shift_flows(h, seg, step, shifts), 2, 5, 1, 2)
        res = line_shift(h, seg, step, shifts, 2, 5, 1, 2)
        assert res[0] == want[0] and res[2] == want[2]
        assert res[1].tolist() == want[1].tolist()


def test_shifts_beyond_the_budget_run_in_rounds(tmp_path):
    from conftest import TINY_LLAMA, write_config

    # the shift's cost depends on the line, its segments and the group, not on the model
    model = pa.load_model(write_config(tmp_path / "tiny", TINY_LLAMA))
    graph = build_graph(model, pa.Workload(context=8, tokens=1).resolved("bf16"))

    def shift(**sets):
        sysm = pa.load_system("wse3", overrides={**sets, "hop_latency_cycles": 1})
        return RegionCoster(sysm.spec, graph)._gqa_shift(4, 4, 4, 1)

    one_at_a_time = shift(fabric_queues=3)  # 3 - 2 kept = 1 shift in flight: three rounds
    assert one_at_a_time[0] == 27 + 28 + 27  # the rounds above, one after the other
    all_at_once = shift()
    flows = _shift_flows(4, 4, 1, (1, 2, 3))
    assert all_at_once[0] == line_flows(4, flows, 1, 20, 1, 2)[0]
    assert all_at_once[0] < one_at_a_time[0]
    assert one_at_a_time[5] == all_at_once[5] == 12  # messages: 4 PEs x 3 distances


def test_costers_of_a_graph_share_costs_only_under_equal_wafer_costs():
    # candidate layouts and what-ifs that move no wafer cost re-use a graph's op costs; a
    # system whose costs differ (a hop of 2 cycles) gets its own, as a fresh graph gives them
    model = pa.load_model("llama-3.1-8b")
    graph = build_graph(model, pa.Workload(context=100, tokens=1).resolved("bf16"))
    base, hop2 = (pa.load_system("wse3", overrides=o) for o in (None, {"hop_latency_cycles": 2}))
    io2 = pa.load_system("wse3", overrides={"system_io_bytes_per_s": 1e12})  # not a mesh cost
    a, b = RegionCoster(base.spec, graph), RegionCoster(io2.spec, graph)
    c = RegionCoster(hop2.spec, graph)
    assert a._memo is b._memo and c._memo is not a._memo
    op = next(op for op in graph.ops if op.kind == "qkv_proj")
    a.op_cost(op, 64, 48, 0)
    fresh_graph = build_graph(model, pa.Workload(context=100, tokens=1).resolved("bf16"))
    fresh = RegionCoster(hop2.spec, fresh_graph).op_cost(op, 64, 48, 0)
    assert c.op_cost(op, 64, 48, 0) == fresh != a.op_cost(op, 64, 48, 0)
