"""LPU engine: hand-derived golden schedules, kernel twins, placement and invariants."""

import numpy as np
import pytest

import pyaccel as pa
from pyaccel import kernels
from pyaccel.errors import PlacementError
from pyaccel.kernels import reference_lpu
from pyaccel.sim.lpu import engine as lpu_engine
from pyaccel.sim.lpu.net import Network
from pyaccel.sim.lpu.program import ChipModel, Program
from pyaccel.sim.lpu.transfers import Builder, schedule

# Round numbers: a 1 GHz clock, 1-byte MXM operands (320x320 blocks of 102,400 weights installed
# over 16 streams of 320 B: 20 cycles a block), one MXM plane, MXM latency 100 cycles; stream
# transit = 88 slices / 2 + 20 superlanes = 64 cycles.
ROUND = [
    "clock_hz=1e9",
    "mxm_operand_bytes=1",
    "mxm_planes=1",
    "mxm_latency_cycles=100",
    "c2c_latency_s=6e-7",
]


def _system(units=1, sets=ROUND):
    return pa.load_system("groq-tsp", units=units, overrides=sets)


def _tiny(tmp_path, layers=2):
    from conftest import TINY_LLAMA, write_config

    return pa.load_model(
        write_config(tmp_path / "tiny", {**TINY_LLAMA, "num_hidden_layers": layers})
    )


def test_golden_mem_mxm_conflict_one_chip():
    # One plane, 4 blocks, a batch of 30 vectors per block (30 MXM cycles each):
    #   install0 [0,20)   compute0 [20,50)
    #   install1 [20,40)  compute1 [50,80)   (the MXM is busy with block 0 until 50)
    #   install2 waits for compute0 to free its weight buffer (double buffering): [50,70)
    #   compute2 [80,110); install3 waits for compute1 (80): [80,100); compute3 [110,140)
    # result usable at 140 + MXM latency 100 + transit 64 = 304.
    chip = ChipModel.from_params(_system().spec.params)
    assert (chip.install_cycles, chip.transit, chip.planes) == (20, 64, 1)
    prog = Program(chip)
    prog.begin_op(0, "gemv", "gemv")
    prog.gemv(4, 30, None)
    sch = prog.schedule()
    assert sch.start.tolist()[:8] == [0, 20, 20, 50, 50, 80, 80, 110]
    assert sch.cycles == 304


def test_golden_gemv_install_bound_at_batch_one():
    # Same chip, 3 blocks, one vector each: installs back to back on the streams [0,20) [20,40)
    # [40,60); computes [20,21) [40,41) [60,61); done 61 + 164 = 225.
    chip = ChipModel.from_params(_system().spec.params)
    prog = Program(chip)
    prog.begin_op(0, "gemv", "gemv")
    prog.gemv(3, 1, None)
    assert prog.schedule().cycles == 225


def test_golden_routed_expert_gemv_feeds_each_block_its_experts_rows():
    # Same chip, two routed experts of 2 blocks each, serving 3 and 1 (row, expert) pairs:
    #   install0 [0,20)   compute0 [20,23)     (expert 0: 3 vectors)
    #   install1 [20,40)  compute1 [40,43)
    #   install2 [40,60)  compute2 [60,61)     (expert 1: 1 vector; block 0's buffer freed at 23)
    #   install3 [60,80)  compute3 [80,81)
    # done 81 + 164 = 245; the MXM computes 2 x 3 + 2 x 1 = 8 cycles, not 4 blocks x 4 pairs.
    chip = ChipModel.from_params(_system().spec.params)
    prog = Program(chip)
    prog.begin_op(0, "experts", "experts")
    prog.xgemv(2, (3, 1), None)
    sch = prog.schedule()
    assert sch.start.tolist()[:8] == [0, 20, 20, 40, 40, 60, 60, 80]
    mxm = [d for d, r in zip(prog.dur, prog.res, strict=True) if r == prog.r_mxm(0)]
    assert mxm == [3, 3, 1, 1]
    assert sch.cycles == 245


def test_expert_rows_by_hand():
    from pyaccel.sim.lpu.plans import expert_rows

    assert expert_rows(10, 3) == (4, 3, 3)  # no busiest known: as even as whole rows allow
    assert expert_rows(10, 3, hot=5) == (5, 3, 2)  # the busiest, then the rest evenly
    assert expert_rows(10, 3, hot=3) == (4, 3, 3)  # a busiest below the even share: even
    assert expert_rows(10, 3, hot=9) == (8, 1, 1)  # the others keep one pair each
    assert expert_rows(2, 5) == (1, 1)  # no more experts than pairs
    assert sum(expert_rows(8192, 128, hot=90)) == 8192


