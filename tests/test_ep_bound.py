"""Lower bounds of expert parallelism's all-to-alls (SPEC §5, §9): a GPU stage's dispatch and
combine and a wafer group's expert combine are bounds of their own (an
:class:`~pyaccel.sim.contract.Exchange`: its messages' latency, then the fewest bytes any
routing leaves its busiest unit to move at the link's peak rate); the LPU's combine is its
expert down projection's all-reduce and the ASIC's each expert die's chip-link stage, bounded
where those are. Every kind holds emulated >= bound for these ops and the step, and no
resource twice as fast raises the bound."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.emulation import engine_module, what_if_system
from pyaccel.place import wafer as wafer_placer
from pyaccel.report import Report
from pyaccel.sim.asic import bound as asic_bound
from pyaccel.sim.experts import fewest_owners
from pyaccel.sim.roofline import StepBounds

# tiny-mixtral (4 experts, top 2, hidden 64, 4 layers, all MoE) on dies whose transistors hold
# about half a layer: every layer spans two dies, two experts on each (as test_expert_parallel)
SPAN_DIES = {"transistors": 9.61e8, "kv_sram_bytes": 2e7}
TINY_GRID = ["usable_width_pes=12", "usable_height_pes=12"]


def _work(batch, context=64):
    return pa.Workload(batch=batch, context=context, tokens=2)


def _gpu(model, batch, units=4):
    cfg, work = pa.load_model(model), _work(batch)
    system = pa.load_system("h100", units, overrides=["expert_layout=ep"])
    return cfg, system, pa.place(cfg, system, work), work


def _wafer(model, batch, units, ep):
    """The first layout of ``model`` on ``units`` wafers with its experts over ``ep`` of them
    (a small grid for the tiny models, whose layers would not spread on their own)."""
    cfg, work = pa.load_model(model), _work(batch)
    system = pa.load_system("wse3", units, overrides=TINY_GRID if "tiny" in model else [])
    graph = pa.build_graph(cfg, work, native_format=system.spec.native_format)
    plc = next(p for p in wafer_placer.candidates(graph, system, units)
               if p.layout.expert_wafers == ep)  # fmt: skip
    return cfg, system, plc, work


def _lpu(model, batch):
    cfg, work = pa.load_model(model), _work(batch)
    system = pa.load_system("groq-tsp", "auto", overrides=["expert_layout=ep"])
    return cfg, system, pa.place(cfg, system, work), work


def _asic(model, batch):
    cfg, work = pa.load_model(model), _work(batch, context=16)
    system = pa.load_system("taalas-hc1", "auto", etch=True, overrides=SPAN_DIES)
    return cfg, system, pa.place(cfg, system, work), work


def _bounds(cfg, system, plc, work):
    return StepBounds(pa.build_graph(cfg, work, native_format=system.spec.native_format),
                      system, plc)  # fmt: skip


def _without_exchanges(monkeypatch, kind):
    """The kind's bound rates with no exchanges (to see what they add)."""
    module = engine_module(kind)
    rates = module.rates
    monkeypatch.setattr(
        module, "rates", lambda spec, work: replace(rates(spec, work), exchanges=None)
    )


def test_fewest_owners_by_hand():
    assert fewest_owners(2, tuple(range(8))) == 2  # mixtral on 8 GPUs: one expert each
    assert fewest_owners(2, (0, 0, 1, 1, 2, 2, 3, 3)) == 1  # two a GPU: both may be home's
    assert fewest_owners(3, (0, 0, 1, 2)) == 2  # at most two on one unit: ceil(3 / 2)
    assert fewest_owners(8, (0,) * 64 + (1,) * 64) == 1  # qwen3-like: 8 of 64 a unit
    assert fewest_owners(2, ()) == 0


# --- golden cases, by hand from the presets ------------------------------------------------------


