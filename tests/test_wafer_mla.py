"""MLA's absorbed up-projections on the wafer (wafer.mla_absorbed): the per-PE tiles of W_UK and
W_UV that the placer holds and the engine times, their MeshGEMV tasks and all-reduces counted by
hand on a tiny model, and DeepSeek-V3's attention on WSE-3 at least its latent part plus the
absorbed work's lower bound."""

import math

import pytest

import pyaccel as pa
from pyaccel.model.graph import build_graph
from pyaccel.place.kinds.wafer import wafer_of
from pyaccel.sim.wafer.cost import RegionCoster
from pyaccel.sim.wafer.entries import Region
from pyaccel.sim.wafer.tasks import Costs, LineAllReduce


@pytest.fixture(scope="module")
def wse3():
    return pa.load_system("wse3", units=1)


def _tiny(context: int = 10):
    # tiny-deepseek-v3: 4 heads, nope 16, v 16, latent 32 + rope 8; bf16 weights and cache
    graph = build_graph(pa.load_model("tiny-deepseek-v3"),
                        pa.Workload(context=context, tokens=1, weights="bf16"))  # fmt: skip
    return graph, next(o for o in graph.ops if o.kind == "attention")


def test_absorbed_tiles_and_bytes_per_pe_by_hand(wse3):
    graph, op = _tiny()
    coster = RegionCoster(wse3.spec, graph)
    # 4 x 8 region: W_UK's 4 x 16 = 64 query inputs along A (16 a PE), its 32 latent outputs
    # along B (4 a PE): 16 x 4 weights; W_UV's 32 latent inputs along B (4), its 4 x 16 = 64
    # outputs along A (16): 4 x 16. 128 weights a PE, 256 B at bf16; 32 PEs hold all 4,096
    assert coster.absorbed_tiles(4, 8) == ((16, 4), (4, 16))
    assert coster.attention_weight_pe_bytes(op, 4, 8) == 256 == 8192 // 32
    # 3 x 5: ceil(64 / 3) = 22 and ceil(32 / 5) = 7, 2 x 154 = 308 weights = 616 B on the
    # fullest PE, more than the even spread ceil(8,192 / 15) = 547 B
    assert coster.absorbed_tiles(3, 5) == ((22, 7), (7, 22))
    weights, kv = coster.pe_bytes([op], 3, 5)
    assert weights == 616 and kv == coster.kv_pe_bytes(op, 3, 5)
    # GQA keeps no absorbed weights (its sinks, if any, spread evenly)
    llama = build_graph(pa.load_model("tiny-llama"), pa.Workload(context=10, tokens=1))
    assert RegionCoster(wse3.spec, llama).absorbed_tiles(4, 8) == ()


def test_absorbed_gemv_tasks_and_allreduces_by_hand(wse3):
    # wse3: 8 FMAC lanes, 16 B/cycle SRAM reads, 8 B/cycle writes, 2-cycle DSD issue, 4 B per
    # fabric element on 4 B links (one wavelet an element).
    # W_UK on 4 x 8, one row: 16 x 4 = 64 FMACs -> 8 lane cycles; reads its 128 B of weights
    # and 128 B of partial sums = 16 cycles, writes 128 B = 16 cycles -> 16 (pe_sram); 16 DSD
    # issues (one an input) = 32 cycles. Its partials, the 4 heads' 4 latent features of the
    # PE, 16 elements, all-reduced along A (a line of 4): each token's PEs get the query.
    # W_UV: 4 x 16 = 64 FMACs, the same 16 pe_sram cycles, 4 issues = 8 cycles; its 16 outputs
    # all-reduced along B (a line of 8).
    graph, op = _tiny()
    cost, _ = RegionCoster(wse3.spec, graph).op_cost(op, 4, 8, 1)
    first, first_line = cost.collectives[0]
    last, last_line = cost.collectives[-1]
    assert cost.parts[:2] == (("pe_sram", 16), ("fixed_latency", 32)) and first == 2
    assert (first_line.axis, first_line.n, first_line.seg, first_line.nwav) == (0, 4, 4, 16)
    assert cost.parts[last - 2 : last] == (("pe_sram", 16), ("fixed_latency", 8))
    assert (last_line.axis, last_line.n, last_line.seg, last_line.nwav) == (1, 8, 8, 16)
    assert first_line.broadcast and last_line.broadcast
    # the latent attention's own four all-reduces lie between them
    assert len(cost.collectives) == 6
    assert all(isinstance(line, LineAllReduce) for _, line in cost.collectives)


def _absorbed_floor(c: Costs, w: int, h: int) -> int:
    """DeepSeek-V3's absorbed work on a ``w x h`` region, one row, by hand (cycles): the fullest
    PE's FMACs of each GEMV at its lanes (W_UK: ceil(128 x 128 / w) inputs x ceil(512 / h)
    features; W_UV: ceil(512 / h) x ceil(128 x 128 / w)), and each all-reduce's broadcast
    across its whole line (w - 1 hops along A, h - 1 along B) after one message start."""
    fmacs = math.ceil(128 * 128 / w) * math.ceil(512 / h)
    return 2 * math.ceil(fmacs / c.lanes) + (w - 1 + h - 1) * c.hop + 2 * c.overhead


def test_deepseek_v3_attention_holds_the_absorbed_work():
    cfg, work = pa.load_model("deepseek-v3"), pa.Workload(context=4096, tokens=1)
    system = pa.load_system("wse3", units="auto")
    plc = pa.place(cfg, system, work)
    trace = pa.emulate(cfg, system, plc, work, event_steps={0})
    ev = trace.to_dataframe()
    att = ev[(ev.step == 0) & (ev.kind == "attention")]
    spent = att.groupby(["layer", "unit"]).duration.sum()
    # the same attention op without its absorbed GEMVs (the latent scores, softmax and sum)
    graph = build_graph(cfg, trace.workload)
    latent_only = RegionCoster(system.spec, graph)
    latent_only.absorbed_tiles = lambda w, h: ()
    floors = 0
    for slot in (s for s in plc.layers if isinstance(s.layer, int)):
        reg = Region.of(slot)
        op = next(o for o in graph.ops_of(slot.layer) if o.kind == "attention")
        assert op.k == 4097
        floor = _absorbed_floor(latent_only.c, reg.w, reg.h)
        latent = latent_only._attention(op, (reg.w, reg.h)).cycles
        assert spent[(slot.layer, wafer_of(slot))] >= latent + floor, slot.layer
        floors += floor
    assert trace.step_cycles[0] >= floors > 61 * 1000  # 61 layers on grids ~755 x 1,152
