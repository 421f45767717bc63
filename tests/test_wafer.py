"""Wafer engine and placer: a hand-derived op, published-range checks, placement errors and the
invariants of SPEC §9."""

import copy
import itertools

import numpy as np
import pytest

import pyaccel as pa
from pyaccel.emulation import what_if_system
from pyaccel.model.graph import build_graph
from pyaccel.place import wafer as placer
from pyaccel.place.kinds.wafer import WaferLayout
from pyaccel.sim import wafer as wafer_engine
from pyaccel.sim.driver import step_cycles
from pyaccel.sim.wafer.cost import RegionCoster


@pytest.fixture(scope="module")
def wse3():
    return pa.load_system("wse3", units=1)


@pytest.fixture(scope="module")
def run8b(wse3):
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(tokens=3)
    plc = pa.place(model, wse3, work)
    return model, plc, work, pa.emulate(model, wse3, plc, work)


def test_golden_qkv_meshgemv_on_a_4x4_region(tmp_path, wse3):
    # Tiny llama QKV: 128 outputs x 64 inputs, bf16, on a 4x4 region (wse3: 8 FMAC lanes,
    # 16 B/cycle reads, 8 B/cycle writes, 2-cycle DSD issue, 20-cycle message start, 4 B per
    # element on the fabric, 4 B links, hop 1, ramps 2 each way, add 1).
    # Tile per PE: 16 inputs x 32 outputs = 512 FMACs -> 64 lane cycles; SRAM reads 1,024 B of
    # weights + 1,024 B of partial sums = 128 cycles, writes 1,024 B = 128 cycles -> 128
    # (pe_sram); 16 DSD issues x 2 = 32 cycles. Local task 160.
    # All-reduce of 32 outputs (32 wavelets) over a line of 4 (2 groups, roots 1 and 3), every
    # PE sending at 160 + 20 = 180; a message crosses its sender's ramp out (2), its hops (1
    # each) and the receiver's ramp in (2), each link one wavelet per cycle:
    #   PE0 -> PE1 and PE2 -> PE3: head 185, tail 216 (link 2->3 busy to 213, PE3's ramp in
    #   to 214);
    #   root 1 streams on from 185 + 1 = 186: out of PE1 head 188, link 1->2 head 189; link
    #   2->3 is PE2's until 213: enters at 214 (last 245), PE3's ramp: head 217, tail 248;
    #   root 3 sums: starts 218, done 249; its multicast send starts at 218 + 20 = 238 (out of
    #   PE3: head 240, last 271); routers copy it 3 -> 2 -> 1 -> 0 (one hop each) and into each
    #   PE (2): PE0 has its last wavelet at 271 + 3 + 2 = 276.
    # Without start overheads the same run ends at 237, so mesh_message = 276 - 237 = 39. With
    # hop, ramp and add latencies zero as well it ends at 223 = 160 + 2 x 32 - 1 (two 32-wavelet
    # messages one after the other on link 2->3, the multicast streaming behind the second), so
    # mesh_hop = 237 - 223 = 14 and mesh_link = 223 - 160 = 63.
    from conftest import TINY_LLAMA, write_config

    model = pa.load_model(write_config(tmp_path / "tiny", TINY_LLAMA))
    graph = build_graph(model, pa.Workload(context=8, tokens=1).resolved("bf16"))
    qkv = next(op for op in graph.ops if op.kind == "qkv_proj")
    cost, axis = RegionCoster(wse3.spec, graph).op_cost(qkv, 4, 4, 0)
    assert cost.parts == (  # memoised costs are read-only: parts a tuple
        ("pe_sram", 128),
        ("fixed_latency", 32),
        ("mesh_message", 39),
        ("mesh_hop", 14),
        ("mesh_link", 63),
    )
    assert cost.cycles == 276 and axis == 1 and cost.transfers == 1


