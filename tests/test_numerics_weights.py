"""Weights: seeded random models, lazy safetensors (single file, sharded, bf16), clear errors."""

import json

import numpy as np
import pytest

from pyaccel.errors import ConfigError
from pyaccel.model.config import load_model
from pyaccel.numerics.weights import (
    LazyWeights,
    expected_tensors,
    load_weights,
    random_weights,
    write_safetensors,
)


def _folder(tmp_path, name="tiny-llama", tensors=None, bf16=False):
    from importlib import resources

    raw = (resources.files("pyaccel.model") / "presets" / f"{name}.json").read_text()
    (tmp_path / "config.json").write_text(raw)
    cfg = load_model(tmp_path)
    tensors = random_weights(cfg, 5) if tensors is None else tensors
    write_safetensors(tmp_path / "model.safetensors", tensors, bf16=bf16)
    return cfg, tensors


def test_random_weights_are_seeded_and_shaped():
    cfg = load_model("tiny-mixtral")
    a, b = random_weights(cfg, 1), random_weights(cfg, 1)
    assert list(a) == list(expected_tensors(cfg))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["lm_head.weight"], random_weights(cfg, 2)["lm_head.weight"])
    # HF checkpoint names: Mixtral experts are w1/w2/w3 under block_sparse_moe
    assert a["model.layers.0.block_sparse_moe.experts.3.w2.weight"].shape == (64, 128)


def test_deepseek_names_follow_the_checkpoint():
    names = expected_tensors(load_model("tiny-deepseek-v3"))
    assert "model.layers.0.mlp.gate_proj.weight" in names  # first_k_dense_replace = 1
    assert "model.layers.1.mlp.experts.7.down_proj.weight" in names
    assert names["model.layers.1.self_attn.kv_b_proj.weight"] == (4 * (16 + 16), 32)
    assert "model.layers.1.mlp.gate.e_score_correction_bias" in names


def test_folder_loads_lazily_fp32_and_bf16(tmp_path):
    cfg, tensors = _folder(tmp_path)
    w = load_weights(cfg)
    assert isinstance(w, LazyWeights) and not w._cache
    assert np.array_equal(w["lm_head.weight"], tensors["lm_head.weight"])
    assert list(w._cache) == ["lm_head.weight"]  # only what was asked for was read
    sub = tmp_path / "b"
    sub.mkdir()
    cfg, tensors = _folder(sub, bf16=True)
    got = load_weights(cfg)["model.norm.weight"]
    assert np.abs(got - tensors["model.norm.weight"]).max() <= 2**-8 * 1.2


def test_sharded_folder_with_index(tmp_path):
    cfg, tensors = _folder(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for fname, keys in shards.items():
        write_safetensors(tmp_path / fname, {k: tensors[k] for k in keys})
    wmap = {k: f for f, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    w = load_weights(cfg)
    assert np.array_equal(w[names[-1]], tensors[names[-1]])


def test_missing_tensor_is_named(tmp_path):
    cfg = load_model("tiny-llama")
    tensors = random_weights(cfg)
    del tensors["model.layers.2.mlp.up_proj.weight"]
    cfg, _ = _folder(tmp_path, tensors=tensors)
    with pytest.raises(ConfigError, match=r"missing tensor 'model\.layers\.2\.mlp\.up_proj"):
        load_weights(cfg)


def test_wrong_shape_is_named(tmp_path):
    cfg = load_model("tiny-llama")
    tensors = random_weights(cfg)
    tensors["model.norm.weight"] = np.ones(63, np.float32)
    cfg, _ = _folder(tmp_path, tensors=tensors)
    with pytest.raises(ConfigError, match=r"'model\.norm\.weight' has shape \[63\].*\[64\]"):
        load_weights(cfg)


def test_wrong_dtype_is_named(tmp_path):
    cfg, _ = _folder(tmp_path)
    path = tmp_path / "model.safetensors"
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = raw[8 : 8 + n].replace(b'"model.norm.weight":{"dtype":"F32"',
                                    b'"model.norm.weight":{"dtype":"I32"')  # fmt: skip
    path.write_bytes(raw[:8] + header + raw[8 + n :])
    with pytest.raises(ConfigError, match=r"'model\.norm\.weight' has dtype I32"):
        load_weights(cfg)


def test_truncated_or_garbage_file(tmp_path):
    cfg, _ = _folder(tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ConfigError, match="runs past the end"):
        load_weights(cfg)
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ConfigError, match="not a safetensors file"):
        load_weights(cfg)


def test_large_random_model_is_refused_kindly():
    with pytest.raises(ConfigError, match="tiny model"):
        load_weights(load_model("llama-3.1-8b"))


def test_unsupported_family_is_an_error():
    with pytest.raises(ConfigError, match="does not cover model_type 'gpt_oss'"):
        expected_tensors(load_model("gpt-oss-120b"))
