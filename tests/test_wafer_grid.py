"""Whole-grid (2-D) simulation of wafer collectives: crossing flows by hand, every line of an
op on its own grid links, consecutive ops overlapping by dataflow, and the fast line-profile
twin checked against the whole grid."""

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import kernels
from pyaccel.model.graph import build_graph
from pyaccel.sim.wafer import grid, mesh
from pyaccel.sim.wafer.cost import RegionCoster
from pyaccel.sim.wafer.mesh import Grid, Tasks

BACKENDS = kernels.available_backends()


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_crossing_flows_by_hand(backend):
    # 4x4 grid, hop 1, XY routing, 4 wavelets each, both ready at cycle 0, A listed first.
    # A: (0,1) -> (3,1) east along row 1: links (0,1)E, (1,1)E, (2,1)E, ramp of (3,1).
    #    Head enters (0,1)E at 0 (last wavelet 3, free from 4), reaches (1,1) at 1;
    #    (1,1)E: head 1, last 4 (free from 5); (2,1)E: head 2, last 5; ramp: head 3, last 6.
    # B: (1,1) -> (2,3) crosses A's path: x first, so (1,1)E (A's link, free from 5), then
    #    south (2,1)S, (2,2)S and the ramp of (2,3).
    #    (1,1)E: head 5, last 8; (2,1)S: head 6, last 9; (2,2)S: head 7, last 10;
    #    ramp of (2,3): head 8, last 11. Alone B would end at 3 + 3 = 6: it waits for A's
    #    4 wavelets plus the cycle A's head needed to reach the shared link.
    # C: (1,0) -> (3,1) only meets A at the ramp of (3,1) (receive side): (1,0)E head 0,
    #    (2,0)E head 1, (3,0)S head 2 (last 5), arriving at router (3,1) at 3 with its last
    #    wavelet at 6; the ramp is A's until 6, so C's head enters at 7 and its last at 10.
    g, tk = Grid(4, 4, hop=1), Tasks()
    tk.add(g.pe(0, 1), 0, False, 4, [], g.path((0, 1), (3, 1)))
    tk.add(g.pe(1, 1), 0, False, 4, [], g.path((1, 1), (2, 3)))
    tk.add(g.pe(1, 0), 0, False, 4, [], g.path((1, 0), (3, 1)))
    res = tk.run(g.link_lat, 16, 0, backend)
    assert res.head.tolist() == [3, 8, 7]
    assert res.tail.tolist() == [6, 11, 10]
    assert res.link_busy[g.link(1, 1, g.E)] == 8  # carried A and B
    assert res.link_busy[g.link(3, 1, g.RAMP)] == 8  # took in A and C


@pytest.mark.parametrize("axis", [0, 1])
def test_line_maps_follow_the_grid_routes(axis):
    w, h = 5, 3
    pe_map, link_map = grid.line_maps(w, h, axis)
    g, n = Grid(w, h, 1), (w, h)[axis]
    line = mesh.Line(n, 1)
    for k in range(pe_map.shape[0]):
        at = [(i, k) if axis == 0 else (k, i) for i in range(n)]
        assert pe_map[k].tolist() == [g.pe(*xy) for xy in at]
        for a in range(n):
            for b in range(n):
                if a != b:
                    got = link_map[k, line.path(a, b)].tolist()
                    assert got == g.path(at[a], at[b])


def _op(axis, n, setup, nwav, two_level=True, broadcast=True, seg=None):
    tpl = mesh._allreduce_template(n, seg or n, 1, two_level, broadcast)
    return grid.GridOp(axis, tpl, setup, 20, nwav)


SHAPES = [(6, 5), (9, 4), (16, 16), (12, 7)]


