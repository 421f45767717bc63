"""The NumPy reference forward pass against golden Hugging Face ``transformers`` logits.

Golden files (tests/golden/<model>/) come from tests/golden/make_golden.py; the live comparison
regenerates them with transformers when it is installed and is skipped otherwise."""

from pathlib import Path

import numpy as np
import pytest

from pyaccel.model.config import load_model
from pyaccel.numerics.reference import DecodeModel, Numerics, reference_logits
from pyaccel.numerics.weights import load_weights, random_weights, read_safetensors

GOLDEN = Path(__file__).parent / "golden"
MODELS = ("tiny-llama", "tiny-qwen3", "tiny-mixtral", "tiny-deepseek-v3")


def _golden(folder: Path):
    cfg = load_model(folder)
    gold = read_safetensors(folder / "golden.safetensors")
    return cfg, gold["tokens"].astype(np.int64), gold["logits"]


@pytest.mark.parametrize("name", MODELS)
def test_reference_matches_transformers_golden(name):
    cfg, tokens, logits = _golden(GOLDEN / name)
    got = reference_logits(cfg, load_weights(cfg), tokens)
    assert got.shape == logits.shape
    assert np.abs(got - logits).max() < 1e-4


@pytest.mark.parametrize("name", MODELS)
def test_live_transformers_comparison(name, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import sys

    sys.path.insert(0, str(GOLDEN))
    import make_golden

    folder = tmp_path / name
    make_golden.write_model_folder(name, folder)
    cfg = load_model(folder)
    tokens = make_golden.golden_tokens(cfg.vocab)
    want = make_golden.hf_logits(folder, tokens)
    got = reference_logits(cfg, load_weights(cfg), tokens)
    assert np.abs(got - want).max() < 1e-4


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
