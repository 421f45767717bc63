"""Attention ops of the decode graph: the shape record a graph keeps of its attention, the
context-dependent counts, the attention op itself, and the block around it (norm, projections,
residual) for GQA and MLA layers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..units import FLOPS_PER_MAC
from ..workload import Workload
from .config import ModelConfig
from .ops import ACT_BYTES, SMALL_PARAM_BYTES, Op, matmul_op, vector_op


@dataclass(frozen=True)
class AbsorbedGemv:
    """One of MLA's absorbed up-projections as a decode token runs it: ``heads`` independent
    GEMVs, each of ``k`` inputs and ``n`` outputs (elements), one per query head."""

    name: str
    heads: int
    k: int
    n: int

    @property
    def macs(self) -> int:
        """Multiply-accumulates a token (= the GEMV's weights, each read once a token)."""
        return self.heads * self.k * self.n


@dataclass(frozen=True)
class AttentionShape:
    """What a decode graph keeps of its model's attention, so that an attention op can be
    rebuilt at any context or batch without the model config (all sizes in elements).

    ``kind`` is ``gqa`` (grouped-query; MHA when ``n_kv_heads == n_heads``) or ``mla`` (latent
    cache of ``kv_lora_rank + qk_rope_dim`` elements per token). ``windows`` has one entry per
    layer: the tokens a layer attends to at most (its sliding window), 0 for full attention.
    """

    kind: str
    n_heads: int
    n_kv_heads: int
    head_dim: int
    kv_lora_rank: int
    qk_nope_dim: int
    qk_rope_dim: int
    v_head_dim: int
    sinks: bool
    windows: tuple[int, ...]
    chunks: tuple[int, ...] = ()

    @classmethod
    def of(cls, cfg: ModelConfig) -> AttentionShape:
        """The attention shape of ``cfg``."""
        windows = tuple(
            cfg.sliding_window if cfg.is_sliding(layer) else 0 for layer in range(cfg.n_layers)
        )
        chunks = tuple(cfg.chunk(i) for i in range(cfg.n_layers)) if cfg.attention_chunk else ()
        return cls(cfg.attention, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.kv_lora_rank,
                   cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim, cfg.attn_sinks,
                   windows, chunks)  # fmt: skip

    def chunk(self, layer: int) -> int:
        """Tokens of ``layer``'s attention chunk (0: not chunked): the token at position ``p``
        attends to positions ``p - p % chunk .. p``."""
        return self.chunks[layer] if self.chunks else 0

    @property
    def latent(self) -> bool:
        """True for MLA: one latent K/V per token shared by every head (not split by heads)."""
        return self.kind == "mla"

    def window(self, layer: int) -> int:
        """Tokens ``layer`` attends to at most: its sliding window, 0 when it sees them all."""
        return self.windows[layer]

    def is_sliding(self, layer: int) -> bool:
        """True when ``layer`` attends only to the last ``window(layer)`` tokens."""
        return self.windows[layer] > 0

    @property
    def kv_elems_per_token(self) -> int:
        """KV-cache elements stored per token per layer (K and V, or MLA's latent + rope key)."""
        if self.latent:
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.n_kv_heads * self.head_dim

    @property
    def absorbed(self) -> tuple[AbsorbedGemv, ...]:
        """MLA's absorbed decode path (kv_b_proj split in two; empty for GQA): ``w_uk`` takes
        each head's ``qk_nope`` query into the ``kv_lora_rank`` latent before the scores,
        ``w_uv`` each head's latent output to its ``v_head`` values before ``o_proj``."""
        if not self.latent:
            return ()
        h, lat = self.n_heads, self.kv_lora_rank
        return (AbsorbedGemv("w_uk", h, self.qk_nope_dim, lat),
                AbsorbedGemv("w_uv", h, lat, self.v_head_dim))  # fmt: skip

    @property
    def q_width(self) -> int:
        """Elements of the attention output per token (the query heads' value widths)."""
        return self.n_heads * (self.v_head_dim if self.latent else self.head_dim)


def _spans(context, q: int, window: int, chunk: int):
    """(first, last, sum) over the ``q`` new tokens of the tokens each attends: the i-th
    (i = 1..q) attends ``context + i`` tokens, at most ``window`` of them, or, in chunked
    attention, those of its own chunk up to itself. Closed forms (a prefill chunk has thousands
    of new tokens); integers, and arrays where ``context`` is one."""
    scalar = np.ndim(context) == 0
    if chunk:  # the i-th new token sits at position context + i - 1
        pos = np.add.outer(context, np.arange(q, dtype=np.int64))
        spans = np.mod(pos, chunk) + 1
        first, last, total = spans[..., 0], spans[..., -1], spans.sum(axis=-1)
    elif window:  # the first k new tokens see their whole prefix, the rest the window
        k = np.clip(window - np.asarray(context), 0, q)
        first = np.minimum(np.asarray(context) + 1, window)
        last = np.minimum(np.asarray(context) + q, window)
        total = k * context + k * (k + 1) // 2 + (q - k) * window
    else:
        return context + 1, context + q, q * context + q * (q + 1) // 2
    if scalar:
        return int(first), int(last), int(total)
    return first, last, total


def expanded_mla(att: AttentionShape, work: Workload) -> bool:
    """True when ``work``'s MLA attention runs expanded (``Workload.expand_mla`` and several
    rows a sequence): each sequence's cached and new latents up-projected once (kv_b_proj:
    ``W_UK``, ``W_UV``) to per-head keys (``qk_nope + qk_rope`` wide) and values (``v_head``)
    that all its rows attend with ordinary multi-head attention: vLLM's "compute friendly"
    MLA path for prefill tokens (vllm/v1/attention/backends/mla/common.py, its context
    up-projected in workspace chunks), the DeepSeek-V2 paper's MHA view. One row a sequence
    shares no up-projection: it stays absorbed, as vLLM routes a one-token query to its decode
    (absorbed) path."""
    return att.latent and work.expand_mla and work.step_tokens > 1


def _mla_flops(att: AttentionShape, work: Workload, first, total):
    """FLOPs of one sequence's MLA attention whose ``step_tokens`` queries attend ``total``
    (query, key) pairs, the first of them ``first`` tokens (so ``first - 1`` cached ones).

    Absorbed: each pair scores over the ``kv_lora_rank + qk_rope`` latent and sums in the
    ``kv_lora_rank`` latent, every query also crossing ``W_UK`` and ``W_UV`` (folded into
    query and output). Expanded: each of the ``first - 1 + step_tokens`` keys is up-projected
    once (``W_UK``, ``W_UV``: ``n_heads x (qk_nope + v_head)`` outputs of ``kv_lora_rank``
    inputs), then each pair scores over ``qk_nope + qk_rope`` and sums ``v_head`` a head."""
    h, lat, q = att.n_heads, att.kv_lora_rank, work.step_tokens
    up = FLOPS_PER_MAC * sum(g.macs for g in att.absorbed)  # one key's (query's) up-projection
    if expanded_mla(att, work):
        pair = 2 * h * (att.qk_nope_dim + att.qk_rope_dim + att.v_head_dim)
        return pair * total + up * (first - 1 + q)
    pair = 2 * h * (lat + att.qk_rope_dim) + 2 * h * lat
    return pair * total + up * q


def attention_counts(att: AttentionShape, work: Workload, layer: int, context):
    """The context-dependent work of one layer's attention: (attended tokens, FLOPs, KV bytes
    read, KV bytes written) for ``context`` cached tokens. ``context`` may be an int or a NumPy
    integer array (every step of a trace at once, for the lower bound); integer arithmetic only,
    so both give the same numbers.

    With ``work.step_tokens = q`` each sequence's ``q`` new tokens attend causally (the i-th to
    ``context + i`` tokens); the cache is read once per sequence for all of them (as paged
    decode kernels read it for a verify step) and their ``q`` K/V rows are written. The
    attended count returned is the last query's."""
    b, q = work.batch, work.step_tokens
    kv_fmt = work.kv_format
    first, attended, total = _spans(context, q, att.window(layer), att.chunk(layer))
    if att.latent:  # absorbed, or expanded (expanded_mla): the same cache bytes either way
        flops = b * _mla_flops(att, work, first, total)
    else:
        flops = b * 4 * att.n_heads * att.head_dim * total
    elems = att.kv_elems_per_token
    # tokens already cached (the first query's attended - 1) are read; the new K/V are written
    kv_read = b * kv_fmt.tensor_bytes(first - 1, elems, "kv") * (first > 1)
    kv_write = b * kv_fmt.tensor_bytes(q, elems, "kv")
    return attended, flops, kv_read, kv_write


def attention_op(att: AttentionShape, work: Workload, layer: int, context: int) -> Op:
    """Attention of each sequence's new token(s) over its cache (scores, softmax, weighted
    sum)."""
    b, rows = work.batch, work.rows
    kv_fmt = work.kv_format
    window = att.window(layer) or att.chunk(layer)  # a chunk's cache holds at most a chunk
    # the positions the run's last step writes, a verification's drafted ones included
    resident_len = min(work.kv_len, window) if window else work.kv_len
    elems = att.kv_elems_per_token
    attended, flops, kv_read, kv_write = (
        int(v) for v in attention_counts(att, work, layer, context)
    )
    act = ACT_BYTES * rows * 2 * att.q_width
    if att.latent:
        # Absorbed MLA (as FlashMLA decodes): scores over the 576-wide latent+rope cache, the
        # weighted sum in the 512-wide latent; kv_b_proj's up-projections (W_UK, W_UV) are folded
        # into the query and output. Expanded (a prefill chunk, expanded_mla): they make per-head
        # keys and values of every key the chunk attends, written and read back once
        # (activations). Either way their weights are read here.
        lat = att.kv_lora_rank
        if expanded_mla(att, work):  # the cached keys (first - 1) and the chunk's own
            first = _spans(context, work.step_tokens, att.window(layer), att.chunk(layer))[0]
            keys = first - 1 + work.step_tokens
            act += 2 * ACT_BYTES * b * keys * att.n_heads * (att.qk_nope_dim + att.v_head_dim)
        w = work.weights_format.tensor_bytes(
            att.n_heads * (att.qk_nope_dim + att.v_head_dim), lat, "attn"
        )
        params = sum(g.macs for g in att.absorbed)
    else:
        w, params = 0, 0
    if att.sinks:
        w += att.n_heads * SMALL_PARAM_BYTES
        params += att.n_heads
    q_width = att.q_width
    return Op(
        f"L{layer}.attention",
        layer,
        "attention",
        "attention",
        "heads",
        m=rows,
        n=q_width,
        k=attended,
        flops=flops,
        weight_bytes=w,
        act_bytes=act,
        kv_read_bytes=kv_read,
        kv_write_bytes=kv_write,
        resident_weight_bytes=w,
        resident_kv_bytes=b * kv_fmt.tensor_bytes(resident_len, elems, "kv"),
        params=params,
    )


def attention_block(
    cfg: ModelConfig, att: AttentionShape, work: Workload, layer: int, context: int
) -> list[Op]:
    """One layer's attention ops: norm, projections (MLA or GQA), attention over the cache,
    output projection and residual add, for ``work.rows`` tokens at ``context``."""
    b, h = work.rows, cfg.hidden
    norm = vector_op(
        f"L{layer}.attn_norm", layer, "attn_norm", "norm", "replicate", b, h, 4, params=h
    )
    project = _mla_projections if cfg.attention == "mla" else _gqa_projections
    ops, o_in = project(cfg, work, layer)
    o_proj = matmul_op(
        f"L{layer}.o_proj", layer, "o_proj", "row", b, [(h, o_in)], work.weights_format, "attn",
        bias=cfg.o_bias,
    )  # fmt: skip
    residual = vector_op(
        f"L{layer}.attn_residual", layer, "attn_residual", "elementwise", "replicate", b, h, 1,
        reads=2,
    )  # fmt: skip
    post = [sandwich_norm(layer, "post_attn_norm", b, h)] if cfg.sandwich_norms else []
    return [norm, *ops, attention_op(att, work, layer, context), o_proj, *post, residual]


def sandwich_norm(layer: int, kind: str, b: int, h: int) -> Op:
    """A norm of a block's output before its residual add (Gemma's post-attention and
    post-feedforward norms)."""
    return vector_op(f"L{layer}.{kind}", layer, kind, "norm", "replicate", b, h, 4, params=h)


def _mla_projections(cfg: ModelConfig, work: Workload, layer: int) -> tuple[list[Op], int]:
    """MLA's query (low-rank when ``q_lora_rank``) and compressed-KV projections with their
    norms and RoPE; and the width the output projection reads."""
    b, h, wf = work.rows, cfg.hidden, work.weights_format
    q_dim = cfg.qk_nope_dim + cfg.qk_rope_dim

    def proj(name: str, split: str, rows: int, cols: int) -> Op:
        return matmul_op(f"L{layer}.{name}", layer, name, split, b, [(rows, cols)], wf, "attn")

    def norm(name: str, width: int) -> Op:
        return vector_op(
            f"L{layer}.{name}", layer, name, "norm", "replicate", b, width, 4, params=width
        )

    if cfg.q_lora_rank:
        ops = [
            proj("q_a_proj", "replicate", cfg.q_lora_rank, h),
            norm("q_a_norm", cfg.q_lora_rank),
            proj("q_b_proj", "col", cfg.n_heads * q_dim, cfg.q_lora_rank),
        ]
    else:
        ops = [proj("q_proj", "col", cfg.n_heads * q_dim, h)]
    rope_width = (cfg.n_heads + 1) * cfg.qk_rope_dim
    ops += [
        proj("kv_a_proj", "replicate", cfg.kv_lora_rank + cfg.qk_rope_dim, h),
        norm("kv_a_norm", cfg.kv_lora_rank),
        vector_op(f"L{layer}.rope", layer, "rope", "elementwise", "heads", b, rope_width, 3),
    ]
    return ops, cfg.n_heads * cfg.v_head_dim


def _gqa_projections(cfg: ModelConfig, work: Workload, layer: int) -> tuple[list[Op], int]:
    """The fused QKV projection of grouped-query attention, its optional per-head norm and RoPE;
    and the width the output projection reads."""
    b, h, hd = work.rows, cfg.hidden, cfg.head_dim
    q, kv = cfg.n_heads * hd, cfg.n_kv_heads * hd
    w_in = h * cfg.draft_head.attn_input if cfg.draft_head and layer == 0 else h
    ops = [
        matmul_op(
            f"L{layer}.qkv_proj", layer, "qkv_proj", "col", b, [(q, w_in), (kv, w_in), (kv, w_in)],
            work.weights_format, "attn", bias=cfg.qkv_bias,
        )
    ]  # fmt: skip
    heads_width = (cfg.n_heads + cfg.n_kv_heads) * hd
    rotates = layer not in cfg.nope_layers  # Llama 4's no-rope layers neither rotate nor norm
    if cfg.qk_norm or (cfg.qk_l2_norm and rotates):
        ops.append(
            vector_op(
                f"L{layer}.qk_norm", layer, "qk_norm", "norm", "heads", b, heads_width, 4,
                params=2 * hd if cfg.qk_norm else 0,
            )
        )  # fmt: skip
    if rotates:
        ops.append(
            vector_op(f"L{layer}.rope", layer, "rope", "elementwise", "heads", b, heads_width, 3)
        )
    return ops, q
