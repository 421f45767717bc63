"""The GPU, LPU and ASIC lower bounds count the latencies every op must wait on (kernel launches
and collective start-ups; pipeline latencies and stream transits; block drains), so they bind
(a bound without them is x8.9 below the LPU's 8B step and x423 below the GPU's tiny one), and
they stay bounds: every emulated step is at or above them on every preset x model that fits.
They also count the waits a token meets crossing between units (GPU stage sends, LPU stage
hops, ASIC chip-link stages) and an ASIC layer's attention over its own KV banks."""

import dataclasses
import math

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.model.config import preset_names
from pyaccel.place import asic as asic_place
from pyaccel.place import gpu as gpu_place
from pyaccel.place import lpu as lpu_place
from pyaccel.place.kinds import asic_die as asic_design
from pyaccel.sim import roofline
from pyaccel.sim.asic import bound as asic_bound
from pyaccel.sim.asic import engine as asic
from pyaccel.sim.gpu import engine as gpu
from pyaccel.sim.lpu import bounds as lpu_bounds
from pyaccel.sim.lpu import fragments, plans
from pyaccel.sim.lpu.net import Network
from pyaccel.sim.lpu.program import ChipModel

from conftest import bound_ratio

SYSTEMS = ("h100", "h200", "b200", "groq-tsp", "taalas-hc1")


@pytest.mark.parametrize(
    "system, units, model, tightest",
    [
        ("h100", 1, "tiny-llama", 1.1),  # launch-bound: x423 without launches
        ("h100", 2, "tiny-llama", 1.1),  # + all-reduce start-ups
        ("h100", 8, "llama-3.1-8b", 1.25),
        ("groq-tsp", "auto", "tiny-llama", 1.1),  # x1,976 without pipeline latencies
        ("groq-tsp", "auto", "llama-3.1-8b", 2.0),  # x8.9 without
        # x1.05 without block drains; x1.19 at context 1,024 without each layer's own KV banks
        ("taalas-hc1", "auto", "llama-3.1-8b", 1.03),
    ],
)
def test_bound_binds_and_holds(system, units, model, tightest):
    ratio = bound_ratio(system, model, units)
    assert 1.0 <= ratio < tightest


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("model", preset_names())
def test_emulated_at_or_above_the_bound_everywhere(system, model):
    units = ("auto", 8) if system in ("h100", "h200", "b200") else ("auto",)
    for n in units:
        for batch, context in ((1, 64), (8, 4096)):
            ratio = bound_ratio(system, model, n, batch, context)
            assert ratio is None or ratio >= 1.0, (n, batch, context)


def _setup(system, units, model="tiny-llama", batch=1):
    work = pa.Workload(batch=batch, context=64, tokens=2)
    cfg, sysm = pa.load_model(model), pa.load_system(system, units)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    return graph, sysm, plc


def test_gpu_floor_counts_the_engines_launches_and_start_ups():
    # TP 2: every op is a kernel but the residual adds (fused into the next norm); each residual
    # instead brings the all-reduce of its block (a launch and an NVLink start-up), and the LM
    # head the all-gather of its logits: launches = ops + 1, start-ups = residuals + 1
    graph, sysm, plc = _setup("h100", 2)
    p = sysm.spec.params
    rates = gpu.rates(sysm.spec, graph.workload)
    slots = {s.layer: s for s in plc.layers}
    total: dict = {}
    for op in graph.ops:
        for res, t in rates.latency_floor(op, slots[op.layer]):
            total[res] = total.get(res, 0.0) + t
    n_res = sum(op.kind.endswith("residual") for op in graph.ops)
    assert n_res == 2 * graph.n_layers
    # the sampler's kernels launch eagerly after the graph (gpu.sampler_eager)
    sampler = p.sampler_kernels * p.kernel_launch_eager_s
    assert total["launch"] == pytest.approx(len(graph.ops) * p.kernel_launch_s + sampler)
    assert total["sync"] == pytest.approx((n_res + 1) * p.nvlink_latency_s)
    # HBM first accesses: every op that reads weights or the KV cache
    reads = [o for o in graph.ops if o.weight_bytes or o.kv_read_bytes]
    assert total["hbm"] == pytest.approx(len(reads) * p.hbm_latency_s)
    # the same counts and times as the engine's own kernels
    kernels = gpu.GpuPass(graph, sysm, plc).kernels
    assert sum(k.launch > 0 for k in kernels) == len(graph.ops) + 1
    assert sum(k.latency > 0 for k in kernels) == n_res + 1
    assert sum(k.hbm_latency > 0 for k in kernels) == len(reads)
    assert sum(k.launch for k in kernels) / sysm.spec.clock_hz == pytest.approx(
        total["launch"], rel=1e-3
    )