def test_gpu_dispatch_and_combine_bound_by_hand(monkeypatch):
    # tiny-mixtral, batch 16 on 4 H100s, EP 4: one expert a GPU, so a row's 2 experts sit on
    # 2 GPUs, at most one its home: >= 1 copy of its 64 x 2 = 128 B hidden vector. The home
    # of the most sequences holds ceil(16 / 4) = 4: 4 x 128 = 512 B at NVLink's 450e9 B/s =
    # 1.1378e-9 s, after a launch (1.3e-6 s) and NVLink's latency (5.9e-6 s, sync):
    # 7.2011378e-6 s each, x 1.98e9 = 14,258.25 -> 14,259 cycles a dispatch or combine.
    cfg, system, plc, work = _gpu("tiny-mixtral", 16)
    assert plc.layout.ep == 4 and plc.layout.pp == 1
    bounds = _bounds(cfg, system, plc, work)
    one = 7.2e-6 + 512 / 450e9
    names = [b.op for b in bounds.exchange_ops]
    assert names == [f"L{i}.{k}" for i in range(4) for k in ("dispatch", "combine")]
    for b in bounds.exchange_ops:
        assert b.seconds == pytest.approx(one, rel=1e-12) and b.resource == "sync"
        assert b.times == {"nvlink": pytest.approx(512 / 450e9, rel=1e-12)}
    # on the chain, one sequence (batch 1): 8 exchanges of 7.2e-6 + 128 / 450e9 s; nothing
    # in the GPUs' NVLink totals (no other op of an EP stage has any either)
    _without_exchanges(monkeypatch, "gpu")
    bare = _bounds(cfg, system, plc, work)
    assert bounds.fixed_totals == bare.fixed_totals
    assert not any(res == "nvlink" for _, res in bounds.fixed_totals)
    assert bounds.one_fixed - bare.one_fixed == pytest.approx(8 * (7.2e-6 + 128 / 450e9))
    # the report's rows: 4 layers x 14,259 cycles each
    monkeypatch.undo()
    rep = Report.from_trace(pa.emulate(cfg, system, plc, work), what_if=False)
    rows = {r.kind: r for r in rep.by_kind}
    for kind in ("dispatch", "combine"):
        assert rows[kind].bound_s == 4 * 14_259 / 1.98e9
        assert rows[kind].emulated_s >= rows[kind].bound_s


def test_gpu_no_partial_sums_cross_data_parallel_ranks():
    # under EP a stage's GPUs run their own sequences' o_proj and experts whole: no
    # all-reduce, so no NVLink term in those ops' bounds. One of (4 - 1) / 4 x 64 x 64 x 2 B
    # at 450e9 B/s = 13.7 ns set o_proj's and the down projection's bounds above their ~3.5 ns
    # kernel bodies (emulated / bound 0.994 and 0.995 for the 4 layers)
    cfg, system, plc, work = _gpu("tiny-mixtral", 64)
    for b in _bounds(cfg, system, plc, work).fixed_ops:
        assert "nvlink" not in b.times, b.op
    rows = {r.kind: r for r in Report.from_trace(pa.emulate(cfg, system, plc, work),
                                                 what_if=False).by_kind}  # fmt: skip
    assert rows["o_proj"].ratio >= 1.0 and rows["experts_down_proj"].ratio >= 1.0


