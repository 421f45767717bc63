"""GPU engine: hand-derived golden cycles, published-range checks, and invariants."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyaccel as pa
from pyaccel.model.config import preset_names
from pyaccel.place.kinds.gpu import GpuLayout
from pyaccel.what_if import what_if_gains

# Round numbers so that every cycle below can be derived by hand: a 1 GHz clock, 1,000 B/cycle of
# HBM with a 500-cycle first-access latency, a 1,000-cycle launch in the graph and a 2,000-cycle
# one for the sampler's single kernel after it, tensor cores fast enough never to bound, NVLink
# at 100 B/cycle (line rate and what a collective moves alike) with a 2,000-cycle fixed latency;
# no host time between steps (its own tests below).
ROUND = [
    "clock_hz=1e9",
    "hbm_achievable_bytes_per_s=1e12",
    "hbm_peak_bytes_per_s=1e12",
    "hbm_latency_s=5e-7",
    "bf16_flops_per_s=1e15",
    "kernel_launch_s=1e-6",
    "kernel_launch_eager_s=2e-6",
    "sampler_kernels=1",
    "step_host_s=0",
    "nvlink_bytes_per_s=1e11",
    "nvlink_effective_bytes_per_s=1e11",
    "nvlink_latency_s=2e-6",
]


def _tiny(tmp_path, layers=1):
    from conftest import TINY_LLAMA, write_config

    return pa.load_model(
        write_config(tmp_path / "tiny", {**TINY_LLAMA, "num_hidden_layers": layers})
    )


def _trace(model, units, work, sets=ROUND, system="h100"):
    sysm = pa.load_system(system, units=units, overrides=sets)
    plc = pa.place(model, sysm, work)
    return pa.emulate(model, sysm, plc, work)


def test_golden_single_gpu_step(tmp_path):
    # tiny llama, 1 layer: hidden 64, 4 heads, 2 KV heads of 16, FFN 160, vocab 256, bf16.
    # Kernel bodies = ceil(HBM bytes / 1,000 B per cycle):
    #   embed 64*2=128 B -> 1; attn_norm 128 -> 1; qkv (64+32+32)*64*2=16,384 -> 17; rope 0 -> 0;
    #   attention: 8 cached tokens * 64 elems * 2 B = 1,024 read + 128 written -> 2;
    #   o_proj 64*64*2=8,192 -> 9; mlp_norm 128 -> 1; gate_up 2*160*64*2=40,960 -> 41; act 0 -> 0;
    #   down 20,480 -> 21; final_norm 128 -> 1; lm_head 256*64*2=32,768 -> 33; sampling 0 -> 0.
    # 13 kernels (residual adds fused) x 1,000 launch cycles + 127 body cycles = 13,127; the
    # sampler's launch after the graph costs 1,000 more; the 10 kernels that read weights or the
    # KV cache from HBM (all but rope, act and sampling, whose inputs sit in L2) first wait 500
    # cycles for their first bytes: 19,127.
    tr = _trace(_tiny(tmp_path), 1, pa.Workload(context=8, tokens=2))
    assert tr.step_cycles.tolist() == [19127, 19127]
    step0 = tr.events["step"] == 0
    # a launch per kernel, a body per kernel with one (not rope, act, sampling: 0 cycles), and
    # the HBM latencies; no event of no time (they put zero-length hbm slices in the trace)
    assert step0.sum() == 13 + 10 + 10 and (tr.events["duration"] > 0).all()
    df = tr.to_dataframe()
    bodyless = df[df.kind.isin(["rope", "act", "sampling"])]
    assert set(bodyless.resource) == {"launch"} and len(bodyless) == 3 * 2  # their launches
    doc = json.loads(tr.to_perfetto(tmp_path / "t.json").read_text())
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert len(slices) == tr.n_events and all(e["dur"] > 0 for e in slices)


def test_golden_tensor_parallel_step(tmp_path):
    # Same model on 2 GPUs (TP 2): the busiest rank's shares are ceil(bytes / 2):
    #   embed 1, norms 1+1+1 (replicated), qkv 8,192 -> 9, attention 576 -> 1, o_proj 4,096 -> 5,
    #   gate_up 20,480 -> 21, down 10,240 -> 11, lm_head 16,384 -> 17: bodies 68.
    # Two all-reduces of 64*2=128 B: launch 1,000 + latency 2,000 + ceil(128 B / 100 B) = 3,002;
    # LM-head all-gather of 256*2=512 B, half received: 1,000 + 2,000 + ceil(2.56) = 3,003.
    # 13 x 1,000 + 68 + 2 x 3,002 + 3,003 = 22,075, + 10 HBM first accesses x 500 + the
    # sampler's eager launch 1,000 = 28,075.
    tr = _trace(_tiny(tmp_path), 2, pa.Workload(context=8, tokens=1))
    assert tr.step_cycles.tolist() == [28075]
    # events: 13 launches and 10 bodies (rope, act and sampling take none) x 2 ranks + 10 HBM
    # latencies x 2 ranks + 3 collectives x 3 events x 2 ranks
    assert tr.n_events == (13 + 10) * 2 + 10 * 2 + 3 * 3 * 2
    assert set(tr.events["unit"].tolist()) == {0, 1}


def test_host_step_overlapped_or_serial(tmp_path):
    # the golden step above is 19,127 GPU cycles. A host taking 25 us a step: overlapped, it
    # prepares the next step during this one, so the GPU waits 25,000 - 19,127 = 5,873 cycles;
    # serial, it waits all 25,000 after each step: 44,127. A 10 us host hides entirely.
    model, work = _tiny(tmp_path), pa.Workload(context=8, tokens=2)
    host = [*ROUND, "step_host_s=25e-6"]
    assert _trace(model, 1, work, host).step_cycles.tolist() == [25000, 25000]
    serial = _trace(model, 1, work, [*host, "host_overlap=serial"])
    assert serial.step_cycles.tolist() == [44127, 44127]
    ev = serial.events
    host = ev["resource"] == "host"
    assert ev["duration"][host].tolist() == [25000, 25000]
    assert ev["start"][host].tolist() == [19127, 44127 + 19127]  # after each step's GPU work
    quiet = _trace(model, 1, work, [*ROUND, "step_host_s=10e-6"]).step_cycles.tolist()
    assert quiet == [19127, 19127]


def test_llama_8b_h100_in_published_range(llama8b, h100):
    work = pa.Workload()
    tr = pa.emulate(llama8b, h100, pa.place(llama8b, h100, work), work)
    # 221 tok/s = 3.35 TB/s / 15.14 GB; the emulated speed may not beat its own lower bound
    assert 150 <= tr.tokens_per_s_per_user <= 221
    assert tr.tokens_per_s_per_user <= 1 / tr.lower_bound_step_time_s


def test_batch_64_trades_latency_for_throughput(llama8b, h100):
    one = pa.emulate(llama8b, h100, pa.place(llama8b, h100, pa.Workload()), pa.Workload())
    w64 = pa.Workload(batch=64)
    many = pa.emulate(llama8b, h100, pa.place(llama8b, h100, w64), w64)
    assert many.tokens_per_s >= 20 * one.tokens_per_s
    assert many.tokens_per_s_per_user < one.tokens_per_s_per_user


def test_tensor_parallel_70b_on_8_gpus():
    model, work = pa.load_model("llama-3.1-70b"), pa.Workload(tokens=4)
    sysm = pa.load_system("h100", units=8)
    plc = pa.place(model, sysm, work)
    assert plc.layout == GpuLayout(tp=8, pp=1, stages=1)
    tr = pa.emulate(model, sysm, plc, work)
    assert "nvlink" in set(tr.events["resource"].tolist())
    assert 0 < tr.tokens_per_s_per_user < 1 / tr.lower_bound_step_time_s + 1e-9


def test_pipeline_stages_cross_nodes():
    model, work = pa.load_model("llama-3.1-405b"), pa.Workload(tokens=2)
    plc = pa.place(model, pa.load_system("h100", units=16), work)
    assert plc.layout.tp == 8 and plc.layout.pp == 2
    tr = pa.emulate(model, pa.load_system("h100", units=16), plc, work)
    assert "node_link" in set(tr.events["resource"].tolist())


def test_each_cached_token_costs_its_kv_bytes_at_hbm_rate(llama8b):
    """At batch 1 on one GPU only attention grows with the context: each cached token adds
    32 layers x K,V x 8 KV heads x 128 dims x 2 B = 131,072 B read per step, so over 250 steps
    the step grows by 250 x 131,072 B / (1,000 B/cycle) = 32,768 cycles (each of the 32
    attention kernels rounds up to whole cycles: +-32). The bound (same rate as its peak here)
    grows by the same bytes."""
    sysm = pa.load_system("h100", units=1, overrides=ROUND)
    work = pa.Workload(context=1000, tokens=251)
    tr = pa.emulate(llama8b, sysm, pa.place(llama8b, sysm, work), work, event_steps=())
    per_token = 32 * 2 * 8 * 128 * 2
    want = 250 * per_token / 1000
    assert abs(int(tr.step_cycles[-1] - tr.step_cycles[0]) - want) <= 32
    assert abs(int(tr.lower_bound_cycles[-1] - tr.lower_bound_cycles[0]) - want) <= 1


@pytest.mark.parametrize("system", ["h100", "h200", "b200"])
def test_the_bound_binds_at_batch_1(llama8b, system):
    """Batch 1 on one GPU is HBM-bound: the emulated step reads the same bytes as the bound at
    the bandwidth a copy benchmark reaches instead of the datasheet peak, and both count one
    launch per kernel (~300 x ~1.3 us against ~5 ms). So emulated / bound is (L + B/achievable)
    / (L + B/peak): at most peak / achievable and, launches being under a tenth of the step,
    above 0.95 of it; a bound that left out bytes or launches, or counted them twice, falls
    outside."""
    sysm = pa.load_system(system, units=1)
    p = sysm.spec.params
    work = pa.Workload(tokens=2)
    tr = pa.emulate(llama8b, sysm, pa.place(llama8b, sysm, work), work, event_steps=())
    ratio = tr.step_cycles / tr.lower_bound_cycles
    peak_over_achievable = p.hbm_peak_bytes_per_s / p.hbm_achievable_bytes_per_s
    assert np.all(ratio <= peak_over_achievable * 1.001)
    assert np.all(ratio >= peak_over_achievable * 0.95)


def test_what_if_gains_follow_the_traces_own_attribution(llama8b):
    """With round numbers the what-if can be predicted from the trace's own events: halving
    every HBM body saves half of the HBM event cycles (whole cycles per kernel), halving the
    launch saves half of the launch events; on one GPU there is no NVLink or node traffic and
    no collective latency, so those classes gain exactly nothing, and at batch 1 tensor cores
    never bound a kernel."""
    sysm = pa.load_system("h100", units=1, overrides=ROUND)
    work = pa.Workload(context=256, tokens=1)
    plc = pa.place(llama8b, sysm, work)
    tr = pa.emulate(llama8b, sysm, plc, work)
    gains = {r.resource: r for r in what_if_gains(llama8b, sysm, plc, work, tr.step_time_s)}
    ev, step = tr.events, int(tr.step_cycles[0])
    for resource in ("hbm", "launch"):
        busy = ev["duration"][ev["resource"] == resource]
        saved = int(busy.sum() - np.sum(-(-busy // 2)))  # each kernel rounds up on its own
        want = step / (step - saved)
        assert gains[resource].gain == pytest.approx(want, rel=1e-3), resource
    assert gains["hbm"].gain > 1.5  # batch 1 is HBM-bound
    for resource in ("tensor_core", "nvlink", "node_link", "sync"):
        assert gains[resource].gain == 1.0, resource


SYSTEMS = st.sampled_from(["h100", "h200", "b200"])
MODELS = st.sampled_from([n for n in preset_names()])
FORMATS = st.sampled_from(["bf16", "fp8", "int8", "int4", "mxfp4", "nvfp4"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    system=SYSTEMS,
    model=MODELS,
    batch=st.integers(1, 64),
    context=st.integers(0, 8192),
    weights=FORMATS,
    kv=st.sampled_from(["bf16", "fp8"]),
)
def test_emulated_never_beats_lower_bound(system, model, batch, context, weights, kv):
    cfg = pa.load_model(model)
    work = pa.Workload(batch=batch, context=context, tokens=2, weights=weights, kv=kv)
    sysm = pa.load_system(system, units="auto")
    plc = pa.place(cfg, sysm, work)
    tr = pa.emulate(cfg, sysm, plc, work)
    assert np.all(tr.step_cycles >= tr.lower_bound_cycles)
    assert np.all(tr.lower_bound_cycles > 0)


def test_stage_end_of_an_eager_host_by_hand():
    """Kernels of 10, 1, 1, 50 and 1 cycles, the host launching one every 5: kernel 1 runs
    [5, 15), 2 [15, 16), 3 [16, 17), 4 waits for its launch at 20: [20, 70), 5 [70, 71). With
    a CUDA graph (no host) they run back to back: 63."""
    from pyaccel.sim.gpu.engine import stage_end

    cycles = np.array([10, 1, 1, 50, 1], dtype=np.int64)
    assert stage_end(cycles, 5) == 71
    assert stage_end(cycles, 0) == 63


def test_eager_host_far_behind_sets_the_step(tmp_path):
    """gpu.eager_host: a host that takes 1 ms per launch (far above any kernel here) launches
    the pass's n kernels by n ms, and the last runs after its launch: the step is n x 1,000,000
    cycles plus the last kernel's own cycles; every wait is booked to ``host`` and the spans
    end where the step does."""
    from pyaccel.model.graph import build_graph
    from pyaccel.sim.gpu.engine import GpuPass

    model = _tiny(tmp_path, layers=2)
    eager = ROUND + ["launch_mode=eager", "host_launch_s=1e-3", "kernel_launch_eager_s=2e-6"]
    work = pa.Workload(tokens=1, context=64)
    tr = _trace(model, 1, work, sets=eager)
    sysm = pa.load_system("h100", units=1, overrides=eager)
    kernels = GpuPass(build_graph(model, work), sysm, pa.place(model, sysm, work)).kernels
    last = kernels[-1]
    assert last.launch == 2000  # the eager gap, not the graph's
    assert int(tr.step_cycles[0]) == len(kernels) * 1_000_000 + last.cycles
    ev = tr.events
    end = int((np.asarray(ev["start"]) + np.asarray(ev["duration"])).max())
    assert end == int(tr.step_cycles[0])
    host = np.asarray(ev["resource"]) == "host"
    assert int(np.asarray(ev["duration"])[host].sum()) > (len(kernels) - 1) * 900_000
    graph = _trace(model, 1, pa.Workload(tokens=1, context=64))
    assert int(graph.step_cycles[0]) < int(tr.step_cycles[0])