def test_golden_two_hop_c2c_transfer():
    # 7,000 B from a chip of one node to a chip of the next node over a global port, relayed to a
    # second chip of that node over a local link (cut-through).
    # Global port: (16 - 2 x 7) links x 14 GB/s / 4 ports = 7 GB/s = 7 B/cycle; local pair:
    # 2 links = 28 B/cycle; hop latency 600 cycles.
    #   hop 1: [0, 1000), arrives 1,600
    #   hop 2: may start once the first vector has arrived: ceil(320 / 7) = 46 + 600 = 646; its
    #          250 cycles would end at 896, but it cannot end before its input has fully arrived
    #          (1,600); arrives 1,600 + 600 = 2,200.
    net = Network(_system().spec.params, 1e9)
    hop = net.stage_hop(1, 2, 7000, False)
    assert hop.cycles == 2200
    assert hop.n_transfers == 2
    # With zero hop latency: hop 1 arrives at 1,000; hop 2 starts at 46, cannot end before
    # 1,000, arrives 1,000. So the links' latency adds 2,200 - 1,000 = 1,200 = two hops of 600
    # (the trace's c2c_latency).
    assert hop.latency_cycles == 1200


def test_golden_link_kernel_two_hops_equal_links():
    # 14,000 B at 14 B/cycle, 600-cycle hops: hop 1 [0,1000) arrives 1,600; hop 2 starts at
    # 0 + ceil(320/14) = 23 + 600 = 623, ends max(623 + 1000, 1600) = 1,623, arrives 2,223.
    b = Builder()
    a, c = b.new_link(14.0, 600), b.new_link(14.0, 600)
    first = b.send(a, 14000, 0)
    b.send(c, 14000, 1, [first], cut=True)
    for backend in kernels.available_backends():
        if backend == "c":
            continue
        start, end, arrive = schedule(b.build(), 320, backend)
        assert start.tolist() == [0, 623]
        assert arrive.tolist() == [1600, 2223]


def _random_program(rng, n, n_res):
    res = rng.integers(-1, n_res, n)
    dur = rng.integers(0, 30, n)
    lat = rng.integers(0, 50, n)
    deps = [sorted(set(rng.integers(0, i, rng.integers(0, 4)).tolist())) if i else []
            for i in range(n)]  # fmt: skip
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(d) for d in deps])
    idx = np.array([j for d in deps for j in d], dtype=np.int64)
    return res, dur, lat, ptr, idx


@pytest.mark.parametrize("backend", [b for b in kernels.available_backends() if b != "numpy"])
def test_list_schedule_twin(backend):
    rng = np.random.default_rng(3)
    fast = kernels.get("lpu_list_schedule", backend)
    for n in (0, 1, 7, 60, 400):
        args = _random_program(rng, n, 5)
        ref = reference_lpu.lpu_list_schedule(*args, 5)
        assert np.array_equal(fast(*args, 5), ref)


@pytest.mark.parametrize("backend", [b for b in kernels.available_backends() if b != "numpy"])
def test_link_schedule_twin(backend):
    rng = np.random.default_rng(5)
    fast = kernels.get("lpu_link_schedule", backend)
    for n in (1, 9, 80, 300):
        _, _, _, ptr, idx = _random_program(rng, n, 1)
        link = rng.integers(0, 6, n)
        nbytes = rng.integers(1, 20000, n)
        cut = rng.random(n) < 0.5
        bpc = rng.uniform(1.0, 40.0, 6)
        lat = rng.integers(0, 700, 6)
        ref = reference_lpu.lpu_link_schedule(link, nbytes, cut, ptr, idx, bpc, lat, 320)
        got = fast(link, nbytes, cut, ptr, idx, bpc, lat, 320)
        for r, g in zip(ref, got, strict=True):
            assert np.array_equal(np.asarray(g), r)


def _run(model, units, work, sets=ROUND, tp=None):
    """Emulate ``model`` on ``units`` chips: the placer's fastest layout, or with ``tp`` the
    layout of ``tp``-wide stages over all the chips."""
    sysm = _system(units, sets)
    return pa.emulate(model, sysm, _layout(model, sysm, work, tp), work)