def test_wafer_combine_bound_by_hand(monkeypatch):
    # tiny-mixtral, batch 3 (3 rows of 64 x 2 = 128 B: 384 B) on 12 x 12-PE wafers. Over 2
    # wafers, 2 experts each: a row's 2 experts may both sit on one (d = 1); every wafer needs
    # every row's sum, so the wafers together receive d x (2 - 1) = 1 partial sum a row, the
    # busiest half of them: 192 B at 150e9 B/s = 1.28e-9 s after the crossing's 2e-6 s:
    # 2.00128e-6 s x 0.85e9 = 1,701.09 -> 1,702 cycles. No wafer surely receives any.
    cfg, system, plc, work = _wafer("tiny-mixtral", 3, units=2, ep=2)
    bounds = _bounds(cfg, system, plc, work)
    for i, b in enumerate(bounds.exchange_ops):
        assert b.op == f"L{i}.experts_down_proj.combine" and b.resource == "wafer_io_latency"
        assert b.seconds == pytest.approx(2e-6 + 192 / 150e9, rel=1e-12)
    assert not any(res == "wafer_io" for _, res in bounds.fixed_totals)  # (o_proj's is gone)
    rep = Report.from_trace(pa.emulate(cfg, system, plc, work), what_if=False)
    row = next(r for r in rep.by_kind if r.kind == "expert_combine")
    assert row.bound_s == 4 * 1_702 / 0.85e9 and row.emulated_s >= row.bound_s
    # over 4 wafers, one expert each: d = 2, the wafers receive 2 x 3 = 6 partial sums a row,
    # the busiest 6 / 4: 1.5 x 384 = 576 B; and every wafer at least d - 1 = 1 a row, 384 B,
    # 2.56e-9 s into its system I/O total for each of the 4 layers
    cfg, system, plc, work = _wafer("tiny-mixtral", 3, units=4, ep=4)
    bounds = _bounds(cfg, system, plc, work)
    for b in bounds.exchange_ops:
        assert b.seconds == pytest.approx(2e-6 + 576 / 150e9, rel=1e-12)
    for u in range(4):
        assert bounds.fixed_totals[u, "wafer_io"] == pytest.approx(4 * 384 / 150e9)
    _without_exchanges(monkeypatch, "wafer")
    bare = _bounds(cfg, system, plc, work)
    # one sequence's pass: 4 combines of 2e-6 s + 1.5 x 128 B
    assert bounds.one_fixed - bare.one_fixed == pytest.approx(4 * (2e-6 + 192 / 150e9))


def test_lpu_combine_is_the_down_projections_all_reduce_by_hand():
    # tiny-mixtral EP on groq-tsp: each layer's 2-chip group holds 2 experts a chip, and every
    # row reaches both chips (no dispatch); the combine is the expert down projection's
    # all-reduce. Its floor at 900 MHz: the expert GEMV (1 cycle + MXM latency 320 + stream
    # transit 1 x (88 / 2 + 20) = 64) and the all-reduce (C2C hop 600 ns = 540 cycles, the
    # transit to the ports and back 2 x 64, one VXM add) = 385 + 669 = 1,054 cycles; its
    # bytes: half of the 16 rows x 64 x 2 B over a chip's 16 C2C links of 14e9 B/s each
    cfg, system, plc, work = _lpu("tiny-mixtral", 16)
    assert plc.layout.ep == 2 and plc.layout.tp == 2
    bounds = _bounds(cfg, system, plc, work)
    down = next(b for b in bounds.fixed_ops if b.op == "L0.experts_down_proj")
    assert down.floor == (("fixed_latency", pytest.approx(1_054 / 0.9e9, rel=1e-12)),)
    assert down.times["c2c_link"] == pytest.approx(1 / 2 * 16 * 128 / (16 * 14e9), rel=1e-12)
    assert not bounds.exchange_ops


def test_asic_combine_is_each_expert_dies_link_stage_by_hand():
    # tiny-mixtral, batch 4, every layer over 2 dies: after the expert down projection each
    # die holding one of a token's experts sends its partial sum over its own chip link. The
    # pass floor waits for each: the link's 2e-6 s and a 1-cycle pipeline register at 1 GHz,
    # 2.001e-6 s a layer, 8.004e-6 s for the 4; the down projection's bytes: half of the 4
    # tokens x 64 x 2 B at the link's 64e9 B/s
    cfg, system, plc, work = _asic("tiny-mixtral", 4)
    graph = pa.build_graph(cfg, work, native_format=system.spec.native_format)
    assert [len(plc.slot(i).units) for i in graph.moe_layers] == [2, 2, 2, 2]
    floor = asic_bound.rates(system.spec, graph.workload).pass_floor_s
    alone = replace(graph, ops=tuple(replace(op, reduces=False) if op.expert else op
                                     for op in graph.ops))  # fmt: skip
    assert floor(graph, plc) - floor(alone, plc) == pytest.approx(4 * (2e-6 + 1e-9))
    bounds = StepBounds(graph, system, plc)
    down = next(b for b in bounds.fixed_ops if b.op == "L0.experts_down_proj")
    assert down.times["chip_link"] == pytest.approx(1 / 2 * 4 * 128 / 64e9, rel=1e-12)
    assert not bounds.exchange_ops