def test_llama_8b_wse3_in_published_band(run8b):
    # published 1,800 (launch) to 2,200 tok/s (later software): within x1.5 of the nearer end,
    # 1,200-3,300 (never an input)
    *_, tr = run8b
    assert 1200 <= tr.tokens_per_s_per_user <= 3300
    # the collectives (wavelets on links, hop latencies, message starts) take most of the step;
    # the bound counts the hops each all-reduce must cross, so it binds within x10 (it was x255
    # when it counted only SRAM bytes and FMACs) and hop latency sets most ops' bound
    assert tr.step_time_s < 10 * tr.lower_bound_step_time_s
    bound_by = list(tr.op_bounds["resource"])
    assert bound_by.count("mesh_hop") > len(bound_by) / 2
    rep = pa.Report.from_trace(tr)
    step = tr.step_time_s
    mesh = sum(rep.by_resource[r] for r in ("mesh_link", "mesh_hop", "mesh_message"))
    assert mesh / step > 0.8


@pytest.mark.parametrize("sets", [[], ["clock_hz=1.1e9"]], ids=["preset-clock", "paper-clock"])
def test_waferllm_shapes_wse2_in_published_band(sets):
    # WaferLLM's 2,700 tok/s converts its cycles at 1.1 GHz; like for like (the paper's clock)
    # and at the preset's 0.85 GHz, within x1.5: 1,800-4,050 (never an input)
    model, work = pa.load_model("waferllm-8b-shapes"), pa.Workload(tokens=2)
    sysm = pa.load_system("wse2", units=1, overrides=sets)
    tr = pa.emulate(model, sysm, pa.place(model, sysm, work), work)
    assert 1800 <= tr.tokens_per_s_per_user <= 4050


def test_70b_auto_wafers_and_speed():
    model, work = pa.load_model("llama-3.1-70b"), pa.Workload(tokens=2)
    sysm = pa.load_system("wse3", units="auto")
    plc = pa.place(model, sysm, work)
    assert 4 <= plc.n_units <= 6
    blocks = [plc.layers_on(u) for u in range(plc.n_units)]
    assert [k for b in blocks for k in b] == list(build_graph(model, work).layer_keys)
    tr = pa.emulate(model, sysm, plc, work)
    assert 300 <= tr.tokens_per_s_per_user <= 2100
    assert "wafer_io" in set(tr.events["resource"].tolist())


def test_70b_on_the_published_four_wafers_fits_and_misses_as_documented():
    # The published deployment (4 CS-3, 450 tok/s at launch) fits at the preset's per-PE
    # reservation (2,048 B of code, the vendor SpMV example's budget, + 1,229 B of buffers) and
    # runs faster than launch software did: x1.60 when this was written, outside x1.5, so the
    # row misses (issue 15; the 8B launch figure is x1.63 too: launch software was slower on
    # both). At the high end of the code's sourced range (8,322 B, the vendor matvec's bound)
    # it needs a fifth wafer.
    model, work = pa.load_model("llama-3.1-70b"), pa.Workload(tokens=2)
    sysm = pa.load_system("wse3", units=4)
    tr = pa.emulate(model, sysm, pa.place(model, sysm, work), work)
    assert 450 < tr.tokens_per_s_per_user <= 2 * 450
    high = pa.load_system("wse3", units=4, overrides=["pe_code_bytes=8322"])
    assert high.spec.ranges["pe_code_bytes"][1] == 8322
    with pytest.raises(pa.PlacementError, match="short of 1.04 GB in sram of wafer 1"):
        pa.place(model, high, work)


def test_70b_on_one_wafer_names_the_wafer_and_bytes():
    model = pa.load_model("llama-3.1-70b")
    with pytest.raises(pa.PlacementError) as err:
        pa.place(model, pa.load_system("wse3", units=1), pa.Workload())
    msg = str(err.value)
    assert "unit 0" in msg and "short of" in msg and " B" in msg
    assert "; units=4 would fit" in msg


