"""A hardwired die's GEMV time from its ROM organisation (issue 17, point 1), by hand.

R = 512 cells per bitline, 4-bit cells, one adder-tree level a cycle (the HC1 preset's values).
A b-bit weight takes ceil(b / 4) cells; a lane holds R // c inputs of one output channel; a
channel's K inputs spread over S = ceil(K / (R // c)) lanes whose sums meet in ceil(log2 S) tree
levels. A block is busy min(K, R // c) x c row reads, then drains: matmul latency 4 + tree + one
register."""

from __future__ import annotations

import pytest

import pyaccel as pa
from pyaccel.errors import ConfigError
from pyaccel.formats import get_format
from pyaccel.model.graph import build_graph
from pyaccel.model.ops import matmul_op
from pyaccel.place.kinds import asic_rom
from pyaccel.sim.asic import engine as asic

HC1 = "taalas-hc1"


def _params():
    return pa.load_system(HC1).spec.params


@pytest.mark.parametrize(
    "shape,bits,lanes,reads,levels",
    [
        ((64, 1024), 3, 64 * 2, 512, 1),  # 1 cell, 512 inputs a lane: 2 lanes a channel
        ((64, 2048), 3, 64 * 4, 512, 2),  # twice the inputs: twice the lanes, one more level
        ((64, 1024), 6, 64 * 4, 512, 2),  # 2 cells, 256 inputs a lane: same as twice the inputs
        ((128, 1024), 3, 128 * 2, 512, 1),  # twice the output channels: twice the lanes only
        ((64, 256), 3, 64, 256, 0),  # fewer inputs than a lane holds: fewer row reads
        ((64, 256), 6, 64, 512, 0),  # ... and 6 bits read two cells an input
        ((64, 14336), 3, 64 * 28, 512, 5),  # down_proj's K: 28 lanes, ceil(log2 28) = 5
    ],
)
def test_gemv_block_by_hand(shape, bits, lanes, reads, levels):
    block = asic_rom.gemv_block([shape], bits, _params())
    assert (block.lanes, block.row_reads, block.tree_levels) == (lanes, reads, levels)
    c = 1 if bits <= 4 else 2
    assert block.cells == shape[0] * shape[1] * c


def _stage(rows: int, cols: int, role: str):
    """The engine's stage of one hc1 GEMV (role ``mlp``: 3 bits, ``attn``: 6 bits)."""
    spec = pa.load_system(HC1).spec
    graph = build_graph(pa.load_model("tiny-llama"), pa.Workload(weights="hc1"))
    op = matmul_op("L0.x", 0, "x_proj", "col", 1, [(rows, cols)], get_format("hc1"), role)
    st = asic.AsicCost(spec, graph).gemv(op, (0,))
    return st.occ, st.lat


def test_twice_the_rows_or_six_bits_take_longer():
    # busy 512 row reads; drain 4 + tree + register 1
    base = _stage(64, 1024, "mlp")
    assert base == (512, 4 + 1 + 1)
    assert _stage(64, 2048, "mlp") == (512, 4 + 2 + 1)  # twice the ROM rows (inputs)
    assert _stage(64, 1024, "attn") == (512, 4 + 2 + 1)  # 6 instead of 3 bits
    assert _stage(128, 1024, "mlp") == base  # twice the output channels: lanes, not time
    # below a lane's inputs the row reads move: 128 -> 256 inputs, or 3 -> 6 bits
    assert _stage(64, 128, "mlp") == (128, 5)
    assert _stage(64, 256, "mlp") == (256, 5)
    assert _stage(64, 128, "attn") == (256, 5)


def _steps(weights: str, **sets):
    cfg = pa.load_model("tiny-llama")
    system = pa.load_system(HC1, units="auto", etch=True, overrides=sets or None)
    work = pa.Workload(context=16, tokens=2, weights=weights)
    return pa.emulate(cfg, system, pa.place(cfg, system, work), work)


def test_wider_weights_slow_an_etched_tiny_model():
    # tiny-llama's GEMVs have K = 64 or 160 inputs, below a lane's: int8 reads two cells an input,
    # int4 one, so each of its 4 x 4 + 1 GEMVs reads twice the rows
    slow, fast = _steps("int8"), _steps("int4")
    k_sum = 4 * (64 + 64 + 64 + 160) + 64  # qkv, o, gate_up, down per layer; head
    assert int(slow.step_cycles[-1] - fast.step_cycles[-1]) == k_sum


