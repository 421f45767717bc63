"""Wafer mesh kernel: hand-derived golden cycles, and C / Numba twins equal to the NumPy one."""

import numpy as np
import pytest

from pyaccel import kernels
from pyaccel.sim.wafer.mesh import Grid, Line, Tasks, allreduce, line_allreduce, multicast

BACKENDS = kernels.available_backends()


def _run(tk: Tasks, mesh, n_pes: int, pass_lat: int, backend: str):
    return tk.run(mesh.link_lat, n_pes, pass_lat, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_flows_sharing_one_link(backend):
    # Line of 4 PEs, hop 1. Flow A: PE0 -> PE2, flow B: PE1 -> PE3, 5 wavelets each, both ready
    # at cycle 0. Both need link 1->2.
    # A: link 0->1 head enters at 0, last wavelet at 4 (free from 5); arrives at PE1 head 1,
    #    tail 5; link 1->2: head 1, last 5 (free from 6); arrives head 2, tail 6; ramp (0 lat).
    # B: link 1->2 is reserved by A until 6: head enters at 6, last at 10; arrives head 7,
    #    tail 11; link 2->3: head 7, last 11 -> PE3 head 8, tail 12.
    # Alone, B would finish at 0 + 4 + 2 hops = 6: sharing costs it A's 5 wavelets + 1.
    line, tk = Line(4, hop=1), Tasks()
    tk.add(0, 0, False, 5, [], line.path(0, 2))
    tk.add(1, 0, False, 5, [], line.path(1, 3))
    res = _run(tk, line, 4, 0, backend)
    assert res.head.tolist() == [2, 8]
    assert res.tail.tolist() == [6, 12]
    assert res.link_busy[2] == 10  # link 1->2 carried both messages
    alone = Tasks()
    alone.add(1, 0, False, 5, [], line.path(1, 3))
    assert _run(alone, line, 4, 0, backend).tail.tolist() == [6]


@pytest.mark.parametrize("backend", BACKENDS)
def test_4x4_broadcast_then_two_level_reduction(backend):
    # 4x4 grid, hop 1, add latency 1, 2 wavelets per message, 5 cycles of compute per PE.
    g, tk = Grid(4, 4, hop=1), Tasks()
    n, compute = 2, 5
    # Broadcast: PE(0,0) sends after 20 cycles of start overhead; routers multicast it east
    # along row 0 and south down every column (XY). Head reaches (x, y) at 20 + x + y, the last
    # of its 2 wavelets one cycle later.
    arrive = {(0, 0): tk.add(g.pe(0, 0), 20, False, 0)}
    for x in range(4):
        if x:
            arrive[(x, 0)] = tk.add(-1, 0, False, n, [arrive[(x - 1, 0)]], [g.link(x - 1, 0, g.E)])
        for y in range(1, 4):
            arrive[(x, y)] = tk.add(-1, 0, False, n, [arrive[(x, y - 1)]], [g.link(x, y - 1, g.S)])
    # Every PE computes its partial sum once the whole vector is there: done at
    # 21 + x + y + 5 = 26 + x + y (the root, which sent it, at 20 + 5 = 25).
    part = {xy: tk.add(g.pe(*xy), compute, False, 0, [t]) for xy, t in arrive.items()}
    # Level 1: each row streams its partials west into column 0 (PE3 -> PE2 -> PE1 -> PE0):
    #   (3,y) sends when its part is done, at 29+y -> arrives at (2,y) head 30+y, tail 31+y;
    #   (2,y) adds and forwards one cycle after the head: starts 31+y -> (1,y) at 32+y / 33+y;
    #   (1,y) starts 33+y -> (0,y) head 34+y, tail 35+y.
    row_in = {}
    for y in range(4):
        prev = tk.add(g.pe(3, y), 0, False, n, [part[(3, y)]], g.path((3, y), (2, y)))
        for x in (2, 1):
            prev = tk.add(g.pe(x, y), 0, True, n, [prev], g.path((x, y), (x - 1, y)))
        row_in[y] = prev
    # Level 2: column 0 streams north into (0,0), each PE adding its row's stream:
    #   (0,3) starts at max(its part 29, row head 37 + 1) = 38 -> (0,2) head 39, tail 40;
    #   (0,2) starts at 39 + 1 = 40 -> (0,1) head 41, tail 42;
    #   (0,1) starts at 42 -> (0,0) head 43, tail 44 (ramps free: the row streams left them
    #   at 38, 37, 36); the root adds both streams: head 43 + 1 = 44, last wavelet 44 + 1 = 45.
    prev = None
    for y in (3, 2, 1):
        deps = [row_in[y]] + ([] if prev is None else [prev])
        prev = tk.add(g.pe(0, y), 0, True, n, deps, g.path((0, y), (0, y - 1)))
    root = tk.add(g.pe(0, 0), 0, True, 0, [row_in[0], prev])
    res = _run(tk, g, 16, 1, backend)
    tails = {xy: int(res.tail[t]) for xy, t in arrive.items()}
    assert all(tails[(x, y)] == 21 + x + y for x, y in tails if (x, y) != (0, 0))
    assert max(tails.values()) == 27  # broadcast done at (3,3): 20 + 6 hops + 1 wavelet
    assert [int(res.tail[part[(x, 2)]]) for x in range(4)] == [28, 29, 30, 31]
    assert [int(res.tail[row_in[y]]) for y in range(4)] == [35, 36, 37, 38]
    assert int(res.head[root]) == 44 and int(res.tail[root]) == 45
    assert res.cycles == 45


@pytest.mark.parametrize("backend", BACKENDS)
def test_line_allreduce_two_groups_by_hand(backend):
    # WaferLLM two-level all-reduce on 4 PEs, 2 groups [0,1] and [2,3] (roots 1 and 3),
    # 10 wavelets, every PE ready after 50 cycles, start overhead 20, hop 1, add latency 1:
    #  PE0 -> PE1: head 51, tail 60.   PE2 -> PE3: head 51, tail 60 (ramp of PE3 busy to 61).
    #  root 1 -> root 3 (streaming, 2 hops): starts at max(50, 51 + 1) = 52, but link 2->3 is
    #  reserved by PE2's message until 60: enters it at 60, tail 69; arrives head 61, tail 70.
    #  root 3 adds: head max(50, 61 + 1) = 62, tail 70 + 1 = 71.
    #  Multicast back from PE3: starts at 62 + 20 = 82; PE0 gets the last wavelet at
    #  82 + 3 hops + 9 = 94.
    cycles, busy, messages = line_allreduce(4, 4, 10, 50, 20, 1, 1, True)
    assert cycles == 94
    assert messages == 3 + 3  # two chain messages, one root-to-root, three multicast hops
    line, tk = Line(4, 1), Tasks()
    allreduce(tk, line, 0, 4, 10, 50, 20, 2)
    assert _run(tk, line, 4, 1, backend).cycles == 94


def _random_tasks(rng, n_tasks: int, w: int, h: int):
    g, tk = Grid(w, h, hop=int(rng.integers(1, 3))), Tasks()
    for i in range(n_tasks):
        deps = sorted(set(rng.integers(0, i, size=rng.integers(0, 3)).tolist())) if i else []
        src = (int(rng.integers(0, w)), int(rng.integers(0, h)))
        dst = (int(rng.integers(0, w)), int(rng.integers(0, h)))
        kind = rng.integers(0, 4)
        if kind == 0:  # local task
            tk.add(g.pe(*src), int(rng.integers(0, 30)), bool(rng.integers(0, 2)), 0, deps)
        elif kind == 1 and deps:  # router forward
            tk.add(-1, 0, False, int(rng.integers(1, 9)), deps, g.route(src, dst) or [0])
        else:
            tk.add(g.pe(*src), int(rng.integers(0, 30)), bool(rng.integers(0, 2)),
                   int(rng.integers(1, 9)), deps, g.path(src, dst))  # fmt: skip
    return g, tk


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "numpy"])
def test_fast_kernels_match_the_numpy_twin(backend):
    rng = np.random.default_rng(11)
    for case in range(25):
        g, tk = _random_tasks(rng, int(rng.integers(1, 120)), 5, 4)
        ref = _run(tk, g, 20, case % 3, "numpy")
        fast = _run(tk, g, 20, case % 3, backend)
        assert fast.head.tolist() == ref.head.tolist()
        assert fast.tail.tolist() == ref.tail.tolist()
        assert fast.link_busy.tolist() == ref.link_busy.tolist()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "numpy"])