def test_auto_strategy_is_the_fastest_candidate():
    auto = pa.load_system("wse3", units=1, overrides=["placement_strategy=auto"])
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1)
    graph = build_graph(model, work.resolved("bf16"))
    cands = placer.candidates(graph, auto, 1)
    assert {c.layout.strategy for c in cands} == {"interleave", "layer_regions",
                                                     "layer_groups"}  # fmt: skip
    times = [step_cycles(wafer_engine, graph, auto, c, graph.context) for c in cands]
    chosen = pa.place(model, auto, work)
    assert step_cycles(wafer_engine, graph, auto, chosen, graph.context) == min(times)
    assert "placement_strategy auto" in chosen.reason
    for c in cands:  # every region holds its tiles and KV share within 48 KiB - code - buffers
        c.check(graph)


@pytest.mark.parametrize("strategy", ["interleave", "layer_regions", "layer_groups"])
def test_a_named_strategy_keeps_only_its_own_layouts(strategy):
    system = pa.load_system("wse3", units=1, overrides=[f"placement_strategy={strategy}"])
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1)
    graph = build_graph(model, work.resolved("bf16"))
    assert {c.layout.strategy for c in placer.candidates(graph, system, 1)} == {strategy}
    assert pa.place(model, system, work).layout.strategy == strategy


def test_the_presets_default_to_the_published_interleave(wse3):
    for name in ("wse2", "wse3"):
        assert pa.load_system(name).spec.params.placement_strategy == "interleave"
        assert "placement_strategy" in pa.load_system(name).spec.assumptions
    model = pa.load_model("llama-3.1-8b")
    assert pa.place(model, wse3, pa.Workload()).layout.strategy == "interleave"


def test_an_unknown_strategy_names_the_choices():
    with pytest.raises(pa.ConfigError) as err:
        pa.load_system("wse3", overrides=["placement_strategy=diagonal"])
    msg = str(err.value)
    assert "placement_strategy" in msg and "'diagonal'" in msg
    assert "auto, layer_regions, interleave, layer_groups" in msg


def test_a_named_strategy_that_cannot_fit_says_so():
    # two users x 72k tokens of llama-3.1-8b KV cache fit per-layer regions but not the whole
    # grid interleave (every PE keeps a ceil share of every layer's tokens and features)
    model = pa.load_model("llama-3.1-8b")
    work = pa.Workload(batch=2, context=72_000, tokens=1)
    graph = build_graph(model, work.resolved("bf16"))
    inter = pa.load_system("wse3", units=1)
    regions = pa.load_system("wse3", units=1, overrides=["placement_strategy=layer_regions"])
    assert placer.candidates(graph, regions, 1) and not placer.candidates(graph, inter, 1)
    with pytest.raises(pa.PlacementError) as err:
        pa.place(model, inter, work)
    msg = str(err.value)
    assert "no interleave layout fits on 1 wse3 wafer(s)" in msg
    assert ("but layer_groups and layer_regions do: overrides=['placement_strategy=auto']"
            in msg)  # fmt: skip
    assert "for interleave, units=2 would fit" in msg


def test_layer_group_tiles_cover_the_grid_in_serpentine_order():
    tiles = placer._tiles(10, 9, 2, 3)
    assert sum(w * h for *_, w, h in tiles) == 90
    cells = {(x, y) for x0, y0, w, h in tiles for x in range(x0, x0 + w)
             for y in range(y0, y0 + h)}  # fmt: skip
    assert len(cells) == 90  # no overlap, no gap
    # down the first column of tiles, up the second: consecutive tiles share an edge
    assert [(x0, y0) for x0, y0, *_ in tiles] == [(0, 0), (0, 3), (0, 6), (5, 6), (5, 3), (5, 0)]
    for (ax, ay, aw, ah), (bx, by, _, bh) in itertools.pairwise(tiles):
        assert ax + aw == bx or ay + ah == by or by + bh == ay
    # tile counts are cut closest to square: a 755 x 1170 grid in 2 is 1 x 2, in 8 is 2 x 4
    cuts = [placer._cut(755, 1170, g) for g in (1, 2, 3, 4, 6, 8, 16)]
    assert cuts == [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (2, 4), (4, 4)]