# --- properties on every kind with expert parallelism ----------------------------------------

MODELS = ("tiny-mixtral", "tiny-deepseek-v3", "mixtral-8x7b")
SETUPS = {
    "gpu": lambda model, batch: _gpu(model, batch, units=8),
    "wafer": lambda model, batch: _wafer(model, batch, units=4, ep=2),
    "lpu": _lpu,
    "asic": _asic,  # the tiny models only: mixtral's etched layers each fit one die
}
EP_KINDS = {"gpu": ("dispatch", "combine"), "wafer": ("expert_combine",),
            "lpu": ("experts_down_proj",), "asic": ("chip_link",)}  # fmt: skip
CASES = [(kind, model, batch) for kind in SETUPS for model in MODELS for batch in (1, 16, 64)
         if not (kind == "asic" and model == "mixtral-8x7b")]  # fmt: skip


@pytest.mark.parametrize("kind, model, batch", CASES)
def test_emulated_at_or_above_the_bound_for_every_op_and_the_step(kind, model, batch):
    cfg, system, plc, work = SETUPS[kind](model, batch)
    assert any(len(set(s.expert_units)) > 1 for s in plc.layers)  # experts over units
    tr = pa.emulate(cfg, system, plc, work)
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()
    rows = {r.kind: r for r in Report.from_trace(tr, what_if=False).by_kind}
    for name in EP_KINDS[kind]:
        assert rows[name].ratio is not None, name  # bounded
    for r in rows.values():
        assert r.ratio is None or r.ratio >= 1.0, r


def test_a_skewed_router_moves_more_and_the_bound_stays():
    # rows crowding onto a few experts (zipf:2) make the busiest GPU receive more than under
    # uniform routing (mixtral, 64 rows on 8 GPUs: dispatch x1.04 -> x1.13 its bound); the
    # bound, the fewest copies any routing sends, is the same for both
    cfg, system, plc, work = _gpu("mixtral-8x7b", 64, units=8)
    rows = {}
    for router in ("uniform", "zipf:2"):
        tr = pa.emulate(cfg, system, plc, replace(work, router=router))
        assert (tr.step_cycles >= tr.lower_bound_cycles).all()
        rows[router] = {r.kind: r for r in Report.from_trace(tr, what_if=False).by_kind}
    for kind in ("dispatch", "combine"):
        even, skew = rows["uniform"][kind], rows["zipf:2"][kind]
        assert skew.bound_s == even.bound_s and skew.emulated_s > even.emulated_s > even.bound_s


WHAT_IF_CASES = [("gpu", "tiny-mixtral", 16), ("gpu", "mixtral-8x7b", 64),
              ("wafer", "tiny-mixtral", 3), ("lpu", "tiny-mixtral", 16),
              ("asic", "tiny-mixtral", 4)]  # fmt: skip


