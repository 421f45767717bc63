"""Architectures users bring beyond Llama/Qwen/Mixtral/DeepSeek-V3 (issue 19): their configs,
graphs and runs on every kind. Their reference forward passes are held to transformers' logits
in tests/test_numerics_reference.py (golden files and live variants)."""

from __future__ import annotations

import pytest

import pyaccel as pa
from pyaccel.model.config import config_from_dict
from pyaccel.results import run

# Real shapes (the families' published configs): parameter counts as their model cards give.
PHI3_MINI = {
    "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "vocab_size": 32064, "max_position_embeddings": 4096,
    "original_max_position_embeddings": 4096, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
    "sliding_window": 2047, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
DEEPSEEK_V2_LITE = {
    "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
    "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "vocab_size": 102400, "kv_lora_rank": 512, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64,
    "num_experts_per_tok": 6, "n_shared_experts": 2, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
    "routed_scaling_factor": 1.0, "max_position_embeddings": 163840, "rms_norm_eps": 1e-6,
}  # fmt: skip


GEMMA2_9B = {
    "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
    "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
    "vocab_size": 256000, "query_pre_attn_scalar": 256, "sliding_window": 4096,
    "max_position_embeddings": 8192,
}  # fmt: skip
GEMMA3_1B = {
    "model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
    "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
    "vocab_size": 262144, "query_pre_attn_scalar": 256, "sliding_window": 512,
    "max_position_embeddings": 32768, "rope_local_base_freq": 10000.0,
}  # fmt: skip


LLAMA4_SCOUT = {
    "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048, "num_local_experts": 16,
    "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "rope_theta": 500000.0,
    "max_position_embeddings": 10485760,
}  # fmt: skip


def _graph(raw, name):
    cfg = config_from_dict(raw, name, name)
    return cfg, pa.build_graph(cfg, pa.Workload(batch=1, context=64), native_format="bf16")


def test_phi3_mini_shapes():
    cfg, g = _graph(PHI3_MINI, "phi-3-mini")
    assert round(g.param_count / 1e9, 2) == 3.82  # Phi-3-mini: 3.8B parameters
    # a sliding window on every layer, as HF's Phi-3 mask applies it
    assert cfg.sliding_window == 2047 and all(cfg.is_sliding(i) for i in range(32))
    att = next(o for o in g.ops_of(0) if o.kind == "attention")
    assert att.k == 65  # 64 cached + the new token, inside the window


def test_deepseek_v2_lite_shapes():
    cfg, g = _graph(DEEPSEEK_V2_LITE, "deepseek-v2-lite")
    assert round(g.param_count / 1e9, 1) == 15.7  # DeepSeek-V2-Lite: 15.7B total
    assert cfg.attention == "mla" and cfg.kv_elems_per_token_layer == 512 + 64
    assert cfg.dense_layers == (0,) and g.moe_layers == tuple(range(1, 27))
    assert cfg.mtp_layers == 0


def test_gemma_shapes():
    cfg, g = _graph(GEMMA2_9B, "gemma-2-9b")
    assert round(g.param_count / 1e9, 2) == 9.24  # Gemma 2 9B: 9.24B (embeddings tied)
    assert cfg.tied_embeddings and cfg.hidden_act == "gelu_tanh"
    assert (cfg.attn_softcap, cfg.final_softcap) == (50.0, 30.0)  # HF's defaults
    assert cfg.layer_types[:2] == ("sliding_attention", "full_attention")
    norms = [o.kind for o in g.ops_of(0) if o.op_class == "norm"]
    assert norms == ["attn_norm", "post_attn_norm", "mlp_norm", "post_ffn_norm"]
    assert any(o.kind == "logit_softcap" for o in g.ops_of("head"))
    cfg3, g3 = _graph(GEMMA3_1B, "gemma-3-1b")
    assert round(g3.param_count / 1e9, 2) == 1.00  # Gemma 3 1B
    assert [i for i, t in enumerate(cfg3.layer_types) if t == "full_attention"] == [5, 11, 17, 23]
    assert cfg3.qk_norm and cfg3.final_softcap == 0 and cfg3.local_rope_theta == 10000.0


def _active(cfg, g) -> float:
    shared = sum(o.params for o in g.ops if not o.expert)
    return (shared + sum(o.params // cfg.n_experts * cfg.top_k for o in g.ops if o.expert)) / 1e9


def test_llama4_shapes_and_chunked_attention():
    cfg, g = _graph(LLAMA4_SCOUT, "llama-4-scout")
    assert round(_active(cfg, g)) == 17  # 17B active (Scout and Maverick)
    assert round(g.param_count / 1e9) == 108  # 109B with the vision encoder, which is left out
    mav, gm = _graph({**LLAMA4_SCOUT, "num_local_experts": 128, "interleave_moe_layer_step": 2},
                     "llama-4-maverick")  # fmt: skip
    assert round(gm.param_count / 1e9) == 401 and round(_active(mav, gm)) == 17  # 400B total
    assert gm.moe_layers == tuple(range(1, 48, 2)) and mav.ffn == 16384
    assert cfg.nope_layers == tuple(range(3, 48, 4)) and cfg.chunk(0) == 8192 and cfg.chunk(3) == 0
    # a chunked layer attends from its chunk's start: position 10,000 sees 10,000 - 8,192 + 1
    g2 = pa.build_graph(cfg, pa.Workload(batch=1, context=10_000), native_format="bf16")
    att = {o.layer: o for o in g2.ops if o.kind == "attention"}
    assert (att[0].k, att[3].k) == (10_000 - 8192 + 1, 10_001)
    assert att[0].resident_kv_bytes < att[3].resident_kv_bytes  # a chunk's cache at most


@pytest.mark.parametrize(
    "model", ["tiny-phi3", "tiny-deepseek-v2", "tiny-gemma2", "tiny-gemma3", "tiny-llama4"]
)
@pytest.mark.parametrize("system", ["h100", "wse3", "groq-tsp", "taalas-hc1"])
def test_runs_on_every_kind_with_its_numerics(model, system):
    # bf16 weights everywhere (an etched die too): the numerics must agree with the reference
    # to the last token (lossy formats are the codecs' tests); fp32 for Llama 4, whose top-1
    # router flips an expert on bf16 rounding of a near tie (0.4 logits off, as tiny-mixtral's
    # bf16 run is 0.5 off with top-2)
    weights = "fp32" if model == "tiny-llama4" else "bf16"
    work = pa.Workload(batch=2, context=16, tokens=3, weights=weights)
    r = run(model, system, "auto", work, etch=system == "taalas-hc1", functional=True)
    assert r.trace.tokens_per_s > 0
    assert (r.trace.step_cycles >= r.trace.lower_bound_cycles).all()
    assert r.trace.functional["top1_agreement"] == 1.0