def test_layer_groups_are_contiguous_blocks_one_stage_per_tile():
    from pyaccel.sim.wafer.engine import WaferPass

    system = pa.load_system("wse3", units=1, overrides=["placement_strategy=layer_groups"])
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1)
    graph = build_graph(model, work.resolved("bf16"))
    fit = placer._Fitter(graph, system)
    keys = list(graph.layer_keys)
    rects = placer._layer_groups(fit, keys, 4, 4)
    order = []
    for k in keys:  # each tile's keys are one contiguous run of layers
        if not order or order[-1] != rects[k]:
            assert rects[k] not in order
            order.append(rects[k])
    assert len(order) == 16
    plc = next(c for c in placer.candidates(graph, system, 1) if c.layout.tiles == (4, 4))
    wp = WaferPass(graph, system, plc)
    assert wp.n_stages == 16
    handoffs = [e for e in wp.entries if e.kind == "handoff"]
    assert len(handoffs) == 16  # 15 between tiles + the sampled token back to the embedding


def test_one_tile_of_layer_groups_is_the_whole_grid_interleave(wse3):
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1)
    graph = build_graph(model, work.resolved("bf16"))
    fit = placer._Fitter(graph, wse3)
    keys = list(graph.layer_keys)
    rects = placer._layer_groups(fit, keys, 1, 1)
    one = placer._placement(graph, wse3, 1, [
        placer._slot(graph, k, 0, rects[k], "layer_groups", tiles=(1, 1)) for k in keys
    ], WaferLayout(strategy="layer_groups", wafers=1, tiles=(1, 1)))  # fmt: skip
    whole = next(c for c in placer.candidates(graph, wse3, 1)
                 if c.layout.grids[0] == (755, 1170))  # fmt: skip
    assert step_cycles(wafer_engine, graph, wse3, one, 1024) == step_cycles(
        wafer_engine, graph, wse3, whole, 1024
    )


def test_per_pe_budget_includes_kv_cache(wse3):
    model = pa.load_model("llama-3.1-8b")
    small = build_graph(model, pa.Workload(context=1024).resolved("bf16"))
    big = build_graph(model, pa.Workload(context=60000, batch=4).resolved("bf16"))
    fit_s, fit_b = placer._Fitter(small, wse3), placer._Fitter(big, wse3)
    assert fit_b.pe_use([0], 100, 100) > fit_s.pe_use([0], 100, 100) + 10_000
    with pytest.raises(pa.PlacementError):
        pa.place(model, wse3, pa.Workload(context=60000, batch=4))


def test_emulated_never_beats_lower_bound(run8b):
    *_, tr = run8b
    assert np.all(tr.step_cycles >= tr.lower_bound_cycles)
    assert np.all(tr.lower_bound_cycles > 0)


def test_collectives_per_step_match_the_hand_count(run8b):
    """Llama-3.1-8B interleaved on one wafer, counted from the engine's mapping (MeshGEMV, the
    norms' sums, attention's phases), not from its output: per layer attn_norm 1 + qkv 1 + the
    GQA query shift 1 + attention's four all-reduces (scores along B; max, exp-sum and P.V
    along A) + o_proj 1 + mlp_norm 1 + gate_up 1 + down 1 = 11; then the embedding row's
    multicast, final_norm, lm_head and sampling: 32 x 11 + 4 = 356 collectives, each with
    wavelets on links (one mesh_link event apiece), and many messages each."""
    *_, tr = run8b
    info = tr.meta["transfers"]
    assert info["collectives"] == 32 * 11 + 4
    ev = tr.events
    step = ev["step"] == info["step"]
    assert np.sum(step & (ev["resource"] == "mesh_link")) == 32 * 11 + 4
    assert info["messages"] > 100 * info["collectives"]  # lines of hundreds of PEs
    # events of a step tile the step exactly (ops run one after another)
    assert ev["duration"][step].sum() == tr.step_cycles[info["step"]]


