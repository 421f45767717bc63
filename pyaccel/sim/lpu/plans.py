"""What each graph op asks of one LPU chip of a ``tp``-wide group: its plan, the integer
quantities its instructions depend on (hashable: the engine's cache keys). A plan is a tuple of
steps: ``("gemv", weights, vectors)``, ``("xgemv", weights of one expert, vectors of each routed
expert)`` (a routed-expert GEMV: each expert's blocks see only its own rows), ``("vector",
elements, ALU ops per element or the name of a preset count)``, ``("reduce", elements)``,
``("memio", bytes)``, and the collectives ``("allreduce" | "allgather" | "broadcast", bytes)``
over the group and ``("seqreduce", bytes, chips)`` among one KV head's chips
(lpu.attention_sequence_split)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...model.ops import ACT_BYTES
from ...units import largest_share
from .program import ChipModel

ARGMAX_PAIR_BYTES = 8  # an fp32 maximum and its int32 index (lpu.sampled_token_bytes)
SOFTMAX_STATS_BYTES = 8  # a head's fp32 running max and sum (lpu.attention_sequence_split)

# ---------------------------------------------------------------------------------------------
# op plans: the integer quantities each op's instructions depend on (hashable, cache keys); a
# VXM pass gives its ALU ops per element as a number or as the name of a preset count


def read_elems(op) -> int:
    """Weight elements an op reads per step (scales excluded), from its bytes and format."""
    if op.params and op.resident_weight_bytes:
        bpe = op.resident_weight_bytes / op.params
        return int(round(op.weight_bytes / bpe))
    return op.n * op.k


def gemv_share(op, tp: int) -> int:
    """Weight elements of a matmul or router op on one chip of a ``tp``-wide group: the
    largest share of its weights read (all of them where the op is replicated)."""
    return largest_share(read_elems(op), tp, op.split != "replicate")


def op_plan(op, graph, tp: int) -> tuple:
    """The instruction patterns of one graph op on one chip of a ``tp``-wide group."""
    m = op.m
    sharded = op.split != "replicate"
    if op.kind == "embed":
        row = ACT_BYTES * m * op.n
        return (("memio", row), ("broadcast", row))
    if op.op_class == "norm":
        w = largest_share(op.n, tp, sharded) * m
        return (("reduce", w), ("vector", w, "norm"))
    if op.op_class in ("matmul", "router"):
        if op.expert:  # each routed expert split over the group like any sharded weight
            one = largest_share(op.params // max(1, graph.n_experts), tp, sharded)
            steps = [("xgemv", one, expert_rows(m, routed_experts(op, graph), op.hot_rows))]
        else:
            steps = [("gemv", gemv_share(op, tp), m)]
        if tp > 1 and op.reduces:
            out = op.n if op.split == "row" else graph.hidden
            steps.append(("allreduce", ACT_BYTES * _rows(op, graph) * out))
        return tuple(steps)
    if op.op_class == "attention":
        return attention_plan(op, graph.attention, tp, graph.workload.step_tokens)
    if op.kind == "sampling":
        pairs = ARGMAX_PAIR_BYTES * m
        return (("reduce", largest_share(op.k, tp, True) * m), ("allgather", pairs))
    width = largest_share(op.n, tp, sharded) * m
    per_elem = max(1, -(-op.flops // max(1, op.m * op.n)))
    return (("vector", width, per_elem),)


def expert_plan(op, graph, tp: int, experts: int, pairs: int) -> tuple:
    """The plan of a routed-expert op on the busiest chip of a ``tp``-wide group whose experts
    are whole on chips (expert parallel): the weights of its ``experts`` routed experts, its
    ``pairs`` (row, expert) pairs; the down projection's all-reduce combines the chips'
    outputs."""
    if op.op_class != "matmul":  # the activation between the projections
        per_elem = max(1, -(-op.flops // max(1, op.m * op.n)))
        return (("vector", op.n * pairs, per_elem),)
    one = op.params // graph.n_experts  # weight elements of one expert
    steps = [("xgemv", one, expert_rows(pairs, experts))]
    if tp > 1 and op.reduces:
        steps.append(("allreduce", ACT_BYTES * _rows(op, graph) * graph.hidden))
    return tuple(steps)


def routed_experts(op, graph) -> int:
    """Distinct experts a routed-expert op reads this step: its weight bytes over one expert's
    (:meth:`~pyaccel.model.graph.DecodeGraph.routed_op`; the graph's expected count, rounded,
    before any routing), at least one and at most one per (row, expert) pair."""
    one = op.resident_weight_bytes / max(1, graph.n_experts)
    found = round(op.weight_bytes / one) if one else 1
    return max(1, min(found, graph.n_experts, op.m))


def expert_rows(pairs: int, experts: int, hot: int = 0) -> tuple[int, ...]:
    """The (row, expert) pairs each of ``experts`` routed experts serves, largest first, as many
    as ``pairs`` in all and at least one each: the busiest ``hot`` of them (0: not known) and
    the others as evenly as whole rows allow. A routed expert's weight blocks stream only its
    own rows through the MXM, so these are each expert's GEMV vectors."""
    pairs = max(1, pairs)
    experts = max(1, min(experts, pairs))
    hot = min(hot, pairs - experts + 1)  # the others serve one pair at least
    if hot > 0 and experts > 1:
        q, r = divmod(pairs - hot, experts - 1)
        if hot >= q + (r > 0):  # the busiest is at least as busy as the rest
            return (hot, *(q + 1,) * r, *(q,) * (experts - 1 - r))
    q, r = divmod(pairs, experts)
    return (*(q + 1,) * r, *(q,) * (experts - r))