def test_gpu_floor_is_serial_with_the_kernel_body():
    # a kernel's launch and its first HBM access precede its body: the op's chain time is launch
    # + HBM latency + its largest work term
    graph, sysm, plc = _setup("h100", 1)
    op = next(o for o in graph.ops if o.kind == "qkv_proj")
    slot = next(s for s in plc.layers if s.layer == op.layer)
    rates = gpu.rates(sysm.spec, graph.workload)
    b = roofline.op_bound(op, 1, rates, graph.hidden, rates.latency_floor(op, slot))
    hbm = op.weight_bytes / sysm.spec.params.hbm_peak_bytes_per_s
    p = sysm.spec.params
    assert b.seconds == pytest.approx(hbm + p.kernel_launch_s + p.hbm_latency_s)


def test_lpu_plan_kinds_follow_the_compiled_plan():
    for model in ("tiny-llama", "tiny-mixtral", "tiny-deepseek-v3"):
        cfg = pa.load_model(model)
        graph = pa.build_graph(cfg, pa.Workload(batch=2, context=64), native_format="int8")
        for tp in (1, 2, 8, 16):
            for op in graph.ops:
                plan = plans.op_plan(op, graph, tp)
                kinds = plans.plan_kinds(op, tp, graph.attention)
                assert kinds == tuple(st[0] for st in plan), (op.name, tp)
                # without the attention the floor drops only the sequence split's all-reduce
                assert plans.plan_kinds(op, tp) == tuple(k for k in kinds if k != "seqreduce")


def test_lpu_floor_is_the_length_of_a_minimal_op_alone():
    # an op of one vector through one block compiled and scheduled alone on a chip takes
    # exactly its floor (a leading GEMV's first install apart: in a stage it runs ahead); a
    # collective adds only the serialisation of its few bytes; any op takes at least its floor
    spec = pa.load_system("groq-tsp").spec
    chip, net = ChipModel.from_params(spec.params), Network(spec.params, spec.clock_hz)
    floor = lpu_bounds._pipeline_floor(spec)
    graph = pa.build_graph(pa.load_model("tiny-llama"), pa.Workload(batch=1, context=1),
                           native_format="int8")  # fmt: skip
    for tp in (1, 2):
        slot = type("Slot", (), {"units": tuple(range(tp))})()
        for op in graph.ops:
            plan = tuple(plans.canonical(chip, tp, st) for st in plans.op_plan(op, graph, tp))
            alone = fragments._compile(chip, net, tp, (plan,)).schedule().cycles
            want = round(floor(op, slot) * spec.clock_hz)
            if plan[0][0] in ("gemv", "xgemv"):  # alone, its first install is on the chain
                alone -= chip.install_cycles
            minimal = all(st[1] == 1 for st in plan if st[0] in ("vector", "reduce", "gemv"))
            minimal &= all(st[2] == 1 for st in plan if st[0] == "gemv")  # one vector through
            minimal &= not any(st[0] == "xgemv" for st in plan)
            has_coll = any(st[0] in ("allreduce", "allgather", "broadcast") for st in plan)
            if minimal and not has_coll:
                assert alone == want, (op.name, tp)
            else:
                assert want <= alone, (op.name, tp)
            if minimal and has_coll and tp > 1:
                assert alone - want < 64, (op.name, tp)  # a few bytes' serialisation


