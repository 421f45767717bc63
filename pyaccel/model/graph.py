"""DecodeGraph: every op of one decode step, with shapes, FLOPs and bytes (SPEC §2).

One step generates one token for each of ``batch`` sequences whose caches hold ``context`` tokens
(or, verifying a speculative round, takes ``step_tokens`` tokens of each: ``batch x step_tokens``
token rows).
Ops run in the order listed; each depends on the one before (decode has no parallel branches
worth modelling at this level). Byte counts: ``weight_bytes`` are read from wherever the weights
live, ``act_bytes`` are activations read plus written, ``kv_read_bytes``/``kv_write_bytes`` touch
the KV cache. *Resident* bytes (what a unit must hold) are kept apart from bytes read per step.

The op record and its builders are in ``ops.py``, attention's ops in ``attention.py``; this
module assembles them into the step and holds the MLP/expert block.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from ..errors import ConfigError, option
from ..formats import FORMATS, HC1_ASSUMPTION, Format
from ..workload import Workload
from .attention import (
    AttentionShape,
    attention_block,
    attention_counts,
    attention_op,
    sandwich_norm,
)
from .config import ModelConfig
from .ops import (
    ACT_BYTES,
    SMALL_PARAM_BYTES,
    Op,
    matmul_op,
    matmul_weight_bytes,
    rows_of,
    vector_op,
)

# Op fields that are a whole number times the batch for every op but attention (tokens in the
# step, FLOPs, activation and KV bytes); :meth:`DecodeGraph.with_workload` scales them.
BATCH_LINEAR_FIELDS = ("m", "flops", "act_bytes", "kv_read_bytes", "kv_write_bytes",
                       "resident_kv_bytes")  # fmt: skip

# graphs with_workload keeps per graph (a run's micro-batch sizes, prefill chunks)
KEPT_DERIVED = 16
GRAPH_ASSUMPTIONS = (
    "graph.activations_bf16: activations move between ops as bf16 (2 B/element)",
    "graph.moe_distinct_experts: the step graph's routed-expert weights read = E*(1-(1-k/E)^B) "
    "experts (expected distinct experts for B tokens routed uniformly); emulated steps read "
    "the experts their router draws (--router)",
)


@dataclass(frozen=True)
class DecodeGraph:
    """The ops of one decode step of a model under ``workload`` at cache length ``context``.

    The graph carries what engines, placers and bounds need of the model -- its name, widths,
    layer count, the attention shape (to rebuild attention at any context) and the routed
    experts (``n_experts``, ``top_k``; 0 for a dense model) -- and no model config: a graph at
    another batch or context is made from the graph itself (:meth:`with_workload`).
    """

    model_name: str
    hidden: int
    vocab: int
    n_layers: int
    attention: AttentionShape
    workload: Workload
    context: int
    ops: tuple[Op, ...]
    left_out: tuple[str, ...]
    assumptions: tuple[str, ...]
    n_experts: int = 0
    top_k: int = 0
    model_source: str = ""  # where the config came from ("preset NAME" or its file's path)

    @cached_property
    def layer_keys(self) -> tuple[int | str, ...]:
        """Layer keys in execution order: ``"embed"``, 0 .. n_layers-1, ``"head"``."""
        return ("embed", *range(self.n_layers), "head")

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

    def attention_op(self, layer: int, context: int, workload: Workload | None = None) -> Op:
        """``layer``'s attention op with ``context`` cached tokens, for this graph's workload or
        ``workload`` (same formats; another batch or length)."""
        return attention_op(self.attention, workload or self.workload, layer, context)

    def attention_counts(self, layer: int, contexts, workload: Workload | None = None) -> tuple:
        """``layer``'s attention work at each of ``contexts`` (int64 arrays: attended tokens,
        FLOPs, KV bytes read, KV bytes written), as :meth:`attention_op` counts it at each, for
        this graph's workload or ``workload``."""
        return attention_counts(self.attention, workload or self.workload, layer, contexts)

    def attention_group(self, layer: int) -> int:
        """A key shared by the layers whose attention costs the same at every context: its
        window (0 for full attention), and its chunk when chunked. Engines re-cost one
        attention op per group and step."""
        chunk = self.attention.chunk(layer)
        return (self.attention.window(layer), chunk) if chunk else self.attention.window(layer)

    def at_context(self, context: int) -> DecodeGraph:
        """The same step with ``context`` tokens in the cache (only attention ops change)."""
        if context == self.context:
            return self
        ops = tuple(
            self.attention_op(op.layer, context) if op.kind == "attention" else op
            for op in self.ops
        )
        return replace(self, context=context, ops=ops)

    def with_workload(self, workload: Workload, context: int | None = None) -> DecodeGraph:
        """The step for another workload (batch, context, tokens, formats; unset weight formats
        are this graph's), made from this graph alone: attention ops are rebuilt from the
        attention shape, every other op's per-token counts scale with the batch, and weight
        bytes are recounted from each matmul's tensors in the new formats, routed experts'
        for the new batch's expected distinct experts. Same arithmetic as :func:`build_graph`,
        so the two give equal graphs (a test holds them to it over the presets)."""
        old = self.workload
        if not workload.weights:
            experts = workload.expert_weights or old.expert_weights
            workload = replace(workload, weights=old.weights, expert_weights=experts)
        work = workload.resolved(old.weights)
        ctx = work.context if context is None else context
        if work == old and ctx == self.context:  # the same step (a batch-1 run's batch-1 graph)
            return self
        # kept: a run's micro-batch graphs are asked for again by its what-ifs and prefill
        hit = self._derived.pop((work, ctx), None)  # least recently used first
        if hit is None:
            if len(self._derived) >= KEPT_DERIVED:
                del self._derived[next(iter(self._derived))]
            ops = tuple(self._op_for(op, work, ctx) for op in self.ops)
            notes = tuple(n for n in self.assumptions if n != HC1_ASSUMPTION)
            if "hc1" in (work.weights, work.expert_weights):
                notes += (HC1_ASSUMPTION,)
            hit = replace(self, workload=work, context=ctx, ops=ops, assumptions=notes)
        self._derived[work, ctx] = hit
        return hit

    def _op_for(self, op: Op, work: Workload, context: int) -> Op:
        """``op`` of this graph as :func:`build_graph` makes it for ``work`` at ``context``."""
        if op.kind == "attention":
            return attention_op(self.attention, work, op.layer, context)
        old_b, new_b = rows_of(op, self.workload), rows_of(op, work)
        fields = {}
        if old_b != new_b:
            fields = {f: getattr(op, f) // old_b * new_b for f in BATCH_LINEAR_FIELDS}
            if op.kind == "embed":  # one embedding row read per token
                fields["weight_bytes"] = op.weight_bytes // old_b * new_b
        if op.tensors and op.role != "router":  # routers stay 16-bit (SMALL_PARAM_BYTES)
            fmt = work.expert_weights_format if op.expert else work.weights_format
            one = matmul_weight_bytes(op.tensors, fmt, op.role, op.bias)
            count, stored = 1.0, 1
            if op.expert:
                count = expected_distinct_experts(self.n_experts, self.top_k, new_b)
                stored = self.n_experts
            resident = 0 if op.shared else one * stored
            fields.update(weight_bytes=round(one * count), resident_weight_bytes=resident)
        return replace(op, **fields) if fields else op

    @cached_property
    def moe_layers(self) -> tuple[int, ...]:
        """Layers with routed experts, in order (the router's layer axis)."""
        return tuple(sorted({op.layer for op in self.ops if op.expert}))

    def routed_ops(self, counts) -> dict[str, Op]:
        """This graph's routed-expert ops for one step in which expert ``e`` of the ``i``-th
        MoE layer serves ``counts[i, e]`` token rows (:meth:`pyaccel.routing.Router.counts`),
        by op name: matmuls read the weights of the experts with rows (``weight_bytes``), and
        every expert op carries the busiest expert's rows (``hot_rows``). Token rows, FLOPs and
        activations stay the graph's (each row still goes to ``top_k`` experts)."""
        return self.routed_ops_of(counts.max(axis=1), (counts > 0).sum(axis=1))

    def routed_ops_of(self, hot, distinct) -> dict[str, Op]:
        """:meth:`routed_ops` of a step whose ``i``-th MoE layer has ``distinct[i]`` experts
        with rows, the busiest serving ``hot[i]`` rows."""
        hot, distinct = np.asarray(hot).tolist(), np.asarray(distinct).tolist()
        return {
            op.name: self.routed_op(j, hot[i], distinct[i])
            for j, (i, op, _) in enumerate(self._expert_ops)
        }

    def routed_op(self, op_index: int, hot: int, distinct: int) -> Op:
        """The ``op_index``-th routed-expert op (in :attr:`expert_ops` order) for a step whose
        MoE layer has ``distinct`` experts with rows, the busiest serving ``hot`` rows; memoised,
        so equal routings give the same object."""
        _, op, one = self._expert_ops[op_index]
        key = (op.name, hot, distinct)
        hit = self._routed_memo.get(key)
        if hit is None:  # steps repeat the same counts often (one sequence: always top_k)
            fields = {"hot_rows": hot}
            if one:
                fields["weight_bytes"] = one * distinct
            hit = self._routed_memo[key] = replace(op, **fields)
        return hit

    @property
    def expert_ops(self) -> tuple:
        """(MoE layer index, op) of every routed-expert op, in graph order."""
        return tuple((i, op) for i, op, _ in self._expert_ops)

    @cached_property
    def _expert_ops(self) -> tuple:
        """(MoE layer index, op, one expert's weight bytes) of every routed-expert op."""
        index = {layer: i for i, layer in enumerate(self.moe_layers)}
        return tuple((index[op.layer], op, op.resident_weight_bytes // max(1, self.n_experts))
                     for op in self.ops if op.expert)  # fmt: skip

    @cached_property
    def _routed_memo(self) -> dict:
        return {}

    @cached_property
    def _derived(self) -> dict:
        """Graphs :meth:`with_workload` made from this one, by (workload, context)."""
        return {}

    @cached_property
    def placer_memo(self) -> dict:
        """Scratch a placer keeps for this graph across its candidate layouts (e.g. each
        layer's per-chip shards at one TP width); keys name their placer."""
        return {}

    def to_dataframe(self):
        """The ops as a pandas DataFrame, one row per op."""
        import pandas as pd

        return pd.DataFrame([op.__dict__ for op in self.ops])


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
    up = matmul_op(
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
    down = matmul_op(
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
    act = vector_op(
        f"L{layer}.{prefix}act", layer, f"{prefix}act", "elementwise", split_up, t, f, 5, reads=2
    )
    # the down projection's output is what the ranks' shares sum to (row-split, or experts)
    return [up, act, replace(down, reduces=split_down in ("row", "experts"))]


def _mlp_block(cfg: ModelConfig, work: Workload, layer: int) -> list[Op]:
    """One layer's MLP ops: norm, the dense SwiGLU or the MoE ops, and the residual add."""
    b, h = work.rows, cfg.hidden
    norm = vector_op(
        f"L{layer}.mlp_norm", layer, "mlp_norm", "norm", "replicate", b, h, 4, params=h
    )
    if cfg.is_dense_layer(layer):
        body = _swiglu(layer, "", "col", "row", b, h, cfg.ffn, work.weights_format, "mlp")
    else:
        body = _moe_ops(cfg, work, layer)
    residual = vector_op(
        f"L{layer}.mlp_residual", layer, "mlp_residual", "elementwise", "replicate", b, h, 1,
        reads=2,
    )  # fmt: skip
    post = [sandwich_norm(layer, "post_ffn_norm", b, h)] if cfg.sandwich_norms else []
    return [norm, *body, *post, residual]


def expected_distinct_experts(n_experts: int, top_k: int, batch: int) -> float:
    """Routed experts a step reads: E*(1-(1-k/E)^B), the expected distinct experts of ``batch``
    tokens routed uniformly to ``top_k`` of ``n_experts`` (graph.moe_distinct_experts)."""
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** batch)


def _moe_ops(cfg: ModelConfig, work: Workload, layer: int) -> list[Op]:
    """A MoE layer's router, routed experts (the expected distinct experts the batch reads) and
    shared experts."""
    b, h = work.rows, cfg.hidden
    e, k = cfg.n_experts, cfg.top_k
    distinct = expected_distinct_experts(e, k, b)
    router = matmul_op(
        f"L{layer}.router", layer, "router", "replicate", b, [(e, h)],
        FORMATS["bf16"],  # routers stay 16-bit (SMALL_PARAM_BYTES)
        "router", bias=cfg.router_bias,
    )  # fmt: skip
    ops = [replace(router, op_class="router")]
    experts = _swiglu(
        layer, "experts_", "experts", "experts", b, h, cfg.expert_ffn,
        work.expert_weights_format, "expert",
        count=distinct, resident=e, bias=cfg.expert_bias, act_tokens=b * k,
    )  # fmt: skip
    ops += [replace(op, expert=True) for op in experts]
    if cfg.n_shared_experts:
        shared_ffn = cfg.expert_ffn * cfg.n_shared_experts
        ops += _swiglu(layer, "shared_", "col", "row", b, h, shared_ffn, work.weights_format, "mlp")
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
            f"{option('expert_weights', ew)}: {model.name} is a dense model (0 routed experts); "
            f"use {option('weights', ew)} for its linear weights"
        )


def build_graph(
    model: ModelConfig, workload: Workload, context: int | None = None, native_format: str = "bf16"
) -> DecodeGraph:
    """The decode-step graph of ``model`` for ``workload`` (formats resolved against
    ``native_format``) with ``context`` cached tokens (default: the workload's context)."""
    check_graph_inputs(model, workload)
    work = workload.resolved(native_format)
    ctx = work.context if context is None else context
    ops: list[Op] = [_embed_op(model, work), *_fuse_ops(model, work)]
    att = AttentionShape.of(model)
    for layer in range(model.n_layers):
        ops += attention_block(model, att, work, layer, ctx)
        ops += _mlp_block(model, work, layer)
    ops += _head_ops(model, work)
    left_out = []
    if model.mtp_layers:
        left_out.append(
            f"{model.mtp_layers} MTP layer(s) (kept in the config for speculative "
            "decoding; not part of the decode step)"
        )
    notes = list(GRAPH_ASSUMPTIONS)
    if work.weights == "hc1" or work.expert_weights == "hc1":
        notes.append(HC1_ASSUMPTION)
    return DecodeGraph(model.name, model.hidden, model.vocab, model.n_layers, att, work, ctx,
                       tuple(ops), tuple(left_out), tuple(notes), model.n_experts,
                       model.top_k, model.source)  # fmt: skip


def _embed_op(model: ModelConfig, work: Workload) -> Op:
    """The token embedding: one 16-bit row read per sequence from a ``vocab x hidden`` table
    (a drafter sharing its target's table reads it and stores none)."""
    b, h, v = work.rows, model.hidden, model.vocab
    if model.draft_head and model.draft_head.shares_embedding:
        return Op("embed", "embed", "embed", "embedding", "replicate", m=b, n=h, k=v,
                  weight_bytes=b * h * SMALL_PARAM_BYTES, act_bytes=ACT_BYTES * b * h,
                  shared=True)  # fmt: skip
    return Op(
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


def _fuse_ops(model: ModelConfig, work: Workload) -> list[Op]:
    """A drafter's ``fc``: the fused hidden-wide states (the target's hidden states, MTP's
    embedding beside one) projected to its own width before its first layer (none for a plain
    model). Row-split like the other projections whose outputs the ranks sum."""
    head = model.draft_head
    if not head or not head.fused_states:
        return []
    b, h = work.rows, model.hidden
    fc = matmul_op("fc", "embed", "fc", "row", b, [(h, head.fused_states * h)],
                   work.weights_format, "attn")  # fmt: skip
    return [replace(fc, reduces=True)]


def _head_ops(model: ModelConfig, work: Workload) -> list[Op]:
    """Final norm (every row), LM head (reading the embedding table when tied, the target's
    head when a drafter shares it) and sampling (the rows the step samples: one a sequence in
    a prefill chunk, :attr:`Workload.logit_rows`)."""
    h, v = model.hidden, model.vocab
    b = work.logit_rows
    head = matmul_op("lm_head", "head", "lm_head", "vocab", b, [(v, h)], work.weights_format,
                     "head")  # fmt: skip
    if model.draft_head and model.draft_head.shares_head:
        head = replace(head, resident_weight_bytes=0, params=0, shared=True)
    elif model.tied_embeddings:  # the head reads the embedding table, which is stored once
        head = replace(
            head, weight_bytes=v * h * SMALL_PARAM_BYTES, resident_weight_bytes=0, params=0,
            tensors=(),
        )  # fmt: skip
    sampling = Op("sampling", "head", "sampling", "sampling", "vocab", m=b, n=1, k=v,
                  flops=b * v, act_bytes=ACT_BYTES * b * v)  # fmt: skip
    norm = vector_op("final_norm", "head", "final_norm", "norm", "replicate", work.rows, h, 4,
                     params=h)  # fmt: skip
    # Gemma 2: logits = cap * tanh(logits / cap) (a divide, a tanh, a multiply an element)
    cap = [vector_op("logit_softcap", "head", "logit_softcap", "elementwise", "vocab", b, v, 3)]
    return [norm, head, *(cap if model.final_softcap else []), sampling]