def _rows(op, graph) -> int:
    """Token rows whose outputs a reducing op's all-reduce sums: a routed expert's ``m`` counts
    (row, expert) pairs, ``top_k`` a row, whose outputs are summed into one per row."""
    return op.m // max(1, graph.top_k) if op.expert else op.m


def attention_plan(op, att, tp: int, q: int = 1) -> tuple:
    """Write the new K/V, install K and stream the query group (scores), softmax (max reduce,
    exp, sum reduce, scale), install V and stream the probabilities (weighted sum).

    A sequence's ``q`` rows of the step (a prompt chunk, a verify step: ``op.m`` rows are
    ``op.m / q`` sequences) share its cache (lpu.attention_rows_share_kv): each K or V block
    of a sequence is installed once and the query vectors of all its rows stream through it
    (their ``op.k`` scores a row, the later keys of the earlier rows masked in the softmax).

    On a group wider than the KV heads (lpu.attention_sequence_split) each KV head's chips split
    its cached tokens: a chip holds ``1/tp`` of the cache (as the placer counts it) and streams
    all of the head's query heads over its slice, and the head's chips combine their partial
    outputs and softmax sums with one all-reduce among themselves."""
    b = op.m
    mla = att.latent
    seq = 1 if mla else max(1, tp // max(1, att.n_kv_heads))
    if seq > 1:
        heads, kv_heads = -(-att.n_heads // att.n_kv_heads), 1
    else:
        heads = -(-att.n_heads // tp)
        kv_heads = 1 if mla else -(-att.n_kv_heads // tp)
    group = max(1, -(-heads // kv_heads))
    per_tok = att.kv_elems_per_token  # K+V elements of one token (all KV heads)
    kv_share = 1 if mla else max(1, min(tp, att.n_kv_heads)) * seq
    attended = -(-op.k // seq)
    kv_elems = -(-(b // q) * op.k * per_tok // kv_share)  # each sequence's cache, once
    vectors = group * q  # through each of a sequence's K/V blocks: its rows' query heads
    write = -(-op.kv_write_bytes // max(1, kv_share // seq))  # one chip of a head writes it
    scores = b * heads * attended
    steps = [("memio", write)]
    if op.weight_bytes:  # MLA absorbed up-projections
        steps.append(("gemv", largest_share(read_elems(op), tp, True), b * group))
    steps += [
        ("gemv", -(-kv_elems // 2), vectors),
        ("reduce", scores),
        ("vector", scores, "softmax_exp"),
        ("reduce", scores),
        ("vector", scores, "softmax_scale"),
        ("gemv", -(-kv_elems // 2), vectors),
    ]
    if seq > 1:  # partial outputs and (max, sum) pairs of the head's query heads
        out = b * heads * (att.head_dim * ACT_BYTES + SOFTMAX_STATS_BYTES)
        steps.append(("seqreduce", out, seq))
    return tuple(steps)


def canonical(chip: ChipModel, tp: int, st: tuple) -> tuple:
    """A plan step reduced to the integers its instructions use (block counts, VXM cycles), so
    that steps whose context differs by less than a block share one compiled program. The
    counts may be int64 arrays (a run's steps at once: :meth:`LpuSim.stage_cycles_over`)."""
    kind = st[0]
    if kind in ("gemv", "xgemv"):
        return (kind, _at_least_one(-(-st[1] // chip.block_weights)), st[2])
    vecs = _at_least_one(-(-st[1] // chip.elems_per_vector))
    if kind == "vector":
        per = st[2] if isinstance(st[2], int) else dict(chip.ops_per_elem)[st[2]]
        return ("vector", _at_least_one(-(-vecs * max(1, per) // chip.alus)))
    if kind == "reduce":
        return ("reduce", _at_least_one(-(-vecs // chip.alus)))
    if kind == "memio":
        return ("memio", -(-st[1] // chip.vector_bytes) * chip.vector_bytes)
    return st


def plan_key(chip: ChipModel) -> tuple:
    """The fields of ``chip`` that :func:`canonical` reads: chips equal in them reduce every
    plan alike (a what-if that moves only rates or latencies keeps its plans)."""
    return (chip.block_weights, chip.elems_per_vector, chip.ops_per_elem, chip.alus,
            chip.vector_bytes)  # fmt: skip


def _at_least_one(n):
    """``max(1, n)`` of an int, or of each element of an int64 array."""
    return np.maximum(n, 1) if isinstance(n, np.ndarray) else max(1, n)


def plan_kinds(op, tp: int, att=None) -> tuple[str, ...]:
    """The kinds of :func:`op_plan`'s steps for ``op`` on a ``tp``-wide group, in order
    (what the latency floor needs; a test holds it to ``op_plan`` on whole models). Without
    the graph's attention ``att`` an attention op leaves out its sequence-split all-reduce
    (the floor, which has no graph, then stays a lower bound)."""
    if op.kind == "embed":
        return ("memio", "broadcast")
    if op.op_class == "norm":
        return ("reduce", "vector")
    if op.op_class in ("matmul", "router"):
        gemv = "xgemv" if op.expert else "gemv"
        return (gemv, "allreduce") if tp > 1 and op.reduces else (gemv,)
    if op.op_class == "attention":
        mla = ("gemv",) if op.weight_bytes else ()
        split = att is not None and not att.latent and tp // max(1, att.n_kv_heads) > 1
        tail = ("seqreduce",) if split else ()
        return ("memio", *mla, "gemv", "reduce", "vector", "reduce", "vector", "gemv", *tail)
    if op.kind == "sampling":
        return ("reduce", "allgather")
    return ("vector",)


def filled(plans: tuple, holes: tuple, new: tuple) -> tuple:
    """``plans`` with the plan at each hole (``(index, key)``) replaced by ``new``'s, in order."""
    full = list(plans)
    for (j, _), plan in zip(holes, new, strict=True):
        full[j] = plan
    return tuple(full)


def attention_plans_over(graph, chip: ChipModel, contexts: np.ndarray, layout) -> dict:
    """Each attention group's canonical plan (by the group's key in ``layout``, whose second
    field is its TP width) at every one of ``contexts`` at once: a count that changes with the
    context is an int64 array, one entry a context (the attention op depends on the context
    only through the tokens it attends)."""
    out = {}
    for key, layers in layout:
        op = graph.attention_op(layers[0], int(contexts[0]))
        attended = graph.attention_counts(layers[0], contexts)[0]
        plan = attention_plan(replace(op, k=attended), graph.attention, key[1],
                              graph.workload.step_tokens)  # fmt: skip
        out[key] = tuple(canonical(chip, key[1], st) for st in plan)
    return out


def plan_at(plan: tuple, i: int) -> tuple:
    """A plan of :func:`attention_plans_over` at its ``i``-th context (plain ints)."""
    return tuple(tuple(int(v[i]) if isinstance(v, np.ndarray) else v for v in st) for st in plan)