def test_longer_context_never_speeds_a_step(wse3):
    model = pa.load_model("llama-3.1-8b")
    work = pa.Workload(context=500, tokens=300)  # crosses one token per PE on a 683-wide grid
    tr = pa.emulate(model, wse3, pa.place(model, wse3, work), work, event_steps=())
    assert np.all(np.diff(tr.step_cycles) >= 0)
    assert tr.step_cycles[-1] > tr.step_cycles[0]  # tokens per PE grew at least once
    assert np.all(np.diff(tr.lower_bound_cycles) >= 0)


def test_halving_link_width_never_speeds_a_step(run8b):
    # Exact for the lower bound (it does not use the mesh links). For the engine: links are
    # reserved first come first served in a fixed task order, so a slower link could in
    # principle reorder contention; tolerance 0 % is asserted and holds on this case.
    model, plc, work, base = run8b
    slow_sys = pa.load_system("wse3", units=1, overrides=["link_bytes_per_cycle=2"])
    slow = pa.emulate(model, slow_sys, plc, work)
    assert np.all(slow.step_cycles >= base.step_cycles)
    assert np.all(slow.lower_bound_cycles == base.lower_bound_cycles)


@pytest.mark.parametrize("resource", ["pe_compute", "pe_sram", "mesh_link", "wafer_io",
                                      "fixed_latency"])  # fmt: skip
def test_faster_resource_never_slows_a_step(resource, run8b, wse3):
    model, plc, work, base = run8b
    fast = pa.emulate(model, what_if_system(wse3, resource), plc, work)
    assert np.all(fast.step_cycles <= base.step_cycles)
    assert np.all(fast.lower_bound_cycles <= base.lower_bound_cycles)


def test_heatmap_arrays(run8b):
    """Every row of the interleaved region runs the same collectives along x and every column
    the same along y (wafer.symmetric_lines), so a PE's reserved link cycles are its column's
    x-traffic plus its row's y-traffic, exactly: busy[y, x] = a[x] + b[y] inside the region,
    and nothing outside it. A transposed or mis-placed line would break the identity."""
    _, plc, _, tr = run8b
    busy, sram = tr.arrays["link_busy_cycles"], tr.arrays["sram_bytes"]
    assert busy.shape == sram.shape == (1, 1170, 755)
    assert sram.max() <= 49152
    assert sram.min() == 2048 + 1229  # idle PEs keep code and buffers only (wse3 preset)
    x0, y0, w, h = plc.layers[1].region.rect
    inside = busy[0, y0 : y0 + h, x0 : x0 + w].astype(np.int64)
    separable = inside[:, :1] + inside[:1, :] - inside[0, 0]
    assert inside.max() > 0 and np.array_equal(inside, separable)
    outside = busy[0].copy()
    outside[y0 : y0 + h, x0 : x0 + w] = 0
    assert not outside.any()