def test_collectives_match_the_twin(backend):
    line = Line(37, 1)
    tk = Tasks()
    allreduce(tk, line, 0, 37, 7, 13, 20, 6)
    multicast(tk, line, 5, 0, 37, 3, 20, [len(tk) - 1])
    ref, fast = _run(tk, line, 37, 1, "numpy"), _run(tk, line, 37, 1, backend)
    assert fast.tail.tolist() == ref.tail.tolist()
    assert fast.link_busy.tolist() == ref.link_busy.tolist()


def test_empty_task_list():
    for backend in BACKENDS:
        res = Tasks().run(np.zeros(3, dtype=np.int64), 2, 1, backend)
        assert res.cycles == 0 and res.link_busy.tolist() == [0, 0, 0]


@pytest.mark.parametrize("two_level,broadcast", [(True, True), (False, True), (True, False)])
def test_collective_templates_match_a_list_built_with_the_numbers(two_level, broadcast):
    # line_allreduce fills a cached task-list template; building the list with the call's own
    # numbers must give the same cycles, link use and message count
    from pyaccel.sim.wafer.mesh import _line_busy, tree_groups

    for n, seg, nwav, setup, overhead, hop, pass_lat in [
        (37, 37, 3, 50, 20, 1, 1), (64, 16, 1, 0, 0, 2, 0), (30, 7, 5, 11, 4, 1, 3),
    ]:  # fmt: skip
        line, tk = Line(n, hop), Tasks()
        for lo in range(0, n, seg):
            hi = min(n, lo + seg)
            g = tree_groups(hi - lo) if two_level else 1
            allreduce(tk, line, lo, hi, nwav, setup, overhead, g, broadcast)
        res = tk.run(line.link_lat, n, pass_lat)
        cycles, busy, msgs = line_allreduce(
            n, seg, nwav, setup, overhead, hop, pass_lat, two_level, broadcast
        )
        assert cycles == res.cycles and msgs == tk.n_messages
        np.testing.assert_array_equal(busy, _line_busy(res.link_busy, n))