def test_asic_floor_is_each_blocks_drain():
    graph, sysm, plc = _setup("taalas-hc1", "auto", "llama-3.1-8b")
    rates = asic_bound.rates(sysm.spec, graph.workload)
    slots = {s.layer: s for s in plc.layers}
    stages, _ = asic.build_stages(graph, sysm.spec, plc)
    by_name = {st.name: st for st in stages}
    clock = sysm.spec.clock_hz
    for op in graph.ops:
        ((res, t),) = rates.latency_floor(op, slots[op.layer])
        assert res == "fixed_latency"
        assert round(t * clock) == by_name[op.name].lat, op.name
    # by hand: a norm over the hidden width drains the vector latency, log2(hidden) tree levels
    # and the register; a GEMV its matmul latency, its adder tree and the register (qkv at 6 bits
    # holds 256 inputs a lane: 4096 inputs over 16 lanes a channel, 4 levels, one a cycle)
    p = sysm.spec.params
    norm = next(o for o in graph.ops if o.op_class == "norm")
    want = math.ceil(p.vector_latency_cycles) + math.ceil(math.log2(graph.hidden))
    assert by_name[norm.name].lat == want + math.ceil(p.stage_register_cycles)
    gemv = next(o for o in graph.ops if o.kind == "qkv_proj")
    assert by_name[gemv.name].lat == math.ceil(p.matmul_latency_cycles) + 4 + math.ceil(
        p.stage_register_cycles
    )


def test_asic_attention_is_bound_by_its_layers_own_banks():
    # asic.kv_banks_per_layer: 8B's 32 layers on one die get kv_banks // 32 banks each, and a
    # layer's K/V lives on those only. At context 1,024 one user's attention reads
    # 1,024 x (K, V) x 8 heads x 128 x 2 B = 4 MiB and writes the new token's 4 KiB over
    # those banks' ports; the die's total stays at the pooled rate (layers work at once)
    work = pa.Workload(context=1024, tokens=2)
    cfg, sysm = pa.load_model("llama-3.1-8b"), pa.load_system("taalas-hc1")
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    p, clock = sysm.spec.params, sysm.spec.clock_hz
    rate = asic_design.kv_banks(p) // 32 * p.kv_sram_port_bytes * clock
    kv_s = (1024 * 2 * 8 * 128 * 2 + 2 * 8 * 128 * 2) / rate
    rates = asic_bound.rates(sysm.spec, graph.workload)
    slot = next(s for s in plc.layers if s.layer == 0)
    # the bound takes attention's drain at context 0 (a floor that holds at every context)
    ((_, drain_s),) = rates.latency_floor(graph.attention_op(0, 0), slot)
    roof = roofline.roofline(graph, sysm, plc, work)
    attn = [b for b in roof.ops if b.op.endswith(".attention")]
    assert len(attn) == 32
    for b in attn:
        assert b.resource == "kv_sram"
        assert b.seconds == pytest.approx(kv_s + drain_s, rel=1e-12)
        assert b.times["kv_sram"] < kv_s / 30  # the pooled term, which the totals add
    total = sum(b.times.get("kv_sram", 0.0) for b in roof.ops)
    assert roof.resource_s["kv_sram"] == pytest.approx(total, rel=1e-12)
    # the engine reads the same bytes over the same ports (whole cycles), so it is not faster
    stages, _ = asic.build_stages(graph, sysm.spec, plc)
    stage = next(st for st in stages if st.name == attn[0].op)
    assert stage.occ >= math.ceil(kv_s * clock)


