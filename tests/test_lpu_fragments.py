"""LPU fragment scheduler: stage programs run from a pool of op fragments, never joined.

The kernel's twins agree on random pools, the NumPy twin is the joined program's plain list
schedule, and the engine's per-step path gives each stage the cycles and link windows of the
joined program (:meth:`Program.join`) it replaces.
"""

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import kernels
from pyaccel.kernels import reference_lpu

INPUT = reference_lpu.INPUT


def i64(*values):
    return np.array(values, dtype=np.int64)


# fragment 0: instructions 0-1 (1 waits for 0); fragment 1: instruction 2, taking the previous
# fragment's output; fragment 2: instruction 3, a delay of latency 5 waiting for nothing
POOL = (i64(0, 1, 0, -1), i64(3, 3, 3, 0), i64(0, 0, 0, 5), i64(0, 0, 1, 2, 2), i64(0, INPUT),
        i64(0, 2, 3, 4), i64(1, 0, 0))  # fmt: skip


ALL_MARKED = (i64(0, 2, 3, 4), i64(0, 1, 0, 0))  # every instruction's start given back


@pytest.mark.parametrize("backend", kernels.available_backends())
def test_golden_fragment_schedule(backend):
    # program [0, 1, 2]: i0 on r0 [0,3); i1 on r1 after i0 [3,6); i2 on r0 after fragment 0's
    # output i1 (usable at 6) [6,9); i3 no resource, starts 0, usable at 5 -> 9 cycles.
    # program [2, 0]: i3 [0,0)+5; i0 [0,3); i1 [3,6) -> 6 cycles, the clock back at 0
    cycles, marked = kernels.get("lpu_fragment_schedule", backend)(
        *POOL, *ALL_MARKED, i64(0, 3, 5), i64(0, 1, 2, 2, 0), 2
    )
    assert cycles.tolist() == [9, 6]
    assert marked.tolist() == [0, 3, 6, 0, 0, 0, 3]
    # marks in any order, repeated, or none: fragment 0 marks its instruction 1 twice
    _, some = kernels.get("lpu_fragment_schedule", backend)(
        *POOL, i64(0, 2, 2, 2), i64(1, 1), i64(0, 3, 5), i64(0, 1, 2, 2, 0), 2
    )
    assert some.tolist() == [3, 3, 3, 3]


def _random_pool(rng, n_frags: int, n_res: int):
    """Fragments of 1-30 instructions, dependencies earlier in the fragment or INPUT (never
    in fragment 0, which programs may start with), 0-3 marked instructions each."""
    res, dur, lat, deps, ptr, out, marks = [], [], [], [], [0], [], []
    for f in range(n_frags):
        n = int(rng.integers(1, 30))
        for i in range(n):
            local = sorted(set(rng.integers(0, i, rng.integers(0, 3)).tolist())) if i else []
            if f and rng.random() < 0.2:
                local.append(INPUT)
            deps.append(local)
        res += rng.integers(-1, n_res, n).tolist()
        dur += rng.integers(0, 30, n).tolist()
        lat += rng.integers(0, 50, n).tolist()
        ptr.append(ptr[-1] + n)
        out.append(int(rng.integers(0, n)))
        marks.append(rng.integers(0, n, rng.integers(0, 4)).tolist())
    dep_ptr = np.r_[0, np.cumsum([len(d) for d in deps])].astype(np.int64)
    dep_idx = np.array([d for ds in deps for d in ds], dtype=np.int64)
    mark_ptr = np.r_[0, np.cumsum([len(m) for m in marks])].astype(np.int64)
    mark_idx = np.array([i for m in marks for i in m], dtype=np.int64)
    return (np.array(res, dtype=np.int64), np.array(dur, dtype=np.int64),
            np.array(lat, dtype=np.int64), dep_ptr, dep_idx, np.array(ptr, dtype=np.int64),
            np.array(out, dtype=np.int64), mark_ptr, mark_idx)  # fmt: skip


def _random_programs(rng, n_frags: int, n_programs: int):
    progs = [np.r_[0, rng.integers(0, n_frags, rng.integers(0, 12))] for _ in range(n_programs)]
    progs[0] = progs[0][:0]  # an empty program too
    seq_ptr = np.r_[0, np.cumsum([len(p) for p in progs])].astype(np.int64)
    return seq_ptr, np.concatenate(progs).astype(np.int64)


