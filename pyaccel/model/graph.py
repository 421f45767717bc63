"""DecodeGraph: every op of one decode step, with shapes, FLOPs and bytes (SPEC §2).

One step generates one token for each of ``batch`` sequences whose caches hold ``context`` tokens.
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

from ..errors import ConfigError
from ..formats import FORMATS, HC1_ASSUMPTION, Format
from ..workload import Workload
from .attention import attention_block, attention_op
from .config import ModelConfig
from .ops import ACT_BYTES, SMALL_PARAM_BYTES, Op, matmul_op, vector_op

GRAPH_ASSUMPTIONS = (
    "graph.activations_bf16: activations move between ops as bf16 (2 B/element)",
    "graph.moe_distinct_experts: routed-expert weights read per step = E*(1-(1-k/E)^B) experts "
    "(expected distinct experts for B tokens routed uniformly), until a router exists",
)


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

    def at_context(self, context: int) -> DecodeGraph:
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
    return [up, act, down]


def _mlp_block(cfg: ModelConfig, work: Workload, layer: int) -> list[Op]:
    """One layer's MLP ops: norm, the dense SwiGLU or the MoE ops, and the residual add."""
    b, h = work.batch, cfg.hidden
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
    return [norm, *body, residual]


def _moe_ops(cfg: ModelConfig, work: Workload, layer: int) -> list[Op]:
    """A MoE layer's router, routed experts (the expected distinct experts the batch reads) and
    shared experts."""
    b, h = work.batch, cfg.hidden
    e, k = cfg.n_experts, cfg.top_k
    distinct = e * (1.0 - (1.0 - k / e) ** b)
    router = matmul_op(
        f"L{layer}.router", layer, "router", "replicate", b, [(e, h)],
        FORMATS["bf16"],  # routers stay 16-bit (SMALL_PARAM_BYTES)
        "router", bias=cfg.router_bias,
    )  # fmt: skip
    ops = [replace(router, op_class="router")]
    ops += _swiglu(
        layer, "experts_", "experts", "experts", b, h, cfg.expert_ffn,
        work.expert_weights_format, "expert",
        count=distinct, resident=e, bias=cfg.expert_bias, act_tokens=b * k,
    )  # fmt: skip
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
        ops += attention_block(model, work, layer, ctx)
        ops += _mlp_block(model, work, layer)
    head = matmul_op("lm_head", "head", "lm_head", "vocab", b, [(v, h)], wf, "head")
    if model.tied_embeddings:  # the head reads the embedding table, which is stored once
        head = replace(
            head, weight_bytes=v * h * SMALL_PARAM_BYTES, resident_weight_bytes=0, params=0
        )
    ops += [
        vector_op("final_norm", "head", "final_norm", "norm", "replicate", b, h, 4, params=h),
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