def test_asic_bound_waits_for_each_chip_link_stage():
    # tiny-llama etched by hand: embed and layer 0 on die 0, layer 1 over dies 1 and 2, the rest
    # on die 3. A token crosses 2 hops (0 -> 1-2 -> 3), each the link's 2 us, one register
    # cycle (1 ns at 1 GHz) and 64 x 2 B over 64 GB/s (2 ns); layer 1's four GEMVs each end in a
    # gather (2 us + 1 ns), the column-split ones also sending half their output: qkv
    # 128 x 2 B / 2 and gate_up 320 x 2 B / 2 (o_proj's and down_proj's bytes are their own
    # link term). Without these waits, tiny-llama's bound on 3 dies was x2.7 below its step
    work = pa.Workload(context=64, tokens=2)
    cfg = pa.load_model("tiny-llama")
    sysm = pa.load_system("taalas-hc1", units=4, etch=True)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = asic_place.build(graph, sysm, [(0,), (0,), (1, 2), (3,), (3,), (3,)])
    p = sysm.spec.params
    assert (p.chip_link_latency_s, p.stage_register_cycles) == (2e-6, 1)
    assert (p.chip_link_bytes_per_s, sysm.spec.clock_hz, graph.hidden) == (64e9, 1e9, 64)
    want = 2 * (2.001e-6 + 2e-9) + 4 * 2.001e-6 + (128 + 320) / 64e9
    waits = asic_bound.rates(sysm.spec, graph.workload).pass_floor_s
    assert waits(graph, plc) == pytest.approx(want, rel=1e-12)
    stages, _ = asic.build_stages(graph, sysm.spec, plc)  # the engine's link stages alike
    assert sum(st.resource == "chip_link" for st in stages) == 2 + 4
    # layer 1's GEMVs split their output channels over 2 dies: each lane keeps its row reads,
    # so the pass is as long as layer 0's on one die (a perfect 1/2 split would halve it)
    ops = {b.op: b for b in roofline.roofline(graph, sysm, plc, work).ops}
    for kind in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        one, two = ops[f"L0.{kind}"].times["rom_read"], ops[f"L1.{kind}"].times["rom_read"]
        assert two == one > 0
        occ = {st.name: st.occ for st in stages}
        assert occ[f"L1.{kind}"] == occ[f"L0.{kind}"]
    tr = pa.emulate(cfg, sysm, plc, work)
    assert 1.0 <= float(np.min(tr.step_cycles / tr.lower_bound_cycles)) < 1.05
    _assert_crossings_bounded(tr, "chip_link", want)
    one_die = pa.place(cfg, pa.load_system("taalas-hc1", units=1, etch=True), work)
    assert waits(graph, one_die) == 0


def test_lpu_bound_waits_for_each_stage_hop():
    # tiny-llama on 3 one-chip stages (embed + layer 0 | layers 1-2 | layer 3 + head): a token
    # crosses 2 stage hops, each at least one C2C hop latency (0.6 us = 540 cycles at 900 MHz)
    # and a 64-cycle stream transit to the ports and one from them: 2 x 668 cycles
    work = pa.Workload(context=64, tokens=2)
    cfg, sysm = pa.load_model("tiny-llama"), pa.load_system("groq-tsp", units=3)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = lpu_place.build(graph, sysm.spec, 1, 3, stages=3)
    p, clock = sysm.spec.params, sysm.spec.clock_hz
    assert (p.c2c_latency_s, clock, ChipModel.from_params(p).transit) == (6e-7, 9e8, 64)
    hops = lpu_bounds.rates(sysm.spec, graph.workload).pass_floor_s
    assert hops(graph, plc) == pytest.approx(2 * (540 + 2 * 64) / 9e8, rel=1e-12)
    assert hops(graph, lpu_place.build(graph, sysm.spec, 1, 3, stages=1)) == 0
    tr = pa.emulate(cfg, sysm, plc, work)
    assert 1.0 <= float(np.min(tr.step_cycles / tr.lower_bound_cycles)) < 1.05  # x1.11 without
    _assert_crossings_bounded(tr, "stage_hop", 2 * (540 + 2 * 64) / 9e8)


