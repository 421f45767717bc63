"""The op record of a decode step and its two builders (weight matmuls, vector ops), with the
byte and FLOP accounting every graph op shares (SPEC §2, §6)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..formats import Format

# Activations move as bf16 between ops on every machine (named assumption of the graph).
ACT_BYTES = 2
# Norm weights, biases, routers, embeddings and sinks stay 16-bit (SPEC §6).
SMALL_PARAM_BYTES = 2
# A sampled token id travels as an int32 (between pipeline stages, to and from a host).
TOKEN_ID_BYTES = 4

SPLITS = ("col", "row", "heads", "experts", "vocab", "replicate")

# Ops that run on the rows a step samples (Workload.logit_rows): the LM head and what follows
# it. The final norm is not among them: serving engines norm every row in the model's forward
# and select the rows to sample after it (vLLM LlamaModel.forward, then compute_logits on
# hidden_states[logits_indices]).
LOGIT_KINDS = ("lm_head", "logit_softcap", "sampling")


@dataclass(frozen=True)
class Op:
    """One op of the decode step.

    ``m`` tokens in the step, ``n`` output and ``k`` input features (matmuls). ``split`` says how
    tensor parallelism divides it: ``col`` (output features; no communication), ``row`` (input
    features), ``heads``, ``experts`` (whole experts per rank), ``vocab`` (LM head; partial
    arg-max reduced), ``replicate`` (every rank does it all). ``reduces``: the ranks' outputs
    are partial sums that an all-reduce of the layer's ``hidden``-wide output combines (a
    row-split matmul, and the routed experts' down projection: each rank's experts add their
    share of every token's output; their gate/up projection and activation stay local).
    ``expert`` marks the ops of routed experts (their matmuls read the weights of the step's
    distinct experts and store all of them; each runs on its experts' tokens only). A weight
    matmul keeps its ``tensors`` (rows, cols), the ``role`` its format applies to and whether it
    has a ``bias``, so its bytes can be recounted in another format. ``shared``: the weights
    belong to another model (a drafter reading its target's embedding or LM head): read every
    step, stored by their owner (no resident bytes, no parameters of this model).
    ``hot_rows``: on a routed-expert op of one step (:meth:`DecodeGraph.routed_ops`), the token
    rows the layer's busiest expert serves; 0 on the graph's own ops, whose ``m`` rows are
    taken as spread evenly over the expected distinct experts.
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
    expert: bool = False
    tensors: tuple[tuple[int, int], ...] = ()
    role: str = ""
    bias: bool = False
    reduces: bool = False
    shared: bool = False
    hot_rows: int = 0

    @property
    def mem_bytes(self) -> int:
        """All bytes the op moves to or from memory in one step."""
        return self.weight_bytes + self.act_bytes + self.kv_read_bytes + self.kv_write_bytes


def rows_of(op: Op, work) -> int:
    """Token rows ``op`` runs on in a step of ``work`` (a :class:`~pyaccel.workload.Workload`):
    the sampled rows for the LM head and sampling (:data:`LOGIT_KINDS`), every row for the
    other ops."""
    return work.logit_rows if op.kind in LOGIT_KINDS else work.rows


def shape_of(op: Op) -> tuple:
    """Every field of ``op`` but its name and layer: all its costs depend on (the ops of alike
    layers share it)."""
    return tuple(vars(op).values())[_SHAPE_FROM:]


# an Op's name and layer are its first fields (a test holds it); its shape, every field after
_SHAPE_FROM = [f.name for f in fields(Op)].index("layer") + 1


def matmul_op(
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
    one = matmul_weight_bytes(tensors, fmt, role, bias)
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
        tensors=tuple((int(r), int(c)) for r, c in tensors),
        role=role,
        bias=bias,
        reduces=split == "row",
    )


def matmul_weight_bytes(tensors, fmt: Format, role: str, bias: bool) -> int:
    """Bytes of one copy of a matmul's weight ``tensors`` in ``fmt`` (scales included) and of
    its bias (16-bit, one per output feature)."""
    n = sum(r for r, _ in tensors)
    return sum(fmt.tensor_bytes(r, c, role) for r, c in tensors) + (
        n * SMALL_PARAM_BYTES if bias else 0
    )


def vector_op(
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