@pytest.mark.parametrize("backend", [b for b in kernels.available_backends() if b != "numpy"])
def test_fragment_schedule_twin(backend):
    rng = np.random.default_rng(11)
    fast = kernels.get("lpu_fragment_schedule", backend)
    for n_frags, n_programs in ((1, 1), (3, 4), (12, 9), (40, 25)):
        pool = _random_pool(rng, n_frags, 5)
        seq_ptr, seq = _random_programs(rng, n_frags, n_programs)
        want = reference_lpu.lpu_fragment_schedule(*pool, seq_ptr, seq, 5)
        got = fast(*pool, seq_ptr, seq, 5)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert len(want[1]) == int(np.diff(pool[7])[seq].sum())


def test_c_fragment_memo_gives_the_schedule_it_skips():
    # the C kernel memoises a fragment by the state it starts from relative to its input
    # (csrc/lpu.c): programs alike but for one "hole" fragment, repeating a pattern, reach the
    # same relative states again, so most fragments come from the memo; every cycle and
    # marked start stays the plain schedule's. Fragments with an instruction that waits for
    # nothing at all (a fixed delay from cycle 0) are never memoised, but programs hold them.
    if "c" not in kernels.available_backends():
        pytest.skip("the C kernels are not built")
    rng = np.random.default_rng(13)
    for n_res in (1, 3, 6):
        pool = _random_pool(rng, 10, n_res)
        res = pool[0].copy()
        res[res < 0] = 0  # every instruction on a resource: all fragments can be memoised
        pool = (res, *pool[1:]) if n_res != 3 else pool  # n_res 3: the pool as drawn
        body = rng.integers(1, 10, 6)
        progs = [np.r_[0, np.tile(body, 5)]]
        for hole in range(1, 10):  # the pattern with a different fragment in its middle
            progs.append(np.r_[0, np.tile(body, 2), hole, np.tile(body, 3)])
        seq_ptr = np.r_[0, np.cumsum([len(p) for p in progs])].astype(np.int64)
        seq = np.concatenate(progs).astype(np.int64)
        stats: dict = {}
        got = kernels.get("lpu_fragment_schedule", "c")(*pool, seq_ptr, seq, n_res, stats=stats)
        want = reference_lpu.lpu_fragment_schedule(*pool, seq_ptr, seq, n_res)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert stats["memo_hits"] > len(seq) // 2, (n_res, stats)


@pytest.mark.parametrize("backend", kernels.available_backends())
def test_fixed_delay_fragment_is_not_moved_with_its_input(backend):
    # fragment 0: i0 on r0 for 10 cycles; fragment 1: i1 a delay of latency 5 waiting for
    # nothing (usable at 5 wherever it sits), marked. Program [0, 1]: i0 [0,10), i1 starts 0.
    # Program [0, 0, 1]: i0 [0,10), i0 [10,20), i1 starts 0 again, although it meets r0 free
    # at its input's cycle (20 - 20 = 0, as 10 - 10 in the first program): a memo of moved
    # schedules (csrc/lpu.c) must not move it to 10.
    pool = (i64(0, -1), i64(10, 0), i64(0, 5), i64(0, 0, 0), i64(), i64(0, 1, 2), i64(0, 0))
    cycles, marked = kernels.get("lpu_fragment_schedule", backend)(
        *pool, i64(0, 0, 1), i64(0), i64(0, 2, 5), i64(0, 1, 0, 0, 1), 1
    )
    assert cycles.tolist() == [10, 20]
    assert marked.tolist() == [0, 0]


def test_fragment_schedule_twin_is_the_joined_list_schedule():
    # the NumPy twin against a join written out here: fragments copied end to end, local
    # dependencies moved by the fragment's place, INPUT taken by the previous fragment's output
    rng = np.random.default_rng(12)
    pool = _random_pool(rng, 15, 4)
    res, dur, lat, dep_ptr, dep_idx, frag_ptr, frag_out, mark_ptr, mark_idx = pool
    seq_ptr, seq = _random_programs(rng, 15, 6)
    cycles, marked = reference_lpu.lpu_fragment_schedule(*pool, seq_ptr, seq, 4)
    want = []
    for s in range(len(seq_ptr) - 1):
        rows, deps, base, prev, marks = [], [], 0, -1, []
        for f in seq[seq_ptr[s] : seq_ptr[s + 1]].tolist():
            for p in range(frag_ptr[f], frag_ptr[f + 1]):
                rows.append(p)
                deps.append([prev if d == INPUT else base + d
                             for d in dep_idx[dep_ptr[p] : dep_ptr[p + 1]].tolist()])  # fmt: skip
            marks += [base + int(i) for i in mark_idx[mark_ptr[f] : mark_ptr[f + 1]]]
            prev, base = base + int(frag_out[f]), base + int(frag_ptr[f + 1] - frag_ptr[f])
        ptr = np.r_[0, np.cumsum([len(d) for d in deps])].astype(np.int64)
        idx = np.array([d for ds in deps for d in ds], dtype=np.int64)
        one = reference_lpu.lpu_list_schedule(res[rows], dur[rows], lat[rows], ptr, idx, 4)
        ready = one + dur[rows] + lat[rows]
        assert cycles[s] == (ready.max() if len(rows) else 0)
        want += one[marks].tolist()
    assert marked.tolist() == want


