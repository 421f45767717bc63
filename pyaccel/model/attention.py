"""Attention ops of the decode graph: the context-dependent counts, the attention op itself, and
the block around it (norm, projections, residual) for GQA and MLA layers."""

from __future__ import annotations

import numpy as np

from ..workload import Workload
from .config import ModelConfig
from .ops import ACT_BYTES, SMALL_PARAM_BYTES, Op, matmul_op, vector_op


def attention_counts(cfg: ModelConfig, work: Workload, layer: int, context):
    """The context-dependent work of one layer's attention: (attended tokens, FLOPs, KV bytes
    read, KV bytes written) for ``context`` cached tokens. ``context`` may be an int or a NumPy
    integer array (every step of a trace at once, for the lower bound); integer arithmetic only,
    so both give the same numbers."""
    b = work.batch
    kv_fmt = work.kv_format
    window = cfg.sliding_window if cfg.is_sliding(layer) else 0
    attended = np.minimum(context + 1, window) if window else context + 1
    if cfg.attention == "mla":
        lat = cfg.kv_lora_rank
        per_token = 2 * cfg.n_heads * (lat + cfg.qk_rope_dim) + 2 * cfg.n_heads * lat
        absorb = 2 * cfg.n_heads * lat * (cfg.qk_nope_dim + cfg.v_head_dim)
        flops = b * (per_token * attended + absorb)
    else:
        flops = b * 4 * cfg.n_heads * cfg.head_dim * attended
    elems = cfg.kv_elems_per_token_layer
    # tokens already cached (attended - 1) are read; the new token's K/V is written
    kv_read = b * kv_fmt.tensor_bytes(attended - 1, elems, "kv") * (attended > 1)
    kv_write = b * kv_fmt.tensor_bytes(1, elems, "kv")
    return attended, flops, kv_read, kv_write


def attention_op(cfg: ModelConfig, work: Workload, layer: int, context: int) -> Op:
    """Attention of one new token per sequence over its cache (scores, softmax, weighted sum)."""
    b = work.batch
    kv_fmt = work.kv_format
    window = cfg.sliding_window if cfg.is_sliding(layer) else 0
    resident_len = min(work.max_len, window) if window else work.max_len
    elems = cfg.kv_elems_per_token_layer
    attended, flops, kv_read, kv_write = (
        int(v) for v in attention_counts(cfg, work, layer, context)
    )
    if cfg.attention == "mla":
        # Absorbed MLA (as FlashMLA decodes): scores over the 576-wide latent+rope cache, the
        # weighted sum in the 512-wide latent; kv_b_proj's up-projections (W_UK, W_UV) are folded
        # into the query and output, so their weights are read here.
        lat = cfg.kv_lora_rank
        w = work.weights_format.tensor_bytes(
            cfg.n_heads * (cfg.qk_nope_dim + cfg.v_head_dim), lat, "attn"
        )
        params = cfg.n_heads * (cfg.qk_nope_dim + cfg.v_head_dim) * lat
    else:
        w, params = 0, 0
    if cfg.attn_sinks:
        w += cfg.n_heads * SMALL_PARAM_BYTES
        params += cfg.n_heads
    q_width = cfg.n_heads * (cfg.v_head_dim if cfg.attention == "mla" else cfg.head_dim)
    return Op(
        f"L{layer}.attention",
        layer,
        "attention",
        "attention",
        "heads",
        m=b,
        n=q_width,
        k=attended,
        flops=flops,
        weight_bytes=w,
        act_bytes=ACT_BYTES * b * 2 * q_width,
        kv_read_bytes=kv_read,
        kv_write_bytes=kv_write,
        resident_weight_bytes=w,
        resident_kv_bytes=b * kv_fmt.tensor_bytes(resident_len, elems, "kv"),
        params=params,
    )


def attention_block(cfg: ModelConfig, work: Workload, layer: int, context: int) -> list[Op]:
    b, h = work.batch, cfg.hidden
    wf = work.weights_format
    ops = [
        vector_op(f"L{layer}.attn_norm", layer, "attn_norm", "norm", "replicate", b, h, 4, params=h)
    ]
    if cfg.attention == "mla":
        q_dim = cfg.qk_nope_dim + cfg.qk_rope_dim
        if cfg.q_lora_rank:
            ops += [
                matmul_op(
                    f"L{layer}.q_a_proj",
                    layer,
                    "q_a_proj",
                    "replicate",
                    b,
                    [(cfg.q_lora_rank, h)],
                    wf,
                    "attn",
                ),
                vector_op(
                    f"L{layer}.q_a_norm",
                    layer,
                    "q_a_norm",
                    "norm",
                    "replicate",
                    b,
                    cfg.q_lora_rank,
                    4,
                    params=cfg.q_lora_rank,
                ),
                matmul_op(
                    f"L{layer}.q_b_proj",
                    layer,
                    "q_b_proj",
                    "col",
                    b,
                    [(cfg.n_heads * q_dim, cfg.q_lora_rank)],
                    wf,
                    "attn",
                ),
            ]
        else:
            ops.append(
                matmul_op(
                    f"L{layer}.q_proj",
                    layer,
                    "q_proj",
                    "col",
                    b,
                    [(cfg.n_heads * q_dim, h)],
                    wf,
                    "attn",
                )
            )
        ops += [
            matmul_op(
                f"L{layer}.kv_a_proj",
                layer,
                "kv_a_proj",
                "replicate",
                b,
                [(cfg.kv_lora_rank + cfg.qk_rope_dim, h)],
                wf,
                "attn",
            ),
            vector_op(
                f"L{layer}.kv_a_norm",
                layer,
                "kv_a_norm",
                "norm",
                "replicate",
                b,
                cfg.kv_lora_rank,
                4,
                params=cfg.kv_lora_rank,
            ),
            vector_op(
                f"L{layer}.rope",
                layer,
                "rope",
                "elementwise",
                "heads",
                b,
                (cfg.n_heads + 1) * cfg.qk_rope_dim,
                3,
            ),
        ]
        o_in = cfg.n_heads * cfg.v_head_dim
    else:
        hd = cfg.head_dim
        ops.append(
            matmul_op(
                f"L{layer}.qkv_proj",
                layer,
                "qkv_proj",
                "col",
                b,
                [(cfg.n_heads * hd, h), (cfg.n_kv_heads * hd, h), (cfg.n_kv_heads * hd, h)],
                wf,
                "attn",
                bias=cfg.qkv_bias,
            )
        )
        if cfg.qk_norm:
            ops.append(
                vector_op(
                    f"L{layer}.qk_norm",
                    layer,
                    "qk_norm",
                    "norm",
                    "heads",
                    b,
                    (cfg.n_heads + cfg.n_kv_heads) * hd,
                    4,
                    params=2 * hd,
                )
            )
        ops.append(
            vector_op(
                f"L{layer}.rope",
                layer,
                "rope",
                "elementwise",
                "heads",
                b,
                (cfg.n_heads + cfg.n_kv_heads) * hd,
                3,
            )
        )
        o_in = cfg.n_heads * hd
    ops += [
        attention_op(cfg, work, layer, context),
        matmul_op(
            f"L{layer}.o_proj", layer, "o_proj", "row", b, [(h, o_in)], wf, "attn", bias=cfg.o_bias
        ),
        vector_op(
            f"L{layer}.attn_residual",
            layer,
            "attn_residual",
            "elementwise",
            "replicate",
            b,
            h,
            1,
            reads=2,
        ),
    ]
    return ops
