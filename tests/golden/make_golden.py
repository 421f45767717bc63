"""Regenerate the golden logits: ``python tests/golden/make_golden.py`` (needs torch+transformers).

For each tiny preset it writes ``tests/golden/<name>/``: ``config.json`` (the preset),
``model.safetensors`` (pyaccel's seeded random weights, stored bf16 to keep the files small) and
``golden.safetensors`` with ``tokens`` and the ``logits`` Hugging Face ``transformers`` computes for
them (fp32, eager attention, one causal forward over the sequence). The tests hold pyaccel's NumPy
reference (token by token, with its KV cache) to these logits within 1e-4.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MODELS = ("tiny-llama", "tiny-qwen3", "tiny-mixtral", "tiny-deepseek-v3")
SEED = 1234
N_TOKENS = 12


def golden_tokens(vocab: int, n: int = N_TOKENS, seed: int = SEED) -> np.ndarray:
    """The token sequence the golden logits are computed for."""
    return np.random.default_rng(seed).integers(0, vocab, n)


def write_model_folder(name: str, folder: Path) -> None:
    """config.json + model.safetensors (bf16) of the seeded random ``name`` preset."""
    from importlib import resources

    from pyaccel.model.config import load_model
    from pyaccel.numerics.weights import random_weights, write_safetensors

    folder.mkdir(parents=True, exist_ok=True)
    raw = json.loads((resources.files("pyaccel.model") / "presets" / f"{name}.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    cfg = load_model(name)
    write_safetensors(folder / "model.safetensors", random_weights(cfg, SEED), bf16=True)


def hf_logits(folder: Path, tokens: np.ndarray) -> np.ndarray:
    """Logits [len(tokens), vocab] of the HF model in ``folder`` (fp32, eager attention)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor(tokens[None, :], dtype=torch.long)).logits[0]
    return out.float().numpy()


def main(names=MODELS) -> None:
    """Regenerate every golden folder."""
    from pyaccel.model.config import load_model
    from pyaccel.numerics.weights import write_safetensors

    for name in names:
        folder = HERE / name
        write_model_folder(name, folder)
        tokens = golden_tokens(load_model(name).vocab)
        logits = hf_logits(folder, tokens)
        write_safetensors(
            folder / "golden.safetensors",
            {"tokens": tokens.astype(np.float32), "logits": logits},
        )
        print(
            f"{name}: {len(tokens)} tokens, logits {logits.shape}, max |logit| "
            f"{np.abs(logits).max():.3f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or MODELS)