def _layout(model, sysm, work, tp=None):
    """The placer's fastest layout on ``sysm``'s chips, or ``tp``-wide stages over them all."""
    if tp is None:
        return pa.place(model, sysm, work)
    from pyaccel.model.graph import build_graph
    from pyaccel.place import lpu as lpu_place

    return lpu_place.build(build_graph(model, work), sysm.spec, tp, int(sysm.units))


def test_chips_of_a_stage_run_one_program(tmp_path):
    """A stage's chips run the same program on their shards (SPMD), so each chip of a stage has
    the same spans -- op, class, start, duration -- whatever its rank; only the bytes it sends
    over C2C may differ. Every class of the engine's own list, and every chip, shows up."""
    work = pa.Workload(context=64, tokens=3)
    tr = _run(_tiny(tmp_path), 8, work, tp=8)
    ev = tr.events
    assert set(ev["resource"].tolist()) <= set(tr.resource_classes)
    assert {"lpu_mem", "lpu_mxm", "lpu_vxm", "lpu_sxm", "c2c_link"} <= set(ev["resource"])
    assert set(ev["unit"].tolist()) == set(range(8))
    step0 = ev["step"] == 0
    spans = {}
    for unit in range(8):
        sel = step0 & (ev["unit"] == unit) & (ev["kind"] != "stage_hop")
        spans[unit] = sorted(zip(ev["op"][sel], ev["resource"][sel], ev["start"][sel].tolist(),
                                 ev["duration"][sel].tolist(), strict=True))  # fmt: skip
    plc = _layout(_tiny(tmp_path), _system(8), work, tp=8)
    assert max(len(s.units) for s in plc.layers) > 1  # tensor-parallel stages to compare
    for s in plc.layers:
        first = s.units[0]
        assert all(spans[u] == spans[first] for u in s.units), s.layer
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()


@pytest.mark.parametrize(
    "slower",
    [["c2c_bytes_per_s=7e9"], ["c2c_latency_s=1.2e-6"], ["local_links_per_peer=1"],
     ["c2c_bytes_per_s=1e9", "c2c_latency_s=5e-6"]],
)  # fmt: skip
def test_slower_links_never_speed_a_step(tmp_path, slower):
    # the schedule is static-order (max-plus), so this holds exactly, step by step
    work = pa.Workload(context=200, tokens=3)
    model = _tiny(tmp_path, layers=4)
    sets = ["sram_bytes=60000"]  # several stages, so hops between nodes happen too
    base = _run(model, 24, work, sets, tp=8)
    slow = _run(model, 24, work, sets + slower, tp=8)
    assert base.meta["stages"] > 1
    assert (slow.step_cycles >= base.step_cycles).all()


def test_more_chips_never_lose_capacity(tmp_path):
    model = _tiny(tmp_path, layers=4)
    work = pa.Workload(context=64, tokens=1)
    sets = ["sram_bytes=40000"]
    first = pa.place(model, pa.load_system("groq-tsp", "auto", sets), work).n_units
    for units in range(first, first + 40):
        plc = pa.place(model, pa.load_system("groq-tsp", units, sets), work)
        assert not plc.shortfalls()


def test_too_few_chips_names_chip_and_fit(tmp_path):
    model = _tiny(tmp_path, layers=4)
    work = pa.Workload(context=64, tokens=1)
    sets = ["sram_bytes=40000"]
    with pytest.raises(PlacementError, match=r"unit \d+ is short of .*; units=\d+ would fit"):
        pa.place(model, pa.load_system("groq-tsp", 2, sets), work)


