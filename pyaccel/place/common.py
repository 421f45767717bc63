"""Helpers shared by the placers: even integer splits and contiguous layer partitions (by bytes,
or by cost under a byte limit)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import option


def split_even(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one and sum to ``total``."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def contiguous_partition(weights: Sequence[int], parts: int) -> list[int]:
    """Stage index of each item so that ``parts`` contiguous blocks have the smallest possible
    largest block sum (every stage gets at least one item when there are enough items)."""
    if parts <= 1 or len(weights) <= 1:
        return [0] * len(weights)
    return capped_partition(weights, parts)


def capped_partition(costs: Sequence[int], parts: int, unit_bytes: np.ndarray | None = None,
                     room: int = 0) -> list[int] | None:  # fmt: skip
    """Stage index of each item: ``parts`` contiguous blocks (each non-empty when there are
    enough items) with the smallest possible largest block cost; with ``unit_bytes`` (items x
    units), a block's bytes on each unit (summed over its items) stay within ``room``, and None
    when no such split exists. Splitting a block keeps it within both limits, so the fewest
    blocks under a cost cap is a greedy fill, and the cap is bisected between the largest item
    and the sum."""
    costs = [int(c) for c in costs]
    rows = None if unit_bytes is None else np.asarray(unit_bytes, dtype=np.int64)
    if not costs or (rows is not None and (rows > room).any()):
        return None
    parts = min(max(1, parts), len(costs))

    def fill(cap: int, at_least: int) -> list[int]:
        """Each item's block, filling under ``cap`` (and ``room``), opening a block early when
        the items left would otherwise leave one of ``at_least`` blocks empty."""
        out, block, acc, n = [], 0, 0, len(costs)
        used = None if rows is None else np.zeros(rows.shape[1], np.int64)
        for i, c in enumerate(costs):
            full = used is not None and bool((used + rows[i] > room).any())
            if out and (acc + c > cap or full or n - i < at_least - block):
                block, acc = block + 1, 0
                used = None if used is None else np.zeros_like(used)
            out.append(block)
            acc += c
            used = None if used is None else used + rows[i]
        return out

    lo, hi = max(costs), sum(costs)
    if fill(hi, 1)[-1] + 1 > parts:  # the bytes alone need more blocks
        return None
    while lo < hi:  # the smallest cap that needs no more than ``parts`` blocks
        mid = (lo + hi) // 2
        if fill(mid, 1)[-1] + 1 <= parts:
            hi = mid
        else:
            lo = mid + 1
    return fill(lo, parts)


def largest_fitting(fits: Callable[[int], bool], high: int) -> int:
    """The largest ``n`` in ``0..high`` with ``fits(n)``, for a ``fits`` that is true up to some
    point and false after it (0 when even ``fits(1)`` is false)."""
    lo, hi = 0, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def kv_capacity_message(fits: Callable[[int, int], bool], batch: int, max_len: int,
                        note: str = "") -> str | None:  # fmt: skip
    """When the weights fit but the KV cache does not: how many users fit at this length, and how
    many tokens per user at this batch. ``fits(batch, tokens_per_user)`` (tokens kept: context +
    generated; any positions a step writes beyond them are the workload's to add); ``note``
    (:func:`ahead_note`) says what those are, beside the length. None if even one user of one
    token does not fit (then the weights are what does not fit)."""
    if not fits(1, 1):
        return None
    users = largest_fitting(lambda b: fits(b, max_len), batch)
    tokens = largest_fitting(lambda n: fits(batch, n), max_len)
    return (
        f"the KV cache of {batch} user(s) x {max_len} tokens{f' ({note})' if note else ''} "
        "does not fit: at "
        f"{max_len} tokens per user {users} user(s) fit; at batch {batch} each user fits "
        f"{tokens} tokens (context + generated)"
    )


def ahead_note(work) -> str:
    """``each verification also writes its 8 drafted tokens' K/V: 2,623 positions``: the K/V
    positions ``work``'s last step writes past the tokens kept (``Workload.kv_len``), for a
    capacity message that counts tokens kept; empty when there are none."""
    ahead = work.ahead_positions
    if not ahead:
        return ""
    return (f"each verification also writes its {ahead} drafted tokens' K/V: "
            f"{work.kv_len:,} positions")  # fmt: skip


def resident_parts(graph, layer) -> dict[str, int]:
    """A layer's resident bytes by what a setting can shrink: routed experts (expert_weights),
    other linear weights (weights), 16-bit tables, norms and routers (none: SPEC §6), and the KV
    cache (batch, context, kv)."""
    parts = dict.fromkeys(("routed experts", "linear weights", "16-bit tables and norms",
                           "KV cache"), 0)  # fmt: skip
    for op in graph.ops_of(layer):
        if op.expert:
            parts["routed experts"] += op.resident_weight_bytes
        elif op.op_class == "matmul":
            parts["linear weights"] += op.resident_weight_bytes
        else:
            parts["16-bit tables and norms"] += op.resident_weight_bytes
        parts["KV cache"] += op.resident_kv_bytes
    return parts


def parts_text(parts: dict[str, int]) -> str:
    """``routed experts 11.27 GB + KV cache 80.95 MB`` (parts that are not zero, largest
    first)."""
    from ..units import fmt_bytes

    items = sorted(((n, k) for k, n in parts.items() if n), reverse=True)
    return " + ".join(f"{k} {fmt_bytes(n)}" for n, k in items) or "nothing"


def smallest_format() -> str:
    """The weight format with the fewest bytes per element, scales included (mixed per-role
    formats left out)."""
    from ..formats import FORMATS

    plain = [f for f in FORMATS.values() if not f.role_bits]
    return min(plain, key=lambda f: (f.tensor_bytes(4096, 4096), f.name)).name


def shrink_hint(
    graph, parts: dict[str, int], fewest: Callable, can_fit: Callable | None = None
) -> str:
    """What could make the largest part smaller: for weights, the smallest format of its
    setting, tried (``fewest(graph)`` gives the fewest units that fit, or None) so that the hint
    says the unit count where one exists, or that even that format does not fit; for the KV cache,
    how many users (at this length) or tokens per user (at this batch) fit, by ``can_fit(graph)``
    (default: ``fewest`` finds a placement)."""
    from dataclasses import replace

    from ..formats import get_format

    work = graph.workload
    biggest = max(parts, key=parts.get)
    if biggest == "KV cache":

        def fits(batch: int, max_len: int) -> bool:
            context = max(0, max_len - work.tokens)
            trial = replace(work, batch=batch, context=context, tokens=max_len - context)
            trial_graph = graph.with_workload(trial)
            return can_fit(trial_graph) if can_fit else fewest(trial_graph) is not None

        told = kv_capacity_message(fits, work.batch, work.max_len, ahead_note(work))
        return told or (
            f"a smaller batch ({option('batch', work.batch)}) or context "
            f"({option('context', work.context)}), or a KV format smaller than "
            f"{option('kv', work.kv)}, may fit"
        )
    field = {"routed experts": "expert_weights", "linear weights": "weights"}.get(biggest)
    if field is None:
        return "embeddings, norms and routers stay 16-bit (SPEC §6): no format setting shrinks them"
    now, small = getattr(work, field), smallest_format()

    def size(name: str) -> int:
        return get_format(name).tensor_bytes(4096, 4096)

    if size(small) >= size(now):
        return f"{option(field, now)} is already the smallest format"
    trial = replace(work, **{field: small})
    if field == "weights" and work.expert_weights == work.weights:
        trial = replace(trial, expert_weights=small)
    plc = fewest(graph.with_workload(trial, graph.context))
    if plc is None:
        return f"even {option(field, small)} (the smallest format) does not fit"
    return f"{option(field, small)} would fit on {option('units', plc.n_units)}"
