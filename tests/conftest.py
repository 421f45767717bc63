"""Shared fixtures: tiny models written as HF folders, and the common presets."""

from __future__ import annotations

import json

import pytest

import pyaccel as pa

TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 4,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 160,
    "vocab_size": 256,
    "tie_word_embeddings": False,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}


def write_config(folder, cfg: dict):
    """An HF-style model folder holding ``config.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture
def tiny_llama_dir(tmp_path):
    return write_config(tmp_path / "tiny-llama", TINY_LLAMA)


@pytest.fixture(scope="session")
def llama8b():
    return pa.load_model("llama-3.1-8b")


@pytest.fixture(scope="session")
def h100():
    return pa.load_system("h100", units=1)


def bound_ratio(system, model, units="auto", batch=1, context=64, overrides=None):
    """The smallest emulated / lower-bound step ratio of a two-token run, or None when the
    model does not fit (nothing to bound)."""
    import numpy as np

    work = pa.Workload(batch=batch, context=context, tokens=2)
    sysm, cfg = pa.load_system(system, units, overrides=overrides), pa.load_model(model)
    try:
        plc = pa.place(cfg, sysm, work)
    except pa.PyaccelError:
        return None
    tr = pa.emulate(cfg, sysm, plc, work, event_steps=())
    return float(np.min(tr.step_cycles / tr.lower_bound_cycles))
