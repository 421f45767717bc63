"""DecodeGraph: every op of one decode step, with shapes, FLOPs and bytes (SPEC §2).

One step generates one token for each of ``batch`` sequences whose caches hold ``context`` tokens.
Ops run in the order listed; each depends on the one before (decode has no parallel branches
worth modelling at this level). Byte counts: ``weight_bytes`` are read from wherever the weights
live, ``act_bytes`` are activations read plus written, ``kv_read_bytes``/``kv_write_bytes`` touch
the KV cache. *Resident* bytes (what a unit must hold) are kept apart from bytes read per step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from ..errors import ConfigError
from ..formats import FORMATS, HC1_ASSUMPTION, Format
from ..workload import Workload
from .config import ModelConfig

# Activations move as bf16 between ops on every machine (named assumption of the graph).
ACT_BYTES = 2
# Norm weights, biases, routers, embeddings and sinks stay 16-bit (SPEC §6).
SMALL_PARAM_BYTES = 2
GRAPH_ASSUMPTIONS = (
    "graph.activations_bf16: activations move between ops as bf16 (2 B/element)",
    "graph.moe_distinct_experts: routed-expert weights read per step = E*(1-(1-k/E)^B) experts "
    "(expected distinct experts for B tokens routed uniformly), until a router exists",
)

SPLITS = ("col", "row", "heads", "experts", "vocab", "replicate")


@dataclass(frozen=True)
class Op:
    """One op of the decode step.

    ``m`` tokens in the step, ``n`` output and ``k`` input features (matmuls). ``split`` says how
    tensor parallelism divides it: ``col`` (output features; no communication), ``row`` (input
    features; an all-reduce of the output follows), ``heads``, ``experts`` (all-reduce follows),
    ``vocab`` (LM head; partial arg-max reduced), ``replicate`` (every rank does it all).
    """

    name: str
    layer: int | str
    kind: str
    op_class: str
    split: str
    m: int = 0
    n: int = 0
    k: int = 0
    flops: int = 0
    weight_bytes: int = 0
    act_bytes: int = 0
    kv_read_bytes: int = 0
    kv_write_bytes: int = 0
    resident_weight_bytes: int = 0
    resident_kv_bytes: int = 0
    params: int = 0

    @property
    def mem_bytes(self) -> int:
        """All bytes the op moves to or from memory in one step."""
        return self.weight_bytes + self.act_bytes + self.kv_read_bytes + self.kv_write_bytes


@dataclass(frozen=True)
class DecodeGraph:
    """The ops of one decode step of ``model`` under ``workload`` at cache length ``context``."""

    model: ModelConfig
    workload: Workload
    context: int
    ops: tuple[Op, ...]
    left_out: tuple[str, ...]
    assumptions: tuple[str, ...]

    @cached_property
    def layer_keys(self) -> tuple[int | str, ...]:
        """Layer keys in execution order: ``"embed"``, 0 .. n_layers-1, ``"head"``."""
        return ("embed", *range(self.model.n_layers), "head")

    def ops_of(self, layer: int | str) -> tuple[Op, ...]:
        """The ops belonging to one layer key."""
        return self._by_layer[layer]

    @cached_property
    def _by_layer(self) -> dict:
        out: dict = {key: [] for key in self.layer_keys}
        for op in self.ops:
            out[op.layer].append(op)
        return {key: tuple(ops) for key, ops in out.items()}

    def resident_bytes(self, layer: int | str) -> tuple[int, int]:
        """(weight bytes, KV-cache bytes) a layer keeps resident for this workload."""
        ops = self.ops_of(layer)
        return (sum(o.resident_weight_bytes for o in ops), sum(o.resident_kv_bytes for o in ops))

    @property
    def total_resident_weight_bytes(self) -> int:
        """Bytes of all parameters in their stored formats, scales included."""
        return sum(o.resident_weight_bytes for o in self.ops)

    @property
    def total_resident_kv_bytes(self) -> int:
        """KV-cache bytes for ``batch`` sequences of ``context + tokens`` tokens."""
        return sum(o.resident_kv_bytes for o in self.ops)

    @property
    def bytes_read_per_step(self) -> int:
        """Weight and KV bytes read in one step (activations excluded)."""
        return sum(o.weight_bytes + o.kv_read_bytes for o in self.ops)

    @property
    def param_count(self) -> int:
        """Parameters of the model as built (MTP layers excluded; listed in ``left_out``)."""
        return sum(o.params for o in self.ops)

    def at_context(self, context: int) -> "DecodeGraph":
        """The same step with ``context`` tokens in the cache (only attention ops change)."""
        if context == self.context:
            return self
        ops = tuple(
            attention_op(self.model, self.workload, op.layer, context)
            if op.kind == "attention"
            else op
            for op in self.ops
        )
        return replace(self, context=context, ops=ops)

    def to_dataframe(self):
        """The ops as a pandas DataFrame, one row per op."""
        import pandas as pd

        return pd.DataFrame([op.__dict__ for op in self.ops])


def _matmul(
    name: str,
    layer,
    kind: str,
    split: str,
    m: int,
    tensors: list[tuple[int, int]],
    fmt: Format,
    role: str,
    bias: bool = False,
    count: float = 1.0,
    resident_count: int = 1,
) -> Op:
    """A weight matmul over one or more ``(rows, cols)`` tensors that share an input.

    ``count`` is how many copies are read per step (expected distinct experts), ``resident_count``
    how many are stored.
    """
    n = sum(r for r, _ in tensors)
    k = tensors[0][1]
    one = sum(fmt.tensor_bytes(r, c, role) for r, c in tensors) + (
        n * SMALL_PARAM_BYTES if bias else 0
    )
    params = sum(r * c for r, c in tensors) + (n if bias else 0)
    return Op(
        name,
        layer,
        kind,
        "matmul",
        split,
        m=m,
        n=n,
        k=k,
        flops=2 * m * n * k,
        weight_bytes=round(one * count),
        act_bytes=ACT_BYTES * m * (n + k),
        resident_weight_bytes=one * resident_count,
        params=params * resident_count,
    )


def _vector_op(
    name: str,
    layer,
    kind: str,
    op_class: str,
    split: str,
    m: int,
    width: int,
    flops_per_elem: int,
    params: int = 0,
    reads: int = 1,
) -> Op:
    """A norm, elementwise or small op over ``m x width`` activations."""
    return Op(
        name,
        layer,
        kind,
        op_class,
        split,
        m=m,
        n=width,
        k=width,
        flops=flops_per_elem * m * width,
        weight_bytes=params * SMALL_PARAM_BYTES,
        act_bytes=ACT_BYTES * m * width * (reads + 1),
        resident_weight_bytes=params * SMALL_PARAM_BYTES,
        params=params,
    )


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


def _attention_block(cfg: ModelConfig, work: Workload, layer: int, context: int) -> list[Op]:
    b, h = work.batch, cfg.hidden
    wf = work.weights_format
    ops = [
        _vector_op(
            f"L{layer}.attn_norm", layer, "attn_norm", "norm", "replicate", b, h, 4, params=h
        )
    ]
    if cfg.attention == "mla":
        q_dim = cfg.qk_nope_dim + cfg.qk_rope_dim
        if cfg.q_lora_rank:
            ops += [
                _matmul(
                    f"L{layer}.q_a_proj",
                    layer,
                    "q_a_proj",
                    "replicate",
                    b,
                    [(cfg.q_lora_rank, h)],
                    wf,
                    "attn",
                ),
                _vector_op(
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
                _matmul(
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
                _matmul(
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
            _matmul(
                f"L{layer}.kv_a_proj",
                layer,
                "kv_a_proj",
                "replicate",
                b,
                [(cfg.kv_lora_rank + cfg.qk_rope_dim, h)],
                wf,
                "attn",
            ),
            _vector_op(
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
            _vector_op(
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
            _matmul(
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
                _vector_op(
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
            _vector_op(
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
        _matmul(
            f"L{layer}.o_proj", layer, "o_proj", "row", b, [(h, o_in)], wf, "attn", bias=cfg.o_bias
        ),
        _vector_op(
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


def _swiglu(
    layer,
    prefix: str,
    split_up: str,
    split_down: str,
    b: int,
    h: int,
    f: int,
    fmt: Format,
    role: str,
    count: float = 1.0,
    resident: int = 1,
    bias: bool = False,
    act_tokens: int | None = None,
) -> list[Op]:
    """gate/up projection, SiLU(gate)*up, down projection (one expert or a dense MLP)."""
    t = b if act_tokens is None else act_tokens
    up = _matmul(
        f"L{layer}.{prefix}gate_up_proj",
        layer,
        f"{prefix}gate_up_proj",
        split_up,
        t,
        [(f, h), (f, h)],
        fmt,
        role,
        bias,
        count,
        resident,
    )
    down = _matmul(
        f"L{layer}.{prefix}down_proj",
        layer,
        f"{prefix}down_proj",
        split_down,
        t,
        [(h, f)],
        fmt,
        role,
        bias,
        count,
        resident,
    )
    act = _vector_op(
        f"L{layer}.{prefix}act", layer, f"{prefix}act", "elementwise", split_up, t, f, 5, reads=2
    )
    return [up, act, down]


def _mlp_block(cfg: ModelConfig, work: Workload, layer: int) -> list[Op]:
    b, h = work.batch, cfg.hidden
    wf, ef = work.weights_format, work.expert_weights_format
    ops = [
        _vector_op(f"L{layer}.mlp_norm", layer, "mlp_norm", "norm", "replicate", b, h, 4, params=h)
    ]
    if cfg.is_dense_layer(layer):
        ops += _swiglu(layer, "", "col", "row", b, h, cfg.ffn, wf, "mlp")
    else:
        e, k = cfg.n_experts, cfg.top_k
        distinct = e * (1.0 - (1.0 - k / e) ** b)
        router = _matmul(
            f"L{layer}.router",
            layer,
            "router",
            "replicate",
            b,
            [(e, h)],
            FORMATS["bf16"],  # routers stay 16-bit (SMALL_PARAM_BYTES)
            "router",
            bias=cfg.router_bias,
        )
        ops.append(replace(router, op_class="router"))
        experts = _swiglu(
            layer,
            "experts_",
            "experts",
            "experts",
            b,
            h,
            cfg.expert_ffn,
            ef,
            "expert",
            count=distinct,
            resident=e,
            bias=cfg.expert_bias,
            act_tokens=b * k,
        )
        ops += experts
        if cfg.n_shared_experts:
            ops += _swiglu(
                layer,
                "shared_",
                "col",
                "row",
                b,
                h,
                cfg.expert_ffn * cfg.n_shared_experts,
                wf,
                "mlp",
            )
    ops.append(
        _vector_op(
            f"L{layer}.mlp_residual",
            layer,
            "mlp_residual",
            "elementwise",
            "replicate",
            b,
            h,
            1,
            reads=2,
        )
    )
    return ops


# Graphs estimated above this are refused before they are built (ModelConfig made in Python can
# skip the config loader's layer limit). OP_BYTES: Python memory of one Op, measured ~390-460 B
# on the presets; OPS_PER_LAYER: the most one layer makes (MLA + MoE + shared experts: ~19).
MAX_GRAPH_BYTES = 2**30
OP_BYTES = 512
OPS_PER_LAYER = 24


def check_graph_inputs(model: ModelConfig, workload: Workload) -> None:
    """Refuse, before building, a graph estimated above :data:`MAX_GRAPH_BYTES` and
    ``--expert-weights`` on a model without routed experts (it would change nothing)."""
    estimate = (model.n_layers * OPS_PER_LAYER + 8) * OP_BYTES
    if estimate > MAX_GRAPH_BYTES:
        raise ConfigError(
            f"{model.name}: the decode graph of {model.n_layers:,} layers is estimated at "
            f"{estimate / 2**30:,.1f} GiB, above the limit of {MAX_GRAPH_BYTES / 2**30:g} GiB"
        )
    ew = workload.expert_weights
    if not model.is_moe and ew is not None and ew != workload.weights:
        raise ConfigError(
            f"--expert-weights {ew}: {model.name} is a dense model (0 routed experts); use "
            "--weights for its linear weights"
        )


def build_graph(
    model: ModelConfig, workload: Workload, context: int | None = None, native_format: str = "bf16"
) -> DecodeGraph:
    """The decode-step graph of ``model`` for ``workload`` (formats resolved against
    ``native_format``) with ``context`` cached tokens (default: the workload's context)."""
    check_graph_inputs(model, workload)
    work = workload.resolved(native_format)
    ctx = work.context if context is None else context
    b, h, v = work.batch, model.hidden, model.vocab
    wf = work.weights_format
    ops: list[Op] = [
        Op(
            "embed",
            "embed",
            "embed",
            "embedding",
            "replicate",
            m=b,
            n=h,
            k=v,
            weight_bytes=b * h * SMALL_PARAM_BYTES,
            act_bytes=ACT_BYTES * b * h,
            resident_weight_bytes=v * h * SMALL_PARAM_BYTES,
            params=v * h,
        )
    ]
    for layer in range(model.n_layers):
        ops += _attention_block(model, work, layer, ctx)
        ops += _mlp_block(model, work, layer)
    head = _matmul("lm_head", "head", "lm_head", "vocab", b, [(v, h)], wf, "head")
    if model.tied_embeddings:  # the head reads the embedding table, which is stored once
        head = replace(
            head, weight_bytes=v * h * SMALL_PARAM_BYTES, resident_weight_bytes=0, params=0
        )
    ops += [
        _vector_op("final_norm", "head", "final_norm", "norm", "replicate", b, h, 4, params=h),
        head,
        Op(
            "sampling",
            "head",
            "sampling",
            "sampling",
            "vocab",
            m=b,
            n=1,
            k=v,
            flops=b * v,
            act_bytes=ACT_BYTES * b * v,
        ),
    ]
    left_out = []
    if model.mtp_layers:
        left_out.append(
            f"{model.mtp_layers} MTP layer(s) (kept in the config for speculative "
            "decoding; not part of the decode step)"
        )
    notes = list(GRAPH_ASSUMPTIONS)
    if work.weights == "hc1" or work.expert_weights == "hc1":
        notes.append(HC1_ASSUMPTION)
    return DecodeGraph(model, work, ctx, tuple(ops), tuple(left_out), tuple(notes))