def _tiny(tmp_path, layers):
    from conftest import TINY_LLAMA, write_config

    return pa.load_model(
        write_config(tmp_path / "tiny", {**TINY_LLAMA, "num_hidden_layers": layers})
    )


@pytest.mark.parametrize("backend", kernels.available_backends())
def test_pool_programs_are_the_joined_programs(tmp_path, backend):
    # every stage at several contexts (block boundaries crossed): the pool's cycles and link
    # windows are the joined program's; stages with alike fixed ops share one program
    from pyaccel.model.graph import build_graph
    from pyaccel.place import lpu as lpu_place
    from pyaccel.sim.contract import StepShape
    from pyaccel.sim.lpu.engine import LpuSim
    from pyaccel.sim.lpu.plans import filled
    from pyaccel.sim.lpu.program import Program

    model = _tiny(tmp_path, layers=10)
    work = pa.Workload(context=60, tokens=1)
    system = pa.load_system("groq-tsp", units=40, overrides=["clock_hz=1e9", "mxm_planes=1"])
    graph = build_graph(model, work)
    plc = lpu_place.build(graph, system.spec, 8, 40)
    sim = LpuSim(graph, system, plc, backend)
    windows = 0
    for ctx in (60, 64, 513, 4000, None):
        step = StepShape(graph, ctx or 100, sim.group_key)
        keys = sim._stage_keys(step)[1]()
        if ctx is None:  # attention plans one step shorter than the fixed program's holes
            keys = [
                (k[0], tuple(sim.numbers.of(sim.numbers.plans[p][:-1]) for p in k[1]), k[2])
                for k in keys
            ]
        got = sim._pool.schedule([sim._program(*k) for k in keys], backend)
        for i, (key, (cycles, wins)) in enumerate(zip(keys, got, strict=True)):
            tp = len(sim.stages[i][0])
            plans = filled(sim._fixed[i], sim._holes[i], [sim.numbers.plans[p] for p in key[1]])
            frags = [sim._frag(tp, p, j == 0) for j, p in enumerate(plans)]
            joined = Program.join(sim.chip, frags).schedule("numpy")
            assert (cycles, wins) == (joined.cycles, joined.link_windows()), (ctx, i)
            # the key's numbers (what programs_compiled counts) are its plans'
            assert sim._key_numbered(key) == (tp, sim.numbers.of_all(plans))
            windows += len(wins)
    assert windows  # collectives on the links: the windows were compared, not just empty
    assert len(sim.stages) > len(sim._shape_list) > 1  # alike stages share, the ends differ


@pytest.mark.parametrize("planes,buffers", [(1, 1), (1, 2), (4, 2), (3, 1)])
def test_gemv_fragment_is_the_compiled_gemv(planes, buffers):
    # the array-built GEMV step equals the one Program.gemv compiles, field by field
    from dataclasses import fields, replace

    from pyaccel.sim.lpu.fragments import _fragment, _gemv_fragment
    from pyaccel.sim.lpu.net import Network
    from pyaccel.sim.lpu.program import ChipModel

    system = pa.load_system("groq-tsp", units=1)
    chip = replace(ChipModel.from_params(system.spec.params), planes=planes,
                   weight_buffers=buffers)  # fmt: skip
    net = Network(system.spec.params, system.spec.clock_hz)
    for blocks in (1, 2, 3, 7, 20, 5, 150, 64, 65, 1):  # cut from longer GEMVs, and grown
        for m, first in ((1, True), (5, False), (1, False)):
            want = _fragment(chip, net, 1, (("gemv", blocks, m),), first)
            got = _gemv_fragment(chip, blocks, m, first)
            for f in fields(want):
                a, b = getattr(want, f.name), getattr(got, f.name)
                same = np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
                assert same and np.asarray(a).dtype == np.asarray(b).dtype, (f.name, blocks, m)


