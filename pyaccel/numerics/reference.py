"""The reference decode forward pass (NumPy, fp32) with a KV cache, one token per sequence per step.

Covers Llama/Mistral/Qwen2/Qwen3 dense (GQA, optional biases, Qwen3's per-head q/k norms, sliding
windows), Mixtral and Qwen3-MoE (softmax top-k routing) and DeepSeek-V3/Kimi-K2 (MLA with
interleaved rope on the rope part, sigmoid group-limited routing with correction bias, shared
experts, first-k dense layers). It follows Hugging Face ``transformers`` op for op, and tests hold
it to the golden logits those models produce (tests/golden/).

The arithmetic is delegated to a :class:`Numerics` object: this module's :class:`Numerics` is plain
fp32; ``numerics/execute.py`` subclasses it to compute each op as a machine does (its formats,
partitions and reduction order) while the model's structure stays in one place.
"""

from __future__ import annotations

import numpy as np

from ..model.config import ModelConfig
from .weights import check_supported


class Numerics:
    """fp32 arithmetic: activations and KV cache kept in fp32, ``y = x @ W.T`` per linear.

    ``linear`` receives the HF tensor name (without ``.weight``), the tensor-parallel ``split``
    of the op (``col``, ``row``, ``replicate``, ``experts``, ``vocab``) and its format ``role``
    (``attn``, ``mlp``, ``expert``, ``head``, ``router``).
    """

    label = "fp32 reference"

    def __init__(self, weights):
        self.w = weights

    def act(self, x: np.ndarray) -> np.ndarray:
        """An activation as it is stored between ops."""
        return x

    def kv(self, x: np.ndarray) -> np.ndarray:
        """A key/value (or MLA latent) as the KV cache stores it."""
        return x

    def linear(self, x: np.ndarray, name: str, split: str, role: str) -> np.ndarray:
        """``x [tokens, k] @ W[n, k].T (+ bias)`` in fp32."""
        y = x @ self.w[name + ".weight"].T
        bias = name + ".bias"
        if bias in self.w:
            y = y + self.w[bias]
        return y

    def combine(self, layer: int, expert_ids: list[int], parts: list[np.ndarray]) -> np.ndarray:
        """Sum of the routed experts' weighted outputs for one token (top-k order)."""
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """HF RMSNorm in fp32: ``weight * x / sqrt(mean(x^2) + eps)`` over the last axis."""
    var = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(var + np.float32(eps)))


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU ``x * sigmoid(x)``."""
    return x / (np.float32(1.0) + np.exp(-x))


def rope_cos_sin(dim: int, theta: float, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of the default rope at position ``pos`` for ``dim`` rotary features (half each),
    computed as HF does: fp32 inverse frequencies, fp32 angle."""
    inv = (1.0 / (np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / dim))).astype(
        np.float32
    )
    ang = (np.float32(pos) * inv).astype(np.float32)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Llama-style rope (rotate_half) over the last axis."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rope_interleave(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """DeepSeek-style rope on interleaved pairs, output de-interleaved (as HF writes it)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in the input's precision."""
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


