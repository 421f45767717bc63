"""Checkpoint tensors a family stores fused, and the parts the forward pass reads of them.

The forward pass (:mod:`pyaccel.numerics.reference`) reads Llama-style names, one tensor per
projection and expert. Some families' checkpoints store several of them in one tensor: Phi-3's
``qkv_proj`` and ``gate_up_proj`` (parts by rows, as HF's ``chunk`` splits them); Llama 4's
routed experts as ``experts.gate_up_proj`` ``[E, hidden, 2 x ffn]`` and ``experts.down_proj``
``[E, ffn, hidden]`` (HF multiplies ``x @ W``: each part is a transposed slice of one expert).
Reading a folder takes the parts out of the fused tensors; writing one for transformers
(:func:`checkpoint_tensors`) puts them back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.config import ModelConfig


@dataclass(frozen=True)
class Part:
    """The tensor ``name`` inside a fused one: rows ``lo:hi`` of it, or, for ``expert`` ``e``,
    the transpose of columns ``lo:hi`` of its ``e``-th matrix."""

    name: str
    lo: int
    hi: int
    expert: int | None = None

    def take(self, fused: np.ndarray) -> np.ndarray:
        """This part's values out of ``fused``."""
        if self.expert is None:
            return fused[self.lo : self.hi]
        return np.ascontiguousarray(fused[self.expert][:, self.lo : self.hi].T)


def fused_tensors(cfg: ModelConfig) -> dict[str, tuple[tuple[int, ...], list[Part]]]:
    """Each fused checkpoint tensor of ``cfg``'s family: its shape and its parts."""
    out = {}
    for i in range(cfg.n_layers):
        if cfg.model_type == "phi3":
            out.update(_phi3(cfg, i))
        elif cfg.model_type in ("llama4_text", "llama4") and not cfg.is_dense_layer(i):
            out.update(_llama4_experts(cfg, i))
    return out


def _phi3(cfg: ModelConfig, i: int) -> dict:
    h, q, kv, f = cfg.hidden, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.ffn
    a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
    qkv = [Part(a + "q_proj.weight", 0, q), Part(a + "k_proj.weight", q, q + kv),
           Part(a + "v_proj.weight", q + kv, q + 2 * kv)]  # fmt: skip
    gate_up = [Part(m + "gate_proj.weight", 0, f), Part(m + "up_proj.weight", f, 2 * f)]
    return {a + "qkv_proj.weight": ((q + 2 * kv, h), qkv),
            m + "gate_up_proj.weight": ((2 * f, h), gate_up)}  # fmt: skip


def _llama4_experts(cfg: ModelConfig, i: int) -> dict:
    h, f, n = cfg.hidden, cfg.expert_ffn, cfg.n_experts
    x = f"model.layers.{i}.feed_forward.experts."
    gate_up, down = [], []
    for e in range(n):
        gate_up += [Part(f"{x}{e}.gate_proj.weight", 0, f, e),
                    Part(f"{x}{e}.up_proj.weight", f, 2 * f, e)]  # fmt: skip
        down.append(Part(f"{x}{e}.down_proj.weight", 0, h, e))
    return {x + "gate_up_proj": ((n, h, 2 * f), gate_up), x + "down_proj": ((n, f, h), down)}


def checkpoint_tensors(cfg: ModelConfig, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``tensors`` (the forward pass's names) under the names ``cfg``'s family's checkpoint uses:
    fused tensors assembled from their parts (what a folder for transformers must hold)."""
    out = dict(tensors)
    for fused, (shape, parts) in fused_tensors(cfg).items():
        arr = np.zeros(shape, dtype=np.float32)
        for part in parts:
            value = out.pop(part.name)
            if part.expert is None:
                arr[part.lo : part.hi] = value
            else:
                arr[part.expert][:, part.lo : part.hi] = value.T
        out[fused] = arr
    return out