@pytest.mark.parametrize("kind, model, batch", WHAT_IF_CASES)
def test_a_resource_twice_as_fast_never_raises_the_bound(kind, model, batch):
    """SPEC §9, exactly: the step's bound at several contexts and every op's (the
    exchanges' too) on the same placement, each resource class doubled in turn."""
    setup = (lambda m, b: _wafer(m, b, units=4, ep=4)) if kind == "wafer" else SETUPS[kind]
    cfg, system, plc, work = setup(model, batch)
    contexts = np.array([16, 64, 256])
    base = _bounds(cfg, system, plc, work)
    base_ops = {b.op: b.seconds for b in base.at(64, with_ops=True).ops}
    for resource in engine_module(system.kind).WHAT_IF:
        fast = _bounds(cfg, what_if_system(system, resource), plc, work)
        assert (fast.step_seconds(contexts) <= base.step_seconds(contexts)).all(), resource
        for b in fast.at(64, with_ops=True).ops:
            assert b.seconds <= base_ops[b.op], (resource, b.op)


def test_a_gpu_reads_its_dense_weights_whole_under_expert_parallelism():
    """Under expert parallelism a stage's GPUs run attention and the dense ops data-parallel,
    each on its own sequences with every weight: the bound spread qkv_proj's weights over the
    4 GPUs (x4 too low: mixtral's qkv_proj showed x5.3 at batch 16 on 8). Each GPU reads them
    whole at HBM's peak; under tensor parallelism its shard, which the pooled term already
    holds; the routed experts and the embedding's rows stay spread."""
    cfg, system, plc, work = _gpu("tiny-mixtral", 8)
    assert plc.layout.ep == 4 and plc.layout.tp == 1
    graph = pa.build_graph(cfg, work, native_format=system.spec.native_format)
    hbm = system.spec.params.hbm_peak_bytes_per_s
    rates = engine_module("gpu").rates(system.spec, graph.workload)
    bounds = {b.op: b for b in StepBounds(graph, system, plc).fixed_ops}
    slots = {s.layer: s for s in plc.layers}
    for op in graph.ops:
        own = rates.own_seconds(op, slots[op.layer])
        if op.expert or op.op_class == "embedding":
            assert own == 0.0, op.name
        else:
            assert own == pytest.approx(op.weight_bytes / hbm), op.name
            if op.name in bounds:  # its bound waits for it (then its launch, serial)
                assert bounds[op.name].seconds >= own
    qkv = next(op for op in graph.ops if op.kind == "qkv_proj")
    assert rates.own_seconds(qkv, slots[qkv.layer]) > 3 * bounds[qkv.name].times["hbm"]
    tp = pa.load_system("h100", 4, overrides=["expert_layout=tp"])
    tp_plc = pa.place(cfg, tp, work)
    width = tp_plc.layout.tp
    assert width > 1 and not tp_plc.layout.ep
    tp_slot = next(s for s in tp_plc.layers if s.layer == qkv.layer)
    assert rates.own_seconds(qkv, tp_slot) == pytest.approx(qkv.weight_bytes / (width * hbm))


# dies leaving ~1/3, 1/4 and 1/6 of a tiny layer's ROM: its experts over 3, 4 and 6 dies
SPAN_MORE = {3: 9.6065e8, 4: 9.605e8, 6: 9.603e8}


@pytest.mark.parametrize("dies", SPAN_MORE)
@pytest.mark.parametrize("model, batch", [("tiny-mixtral", 16), ("tiny-deepseek-v3", 64)])
def test_asic_combine_over_three_dies_or_more_stays_above_its_bound(dies, model, batch):
    """The combine's link term is a floor however many dies a layer's experts span (each die
    holding a token's expert sends its partial over its own link): step and every kind at or
    above their bounds."""
    cfg, work = pa.load_model(model), _work(batch, context=16)
    sets = {**SPAN_DIES, "transistors": SPAN_MORE[dies]}
    system = pa.load_system("taalas-hc1", "auto", etch=True, overrides=sets)
    plc = pa.place(cfg, system, work)
    assert {len(set(s.units)) for s in plc.layers if s.expert_units} == {dies}
    tr = pa.emulate(cfg, system, plc, work)
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()
    rows = {r.kind: r for r in Report.from_trace(tr, what_if=False).by_kind}
    assert rows["chip_link"].ratio is not None
    assert all(r.ratio is None or r.ratio >= 1.0 for r in rows.values())