class DecodeModel:
    """A decoder whose ``step(tokens)`` appends one token per sequence and returns the logits
    ``[batch, vocab]`` (fp32) for the next token; the KV cache lives inside."""

    def __init__(self, cfg: ModelConfig, numerics: Numerics, batch: int = 1, max_len: int = 0):
        check_supported(cfg)
        self.cfg = cfg
        self.nx = numerics
        self.batch = batch
        self.max_len = max_len or cfg.max_position or 4096
        self.reset()

    def reset(self) -> None:
        """Empty the KV cache (position 0)."""
        c, b, n = self.cfg, self.batch, self.max_len
        self.pos = 0
        if c.attention == "mla":
            shapes = [(b, n, c.kv_lora_rank), (b, n, c.qk_rope_dim)]
        else:
            shapes = [(b, n, c.n_kv_heads, c.head_dim)] * 2
        self.cache = [[np.zeros(s, dtype=np.float32) for s in shapes] for _ in range(c.n_layers)]

    # -- one step ------------------------------------------------------------------------------

    def step(self, tokens) -> np.ndarray:
        """Feed one token per sequence; return next-token logits ``[batch, vocab]``."""
        c, nx = self.cfg, self.nx
        if self.pos >= self.max_len:
            raise ValueError(f"KV cache full ({self.max_len} positions)")
        ids = np.asarray(tokens, dtype=np.int64).reshape(self.batch)
        x = nx.act(nx.w["model.embed_tokens.weight"][ids].astype(np.float32))
        for i in range(c.n_layers):
            p = f"model.layers.{i}."
            h = nx.act(rms_norm(x, nx.w[p + "input_layernorm.weight"], c.norm_eps))
            if c.attention == "mla":
                a = self._mla(i, h)
            else:
                a = self._gqa(i, h)
            x = nx.act(x + a)
            h = nx.act(rms_norm(x, nx.w[p + "post_attention_layernorm.weight"], c.norm_eps))
            x = nx.act(x + self._mlp(i, h))
        h = nx.act(rms_norm(x, nx.w["model.norm.weight"], c.norm_eps))
        head = "model.embed_tokens" if c.tied_embeddings else "lm_head"
        logits = nx.linear(h, head, "vocab", "head")
        self.pos += 1
        return logits.astype(np.float32)

    # -- attention ------------------------------------------------------------------------------

    def _window_start(self, layer: int) -> int:
        c = self.cfg
        if c.is_sliding(layer) and c.sliding_window:
            return max(0, self.pos + 1 - c.sliding_window)
        return 0

    def _gqa(self, i: int, h: np.ndarray) -> np.ndarray:
        c, nx, b = self.cfg, self.nx, self.batch
        a, hd = f"model.layers.{i}.self_attn.", c.head_dim
        q = nx.act(nx.linear(h, a + "q_proj", "col", "attn")).reshape(b, c.n_heads, hd)
        k = nx.act(nx.linear(h, a + "k_proj", "col", "attn")).reshape(b, c.n_kv_heads, hd)
        v = nx.act(nx.linear(h, a + "v_proj", "col", "attn")).reshape(b, c.n_kv_heads, hd)
        if c.qk_norm:
            q = nx.act(rms_norm(q, nx.w[a + "q_norm.weight"], c.norm_eps))
            k = nx.act(rms_norm(k, nx.w[a + "k_norm.weight"], c.norm_eps))
        cos, sin = rope_cos_sin(hd, c.rope_theta, self.pos)
        q, k = nx.act(rope_half(q, cos, sin)), rope_half(k, cos, sin)
        kc, vc = self.cache[i]
        kc[:, self.pos], vc[:, self.pos] = nx.kv(k), nx.kv(v)
        lo = self._window_start(i)
        keys, vals = kc[:, lo : self.pos + 1], vc[:, lo : self.pos + 1]  # [b, t, kvh, hd]
        group = c.n_heads // c.n_kv_heads
        keys, vals = np.repeat(keys, group, axis=2), np.repeat(vals, group, axis=2)
        scores = np.einsum("bhd,bthd->bht", q, keys) * np.float32(hd**-0.5)
        out = np.einsum("bht,bthd->bhd", softmax(scores), vals).reshape(b, -1)
        return nx.linear(nx.act(out.astype(np.float32)), a + "o_proj", "row", "attn")

    def _mla(self, i: int, h: np.ndarray) -> np.ndarray:
        c, nx, b = self.cfg, self.nx, self.batch
        a = f"model.layers.{i}.self_attn."
        nope, rope, vd = c.qk_nope_dim, c.qk_rope_dim, c.v_head_dim
        if c.q_lora_rank:
            qa = nx.act(nx.linear(h, a + "q_a_proj", "replicate", "attn"))
            qa = nx.act(rms_norm(qa, nx.w[a + "q_a_layernorm.weight"], c.norm_eps))
            q = nx.linear(qa, a + "q_b_proj", "col", "attn")
        else:
            q = nx.linear(h, a + "q_proj", "col", "attn")
        q = nx.act(q).reshape(b, c.n_heads, nope + rope)
        ckv = nx.act(nx.linear(h, a + "kv_a_proj_with_mqa", "replicate", "attn"))
        latent = nx.act(rms_norm(ckv[:, : c.kv_lora_rank], nx.w[a + "kv_a_layernorm.weight"],
                                 c.norm_eps))  # fmt: skip
        cos, sin = rope_cos_sin(rope, c.rope_theta, self.pos)
        q_rot = rope_interleave(q[..., nope:], cos, sin)
        k_rot = rope_interleave(ckv[:, None, c.kv_lora_rank :], cos, sin)[:, 0]
        lat_c, rot_c = self.cache[i]
        lat_c[:, self.pos], rot_c[:, self.pos] = nx.kv(latent), nx.kv(k_rot)
        t = self.pos + 1
        # keys/values from the cached latent through kv_b_proj (HF's non-absorbed form)
        kv = nx.linear(lat_c[:, :t].reshape(b * t, -1), a + "kv_b_proj", "heads", "attn")
        kv = nx.act(kv).reshape(b, t, c.n_heads, nope + vd)
        k_nope, vals = kv[..., :nope], kv[..., nope:]
        q_all = nx.act(np.concatenate([q[..., :nope], q_rot], axis=-1))
        keys = np.concatenate(
            [k_nope, np.broadcast_to(rot_c[:, :t, None, :], (b, t, c.n_heads, rope))], axis=-1
        )
        scale = np.float32((nope + rope) ** -0.5)
        scores = np.einsum("bhd,bthd->bht", q_all, keys) * scale
        out = np.einsum("bht,bthd->bhd", softmax(scores), vals).reshape(b, -1)
        return nx.linear(nx.act(out.astype(np.float32)), a + "o_proj", "row", "attn")

    # -- MLP / MoE ------------------------------------------------------------------------------

    def _swiglu(self, x: np.ndarray, p: str, names, splits, role: str) -> np.ndarray:
        nx = self.nx
        g = nx.act(nx.linear(x, p + names[0], splits[0], role))
        u = nx.act(nx.linear(x, p + names[1], splits[0], role))
        return nx.linear(nx.act(silu(g) * u), p + names[2], splits[1], role)

    def _mlp(self, i: int, h: np.ndarray) -> np.ndarray:
        c, p = self.cfg, f"model.layers.{i}."
        std = ("gate_proj", "up_proj", "down_proj")
        if c.is_dense_layer(i):
            return self._swiglu(h, p + "mlp.", std, ("col", "row"), "mlp")
        if c.model_type == "mixtral":
            moe, names = p + "block_sparse_moe.", ("w1", "w3", "w2")
        else:
            moe, names = p + "mlp.", std
        ids, wts = self._route(i, h, moe)
        rows = []
        for t in range(self.batch):
            parts = []
            for e, wt in zip(ids[t], wts[t]):
                y = self._swiglu(h[t : t + 1], f"{moe}experts.{e}.", names,
                                 ("experts", "experts"), "expert")  # fmt: skip
                parts.append(self.nx.act(y) * np.float32(wt))
            rows.append(self.nx.combine(i, [int(e) for e in ids[t]], parts))
        out = np.concatenate(rows, axis=0)
        if c.n_shared_experts:
            out = out + self.nx.act(self._swiglu(h, moe + "shared_experts.", std,
                                                 ("col", "row"), "mlp"))  # fmt: skip
        return out

    def _route(self, i: int, h: np.ndarray, moe: str) -> tuple[np.ndarray, np.ndarray]:
        """Top-k expert ids and weights per token, by the family's rule."""
        c, nx = self.cfg, self.nx
        logits = nx.linear(h, moe + "gate", "replicate", "router").astype(np.float32)
        k = c.top_k
        if c.attention == "mla":
            return _deepseek_route(c, logits, nx.w[moe + "gate.e_score_correction_bias"])
        probs = softmax(logits)
        ids = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
        wts = np.take_along_axis(probs, ids, axis=-1)
        if c.model_type == "mixtral" or c.raw.get("norm_topk_prob", False):
            wts = wts / wts.sum(axis=-1, keepdims=True)
        return ids, wts