def test_more_tree_levels_a_cycle_never_slow():
    fast = _steps("hc1", adder_tree_levels_per_cycle=3)
    assert _steps("hc1").step_cycles[-1] >= fast.step_cycles[-1]


# --- LoRA ------------------------------------------------------------------------------------


def _hc1(**sets):
    """(trace, qkv stages) of one llama-3.1-8b token on HC1 with ``sets``."""
    cfg = pa.load_model("llama-3.1-8b")
    system = pa.load_system(HC1, overrides=sets or None)
    work = pa.Workload(context=64, tokens=1)
    plc = pa.place(cfg, system, work)
    graph = build_graph(cfg, work, native_format="hc1")
    stages, _ = asic.build_stages(graph, system.spec, plc)
    return pa.emulate(cfg, system, plc, work), [s for s in stages if s.kind == "qkv_proj"]


def test_lora_adapter_timed_from_its_sram_by_hand():
    # rank 16 on q_proj and v_proj, bf16: per layer q 16 x (4096 + 4096) x 2 + v 16 x (4096 + 1024)
    # x 2 = 425,984 B; x 32 layers = 13,631,488 B = all of lora_sram_bytes.
    # 13,631,488 B / 16 KiB = 832 banks over 64 adapted tensors: 13 banks x 16 B = 208 B/cycle.
    # q: A 131,072 B -> 631 cycles, tree over 104 MACs -> 7 levels, B 131,072 B -> 631: 1,269;
    # v: 631 + 7 + 32,768 / 208 -> 158 = 796. The qkv block is busy max(512, 1,269) = 1,269.
    (base, plain), (lora, qkv) = _hc1(), _hc1(lora_rank=16)
    assert {s.occ for s in plain} == {512} and {s.resource for s in plain} == {"rom_read"}
    assert {s.occ for s in qkv} == {1269} and {s.resource for s in qkv} == {"kv_sram"}
    assert int(lora.step_cycles[0] - base.step_cycles[0]) == 32 * (1269 - 512)


def test_lora_rank_beyond_its_sram_names_the_limit():
    with pytest.raises(ConfigError, match=r"lora_rank = 32: .*\(at most rank 16\)"):
        _hc1(lora_rank=32)


# --- the preset's derivation (its header), recomputed ---------------------------------------

# each ranged parameter's slow end (the KV SRAM is derived, so lane cost and share move it)
SLOW_END = {
    "clock_hz": "low",
    "rom_rows_per_bitline": "high",
    "lane_transistors": "high",
    "lane_logic_share": "low",
    "kv_sram_bank_bytes": "high",
    "kv_sram_port_bytes": "low",
    "matmul_latency_cycles": "high",
    "vector_latency_cycles": "high",
    "fused_op_busy_cycles": "high",
    "adder_tree_levels_per_cycle": "low",
}


def _published_workload_tok_s(sets: dict) -> float:
    cfg = pa.load_model("llama-3.1-8b")
    system = pa.load_system(HC1, overrides=sets or None)
    work = pa.Workload(batch=1, context=1024, tokens=1024)
    return pa.emulate(cfg, system, pa.place(cfg, system, work), work).tokens_per_s_per_user


def test_derivation_nominal_and_corners():
    import tomllib
    from importlib import resources

    text = resources.files("pyaccel.hw.presets").joinpath(f"{HC1}.toml").read_text()
    params = tomllib.loads(text)["params"]
    ranged = {k: (v["low"], v["high"]) for k, v in params.items() if "low" in v}
    assert set(ranged) - {"kv_sram_bytes", "prefill_chunk_tokens"} == set(SLOW_END)
    slow = {k: ranged[k][0 if end == "low" else 1] for k, end in SLOW_END.items()}  # decode
    fast = {k: ranged[k][1 if end == "low" else 0] for k, end in SLOW_END.items()}
    got = [_published_workload_tok_s(s) for s in ({}, slow, fast)]
    # the header's figures: nominal 11,239; slow corner 2,554; fast corner 37,717 tok/s per user
    assert got == pytest.approx([11_239, 2_554, 37_717], abs=1)
    assert got[1] < 17_000 < got[2]  # the derivation brackets the published claim
