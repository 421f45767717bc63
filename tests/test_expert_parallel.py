"""Expert parallelism: where experts live, the all-to-all's bytes by hand, and the hot-expert
holder setting the step."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.errors import PlacementError
from pyaccel.place.experts import held, spread
from pyaccel.sim.experts import busiest_link_rows_over, expert_load, expert_loads_over, homes

from conftest import write_config

# A tiny MoE with 8 experts, one a token: 8 GPUs of EP hold one expert each.
TINY_MOE = {
    "model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "vocab_size": 256, "num_local_experts": 8, "num_experts_per_tok": 1,
    "max_position_embeddings": 512,
}  # fmt: skip
HIDDEN = TINY_MOE["hidden_size"]


def test_spread_in_contiguous_blocks():
    assert spread(8, (4, 5, 6)) == (4, 4, 4, 5, 5, 5, 6, 6)
    assert held(spread(8, (4, 5, 6)), (4, 5, 6)) == [3, 3, 2]


def test_expert_load_by_hand():
    # 4 rows on 2 GPUs (rows 0, 1 on GPU 0; rows 2, 3 on GPU 1), experts 0, 1 on GPU 0 and
    # 2, 3 on GPU 1, two a row:
    # row 0 -> 0, 1: both local; row 1 -> 0, 2: sends to GPU 1; row 2 -> 2, 3: local;
    # row 3 -> 1, 3: sends to GPU 0. Each GPU computes 4 pairs, reads 2 experts, sends 1 row
    # and receives 1 (a row needing two experts on one GPU is sent there once).
    picks = np.array([[0, 1], [0, 2], [2, 3], [1, 3]])
    load = expert_load(picks, homes([2, 2], 1), np.array([0, 0, 1, 1]), 2)
    assert load.pairs.tolist() == [4, 4] and load.experts.tolist() == [2, 2]
    assert load.sent.tolist() == [1, 1] and load.received.tolist() == [1, 1]
    one_gpu = expert_load(np.array([[2, 3], [2, 3]]), homes([1, 1], 1), np.array([0, 0, 1, 1]), 2)
    assert one_gpu.sent.tolist() == [1, 0] and one_gpu.received.tolist() == [0, 1]
    assert one_gpu.experts.tolist() == [0, 2] and one_gpu.busiest_link_rows() == 1


def _ep_run(tmp_path, route, name):
    folder = tmp_path / name
    write_config(folder, TINY_MOE)
    path = tmp_path / f"{name}.npy"
    np.save(path, np.array(route, dtype=np.int64).reshape(8, 1, 1).repeat(2, axis=1))
    work = pa.Workload(batch=8, context=32, tokens=1, router=str(path))
    # the host's 150 us a step would hide a model this small: take it away
    system = pa.load_system("h100", units=8, overrides=["expert_layout=ep", "step_host_s=0"])
    cfg = pa.load_model(folder)
    plc = pa.place(cfg, system, work)
    return plc, pa.emulate(cfg, system, plc, work)


def test_all_to_all_bytes_by_hand_and_the_hot_holder_sets_the_step(tmp_path):
    # 8 sequences on 8 GPUs, one each; expert e on GPU e. Spread: sequence i -> expert i, all
    # local: no bytes move. Hot: every sequence -> expert 0: GPUs 1..7 each send their row to
    # GPU 0, which receives 7 rows of hidden x 2 B = 7 x 64 x 2 = 896 B in the dispatch (and
    # sends as many back in the combine), and computes all 8 rows itself.
    plc, spread_run = _ep_run(tmp_path, range(8), "spread")
    assert plc.layout.ep == 8 and plc.slot(0).expert_units == tuple(range(8))
    _, hot_run = _ep_run(tmp_path, [0] * 8, "hot")
    ev = {name: t.to_dataframe() for name, t in (("spread", spread_run), ("hot", hot_run))}
    for name, want in (("spread", set()), ("hot", {7 * HIDDEN * 2})):
        for kind in ("dispatch", "combine"):
            rows = ev[name][(ev[name].op == f"L0.{kind}") & (ev[name].resource == "nvlink")]
            assert set(rows.bytes) == want, (name, kind)  # spread: nothing moves on NVLink
            # the all-to-all is still launched and waits NVLink's small-message latency
            lead = ev[name][ev[name].op.isin([f"L0.{kind}.launch", f"L0.{kind}.latency"])]
            assert set(lead.resource) == {"launch", "sync"}, (name, kind)
    assert hot_run.step_cycles[0] > spread_run.step_cycles[0]
    for t in (spread_run, hot_run):
        assert (t.step_cycles >= t.lower_bound_cycles).all()


def test_ep_kernels_kept_per_load_are_the_kernels_made_afresh():
    # a plan keeps each GPU's expert kernels by (op, pairs, experts, stage) and the all-to-alls
    # by bytes; every step's layer kernels equal those of a plan that never saw a step
    from pyaccel.sim.gpu.engine import GpuPass

    cfg = pa.load_model("mixtral-8x7b")
    system = pa.load_system("h100", units=8, overrides=["expert_layout=ep"])
    work = pa.Workload(batch=16, weights="bf16")
    plc = pa.place(cfg, system, work)
    graph = plc.basis[0].with_workload(pa.Workload(batch=2, weights="bf16"))  # a GPU's share
    warm = GpuPass(graph, system, plc)
    rng = np.random.default_rng(5)
    for _ in range(6):
        picks = rng.integers(0, 8, (16, len(graph.moe_layers), 2))
        for n, layer in enumerate(graph.moe_layers[:4]):
            stage = warm.kernels[warm._ep_at[layer][0]].stage
            fresh = GpuPass(graph, system, plc)
            ops = warm._ep_ops[layer]
            ranks = (2,) * 8  # the 16 sequences, two on each GPU
            assert (warm.ep_plan.layer_kernels(warm.cost, n, ops, stage, picks, ranks)
                    == fresh.ep_plan.layer_kernels(fresh.cost, n, fresh._ep_ops[layer], stage,
                                                   picks, ranks))  # fmt: skip
    assert warm.ep_plan._kernels  # kept


def test_place_shows_where_experts_live_and_the_file_keeps_them(tmp_path):
    from typer.testing import CliRunner

    from pyaccel.cli import app

    write_config(tmp_path / "m", TINY_MOE)
    args = ["place", "--system", "h100", "--units", "4", "--model", str(tmp_path / "m"),
            "--set", "expert_layout=ep"]  # fmt: skip
    text = CliRunner().invoke(app, args).stdout
    assert "experts" in text and "0-1" in text and "6-7" in text
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert doc["format_version"] == 3 and doc["layout"]["ep"] == 4
    assert doc["layers"][1]["expert_units"] == [0, 0, 1, 1, 2, 2, 3, 3]
    back = pa.Placement.from_json(json.dumps(doc), model=str(tmp_path / "m"))
    assert back.slot(0).expert_units == (0, 0, 1, 1, 2, 2, 3, 3)
    doc["layers"][1]["expert_units"][0] = 9
    with pytest.raises(pa.errors.ConfigError, match="puts an expert on unit 9"):
        pa.Placement.from_json(json.dumps(doc), model=str(tmp_path / "m"))


def test_version_2_files_without_experts_still_load(tmp_path):
    write_config(tmp_path / "m", TINY_MOE)
    system = pa.load_system("h100", units=2)
    plc = pa.place(pa.load_model(tmp_path / "m"), system, pa.Workload())
    doc = json.loads(plc.to_json())
    doc["format_version"] = 2
    back = pa.Placement.from_json(json.dumps(doc), model=str(tmp_path / "m"))
    assert all(not s.expert_units for s in back.layers)


def test_expert_layout_choices():
    cfg = pa.load_model("mixtral-8x7b")
    work = pa.Workload(batch=4)
    tp = pa.place(cfg, pa.load_system("h100", units=8, overrides=["expert_layout=tp"]), work)
    assert tp.layout.ep is None and tp.layout.tp == 8
    auto = pa.place(cfg, pa.load_system("h100", units=8), work)
    assert "EP 8 x PP 1:" in auto.reason and "TP 8 x PP 1:" in auto.reason
    dense = pa.place(pa.load_model("llama-3.1-8b"), pa.load_system("h100", units=2), work)
    assert "EP" not in dense.reason


def test_pinned_ep_that_does_not_fit_is_refused(tmp_path):
    # HBM between what TP 2 and EP 2 need of the busiest GPU: TP fits, EP (attention copied to
    # both GPUs) does not
    from pyaccel.place import gpu, gpu_ep

    cfg = pa.load_model(write_config(tmp_path / "m", TINY_MOE))
    spec = pa.load_system("h100").spec
    graph = pa.build_graph(cfg, pa.Workload(batch=2, context=64), native_format="bf16")
    need = [max(p.level_use(u)["hbm"] for u in range(2))
            for p in (gpu.build(graph, spec, 2, 1), gpu_ep.build(graph, spec, 2, 1))]  # fmt: skip
    assert need[0] < need[1]
    sets = [f"hbm_capacity_bytes={(need[0] + need[1]) // 2}"]
    work = pa.Workload(batch=2, context=64)
    assert pa.place(cfg, pa.load_system("h100", units=2, overrides=sets), work).layout.tp == 2
    with pytest.raises(PlacementError, match="expert_layout = ep"):
        pa.place(cfg, pa.load_system("h100", units=2, overrides=[*sets, "expert_layout=ep"]),
                 work)  # fmt: skip


def test_gpu_auto_with_pinned_ep_seeks_the_fewest_gpus_an_ep_layout_fits():
    # one B200 holds mixtral at bf16 split by TP, but an EP layout needs 2+ GPUs: with
    # expert_layout = ep, --units auto is the fewest GPUs an EP layout holds (it was refused)
    cfg, work = pa.load_model("mixtral-8x7b"), pa.Workload(batch=16, weights="bf16")
    assert pa.place(cfg, pa.load_system("b200", units="auto"), work).n_units == 1
    plc = pa.place(cfg, pa.load_system("b200", units="auto", overrides=["expert_layout=ep"]),
                   work)  # fmt: skip
    assert plc.layout.ep == 2 and plc.n_units == 2
    assert "the fewest b200 GPUs an expert-parallel layout holds it on" in plc.reason


# --- LPU: experts whole on the chips of a stage ---------------------------------------------


def test_lpu_auto_with_pinned_ep_seeks_the_fewest_chips_an_ep_layout_fits():
    # --units auto with expert_layout = ep: the chip count is the fewest an expert-parallel
    # layout holds (it was the fewest a split-expert layout holds, where no EP layout might
    # fit: a traceback); where a whole expert outgrows one chip, a clear refusal
    from pyaccel.place import lpu

    cfg = pa.load_model("mixtral-8x7b")
    work = pa.Workload(batch=16, weights="int8")
    sysm = pa.load_system("groq-tsp", units="auto", overrides=["expert_layout=ep"])
    plc = pa.place(cfg, sysm, work)
    assert plc.layout.ep
    graph = plc.basis[0]
    # the next smaller count of whole stages of each width holds no EP layout
    below = {t * ((plc.n_units - 1) // t) for t in lpu.tp_candidates(sysm.spec)} - {0}
    assert all(lpu.best_for(graph, sysm.spec, n) is None for n in below)
    bf16 = pa.Workload(batch=16, weights="bf16")  # an expert of a layer: 352 MB > 231 MB SRAM
    with pytest.raises(PlacementError, match=r"expert_layout = ep.*352\.32 MB.*230\.69 MB"):
        pa.place(cfg, sysm, bf16)


def test_lpu_expert_plan_by_hand():
    from pyaccel.sim.lpu.plans import expert_plan, op_plan

    g = pa.build_graph(pa.load_model("tiny-mixtral"), pa.Workload(batch=3), native_format="bf16")
    up = next(o for o in g.ops if o.kind == "experts_gate_up_proj")
    down = next(o for o in g.ops if o.kind == "experts_down_proj")
    one = up.params // g.n_experts  # 2 x 128 x 64 weights of one expert's gate and up
    assert one == 2 * 128 * 64
    # 2 experts on the busiest chip, 5 (row, expert) pairs: each expert's blocks stream its own
    assert expert_plan(up, g, 4, 2, 5) == (("xgemv", one, (3, 2)),)
    # the down projection's all-reduce sums each row's top-k outputs: 3 rows x 64 x 2 B
    assert expert_plan(down, g, 4, 1, 2)[1] == ("allreduce", 3 * 64 * 2)
    assert op_plan(down, g, 4)[1] == ("allreduce", 3 * 64 * 2)  # split experts: the same sum
    # split experts: a step whose 8 rows (16 pairs) reach 4 experts, the busiest with 5 pairs;
    # each expert's half on a chip of 2 streams its own pairs, 5 + 4 + 4 + 3 (not 16 each)
    g8 = pa.build_graph(pa.load_model("tiny-mixtral"), pa.Workload(batch=8), native_format="bf16")
    j = next(j for j, (_, op) in enumerate(g8.expert_ops) if op.kind == "experts_gate_up_proj")
    assert op_plan(g8.routed_op(j, 5, 4), g8, 2) == (("xgemv", one // 2, (5, 4, 4, 3)),)
    assert op_plan(g8.routed_op(j, 8, 2), g8, 2) == (("xgemv", one // 2, (8, 8)),)


def _lpu_run(tmp_path, route, name, layout="ep"):
    folder = tmp_path / name
    write_config(folder, TINY_MOE)
    path = tmp_path / f"{name}.npy"
    np.save(path, np.array(route, dtype=np.int64).reshape(8, 1, 1).repeat(2, axis=1))
    work = pa.Workload(batch=8, context=32, tokens=1, router=str(path))
    system = pa.load_system("groq-tsp", units=8, overrides=[f"expert_layout={layout}"])
    cfg = pa.load_model(folder)
    # one stage of 8 chips, one expert each (the speed search would take fewer chips)
    from pyaccel.place import lpu

    graph = pa.build_graph(cfg, work, native_format=system.spec.native_format)
    plc = lpu.build(graph, system.spec, 8, 8, ep=layout == "ep")
    return plc, pa.emulate(cfg, system, plc, work)


def test_lpu_experts_whole_on_chips_and_the_hot_chip_sets_the_step(tmp_path):
    plc, spread_run = _lpu_run(tmp_path, range(8), "spread")
    assert plc.layout.ep == 8 and plc.layout.pp == 1
    slot = plc.slot(0)
    assert slot.expert_units == tuple(range(8))
    _, hot_run = _lpu_run(tmp_path, [3] * 8, "hot")  # chip 3 runs all 8 rows
    assert hot_run.step_cycles[0] > spread_run.step_cycles[0]
    for t in (spread_run, hot_run):
        assert (t.step_cycles >= t.lower_bound_cycles).all()


def test_expert_loads_of_many_steps_are_each_steps_own():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n_experts, units = int(rng.integers(2, 17)), int(rng.integers(1, 7))
        rows, steps = int(rng.integers(1, 10)), int(rng.integers(1, 6))
        top_k = int(rng.integers(1, min(n_experts, 4) + 1))
        owner = rng.integers(0, units, n_experts)
        home = np.sort(rng.integers(0, units, rows))
        picks = np.stack([[rng.choice(n_experts, top_k, replace=False) for _ in range(rows)]
                          for _ in range(steps)])  # fmt: skip
        loads = expert_loads_over(picks, home, owner, units)
        busiest = busiest_link_rows_over(loads)
        for t in range(steps):
            one = expert_load(picks[t], home, owner, units)
            for f in ("experts", "pairs", "sent", "received"):
                assert getattr(loads, f)[t].tolist() == getattr(one, f).tolist(), f
            assert busiest[t] == one.busiest_link_rows()


def test_lpu_ep_plans_kept_per_picks_are_the_plans_made_afresh():
    # a stage's routed-expert plans are kept per (op, picks, width); each step's plans equal
    # those of a simulator that never saw a step
    from pyaccel.sim.contract import StepShape
    from pyaccel.sim.lpu.engine import LpuSim

    cfg = pa.load_model("mixtral-8x7b")
    system = pa.load_system("groq-tsp", units="auto", overrides=["expert_layout=ep"])
    work = pa.Workload(batch=2, weights="int8")
    plc = pa.place(cfg, system, work)
    graph = plc.basis[0]
    warm = LpuSim(graph, system, plc)
    rng = np.random.default_rng(7)
    for _ in range(5):
        picks = rng.integers(0, 8, (2, len(graph.moe_layers), 2))
        counts = np.zeros((len(graph.moe_layers), 8), dtype=np.int64)
        for r in range(2):
            for n in range(len(graph.moe_layers)):
                np.add.at(counts[n], picks[r, n], 1)
        step = StepShape(graph, 100, warm.group_key, routed=graph.routed_ops(counts),
                         picks=picks)  # fmt: skip
        fresh = LpuSim(graph, system, plc)
        for i in range(len(warm.stages)):
            assert warm._routed_plans(step, i) == fresh._routed_plans(step, i)
    assert warm._ep._plans  # kept


# --- wafer: every expert a band of its layer's rect ---------------------------------------------


def test_wafer_places_each_expert_on_a_band_and_the_file_keeps_it():
    cfg = pa.load_model("mixtral-8x7b")
    plc = pa.place(cfg, pa.load_system("wse3", units="auto"), pa.Workload(batch=1))
    slot = plc.slot(0)
    sw, sh, cols = slot.region.expert_bands
    x0, y0, w, h = slot.region.rect
    # 8 experts: 8 bands along B in one column (the engine's expert_regions)
    assert (cols, sw, sh) == (1, w, h // 8)
    assert slot.expert_units == (slot.units[0],) * 8
    back = pa.Placement.from_json(plc.to_json())
    assert back.slot(0).region.expert_bands == (sw, sh, cols)
    assert not plc.slot("embed").expert_units and plc.slot("embed").region.expert_bands is None


# --- ASIC: a MoE layer spanning dies keeps its experts whole, the dies are EP units -------------

# tiny-mixtral (4 experts, top 2) on dies whose transistors hold about half a layer: every layer
# spans two dies, two experts on each
SPAN_DIES = {"transistors": 9.61e8, "kv_sram_bytes": 2e7}


def _asic_spanning(work):
    from pyaccel.sim.asic.engine import AsicPipeline

    cfg = pa.load_model("tiny-mixtral")
    system = pa.load_system("taalas-hc1", units="auto", etch=True, overrides=SPAN_DIES)
    plc = pa.place(cfg, system, work)
    graph = pa.build_graph(cfg, work, native_format=system.spec.native_format)
    return cfg, system, plc, AsicPipeline(graph, system, plc)


def test_asic_spanning_moe_layer_combines_over_the_links_of_the_experts_dies():
    work = pa.Workload(batch=4, context=16, tokens=2)
    cfg, system, plc, model = _asic_spanning(work)
    a, b = plc.slot(0).units
    assert plc.slot(0).expert_units == (a, a, b, b)
    names = [st.name for st in model.stages]
    hw, ex = model.hardware(), model.expert_hardware()
    gather, hop = names.index("L0.o_proj.gather"), names.index(f"link_die{b}_die{b + 1}")
    combine = names.index("L0.experts_down_proj.combine")
    link_a, link_b = hw[gather]  # a gather holds the links of both dies at once
    assert hw[hop].tolist() == [link_b, -1]  # a hop, its sending die's
    # experts 0, 1 send over die a's link, 2, 3 over die b's
    assert ex[combine].tolist() == [link_a, link_a, link_b, link_b]
    assert model.expert_stages()[combine] == 0
    # each expert a block of its own on every routed GEMV, used by no other stage
    up = names.index("L0.experts_gate_up_proj")
    others = set(hw.ravel().tolist()) - {hw[up, 0]}
    assert len(set(ex[up].tolist())) == 4 and not set(ex[up].tolist()) & others
    # no gather of expert outputs: they stay on their dies until the combine
    tr = pa.emulate(cfg, system, plc, work)
    ops = set(tr.events["op"])
    assert not any("experts" in o and ".gather" in o for o in ops)
    assert any(o.startswith("L0.experts_down_proj.combine") for o in ops)
    assert any(a.startswith("asic.routed_combine") for a in tr.assumptions)
    assert (tr.step_cycles >= tr.lower_bound_cycles).all()


@pytest.mark.parametrize(("batch", "pp", "ep"), [(6, 2, 4), (5, 2, 4), (7, 3, 2), (9, 4, 8),
                                                 (16, 2, 8)])  # fmt: skip
def test_each_gpu_keeps_the_kv_of_the_sequences_the_engine_homes_on_it(tmp_path, monkeypatch,
                                                                      batch, pp, ep):  # fmt: skip
    """The placement lays each GPU's KV out for the sequences whose rows the engine puts on it
    (dispatching their tokens from there): each micro-batch's sequences over the stage's GPUs,
    summed over the step's micro-batches. B = 6 over PP 2 x EP 4 was (2, 2, 1, 1) in the
    placement but (2, 2, 2, 0) in the engine."""
    import pyaccel.sim.gpu.expert_parallel as engine_ep
    from pyaccel.place import gpu_ep

    cfg = pa.load_model(write_config(tmp_path / "m", TINY_MOE))
    system = pa.load_system("h100", units=ep * pp, overrides=["expert_layout=ep"])
    work = pa.Workload(batch=batch, context=32, tokens=1)
    graph = pa.build_graph(cfg, work, native_format="bf16")
    plc = gpu_ep.build(graph, system.spec, ep, pp)
    seen = []  # the sequences on each GPU of every (micro-batch, MoE layer) the engine homes
    real = engine_ep.homes
    monkeypatch.setattr(engine_ep, "homes", lambda seqs, q: seen.append(tuple(seqs)) or
                        real(seqs, q))  # fmt: skip
    pa.emulate(cfg, system, plc, work)
    n_moe = len(graph.moe_layers)
    per_micro = seen[::n_moe]  # one step: each micro-batch's MoE layers one after another
    assert all(s == seen[i - i % n_moe] for i, s in enumerate(seen))
    homed = np.sum(per_micro, axis=0)
    assert homed.sum() == batch
    kv_per_seq = {k: graph.resident_bytes(k)[1] // batch for k in graph.layer_keys}
    for slot in plc.layers:
        for rank, kv in enumerate(slot.kv_bytes):
            assert kv == kv_per_seq[slot.layer] * homed[rank], (slot.layer, rank)
    # a micro-batch's attention is timed on the GPU home to most of its sequences, reading
    # their KV alone (it read the whole micro-batch's: the driver never saw data_parallel)
    from pyaccel.sim.driver import MicroBatchPasses
    from pyaccel.sim.inputs import engine_module

    passes = MicroBatchPasses(engine_module("gpu"), graph, system, plc)
    for size, seqs in zip(passes.sizes, per_micro, strict=True):
        assert passes.models[size].graph.workload.batch == max(seqs) < size