def _deepseek_route(c: ModelConfig, logits: np.ndarray, bias: np.ndarray):
    """DeepSeek-V3 routing: sigmoid scores, group-limited top-k on scores + correction bias,
    weights from the uncorrected scores (normalised, times the routed scaling factor)."""
    raw = c.raw
    n_group, topk_group = int(raw.get("n_group") or 1), int(raw.get("topk_group") or 1)
    scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores + bias
    per = c.n_experts // n_group
    grouped = choice.reshape(-1, n_group, per)
    group_scores = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)
    keep = np.argsort(-group_scores, axis=-1, kind="stable")[:, :topk_group]
    mask = np.zeros_like(group_scores, dtype=bool)
    np.put_along_axis(mask, keep, True, axis=-1)
    masked = np.where(np.repeat(mask, per, axis=-1), choice, -np.inf)
    ids = np.argsort(-masked, axis=-1, kind="stable")[:, : c.top_k]
    wts = np.take_along_axis(scores, ids, axis=-1)
    if raw.get("norm_topk_prob", True):
        wts = wts / (wts.sum(axis=-1, keepdims=True) + np.float32(1e-20))
    return ids, wts * np.float32(raw.get("routed_scaling_factor") or 1.0)


def reference_logits(cfg: ModelConfig, weights, tokens) -> np.ndarray:
    """fp32 logits ``[len(tokens), vocab]`` after each token of one sequence (decode with cache)."""
    model = DecodeModel(cfg, Numerics(weights), batch=1, max_len=len(tokens))
    return np.stack([model.step([t])[0] for t in tokens])
