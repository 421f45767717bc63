"""The NumPy reference forward pass against Hugging Face ``transformers`` logits.

The golden files (tests/golden/<model>/) come from tests/golden/make_golden.py (transformers 5.25.0,
torch 2.13.0; see tests/golden/versions.json) and are always checked. When torch and transformers
are installed (``pip install -e '.[golden]'``) the live tests also run a fresh transformers forward
for each tiny model and for config variants (rope scalings, MLA and routing options, sliding
windows, Qwen3-MoE); otherwise they are skipped."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from pyaccel.errors import ConfigError
from pyaccel.model.config import load_model
from pyaccel.numerics.reference import (
    DecodeModel,
    Numerics,
    mla_softmax_scale,
    reference_logits,
    rope_inv_freq,
    rope_parameters,
)
from pyaccel.numerics.weights import load_weights, random_weights, read_safetensors

GOLDEN = Path(__file__).parent / "golden"
# fp32 reordering noise is ~3e-6 on these logits (|logit| < 4); 2e-5 still catches a wrong norm
# epsilon in one place (DeepSeek's latent norms at 1e-5 instead of 1e-6 moved logits by 3.2e-5).
TOL = 2e-5


def _make_golden():
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_golden = _make_golden()
MODELS = make_golden.MODELS  # the tiny presets with golden files


def _golden(folder: Path):
    cfg = load_model(folder)
    gold = read_safetensors(folder / "golden.safetensors")
    return cfg, gold["tokens"].astype(np.int64), gold["logits"]


@pytest.mark.parametrize("name", MODELS)
def test_reference_matches_transformers_golden(name):
    cfg, tokens, logits = _golden(GOLDEN / name)
    got = reference_logits(cfg, load_weights(cfg), tokens)
    assert got.shape == logits.shape
    assert np.abs(got - logits).max() < TOL


@pytest.mark.parametrize("name", MODELS)
def test_golden_folder_is_the_seeded_preset(name, tmp_path):
    """The stored config and weights are what make_golden.py writes today (preset unchanged)."""
    make_golden.write_model_folder(name, tmp_path)
    for f in ("config.json", "model.safetensors"):
        assert (tmp_path / f).read_bytes() == (GOLDEN / name / f).read_bytes(), f
    _, tokens, _ = _golden(GOLDEN / name)
    assert np.array_equal(tokens, make_golden.golden_tokens(load_model(tmp_path).vocab))


def _hf_vs_reference(raw: dict, folder: Path) -> float:
    make_golden.write_config_folder(raw, folder)
    cfg = load_model(folder)
    tokens = make_golden.golden_tokens(cfg.vocab)
    want = make_golden.hf_logits(folder, tokens)
    got = reference_logits(cfg, load_weights(cfg), tokens)
    assert got.shape == want.shape
    return float(np.abs(got - want).max())


def _transformers():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")


@pytest.mark.parametrize("name", MODELS)
def test_live_transformers_comparison(name, tmp_path):
    _transformers()
    assert _hf_vs_reference(make_golden.preset_config(name), tmp_path / name) < TOL


def _variant(base: str, **fields) -> dict:
    raw = make_golden.preset_config(base)
    raw.update(fields)
    return raw


_QWEN3_MOE = dict(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                  mlp_only_layers=[], norm_topk_prob=True)  # fmt: skip
# a table, one entry per variant: kept as laid out
# fmt: off
VARIANTS = {
    "llama-rope-linear": ("tiny-llama", dict(rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "llama-rope-llama3": ("tiny-llama", dict(rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})),
    "qwen3-rope-yarn": ("tiny-qwen3", dict(rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128})),
    "qwen3-sliding": ("tiny-qwen3", dict(use_sliding_window=True, sliding_window=4,
                                         max_window_layers=2)),
    "mixtral-sliding": ("tiny-mixtral", dict(sliding_window=4)),
    "qwen3-moe": ("tiny-qwen3", _QWEN3_MOE),
    "qwen3-moe-unnormed": ("tiny-qwen3", {**_QWEN3_MOE, "norm_topk_prob": False}),
    "deepseek-v3-yarn": ("tiny-deepseek-v3", dict(max_position_embeddings=2560, rope_scaling={
        "type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
        "mscale_all_dim": 1.0, "original_max_position_embeddings": 64})),
    "deepseek-v3-yarn-mscale": ("tiny-deepseek-v3", dict(rope_scaling={
        "type": "yarn", "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 0.5,
        "original_max_position_embeddings": 128})),
    "deepseek-v3-rope-not-interleaved": ("tiny-deepseek-v3", dict(rope_interleave=False)),
    "deepseek-v3-no-q-lora": ("tiny-deepseek-v3", dict(q_lora_rank=None)),
    "deepseek-v3-4-groups-top-2": ("tiny-deepseek-v3", dict(n_group=4, topk_group=2)),
    "deepseek-v3-unnormed": ("tiny-deepseek-v3", dict(norm_topk_prob=False,
                                                      routed_scaling_factor=1.0)),
    "deepseek-v3-2-shared-2-dense": ("tiny-deepseek-v3", dict(n_shared_experts=2,
                                                              first_k_dense_replace=2)),
    "deepseek-v2-greedy": ("tiny-deepseek-v2", dict(topk_method="greedy", n_group=1,
                                                    topk_group=1)),
    "deepseek-v2-q-lora-yarn": ("tiny-deepseek-v2", dict(q_lora_rank=48, rope_scaling={
        "type": "yarn", "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 128})),
    "phi3-full-rotary-no-window": ("tiny-phi3", dict(partial_rotary_factor=1.0,
                                                     sliding_window=None)),
    "gemma2-no-softcaps": ("tiny-gemma2", dict(attn_logit_softcapping=None,
                                               final_logit_softcapping=None)),
    "gemma3-unscaled-pattern-2": ("tiny-gemma3", dict(rope_scaling=None,
                                                      sliding_window_pattern=2)),
    "llama4-all-moe-top-2-no-tuning": ("tiny-llama4", dict(
        interleave_moe_layer_step=1, num_experts_per_tok=2, attn_temperature_tuning=False,
        use_qk_norm=False, attention_chunk_size=None)),
}
# fmt: on


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_live_transformers_variants(variant, tmp_path):
    _transformers()
    base, fields = VARIANTS[variant]
    assert _hf_vs_reference(_variant(base, **fields), tmp_path / variant) < TOL


# inverse frequencies transformers 5.24.0 computes (ROPE_INIT_FUNCTIONS) for the variants above
# a table, one entry per variant: kept as laid out
# fmt: off
HF_INV_FREQ = {
    "llama-rope-linear": [0.5, 0.15811388194561005, 0.05000000074505806, 0.015811389312148094,
                          0.004999999888241291, 0.0015811389312148094, 0.0005000000237487257,
                          0.00015811389312148094],
    "llama-rope-llama3": [1.0, 0.07940301299095154, 0.004700753837823868, 0.0009115831344388425,
                          0.00017677668074611574, 3.428102354519069e-05, 6.647869668086059e-06,
                          1.289173155782919e-06],
    "qwen3-rope-yarn": [1.0, 0.11114246398210526, 0.007905694656074047, 0.0014058533124625683,
                        0.0002500000118743628, 4.4456985051510856e-05, 7.905693564680405e-06,
                        1.405853367941745e-06],
    "deepseek-v3-yarn-mscale": [1.0, 0.0625, 0.0024999999441206455, 0.0002500000118743628],
}
# fmt: on
HF_ROPE_FACTOR = {
    "qwen3-rope-yarn": 1.138629436111989,
    "deepseek-v3-yarn-mscale": 1.0268361529030026,
}  # fmt: skip


@pytest.mark.parametrize("variant", sorted(HF_INV_FREQ))
def test_rope_scaling_matches_transformers_values(variant, tmp_path):
    base, fields = VARIANTS[variant]
    (tmp_path / "config.json").write_text(json.dumps(_variant(base, **fields)))
    cfg = load_model(tmp_path)
    rp = rope_parameters(cfg)
    dim = cfg.qk_rope_dim if cfg.attention == "mla" else cfg.head_dim
    inv, factor = rope_inv_freq(rp, dim, cfg.max_position)
    assert np.allclose(inv, HF_INV_FREQ[variant], rtol=1e-6, atol=0)
    assert factor == pytest.approx(HF_ROPE_FACTOR.get(variant, 1.0), rel=1e-12)
    if cfg.attention == "mla":  # HF yarn_apply_mscale(rope_parameters, qk_head_dim ** -0.5)
        assert mla_softmax_scale(cfg, rp) == pytest.approx(0.23340248099017752, rel=1e-12)


def test_unsupported_rope_type_is_refused(tmp_path):
    raw = _variant("tiny-llama", rope_scaling={"rope_type": "longrope", "factor": 2.0})
    (tmp_path / "config.json").write_text(json.dumps(raw))
    cfg = load_model(tmp_path)
    with pytest.raises(ConfigError, match="longrope"):
        DecodeModel(cfg, Numerics(random_weights(cfg, 0)))


def test_kv_cache_decode_equals_restart():
    """Token-by-token decode with the cache gives the same logits as replaying the prefix."""
    cfg = load_model("tiny-qwen3")
    w = random_weights(cfg, 3)
    tokens = [5, 17, 200, 3, 99]
    full = reference_logits(cfg, w, tokens)
    again = reference_logits(cfg, w, tokens[:3])
    assert np.array_equal(full[:3], again)


def test_batch_rows_are_independent_sequences():
    cfg = load_model("tiny-mixtral")
    w = random_weights(cfg, 3)
    m = DecodeModel(cfg, Numerics(w), batch=2, max_len=4)
    a = m.step([1, 7])
    b = m.step([2, 9])
    solo = reference_logits(cfg, w, [7, 9])
    assert np.allclose(a[1], solo[0], atol=1e-5) and np.allclose(b[1], solo[1], atol=1e-5)