def test_llama2_70b_auto_placement_in_range():
    model = pa.load_model("llama-2-70b")
    work = pa.Workload(context=4096, weights="int8")
    plc = pa.place(model, pa.load_system("groq-tsp", "auto"), work)
    from pyaccel.model.graph import build_graph

    g = build_graph(model, work, native_format="int8")
    need = g.total_resident_weight_bytes + g.total_resident_kv_bytes
    floor = -(-need // (220 * 2**20))
    assert plc.n_units >= 299
    assert floor <= plc.n_units <= 1.2 * floor
    assert "fewest" in plc.reason
    assert plc.layers[5].region.mem_slices[1] < 88


def test_what_if_runs_every_class(tmp_path):
    work = pa.Workload(context=64, tokens=2)
    model, sysm = _tiny(tmp_path), _system(8, ROUND)
    plc = pa.place(model, sysm, work)
    tr = pa.emulate(model, sysm, plc, work)
    rep = pa.Report.from_trace(tr, pa.what_if_gains(model, sysm, plc, work, tr.step_time_s))
    assert {r.resource for r in rep.what_if} == set(tr.resource_classes)
    assert all(r.gain >= 1.0 - 1e-12 for r in rep.what_if)


def _llama2_70b(units, sets=()):
    model = pa.load_model("llama-2-70b")
    system = pa.load_system("groq-tsp", units=units, overrides=list(sets))
    work = pa.Workload(context=4096, tokens=2, weights="int8")
    return pa.emulate(model, system, pa.place(model, system, work), work)


def test_llama2_70b_576_chips_misses_the_published_speed_as_documented():
    # Published ~300 tok/s (bench/published.csv, "served under load") is a check, never an input.
    # From mechanisms alone the fastest layout on 576 chips runs faster than x1.5 of it (issue 16
    # stays open on this): the note's sensitivity table finds no single named unknown whose range
    # reaches 450. The row must stay within x2.2 (the field's worst miss the brief names) and the
    # emulated speed must respect its own lower bound.
    tr = _llama2_70b(576)
    assert 300 * 1.5 < tr.tokens_per_s_per_user <= 300 * 2.2
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()


def test_more_chips_never_run_slower():
    # the placer seeks speed on the chips it is given (it may leave some idle), so a larger
    # count can always do what a smaller one did (issue 16)
    speeds = [_llama2_70b(units).tokens_per_s_per_user for units in (328, 448, 576)]
    assert speeds == sorted(speeds), speeds


def test_speed_search_names_every_layout_it_timed(tmp_path):
    model = _tiny(tmp_path, layers=4)
    work = pa.Workload(context=64, tokens=1)
    plc = pa.place(model, _system(8, ROUND + ["sram_bytes=60000"]), work)
    timed = plc.reason.split("one step each: ")[1].split("; kept")[0].split("; ")
    assert len(timed) > 1 and all(t.startswith("TP ") and t.endswith(" cycles") for t in timed)
    cycles = {t.split(":")[0]: int(t.split(": ")[1].split()[0].replace(",", "")) for t in timed}
    kept = f"TP {plc.layout.tp} x {plc.layout.pp}"
    assert cycles[kept] == min(cycles.values())


def test_per_link_bytes_match_transfers(tmp_path):
    # tiny llama on 2 stages of 8 chips: every chip's link-slot bytes add up to what it sent,
    # and each all-reduce (one-shot at this size) uses all 7 node-peer links of every chip
    work = pa.Workload(context=64, tokens=1)
    tr = _run(_tiny(tmp_path, layers=4), 16, work, ROUND + ["sram_bytes=60000"], tp=8)
    links, sent = tr.arrays["c2c_bytes_per_chip_link"], tr.arrays["c2c_bytes_sent_per_chip"]
    assert links.shape[1] == 7 + 4
    assert np.array_equal(links.sum(axis=1), sent)
    assert (links[:, :7] > 0).all()


def _sim(model, units, work, sets=ROUND, tp=8):
    from pyaccel.model.graph import build_graph
    from pyaccel.sim.lpu.engine import LpuSim

    sysm = _system(units, sets)
    plc = _layout(model, sysm, work, tp)
    graph = build_graph(model, work)
    return graph, LpuSim(graph, sysm, plc)


def test_joined_fragments_are_the_directly_compiled_program(tmp_path):
    # each op compiled once on its own and joined must give the same instructions, in the same
    # order, with the same dependencies, as compiling the stage's ops one after another
    from pyaccel.sim.lpu.fragments import _compile
    from pyaccel.sim.lpu.program import kind_codes

    graph, sim = _sim(_tiny(tmp_path, layers=3), 16, pa.Workload(context=300, tokens=1))
    assert len(sim.stages) > 1
    for i, (chips, _) in enumerate(sim.stages):
        plans, _ = sim.stage_plans(graph, i)
        tp = len(chips)
        direct = _compile(sim.chip, sim.net, tp, plans)
        joined = Program.join(sim.chip, [sim._frag(tp, p, j == 0) for j, p in enumerate(plans)])
        for a, b in zip(direct.arrays(), joined.arrays(), strict=True):
            assert np.array_equal(a, b)
        assert np.array_equal(kind_codes(direct.kind), joined.kind_code)  # kinds, as codes
        assert np.array_equal(np.asarray(direct.op), joined.op)
        assert np.array_equal(np.asarray(direct.nbytes), joined.nbytes)
        assert direct.collectives.keys() == joined.collectives.keys()
        sd, sj = direct.schedule(), joined.schedule()
        assert sd.cycles == sj.cycles and np.array_equal(sd.start, sj.start)
        assert sd.op_events() == sj.op_events()


def test_stage_cycles_at_any_context_match_a_graph_rebuilt_there(tmp_path):
    # the per-step path re-plans attention only and remembers the last step: in any order of
    # contexts (across block boundaries, and back) it must give what a rebuilt graph gives
    from pyaccel.model.graph import build_graph

    model = _tiny(tmp_path, layers=3)
    work = pa.Workload(context=60, tokens=1)
    _, sim = _sim(model, 16, work)
    _, fresh = _sim(model, 16, work)
    from pyaccel.sim.contract import StepShape

    def at(ctx):
        return sim.stage_cycles_at(StepShape(sim.graph, ctx, sim.group_key))

    for ctx in (60, 61, 64, 200, 513, 200, 60, 8000, 8000):
        want, _ = fresh.stage_cycles(build_graph(model, work, ctx))
        assert at(ctx) == want, ctx
    assert at(60) != at(8000)  # attention did change


def test_collective_books_latency_link_and_transit_apart():
    """A 2-chip all-reduce of 7,000 B in one op: the trace books the links' hop latency
    (c2c_latency, the schedule re-run without it), the on-chip stream transit to the C2C ports
    and back (fixed_latency: 2 x 64 cycles) and the rest as link serialisation (c2c_link);
    together they are the op's whole time. Beside them (lpu.collective_on_chip) the chip's
    streams carry its 22 sent vectors (7,000 / 320, rounded up), 32 a cycle: one cycle of
    lpu_mem; and its VXM sums the two partials when the schedule has them (2 x 10 cycles,
    then the VXM pass latency of 8 ends the schedule)."""
    p = _system().spec.params
    chip, net = ChipModel.from_params(p), Network(p, 1e9)
    assert chip.transit == 64
    coll = net.allreduce(2, 7000, 10)
    prog = Program(chip)
    prog.begin_op(None, "ar", "allreduce")
    prog.collective(coll, None)
    spans = {res: d for _, res, _, d, _ in prog.schedule().op_events()}
    assert spans["c2c_latency"] == coll.latency_cycles > 0
    assert spans["fixed_latency"] == 2 * 64
    assert spans["c2c_link"] == coll.cycles - coll.latency_cycles
    on_links = ("c2c_latency", "fixed_latency", "c2c_link")
    assert sum(spans[k] for k in on_links) == coll.cycles + 2 * 64
    assert (coll.send_vectors, spans["lpu_mem"]) == (22, 1)
    assert coll.vxm_busy == ((coll.cycles - 28, coll.cycles - 8),) and spans["lpu_vxm"] == 20


def test_golden_a_collective_waits_for_the_vxm_it_sums_on():
    """lpu.collective_on_chip: the same all-reduce (878 cycles: its VXM sums the partials for
    20 cycles, then 8 of pass latency), issued beside a 1,000-cycle VXM pass listed first.
    Alone it is ready at 878 + 2 x 64 = 1,006: its sent vectors take the streams [0, 1), its
    sums would take the VXM at 64 + 850 = 914. The VXM is busy until 1,000, so the sums run
    [1000, 1020) and the collective is ready 8 + 64 cycles (the pass latency and the transit
    back) later: 1,092."""
    p = _system().spec.params
    chip, net = ChipModel.from_params(p), Network(p, 1e9)
    coll = net.allreduce(2, 7000, 10)
    alone = Program(chip)
    alone.begin_op(None, "ar", "allreduce")
    out = alone.collective(coll, None)
    sch = alone.schedule()
    assert coll.cycles == 878 and coll.vxm_busy == ((850, 870),)
    assert int(sch.start[out] + sch.dur[out] + sch.lat[out]) == sch.cycles == 1006
    busy = Program(chip)
    busy.begin_op(None, "v", "vector")
    busy.vector(1000, None)
    busy.begin_op(None, "ar", "allreduce")
    out = busy.collective(coll, None)
    sch = busy.schedule()
    assert int(sch.start[out] + sch.dur[out] + sch.lat[out]) == 1092


def test_stage_hops_overlap_the_next_micro_batch(tmp_path):
    """lpu.stage_link_pipeline: a hop holds its ports only while sending, so with micro-batches
    in flight the simulated schedule is at most the closed form that charges each stage its
    outgoing hop, and strictly less here; one micro-batch (batch 1) is the same pass sum."""
    from pyaccel.model.graph import build_graph
    from pyaccel.sim import driver
    from pyaccel.sim.lpu import engine
    from pyaccel.sim.pipeline import pipeline_cycles

    model = _tiny(tmp_path, layers=4)
    sets = ROUND + ["sram_bytes=60000"]
    for batch, stricter in ((1, False), (8, True)):
        work = pa.Workload(batch=batch, context=200, tokens=1)
        sysm = _system(24, sets)
        graph = build_graph(model, work)
        plc = _layout(model, sysm, work, tp=8)
        passes = driver.MicroBatchPasses(engine, graph, sysm, plc)
        step = passes.step(200)[0]
        totals = {s: m.stage_cycles(m.graph.with_workload(m.graph.workload, 200))[0]
                  for s, m in passes.models.items()}  # fmt: skip
        closed = pipeline_cycles(totals, passes.sizes)
        assert len(plc.layers) and passes.models[passes.first].hops[0] is not None
        assert (step < closed) if stricter else (step == closed), (batch, step, closed)


def test_stage_plans_kept_with_the_graph_are_the_plans_made_afresh(tmp_path):
    # a graph's passes (candidate layouts, what-ifs) share its op plans per chip and TP width;
    # a chip with other timing constants makes its own
    from pyaccel.model.graph import build_graph
    from pyaccel.sim.lpu.engine import LpuSim
    from pyaccel.sim.lpu.plans import canonical, op_plan

    model, work = _tiny(tmp_path, layers=3), pa.Workload(context=300, tokens=1)
    graph = build_graph(model, work)
    sysm = _system(16)
    plc = _layout(model, sysm, work, 8)
    first, second = LpuSim(graph, sysm, plc), LpuSim(graph, sysm, plc)
    other = LpuSim(graph, _system(16, [*ROUND[:1], "mxm_operand_bytes=2", *ROUND[2:]]), plc)
    assert other.chip != first.chip
    for i, (chips, _) in enumerate(first.stages):
        plans, ops = first.stage_plans(graph, i)
        tp = len(chips)
        fresh = tuple(tuple(canonical(first.chip, tp, st) for st in op_plan(op, graph, tp))
                      for op in ops)  # fmt: skip
        assert plans == fresh and second.stage_plans(graph, i)[0][0] is plans[0]
        assert other.stage_plans(graph, i)[0] == tuple(
            tuple(canonical(other.chip, tp, st) for st in op_plan(op, graph, tp)) for op in ops
        )


@pytest.mark.parametrize("resource", list(lpu_engine.WHAT_IF))
def test_chips_of_one_plan_key_reduce_every_plan_alike(tmp_path, resource):
    # stage plans are kept per plan_key (the chip fields canonical reads): a what-if chip
    # with the same key shares the plans, and they are its own plans made afresh
    from pyaccel.emulation import what_if_system
    from pyaccel.model.graph import build_graph
    from pyaccel.sim.lpu.engine import LpuSim
    from pyaccel.sim.lpu.plans import canonical, op_plan, plan_key

    model, work = _tiny(tmp_path, layers=3), pa.Workload(context=300, tokens=1)
    graph = build_graph(model, work)
    sysm = _system(16)
    plc = _layout(model, sysm, work, 8)
    base, other = LpuSim(graph, sysm, plc), LpuSim(graph, what_if_system(sysm, resource), plc)
    same = plan_key(other.chip) == plan_key(base.chip)
    assert same == (resource != "lpu_vxm")  # only the VXM's ALUs enter a plan
    for i, (chips, _) in enumerate(base.stages):
        plans, ops = other.stage_plans(graph, i)
        tp = len(chips)
        assert plans == tuple(tuple(canonical(other.chip, tp, st) for st in op_plan(op, graph, tp))
                              for op in ops)  # fmt: skip
        assert (plans[0] is base.stage_plans(graph, i)[0][0]) == same
