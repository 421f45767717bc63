"""Weights read through safetensors.safe_open: sharded folders (with and without an index),
bf16/fp16 shards, files from the safetensors library itself, and clear errors naming the file."""

import json

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pyaccel.errors import ConfigError
from pyaccel.model.config import load_model
from pyaccel.numerics.codecs import bf16_bits_reference, bf16_decode_reference
from pyaccel.numerics.weights import (
    load_weights,
    random_weights,
    read_safetensors,
    write_safetensors,
)


def _config(folder, name="tiny-llama"):
    from importlib import resources

    raw = (resources.files("pyaccel.model") / "presets" / f"{name}.json").read_text()
    (folder / "config.json").write_text(raw)
    return load_model(folder)


def _shard(folder, tensors, n_shards=3, bf16=False, index=True):
    names = sorted(tensors)
    shards = {f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors": names[i::n_shards]
              for i in range(n_shards)}  # fmt: skip
    for fname, keys in shards.items():
        write_safetensors(folder / fname, {k: tensors[k] for k in keys}, bf16=bf16)
    if index:
        wmap = {k: f for f, keys in shards.items() for k in keys}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    return shards


def _bf16(x):
    return bf16_decode_reference(bf16_bits_reference(x))


@pytest.mark.parametrize("index", [True, False])
def test_bf16_shards_load_bit_exact(tmp_path, index):
    cfg = _config(tmp_path)
    tensors = random_weights(cfg, 7)
    _shard(tmp_path, tensors, bf16=True, index=index)
    w = load_weights(cfg)
    for name in w.names:
        got = w[name]
        assert got.dtype == np.float32 and got.shape == tensors[name].shape
        assert np.array_equal(got.view(np.uint32), _bf16(tensors[name]).view(np.uint32)), name


def test_files_from_the_safetensors_library_load(tmp_path):
    cfg = _config(tmp_path, "tiny-qwen3")
    tensors = random_weights(cfg, 2)
    mixed = {}
    for i, (k, v) in enumerate(sorted(tensors.items())):
        mixed[k] = (v.astype(ml_dtypes.bfloat16), v.astype(np.float16), v)[i % 3]
    save_file(mixed, str(tmp_path / "model.safetensors"))
    w = load_weights(cfg)
    for k, v in mixed.items():
        assert np.array_equal(w[k], v.astype(np.float32)), k


def test_what_we_write_the_library_reads(tmp_path):
    t = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.float32([1.5, -2.0])}
    write_safetensors(tmp_path / "x.safetensors", t, bf16=True)
    back = load_file(str(tmp_path / "x.safetensors"))
    assert back["a"].dtype == ml_dtypes.bfloat16
    assert np.array_equal(back["a"].astype(np.float32), t["a"])
    assert np.array_equal(read_safetensors(tmp_path / "x.safetensors")["b"], t["b"])


def test_index_naming_a_missing_shard(tmp_path):
    cfg = _config(tmp_path)
    shards = _shard(tmp_path, random_weights(cfg))
    missing = sorted(shards)[1]
    (tmp_path / missing).unlink()
    with pytest.raises(ConfigError, match=f"lists {missing}, which is missing"):
        load_weights(cfg)


@pytest.mark.parametrize("text", ["{", "[]", '{"weight_map": 3}', '{"other": {}}'])
def test_bad_index_is_named(tmp_path, text):
    cfg = _config(tmp_path)
    _shard(tmp_path, random_weights(cfg))
    (tmp_path / "model.safetensors.index.json").write_text(text)
    with pytest.raises(ConfigError, match="not a valid index"):
        load_weights(cfg)


def test_truncated_shard_is_named(tmp_path):
    cfg = _config(tmp_path)
    shards = _shard(tmp_path, random_weights(cfg))
    bad = tmp_path / sorted(shards)[2]
    bad.write_bytes(bad.read_bytes()[:-10])
    with pytest.raises(ConfigError, match=rf"{bad.name}: truncated or corrupt.*runs past the end"):
        load_weights(cfg)


def test_trailing_bytes_are_refused(tmp_path):
    cfg = _config(tmp_path)
    write_safetensors(tmp_path / "model.safetensors", random_weights(cfg))
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes() + b"junk")
    with pytest.raises(ConfigError, match="truncated or corrupt"):
        load_weights(cfg)


@pytest.mark.parametrize("raw", [b"", b"\x01\x02", b"\xff" * 8 + b"{}",
                                 b"\x04\x00\x00\x00\x00\x00\x00\x00[1]\x20"])  # fmt: skip
def test_garbage_files_are_not_safetensors(tmp_path, raw):
    cfg = _config(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(raw)
    with pytest.raises(ConfigError, match=r"model\.safetensors: not a safetensors file"):
        load_weights(cfg)


def test_a_folder_named_like_a_shard_is_an_error(tmp_path):
    cfg = _config(tmp_path)
    (tmp_path / "model.safetensors").mkdir()
    with pytest.raises(ConfigError, match=r"model\.safetensors: not a regular file"):
        load_weights(cfg)


def test_integer_tensor_in_read_safetensors_is_named(tmp_path):
    save_file({"ids": np.arange(4, dtype=np.int32)}, str(tmp_path / "g.safetensors"))
    with pytest.raises(ConfigError, match="'ids' has dtype I32"):
        read_safetensors(tmp_path / "g.safetensors")