def test_heatmaps_are_made_when_read_and_equal_those_made_at_once(run8b, wse3):
    """A run that never reads its heatmaps never builds them; read later (after other runs
    on the same placement), they are the arrays the step had; pickled, a plain dict."""
    import pickle

    from pyaccel.trace import LazyArrays

    model, plc, work, _ = run8b
    now = pa.emulate(model, wse3, plc, work)
    made = {k: v.copy() for k, v in now.arrays.items()}
    later = pa.emulate(model, wse3, plc, work)
    assert isinstance(later.arrays, LazyArrays) and "not made yet" in repr(later.arrays)
    assert "sram_bytes" in later.arrays and len(later.arrays) == 2  # without making them
    assert "not made yet" in repr(later.arrays)
    pa.emulate(model, wse3, plc, pa.Workload(context=work.context // 2, tokens=2))
    assert list(later.arrays) == list(made)
    assert all(np.array_equal(later.arrays[k], made[k]) for k in made)
    back = pickle.loads(pickle.dumps(later.arrays))
    assert type(back) is dict and all(np.array_equal(back[k], made[k]) for k in made)
    with pytest.raises(KeyError):
        later.arrays["nothing"]


def test_heatmap_png_draws_the_traces_arrays(run8b, tmp_path):
    """The picture is the data: the same trace gives the same bytes, and a trace whose link use
    differs (the region's links busy elsewhere) gives a different picture."""
    import matplotlib.image as mpimg

    from pyaccel.plots import wafer_heatmap

    *_, tr = run8b
    a = wafer_heatmap(tr, tmp_path / "a.png").read_bytes()
    assert wafer_heatmap(tr, tmp_path / "b.png").read_bytes() == a
    shifted = copy.copy(tr)
    shifted.arrays = {**tr.arrays, "link_busy_cycles": np.roll(tr.arrays["link_busy_cycles"],
                                                               200, axis=2)}  # fmt: skip
    assert wafer_heatmap(shifted, tmp_path / "c.png").read_bytes() != a
    image = mpimg.imread(tmp_path / "a.png")
    assert image.ndim == 3 and len(np.unique(image.reshape(-1, image.shape[2]), axis=0)) > 16


def test_heatmap_shows_link_time_in_seconds_with_its_unit(run8b):
    # the colour bar read "cycles per pass": SPEC §6 has reports give times in seconds
    from pyaccel.plots import _figure, _wafer_figure

    *_, tr = run8b
    fig = _wafer_figure(tr)
    try:
        link, sram, link_bar, sram_bar = fig.axes
        assert "busy time" in link.get_title() and "cycles" not in link_bar.get_ylabel()
        assert link_bar.get_ylabel() == "link busy time per pass (us)"
        assert sram_bar.get_ylabel() == "KiB"
        shown = np.asarray(link.images[0].get_array())
        width = tr.arrays["link_busy_cycles"].shape[2]
        us = tr.arrays["link_busy_cycles"][0] / tr.clock_hz * 1e6
        assert np.allclose(shown[:, :width], us) and np.nanmax(shown) < 1e4  # us, not cycles
    finally:
        _figure().close(fig)


@pytest.mark.parametrize("name", ["tiny-mixtral", "tiny-deepseek-v3", "tiny-qwen3", "tiny-llama"])
def test_tiny_models_of_every_family_run(name, wse3):
    model, work = pa.load_model(name), pa.Workload(tokens=2, batch=2)
    tr = pa.emulate(model, wse3, pa.place(model, wse3, work), work)
    assert np.all(tr.step_cycles >= tr.lower_bound_cycles) and tr.step_cycles[0] > 0


def test_batch_fills_the_layer_pipeline():
    regions = pa.load_system("wse3", units=1, overrides=["placement_strategy=layer_regions"])
    model = pa.load_model("llama-3.1-8b")
    one, many = pa.Workload(tokens=1), pa.Workload(tokens=1, batch=16)
    plc = pa.place(model, regions, many)  # regions sized for 16 users' KV cache
    t1 = pa.emulate(model, regions, plc, one)
    t16 = pa.emulate(model, regions, plc, many)
    assert t16.meta["micro_batches"] == 16
    assert t16.tokens_per_s > 4 * t1.tokens_per_s
    # 16 micro-batches do not fill 35 stages: each user still sees one pass per token
    assert t16.tokens_per_s_per_user <= t1.tokens_per_s_per_user


def test_placement_json_round_trip_emulates_the_same(run8b, wse3):
    model, plc, work, tr = run8b
    back = pa.Placement.from_json(plc.to_json())
    again = pa.emulate(model, wse3, back, work, event_steps=())
    assert again.step_cycles.tolist() == tr.step_cycles.tolist()


def test_moe_experts_run_on_their_own_regions(wse3):
    # tiny-mixtral: 4 experts (top 2) -> 4 bands along B of each MoE layer's region; the down
    # projection reduces inside its band, then the top-k combine all-reduces along B.
    model, work = pa.load_model("tiny-mixtral"), pa.Workload(tokens=1)
    graph = build_graph(model, work.resolved("bf16"))
    coster = RegionCoster(wse3.spec, graph)
    sw, sh, cols = coster.expert_regions(8, 16)
    assert (sw, sh, cols) == (8, 16 // model.n_experts, 1)
    down = next(op for op in graph.ops if op.kind == "experts_down_proj")
    cost, _ = coster.op_cost(down, 8, 16, 1)
    assert cost.transfers == 2
    assert set(cost.busy) == {(1, sh), (1, 16)}


def test_more_wafers_than_layer_blocks_says_the_limit():
    model = pa.load_model("llama-3.1-8b")
    with pytest.raises(pa.PlacementError) as err:
        pa.place(model, pa.load_system("wse3", units=40), pa.Workload(tokens=1))
    assert "40 wse3 wafer(s) for 34 layer blocks" in str(err.value)
    assert "at most units=34" in str(err.value)


def test_layer_groups_on_wafers_holding_one_block_each():
    # 8B over 20 wafers: some wafers hold a single block, which gets one tile (the whole grid);
    # the others are still cut into tiles
    system = pa.load_system("wse3", units=20, overrides=["placement_strategy=layer_groups"])
    model, work = pa.load_model("llama-3.1-8b"), pa.Workload(tokens=1)
    plc = pa.place(model, system, work)
    per = plc.layout.tiles_per_wafer
    assert len(per) == 20 and (1, 1) in per and any(t != (1, 1) for t in per)
    tr = pa.emulate(model, system, plc, work)
    assert np.all(tr.step_cycles >= tr.lower_bound_cycles)


def test_memoised_op_costs_are_read_only(wse3):
    # the coster hands one memoised cost to every op of the same shape and region: nothing a
    # caller does to it may change what the next op is told
    graph = build_graph(pa.load_model("tiny-llama"), pa.Workload(tokens=1).resolved("bf16"))
    coster = RegionCoster(wse3.spec, graph)
    op = next(o for o in graph.ops if o.op_class == "matmul")
    cost, _ = coster.op_cost(op, 6, 5, 0)
    assert coster.op_cost(op, 6, 5, 0)[0] is cost and cost.busy
    with pytest.raises(AttributeError):
        cost.parts.append(("mesh_link", 1))
    with pytest.raises(TypeError):
        cost.busy[(0, 1)] = np.zeros(1, dtype=np.int64)
    for vec in cost.busy.values():
        with pytest.raises(ValueError, match="read-only"):
            vec[0] += 1


def test_collective_time_is_split_into_links_hops_and_message_starts(run8b, wse3):
    """A collective's hop latency and message start costs are classes of their own, each with
    its what-if knob; on llama-3.1-8b the hops dominate, and the headline class (largest
    occupancy) is the class whose doubling gains most."""
    model, plc, work, tr = run8b
    rep = pa.Report.from_trace(tr)
    assert {"mesh_link", "mesh_hop", "mesh_message"} <= set(rep.by_resource)
    gains = {r.resource: r.gain for r in rep.what_if}
    assert {"mesh_link", "mesh_hop", "mesh_message"} <= set(gains)
    assert rep.bottleneck == rep.what_if[0].resource == "mesh_hop"
    assert gains["mesh_hop"] > gains["mesh_link"] > 1.0
