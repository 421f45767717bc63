"""The reference decode forward pass (NumPy, fp32) with a KV cache, one token per sequence per step.

Covers Llama/Mistral/Qwen2/Qwen3 dense (GQA, optional biases, Qwen3's per-head q/k norms, sliding
windows), Mixtral and Qwen3-MoE (softmax top-k routing) and DeepSeek-V3/Kimi-K2 (MLA with
interleaved rope on the rope part, sigmoid group-limited routing with correction bias, shared
experts, first-k dense layers), with the rope scalings ``default``, ``linear``, ``llama3`` and
``yarn`` (DeepSeek's yarn softmax mscale included). It follows Hugging Face ``transformers`` op for
op (checked against transformers 5.24.0), and tests hold it to the golden logits those models
produce (tests/golden/).

The arithmetic is delegated to a :class:`Numerics` object: this module's :class:`Numerics` is plain
fp32; ``numerics/execute.py`` subclasses it to compute each op as a machine does (its formats,
partitions and reduction order) while the model's structure stays in one place.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..model.config import ModelConfig
from ..model.families import LLAMA4_TYPES
from .rope import (
    mla_softmax_scale,
    rope_cos_sin,
    rope_half,
    rope_interleave,
    rope_inv_freq,
    rope_parameters,
)
from .weights import check_supported, nonfinite_count

# HF builds DeepSeek's q_a_layernorm / kv_a_layernorm as ``DeepseekV3RMSNorm(rank)``: the class
# default eps, not the config's ``rms_norm_eps`` (the original DeepSeek code does the same).
MLA_LATENT_NORM_EPS = 1e-6


def check_finite(x: np.ndarray, layer, op: str, run: str) -> np.ndarray:
    """``x`` unchanged when every value is finite; else :class:`ConfigError` naming the layer,
    the op and the run (metrics over NaN/inf logits would be meaningless: a model with 1e38
    weights once scored top-1 agreement 1.0)."""
    bad = nonfinite_count(x)
    if bad is None:
        return x
    raise ConfigError(
        f"functional run ({run}): layer {layer} op {op} produced {bad}; "
        f"every activation must be finite (|x| <= "
        f"{float(np.finfo(np.float32).max):.4g}, fp32): check the scales of the weights and of "
        "the config"
    )


def tensor_site(name: str) -> tuple[object, str]:
    """(layer, op) of an HF tensor name: ``model.layers.3.mlp.up_proj`` -> (3, ``mlp.up_proj``);
    names outside the layers (``lm_head``) -> (``head``, name)."""
    parts = name.split(".")
    if len(parts) > 3 and parts[:2] == ["model", "layers"] and parts[2].isdigit():
        return int(parts[2]), ".".join(parts[3:])
    return "head", name


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
        return check_finite(y, *tensor_site(name), self.label)

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


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (HF ``gelu_pytorch_tanh``):
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    f32 = np.float32
    inner = f32(math.sqrt(2.0 / math.pi)) * (x + f32(0.044715) * x * x * x)
    return f32(0.5) * x * (f32(1.0) + np.tanh(inner))


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
        rp = rope_parameters(cfg)
        # Phi-3 and others rotate only the first partial_rotary_factor of each head
        partial = float(rp.get("partial_rotary_factor") or cfg.raw.get("partial_rotary_factor")
                        or 1.0)  # fmt: skip
        rot = cfg.qk_rope_dim if cfg.attention == "mla" else int(cfg.head_dim * partial)
        self.rot = rot
        self.inv_freq, self.rope_factor = rope_inv_freq(rp, rot, cfg.max_position or 4096)
        # Gemma 3: sliding layers rotate with a base of their own, unscaled
        local = {"rope_type": "default", "rope_theta": cfg.local_rope_theta}
        self.local_rope = rope_inv_freq(local, rot, 0) if cfg.local_rope_theta else None
        # HF DeepSeek: interleaved rope pairs unless the config sets rope_interleave false;
        # Llama 4 rotates interleaved pairs too (complex multiplication)
        self.rope_interleave = cfg.model_type in LLAMA4_TYPES
        if cfg.attention == "mla":
            self.mla_scale = mla_softmax_scale(cfg, rp)
            self.rope_interleave = bool(cfg.raw.get("rope_interleave", True))
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
        x = nx.w["model.embed_tokens.weight"][ids].astype(np.float32)
        if c.embed_scale:  # Gemma: embeddings times sqrt(hidden)
            x = x * np.float32(c.hidden**0.5)
        x = self._finite(nx.act(x), "embed", "embed_tokens")
        for i in range(c.n_layers):
            x = self._layer(i, x)
        h = self._finite(nx.act(self._norm(x, "model.norm")), "head", "final norm")
        head = "model.embed_tokens" if c.tied_embeddings else "lm_head"
        logits = nx.linear(h, head, "vocab", "head").astype(np.float32)
        if c.final_softcap:  # Gemma 2: cap * tanh(logits / cap)
            cap = np.float32(c.final_softcap)
            logits = np.tanh(logits / cap) * cap
        self.pos += 1
        return logits.astype(np.float32)

    def _layer(self, i: int, x: np.ndarray) -> np.ndarray:
        """One decoder layer: attention and MLP blocks, each normed before (and with Gemma's
        sandwich norms, after) and added to the residual."""
        c, nx, p = self.cfg, self.nx, f"model.layers.{i}."
        h = self._finite(nx.act(self._norm(x, p + "input_layernorm")), i, "input_layernorm")
        a = self._mla(i, h) if c.attention == "mla" else self._gqa(i, h)
        if c.sandwich_norms:
            a = nx.act(self._norm(a, p + "post_attention_layernorm"))
        x = self._finite(nx.act(x + a), i, "attention residual add")
        pre = p + ("pre_feedforward_layernorm" if c.sandwich_norms else "post_attention_layernorm")
        h = self._finite(nx.act(self._norm(x, pre)), i, "pre-MLP norm")
        m = self._mlp(i, h)
        if c.sandwich_norms:
            m = nx.act(self._norm(m, p + "post_feedforward_layernorm"))
        return self._finite(nx.act(x + m), i, "mlp residual add")

    def _norm(self, x: np.ndarray, name: str, eps: float | None = None) -> np.ndarray:
        """RMSNorm with weight ``name``; Gemma's weight scales by ``1 + w``."""
        w = self.nx.w[name + ".weight"]
        if self.cfg.norm_offset:
            w = np.float32(self.cfg.norm_offset) + w
        return rms_norm(x, w, self.cfg.norm_eps if eps is None else eps)

    def _finite(self, x: np.ndarray, layer, op: str) -> np.ndarray:
        return check_finite(x, layer, op, self.nx.label)

    # -- attention ------------------------------------------------------------------------------

    def _window_start(self, layer: int) -> int:
        c = self.cfg
        if c.is_sliding(layer) and c.sliding_window:
            return max(0, self.pos + 1 - c.sliding_window)
        chunk = c.chunk(layer)
        return self.pos - self.pos % chunk if chunk else 0

    def _gqa(self, i: int, h: np.ndarray) -> np.ndarray:
        c, nx, b = self.cfg, self.nx, self.batch
        a, hd = f"model.layers.{i}.self_attn.", c.head_dim
        q = nx.act(nx.linear(h, a + "q_proj", "col", "attn")).reshape(b, c.n_heads, hd)
        k = nx.act(nx.linear(h, a + "k_proj", "col", "attn")).reshape(b, c.n_kv_heads, hd)
        v = nx.act(nx.linear(h, a + "v_proj", "col", "attn")).reshape(b, c.n_kv_heads, hd)
        if c.qk_norm:
            q = nx.act(self._norm(q, a + "q_norm"))
            k = nx.act(self._norm(k, a + "k_norm"))
        if i not in c.nope_layers:
            q, k = self._rotate(i, q, k)
        elif c.temp_floor:  # Llama 4's no-rope layers: query temperature grows with position
            t = np.log1p(np.floor(np.float32(self.pos + 1) / np.float32(c.temp_floor)))
            q = nx.act(q * (t * np.float32(c.temp_scale) + np.float32(1.0)))
        kc, vc = self.cache[i]
        kc[:, self.pos], vc[:, self.pos] = nx.kv(k), nx.kv(v)
        lo = self._window_start(i)
        keys, vals = kc[:, lo : self.pos + 1], vc[:, lo : self.pos + 1]  # [b, t, kvh, hd]
        group = c.n_heads // c.n_kv_heads
        keys, vals = np.repeat(keys, group, axis=2), np.repeat(vals, group, axis=2)
        scores = np.einsum("bhd,bthd->bht", q, keys) * np.float32(c.attn_scale or hd**-0.5)
        if c.attn_softcap:  # Gemma 2: cap * tanh(scores / cap) before the softmax
            cap = np.float32(c.attn_softcap)
            scores = np.tanh(scores / cap) * cap
        out = np.einsum("bht,bthd->bhd", softmax(scores), vals).reshape(b, -1)
        return nx.linear(nx.act(out.astype(np.float32)), a + "o_proj", "row", "attn")

    def _rotate(self, i: int, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q and k rotated by their position (the first ``rot`` features of each head; pairs
        interleaved or halves), then Llama 4's weightless L2 norm on rope layers."""
        c, nx = self.cfg, self.nx
        inv, factor = (self.local_rope if self.local_rope and c.is_sliding(i)
                       else (self.inv_freq, self.rope_factor))  # fmt: skip
        cos, sin = rope_cos_sin(inv, self.pos, factor)
        r, rotate = self.rot, rope_interleave if self.rope_interleave else rope_half
        q = nx.act(np.concatenate([rotate(q[..., :r], cos, sin), q[..., r:]], axis=-1))
        k = np.concatenate([rotate(k[..., :r], cos, sin), k[..., r:]], axis=-1)
        if c.qk_l2_norm:
            ones = np.ones(q.shape[-1], dtype=np.float32)
            q, k = nx.act(rms_norm(q, ones, c.norm_eps)), rms_norm(k, ones, c.norm_eps)
        return q, k

    def _mla(self, i: int, h: np.ndarray) -> np.ndarray:
        c, nx, b = self.cfg, self.nx, self.batch
        a = f"model.layers.{i}.self_attn."
        nope, rope, vd = c.qk_nope_dim, c.qk_rope_dim, c.v_head_dim
        if c.q_lora_rank:
            qa = nx.act(nx.linear(h, a + "q_a_proj", "replicate", "attn"))
            qa = nx.act(rms_norm(qa, nx.w[a + "q_a_layernorm.weight"], MLA_LATENT_NORM_EPS))
            q = nx.linear(qa, a + "q_b_proj", "col", "attn")
        else:
            q = nx.linear(h, a + "q_proj", "col", "attn")
        q = nx.act(q).reshape(b, c.n_heads, nope + rope)
        ckv = nx.act(nx.linear(h, a + "kv_a_proj_with_mqa", "replicate", "attn"))
        latent = nx.act(rms_norm(ckv[:, : c.kv_lora_rank], nx.w[a + "kv_a_layernorm.weight"],
                                 MLA_LATENT_NORM_EPS))  # fmt: skip
        cos, sin = rope_cos_sin(self.inv_freq, self.pos, self.rope_factor)
        rotate = rope_interleave if self.rope_interleave else rope_half
        q_rot = rotate(q[..., nope:], cos, sin)
        k_rot = rotate(ckv[:, None, c.kv_lora_rank :], cos, sin)[:, 0]
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
        scale = np.float32(self.mla_scale)
        scores = np.einsum("bhd,bthd->bht", q_all, keys) * scale
        out = np.einsum("bht,bthd->bhd", softmax(scores), vals).reshape(b, -1)
        return nx.linear(nx.act(out.astype(np.float32)), a + "o_proj", "row", "attn")

    # -- MLP / MoE ------------------------------------------------------------------------------

    def _swiglu(self, x: np.ndarray, p: str, names, splits, role: str) -> np.ndarray:
        nx = self.nx
        g = nx.act(nx.linear(x, p + names[0], splits[0], role))
        u = nx.act(nx.linear(x, p + names[1], splits[0], role))
        act = gelu_tanh if self.cfg.hidden_act == "gelu_tanh" else silu
        return nx.linear(nx.act(act(g) * u), p + names[2], splits[1], role)

    def _mlp(self, i: int, h: np.ndarray) -> np.ndarray:
        c, p = self.cfg, f"model.layers.{i}."
        std = ("gate_proj", "up_proj", "down_proj")
        llama4 = c.model_type in LLAMA4_TYPES
        mlp = p + ("feed_forward." if llama4 else "mlp.")
        if c.is_dense_layer(i):
            return self._swiglu(h, mlp, std, ("col", "row"), "mlp")
        moe, names = (p + "block_sparse_moe.", ("w1", "w3", "w2")) if c.model_type == "mixtral" \
            else (mlp, std)  # fmt: skip
        ids, wts = self._route(i, h, moe)
        rows = []
        for t in range(self.batch):
            parts = []
            for e, wt in zip(ids[t], wts[t], strict=True):
                # Llama 4 scales the expert's input by its score, the others its output
                x = h[t : t + 1] * np.float32(wt) if llama4 else h[t : t + 1]
                y = self.nx.act(self._swiglu(x, f"{moe}experts.{e}.", names,
                                             ("experts", "experts"), "expert"))  # fmt: skip
                parts.append(y if llama4 else y * np.float32(wt))
            rows.append(self.nx.combine(i, [int(e) for e in ids[t]], parts))
        out = np.concatenate(rows, axis=0)
        if c.n_shared_experts:
            shared = moe + ("shared_expert." if llama4 else "shared_experts.")
            out = out + self.nx.act(self._swiglu(h, shared, std, ("col", "row"), "mlp"))
        return out

    def _route(self, i: int, h: np.ndarray, moe: str) -> tuple[np.ndarray, np.ndarray]:
        """Top-k expert ids and weights per token, by the family's rule."""
        c, nx = self.cfg, self.nx
        gate = moe + ("router" if c.model_type in LLAMA4_TYPES else "gate")
        logits = nx.linear(h, gate, "replicate", "router").astype(np.float32)
        k = c.top_k
        if c.model_type in LLAMA4_TYPES:  # sigmoid of the top-k logits (HF Llama4Router)
            ids = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
            top = np.take_along_axis(logits, ids, axis=-1)
            return ids, (np.float32(1.0) / (np.float32(1.0) + np.exp(-top))).astype(np.float32)
        if c.model_type == "deepseek_v2":
            return _deepseek_v2_route(c, logits)
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


def _deepseek_v2_route(c: ModelConfig, logits: np.ndarray):
    """DeepSeek-V2 routing (HF ``DeepseekV2TopkRouter``): softmax scores; ``greedy`` top-k, or
    ``group_limited_greedy`` (groups ranked by their best expert, the best ``topk_group`` kept);
    weights the scores, not renormalised, times the routed scaling factor."""
    raw = c.raw
    scores = softmax(logits)
    if raw.get("topk_method") == "group_limited_greedy":
        n_group, topk_group = int(raw.get("n_group") or 1), int(raw.get("topk_group") or 1)
        grouped = scores.reshape(-1, n_group, c.n_experts // n_group)
        keep = np.argsort(-grouped.max(axis=-1), axis=-1, kind="stable")[:, :topk_group]
        mask = np.zeros(grouped.shape[:2], dtype=bool)
        np.put_along_axis(mask, keep, True, axis=-1)
        scores = np.where(np.repeat(mask, c.n_experts // n_group, axis=-1), scores, 0.0)
    ids = np.argsort(-scores, axis=-1, kind="stable")[:, : c.top_k]
    wts = np.take_along_axis(scores, ids, axis=-1)
    return ids, wts * np.float32(raw.get("routed_scaling_factor") or 1.0)


def reference_logits(cfg: ModelConfig, weights, tokens) -> np.ndarray:
    """fp32 logits ``[len(tokens), vocab]`` after each token of one sequence (decode with cache)."""
    model = DecodeModel(cfg, Numerics(weights), batch=1, max_len=len(tokens))
    return np.stack([model.step([t])[0] for t in tokens])