def test_attention_plans_over_contexts_are_each_context_s_plan(tmp_path):
    # a run's segments take their attention plans from one vectorised plan: at every context
    # it must be the plan made for that context alone (plain ints, same values)
    from pyaccel.model.graph import build_graph
    from pyaccel.place import lpu as lpu_place
    from pyaccel.sim.contract import StepShape, attention_layout
    from pyaccel.sim.lpu.engine import LpuSim
    from pyaccel.sim.lpu.plans import attention_plan, attention_plans_over, canonical, plan_at

    model = _tiny(tmp_path, layers=4)
    work = pa.Workload(context=60, tokens=1)
    system = pa.load_system("groq-tsp", units=16, overrides=["clock_hz=1e9", "mxm_planes=1"])
    graph = build_graph(model, work)
    sim = LpuSim(graph, system, lpu_place.build(graph, system.spec, 8, 16))
    layout = attention_layout(graph, sim.group_key)
    contexts = np.array([60, 61, 64, 255, 256, 257, 513, 1000, 4000, 9000])
    over = attention_plans_over(graph, sim.chip, contexts, layout)
    for i, ctx in enumerate(contexts.tolist()):
        for g in StepShape(graph, ctx, sim.group_key, layout=layout).groups():
            tp = g.key[1]
            want = tuple(canonical(sim.chip, tp, st)
                         for st in attention_plan(g.op, graph.attention, tp))  # fmt: skip
            got = plan_at(over[g.key], i)
            assert got == want and repr(got) == repr(want), ctx  # values and int types
    assert len({plan_at(over[layout[0][0]], i) for i in range(len(contexts))}) >= 3


def test_windows_read_as_the_tuple_of_their_pairs():
    # link windows made as arrays stand for the tuple of (start, end) pairs everywhere: in
    # equality and hashing (the driver's schedule memo) and in the pipeline kernel's CSR
    from pyaccel.sim.pipeline import Windows, _windows

    pairs = ((0, 5), (9, 12))
    wins = Windows(i64(0, 9), i64(5, 12))
    assert wins == pairs and pairs == wins and hash(wins) == hash(pairs)
    assert list(wins) == list(pairs) and len(wins) == 2 and wins != ((0, 5),)
    assert Windows.of_pairs(pairs) == wins and Windows.of_pairs(()) == ()
    mixed = {4: [wins, ()], 2: [((1, 2),), Windows(i64(), i64())]}
    ptr, starts, ends = _windows(mixed, [4, 2], 2)
    assert ptr.tolist() == [0, 2, 2, 3, 3]
    assert starts.tolist() == [0, 9, 1] and ends.tolist() == [5, 12, 2]


def test_networks_alike_share_transfer_schedules():
    # schedules are kept per network key across Network objects (each run makes its own):
    # an equal system gets the very schedule, a faster link its own, shorter one
    from pyaccel.sim.lpu.net import Network

    def net(sets=()):
        spec = pa.load_system("groq-tsp", units=16, overrides=list(sets)).spec
        return Network(spec.params, spec.clock_hz)

    a, b, fast = net(), net(), net(["c2c_bytes_per_s=4e11"])
    assert a is not b and a.key == b.key != fast.key
    assert a.allreduce(8, 65536, 4) is b.allreduce(8, 65536, 4)
    assert fast.allreduce(8, 65536, 4).cycles < a.allreduce(8, 65536, 4).cycles


def test_programs_compiled_counts_the_same_programs_by_either_path(tmp_path):
    # a run timed step by step with events (every step kept) and one timed at once report
    # the same distinct stage programs, and a run across KV block boundaries has more than one
    model = _tiny(tmp_path, layers=4)
    system = pa.load_system("groq-tsp", units=16, overrides=["clock_hz=1e9", "mxm_planes=1"])
    work = pa.Workload(context=300, tokens=700)
    plc = pa.place(model, system, work)
    fast = pa.emulate(model, system, plc, work)
    every = pa.emulate(model, system, plc, work, trace_steps="all")
    assert np.array_equal(fast.step_cycles, every.step_cycles)
    assert fast.meta["programs_compiled"] == every.meta["programs_compiled"] > 3


def test_chip_model_is_one_object_and_travels_without_its_hash():
    # caches key on the chip model: one object per distinct chip (found by identity), its
    # hash kept; a pickled chip (a Dask worker's) carries no hash salted by this process
    import pickle

    from pyaccel.sim.lpu.program import ChipModel

    params = pa.load_system("groq-tsp", units=1).spec.params
    chip = ChipModel.from_params(params)
    assert ChipModel.from_params(params) is chip
    hash(chip)
    assert "_hash" in vars(chip) and "_hash" not in pickle.loads(pickle.dumps(chip)).__dict__