def _layer(w, h):
    # a norm, a MeshGEMV along x, a per-head reduction along y, two GEMVs, an arg-max
    return [
        _op(0, w, 3, 1),
        _op(0, w, 9, 3),
        _op(1, h, 5, 2, seg=max(1, h // 2)),
        _op(1, h, 7, 4, two_level=False),
        _op(0, w, 2, 6),
        _op(1, h, 4, 2, broadcast=False),
    ]


@pytest.mark.parametrize("w,h", SHAPES)
def test_profile_twin_matches_the_whole_grid(w, h):
    # Lines of one op share no mesh link, but consecutive ops along different axes meet on the
    # ramps of the PEs both feed: there the whole grid finds a PE a few cycles later than the
    # line-profile twin (measured: at most 4 here). The op's slowest PE never waits: the
    # step's cycles are the twin's exactly.
    ops = _layer(w, h)
    run = grid.grid_sequence(w, h, ops, 1, 1)
    for k, (xs, ys) in enumerate(grid.profile_sequence(w, h, ops, 1)):
        gap = run.done[k] - (xs[None, :] + ys[:, None])
        assert 0 <= gap.min() and gap.max() <= 4
        assert run.done[k].max() == xs.max() + ys.max()


@pytest.mark.parametrize("w,h", SHAPES)
def test_overlap_saves_a_cycle_or_two_per_op_after_a_broadcast_from_the_middle(w, h):
    # Each line's result reaches its ends last, and the ends are where the next all-reduce's
    # chains start: overlapping consecutive all-reduces by dataflow saves only the cycle or
    # two by which a chain's head PE can start before the broadcast's last wavelet (what the
    # engine's serial op sums neglect, wafer.ops_in_order).
    ops = _layer(w, h)[:-1]
    serial = sum(op.template.run(op.setup, op.overhead, op.nwav, 1).cycles for op in ops)
    overlapped = grid.grid_sequence(w, h, ops, 1, 1).cycles
    assert serial - 2 * len(ops) <= overlapped <= serial


def test_a_late_line_starts_late_by_exactly_its_delay():
    op = _op(0, 8, 4, 3)
    ready = np.zeros(8, dtype=np.int64)
    base, _ = grid.line_with_ready(op, ready, 1)
    shifted, _ = grid.line_with_ready(op, ready + 17, 1)
    np.testing.assert_array_equal(shifted, base + 17)
    # one PE ready late delays every PE's result by no more than its lateness
    late = ready.copy()
    late[0] = 50
    got, _ = grid.line_with_ready(op, late, 1)
    assert (got >= base).all() and (got <= base + 50).all() and got.max() > base.max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_grid_backends_agree(backend):
    w, h = 9, 6
    ops = _layer(w, h)
    want = grid.grid_sequence(w, h, ops, 1, 1, backend="numpy")
    got = grid.grid_sequence(w, h, ops, 1, 1, backend=backend)
    np.testing.assert_array_equal(got.done, want.done)
    np.testing.assert_array_equal(got.result.link_busy, want.result.link_busy)


def test_a_template_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="lines of 4"):
        grid.grid_sequence(7, 4, [_op(1, 7, 1, 1)], 1, 1)


def test_a_layer_as_the_engine_costs_it_matches_the_whole_grid(tmp_path):
    # A tiny llama layer (no GQA shift: as many KV heads as query heads) costed by the engine op
    # by op, each all-reduce on one line, then its all-reduces rebuilt on every line of the
    # 12 x 8 grid with each PE starting the next one once it holds the last result: the
    # engine's serial sum is the whole grid's time, less a cycle or two per all-reduce that
    # the dataflow overlap saves.
    from conftest import TINY_LLAMA, write_config

    cfg = {**TINY_LLAMA, "num_key_value_heads": TINY_LLAMA["num_attention_heads"]}
    model = pa.load_model(write_config(tmp_path / "mha", cfg))
    graph = build_graph(model, pa.Workload(context=40, tokens=1).resolved("bf16"))
    spec = pa.load_system("wse3").spec
    coster, w, h = RegionCoster(spec, graph), 12, 8
    c = coster.c
    serial, pending, ops, axis = 0, 0, [], 0
    for op in graph.ops_of(graph.layer_keys[1]):
        cost, axis_after = coster.op_cost(op, w, h, axis)
        serial += cost.cycles
        starts = dict(cost.collectives)
        k = 0
        while k < len(cost.parts):
            if k not in starts:
                pending += cost.parts[k][1]
                k += 1
                continue
            line = starts[k]
            assert line is not None  # only all-reduces in this layer
            while cost.parts[k][0] != "mesh_link":
                k += 1
            k += 1
            tpl = mesh._allreduce_template(line.n, line.seg, c.hop, line.two_level,
                                           line.broadcast, c.ramp)  # fmt: skip
            ops.append(grid.GridOp(line.axis, tpl, pending + c.overhead, c.overhead, line.nwav))
            pending = 0
        axis = axis_after
    assert len(ops) >= 9  # two norms, QKV, four in attention, O, gate/up, down
    whole = grid.grid_sequence(w, h, ops, c.hop, c.pass_lat, c.ramp).cycles + pending
    assert serial - 2 * len(ops) <= whole <= serial