@pytest.mark.parametrize(
    "tp, pp, want",
    [  # tiny-llama's stages by hand: a send carries 64 x 2 B
        (1, 3, 2 * (5.9e-6 + 128 / 450e9)),  # GPUs 0 | 1 | 2: two sends over NVLink
        (8, 2, 2.5e-6 + 128 / 50e9),  # node 0 | node 1: one over the node network
        (4, 3, 5.9e-6 + 128 / 450e9 + 2.5e-6 + 128 / 50e9),  # 0-3 | 4-7 (node 0) | 8-11
    ],
)
def test_gpu_bound_waits_for_each_stage_send(tp, pp, want):
    work = pa.Workload(context=64, tokens=2)
    cfg = pa.load_model("tiny-llama")
    sysm = pa.load_system("h100", units=tp * pp, overrides=["step_host_s=0"])
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = gpu_place.build(graph, sysm.spec, tp, pp)
    p = sysm.spec.params
    assert (p.nvlink_latency_s, p.nvlink_bytes_per_s) == (5.9e-6, 450e9)
    assert (p.internode_latency_s, p.internode_bytes_per_s, p.gpus_per_node) == (2.5e-6, 50e9, 8)
    sends = gpu.rates(sysm.spec, graph.workload).pass_floor_s
    assert sends(graph, plc) == pytest.approx(want, rel=1e-12)
    assert sends(graph, gpu_place.build(graph, sysm.spec, tp, 1)) == 0
    tr = pa.emulate(cfg, sysm, plc, work)
    assert 1.0 <= float(np.min(tr.step_cycles / tr.lower_bound_cycles)) < 1.05
    _assert_crossings_bounded(tr, "send", want)


def _assert_crossings_bounded(trace, kind: str, want_s: float) -> None:
    """The report's row of the engine's crossing events has the pass floor as its bound (in
    whole cycles), and the emulated crossings are at or above it."""
    rep = pa.Report.from_trace(trace, what_if=False)
    row = next(r for r in rep.by_kind if r.kind == kind)
    assert row.bound_s == pytest.approx(want_s, abs=1.0 / trace.clock_hz)
    assert row.ratio >= 1.0


@pytest.mark.parametrize("batch", [1, 4])
def test_asic_routed_experts_take_one_pass_of_their_blocks(batch):
    # each routed expert is a block of its own (asic.experts_parallel) and a block's pass
    # serves its whole batch (asic.roofline): tiny-mixtral's routed gate/up projection takes
    # one pass of a copy's 64 row reads (1 a cycle at 1 GHz: 64 ns) at batch 1 and 4. Credited
    # with every expert's block for every routed row, it was bounded at 64 / 4 experts
    work = pa.Workload(batch=batch, context=64, tokens=2)
    cfg = pa.load_model("tiny-mixtral")
    sysm = pa.load_system("taalas-hc1", units="auto", etch=True)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    op = next(o for o in graph.ops if o.kind == "experts_gate_up_proj")
    assert asic_design.op_block(op, graph.workload, sysm.spec.params).row_reads == 64
    assert (sysm.spec.params.rom_rows_per_cycle, sysm.spec.clock_hz) == (1, 1e9)
    bound = next(b for b in roofline.roofline(graph, sysm, plc, work).ops if b.op == op.name)
    assert bound.times["rom_read"] == pytest.approx(64e-9, rel=1e-12)
    assert bound.resource == "rom_read"
    stages, _ = asic.build_stages(graph, sysm.spec, plc)  # the engine's block: the same pass
    assert next(st for st in stages if st.name == op.name).occ == 64


def test_asic_mla_attention_waits_for_its_absorbed_weights_pass():
    # tiny-deepseek-v3's absorbed up-projections (4,096 weights in ROM) take a block of 512
    # row reads, 1 a cycle at 1 GHz: after its K/V reads the attention waits 512 ns more than
    # its drain; the engine reads the whole 512-row bitline there
    work = pa.Workload(context=64, tokens=2)
    cfg = pa.load_model("tiny-deepseek-v3")
    sysm = pa.load_system("taalas-hc1", units="auto", etch=True)
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    op = graph.attention_op(0, graph.context)  # the engine's stage below is at this context
    assert op.params == 4096
    assert asic_design.op_block(op, graph.workload, sysm.spec.params).row_reads == 512
    slot = next(s for s in plc.layers if s.layer == 0)
    floor = dict(asic_bound.rates(sysm.spec, graph.workload).latency_floor(op, slot))
    assert floor["rom_read"] == pytest.approx(512e-9, rel=1e-12)
    stages, _ = asic.build_stages(graph, sysm.spec, plc)
    stage = next(st for st in stages if st.name == "L0.attention")
    assert round(floor["fixed_latency"] * sysm.spec.clock_hz) == stage.lat
    assert stage.occ >= 512  # K/V reads, then the bitline's 512 rows


