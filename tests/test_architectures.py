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


@pytest.mark.parametrize("model", ["tiny-phi3", "tiny-deepseek-v2"])
@pytest.mark.parametrize("system", ["h100", "wse3", "groq-tsp", "taalas-hc1"])
def test_runs_on_every_kind_with_its_numerics(model, system):
    # bf16 weights everywhere (an etched die too): the numerics must agree with the reference
    # to the last token (lossy formats are the codecs' tests)
    work = pa.Workload(batch=2, context=16, tokens=3, weights="bf16")
    r = run(model, system, "auto", work, etch=system == "taalas-hc1", functional=True)
    assert r.trace.tokens_per_s > 0
    assert (r.trace.step_cycles >= r.trace.lower_bound_cycles).all()
    assert r.trace.functional["top1_agreement"] == 1.0