def test_cached_collectives_hand_out_read_only_values():
    # every caller of a cached collective shares its arrays: writing into one must raise rather
    # than change what the next caller (another op, another candidate) is told
    from pyaccel.sim.wafer.flows import line_flows
    from pyaccel.sim.wafer.mesh import _allreduce_template, line_multicast

    values = [
        line_allreduce(12, 4, 2, 5, 3, 1, 1, True)[1],
        line_multicast(9, 4, 2, 5, 3, 1, 2)[1],
        line_flows(6, ((0, 3), (5, 1)), 2, 4, 1)[1],
    ]
    tpl = _allreduce_template(12, 4, 1, True, True)
    values += [tpl.link_lat, *tpl.arrays.values()]
    for arr in values:
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1
    with pytest.raises(TypeError):
        tpl.arrays["pe"] = np.zeros(1, dtype=np.int64)
    again = line_allreduce(12, 4, 2, 5, 3, 1, 1, True)
    assert again[1] is values[0]  # the cached object itself, still as computed
    for backend in BACKENDS:  # kernels take the read-only arrays without a copy
        assert tpl.run(5, 3, 2, 1, backend).cycles == again[0]


def test_flow_arrays_are_the_task_list_of_the_flows():
    # line_flows builds its kernel arrays with NumPy: they must be those Tasks builds flow by
    # flow (both directions, neighbours, a PE to itself, the line's ends)
    from pyaccel.sim.wafer.flows import flow_arrays, line_flows

    n = 11
    flows = ((0, 10), (10, 0), (3, 4), (4, 3), (5, 5), (7, 2), (1, 9), (9, 8))
    line, tk = Line(n, 2), Tasks()
    for src, dst in flows:
        tk.add(src, 7, False, 3, [], line.path(src, dst))
    want, got = tk.arrays(), flow_arrays(n, flows, 3, 7)
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        assert got[key].dtype == np.int64
    res = tk.run(line.link_lat, n, 0)
    cycles, busy, msgs = line_flows(n, flows, 3, 7, 2)
    assert cycles == res.cycles and msgs == tk.n_messages == len(flows)
    with pytest.raises(ValueError, match="at least one wavelet"):
        flow_arrays(n, flows, 0, 7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ramp_latency_by_hand(backend):
    # Line of 3 PEs, hop 1, ramps of 2 cycles each way, add latency 1, 1 wavelet.
    # PE0 sends at 0: out of PE0 +2, hop +1, into PE1 +2: arrives at 5.
    # PE1 streams (adds its own, forwards): starts at 5 + 1 = 6; out +2, hop +1, in +2: 11.
    # A chain stage costs 2 ramps + a hop + the add: 6 cycles (Luczynski et al.'s 2 T_R + 1,
    # plus the add latency this model keeps apart).
    line, tk = Line(3, hop=1, ramp=2), Tasks()
    first = tk.add(0, 0, True, 1, [], line.path(0, 1))
    tk.add(1, 0, True, 1, [first], line.path(1, 2))
    res = tk.run(line.link_lat, 3, 1, backend)
    assert res.head.tolist() == [5, 11]
    # A multicast from PE1 (2 wavelets, setup 3): out of PE1 head 5 (last 6); router copies
    # each way, one hop to PE0's and PE2's routers (head 6), then into the PEs: head 8, last 9.
    tk = Tasks()
    done = multicast(tk, line, 1, 0, 3, 2, 3)
    res = tk.run(line.link_lat, 3, 1, backend)
    assert [int(res.tail[done[j]]) for j in (0, 2)] == [9, 9]
    assert int(res.tail[done[1]]) == 3  # the root is free once it has started sending


needs_c_builders = pytest.mark.skipif(
    kernels.compiled("allreduce_tasks") is None, reason="the C module's task builders are not built"
)


@needs_c_builders
@pytest.mark.parametrize("n", [*range(1, 26), 64, 241, 755])
def test_c_task_builders_give_the_tasks_builders_lists(n, monkeypatch):
    # the C builders must write exactly the task list (order, slots, dependencies, paths, the
    # task each PE waits for, messages) that the readable Tasks builders make
    from pyaccel.kernels import ffi_mesh
    from pyaccel.sim.wafer.mesh import _allreduce_template, _multicast_template

    monkeypatch.setenv("PYACCEL_BACKEND", "numpy")  # the readable builders
    assert kernels.compiled("allreduce_tasks") is None
    for seg in sorted({1, 2, 3, 7, max(1, n // 3), n}):
        for two_level in (False, True):
            for broadcast in (False, True):
                want = _allreduce_template.__wrapped__(n, seg, 1, two_level, broadcast)
                got, arrive, messages = ffi_mesh.allreduce_tasks(n, seg, two_level, broadcast)
                assert got.keys() == want.arrays.keys()
                for k, v in got.items():
                    np.testing.assert_array_equal(v, want.arrays[k], err_msg=k)
                np.testing.assert_array_equal(arrive, want.arrive)
                assert messages == want.n_messages
    for root in sorted({0, n // 2, n - 1}):
        for lead in (0, 1, 6):
            want = _multicast_template.__wrapped__(n, root, 1, lead, 0)
            got, messages = ffi_mesh.multicast_tasks(n, root, lead)
            for k, v in got.items():
                np.testing.assert_array_equal(v, want.arrays[k], err_msg=k)
            assert messages == want.n_messages


@needs_c_builders
def test_c_task_builders_refuse_bad_lines():
    from pyaccel.kernels import ffi_mesh

    with pytest.raises(ValueError, match="segments of 0"):
        ffi_mesh.allreduce_tasks(4, 0, True, True)
    with pytest.raises(ValueError, match="root 4"):
        ffi_mesh.multicast_tasks(4, 4, 0)


@pytest.mark.parametrize("two_level,broadcast", [(True, True), (False, True), (True, False)])
def test_more_setup_only_delays_an_allreduce(two_level, broadcast):
    # line_allreduce simulates one setup per shape and moves it: each case against the list
    # simulated with its own setup (cycles, link use and messages)
    from pyaccel.sim.wafer.mesh import _allreduce_template, _line_busy

    rng = np.random.default_rng(2)
    shapes = [(1, 1, 1, 0, 0), (2, 2, 1, 1, 0), (37, 37, 2, 1, 1), (30, 7, 1, 3, 2),
              (64, 16, 2, 0, 0), (9, 1, 1, 2, 1)]  # fmt: skip
    for n, seg, hop, pass_lat, ramp in shapes:
        tpl = _allreduce_template(n, seg, hop, two_level, broadcast, ramp)
        assert tpl.setup_shifts
        for setup, overhead, nwav in rng.integers(1, 400, (4, 3)).tolist():
            res = tpl.run(setup, overhead, nwav, pass_lat)
            got = line_allreduce(n, seg, nwav, setup, overhead, hop, pass_lat, two_level,
                                 broadcast, ramp)  # fmt: skip
            assert got[0] == res.cycles and got[2] == tpl.n_messages
            np.testing.assert_array_equal(got[1], _line_busy(res.link_busy, n))


def test_setup_that_waits_for_data_is_not_a_shift():
    from pyaccel.sim.wafer.mesh import SETUP_SLOT, Template

    line = Line(2, 1)
    for stream, shifts in ((True, True), (False, False)):
        tk = Tasks()
        first = tk.add(0, SETUP_SLOT, True, 2, [], line.path(0, 1))
        tk.add(1, SETUP_SLOT, stream, 0, [first])  # store and forward: setup after the data
        assert Template.of(tk, line.link_lat, 2).setup_shifts is shifts
    tk = Tasks()
    tk.add(0, 0, False, 2, [], line.path(0, 1))  # a task with no setup slot and no data to wait
    assert not Template.of(tk, line.link_lat, 2).setup_shifts