def test_lpu_gemv_waits_for_its_weight_installs():
    # llama-3.1-8b on groq-tsp (auto: TP 8): a chip's share of gate/up is 4,096 x 28,672 / 8 =
    # 14,680,064 weights, in 574 blocks of 160 x 160 (fp16 operands on a 320-wide MXM), round-
    # robin over 4 planes: 144 installs of 10 cycles (160 x 160 x 2 B over 16 streams of 320 B)
    # one after another on the busiest plane: 1,440 cycles at 900 MHz. The pooled MEM term
    # (all 88 slices' reads) is x2.8 below it, and the units' totals keep that one
    work = pa.Workload(context=1024, tokens=2)
    cfg, sysm = pa.load_model("llama-3.1-8b"), pa.load_system("groq-tsp", units="auto")
    graph = pa.build_graph(cfg, work, native_format=sysm.spec.native_format)
    plc = pa.place(cfg, sysm, work, graph=graph)
    chip = ChipModel.from_params(sysm.spec.params)
    assert (len(plc.slot(0).units), chip.planes, chip.block_weights) == (8, 4, 160 * 160)
    assert (chip.install_cycles, sysm.spec.clock_hz) == (10, 9e8)
    roof = roofline.roofline(graph, sysm, plc, work)
    gate_up = next(b for b in roof.ops if b.op == "L0.gate_up_proj")
    assert gate_up.resource == "lpu_mem"
    assert gate_up.seconds == pytest.approx(1440 / 9e8, rel=1e-12)
    assert gate_up.times["lpu_mem"] < gate_up.seconds / 2.5  # the pooled term the totals add


@pytest.mark.parametrize("blocks, cycles_4, cycles_8", [(3, 10, 10), (574, 1440, 1435)])
def test_lpu_install_bound_never_rises_with_more_planes(monkeypatch, blocks, cycles_4, cycles_8):
    """SPEC §9: a faster resource never raises the lower bound. The engine splits a
    hemisphere's 32 streams over its planes in fixed parts, so 8 planes install a 160 x 160 x
    2 B block in 20 cycles (8 streams of 320 B each) against 4 planes' 10 (16 each); the bound
    takes one plane's own 16 streams (10 cycles a block) and the chip's 64 together (a block
    is 160 vectors). 3 blocks: 4 planes max(ceil(3/4) x 10, ceil(3 x 160 / 64)) = max(10, 8)
    = 10; 8 planes max(1 x 10, 8) = 10 (it was 1 x 20). 574 blocks: 4 planes max(144 x 10,
    1,435) = 1,440; 8 planes max(72 x 10, 1,435) = 1,435 (it was 72 x 20 = 1,440)."""
    spec = pa.load_system("groq-tsp", units=8).spec
    four, eight = spec.params, dataclasses.replace(spec.params, mxm_planes=8)
    monkeypatch.setattr(lpu_bounds, "gemv_share", lambda op, tp: blocks * 160 * 160)
    op = type("Op", (), {"op_class": "matmul"})()
    slot = type("Slot", (), {"units": tuple(range(8))})()
    got = []
    for params, engine_cycles in ((four, 10), (eight, 20)):
        chip = ChipModel.from_params(params)
        assert (chip.install_cycles_alone, chip.install_cycles) == (10, engine_cycles)
        assert (chip.block_install_vectors, chip.install_vectors_per_cycle) == (160, 64)
        got.append(lpu_bounds._weight_installs(chip, 1.0)(op, slot))
    assert got == [cycles_4, cycles_8]
