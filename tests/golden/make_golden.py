"""Regenerate the golden logits: ``python tests/golden/make_golden.py [--out DIR] [NAME ...]``.

Needs torch and transformers: ``pip install -e '.[golden]'`` (the tests themselves do not; they
read the stored files, and compare with a fresh transformers forward only when it is installed).

For each tiny preset it writes ``<DIR>/<name>/`` (``DIR`` defaults to tests/golden): ``config.json``
(the preset), ``model.safetensors`` (pyaccel's seeded random weights, stored bf16 to keep the files
small) and ``golden.safetensors`` with ``tokens`` and the ``logits`` Hugging Face ``transformers``
computes for them (fp32, eager attention, one causal forward over the sequence; loading refuses
any missing, unexpected or mismatched tensor, so nothing is silently initialised). It also writes
``<DIR>/versions.json`` (the torch/transformers/numpy that produced the logits) and prints, per
model, the max |logit| difference from the previous ``golden.safetensors`` and from pyaccel's NumPy
reference (token by token, with its KV cache), which the tests hold to 1e-4.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MODELS = (
    "tiny-llama",
    "tiny-qwen3",
    "tiny-mixtral",
    "tiny-deepseek-v3",
    "tiny-deepseek-v2",
    "tiny-phi3",
    "tiny-gemma2",
    "tiny-gemma3",
    "tiny-llama4",
)
SEED = 1234
N_TOKENS = 12


def golden_tokens(vocab: int, n: int = N_TOKENS, seed: int = SEED) -> np.ndarray:
    """The token sequence the golden logits are computed for."""
    return np.random.default_rng(seed).integers(0, vocab, n)


def preset_config(name: str) -> dict:
    """The raw config.json of pyaccel's ``name`` preset."""
    from importlib import resources

    return json.loads((resources.files("pyaccel.model") / "presets" / f"{name}.json").read_text())


def write_config_folder(raw: dict, folder: Path, seed: int = SEED) -> None:
    """config.json (``raw``) + model.safetensors (bf16) of seeded random weights of its shapes."""
    from pyaccel.model.config import load_model
    from pyaccel.numerics.checkpoint import checkpoint_tensors
    from pyaccel.numerics.weights import random_weights, write_safetensors

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.safetensors"):
        old.unlink()
    (folder / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    cfg = load_model(folder)
    tensors = checkpoint_tensors(cfg, random_weights(cfg, seed))  # the family's own names
    write_safetensors(folder / "model.safetensors", tensors, bf16=True)


def write_model_folder(name: str, folder: Path) -> None:
    """config.json + model.safetensors (bf16) of the seeded random ``name`` preset."""
    write_config_folder(preset_config(name), folder)


def hf_logits(folder: Path, tokens: np.ndarray) -> np.ndarray:
    """Logits [len(tokens), vocab] of the HF model in ``folder`` (fp32, eager attention)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    bad = {k: sorted(map(str, v)) for k, v in info.items() if v}
    if bad:
        raise RuntimeError(f"{folder}: transformers did not load the checkpoint as is: {bad}")
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor(tokens[None, :], dtype=torch.long)).logits[0]
    return out.float().numpy()


def versions() -> dict[str, str]:
    """Versions of the libraries the golden logits come from."""
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "numpy": np.__version__}  # fmt: skip


def main(names=MODELS, out: Path = HERE) -> None:
    """Regenerate the golden folders of ``names`` under ``out``."""
    from pyaccel.model.config import load_model
    from pyaccel.numerics.reference import reference_logits
    from pyaccel.numerics.weights import load_weights, read_safetensors, write_safetensors

    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        folder = out / name
        previous = folder / "golden.safetensors"
        before = read_safetensors(previous)["logits"] if previous.is_file() else None
        write_model_folder(name, folder)
        cfg = load_model(folder)
        tokens = golden_tokens(cfg.vocab)
        logits = hf_logits(folder, tokens)
        write_safetensors(
            folder / "golden.safetensors",
            {"tokens": tokens.astype(np.float32), "logits": logits},
        )
        ref = reference_logits(cfg, load_weights(cfg), tokens)
        was = "new" if before is None or before.shape != logits.shape else (
            f"{np.abs(before - logits).max():.3e}")  # fmt: skip
        print(
            f"{name}: {len(tokens)} tokens, logits {logits.shape}, max |logit| "
            f"{np.abs(logits).max():.3f}, max |d| vs previous golden {was}, "
            f"vs pyaccel reference {np.abs(ref - logits).max():.3e}"
        )
    (out / "versions.json").write_text(json.dumps(versions(), indent=2) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(MODELS), help="tiny presets (default: all)")
    ap.add_argument("--out", type=Path, default=HERE, help="folder to write (default: here)")
    args = ap.parse_args()
    main(args.names, args.out)
