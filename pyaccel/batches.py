"""How one decode step's batch is split: into micro-batches over pipeline stages, and each
micro-batch's sequences over a stage's data-parallel ranks (GPU expert parallelism runs attention
data-parallel). The step driver follows these splits when it times passes, and the placers
when they lay out each rank's KV cache, so the two agree by construction (SPEC §2, one spine).
Counts are whole sequences."""

from __future__ import annotations


def micro_batch_sizes(batch: int, stages: int) -> list[int]:
    """Sequences in each micro-batch for ``batch`` over ``stages``, largest first.

    The batch is split into ``min(batch, stages)`` micro-batches, so that each stage has one to
    work on when it can, as evenly as whole sequences allow: the sizes differ by at most one and
    add up to ``batch`` (16 over 5 stages: 4, 3, 3, 3, 3).
    """
    n_micro = max(1, min(batch, stages))
    q, r = divmod(batch, n_micro)
    return [q + 1] * r + [q] * (n_micro - r)


def rank_shares(sizes: list[int], ranks: int) -> list[tuple[int, ...]]:
    """Sequences of each micro-batch (``sizes``, in pipeline order) on each of ``ranks``
    data-parallel ranks, as contiguous blocks in rank order.

    Each micro-batch is split as evenly as whole sequences allow (no rank gets more than
    ``ceil(size / ranks)``: the busiest rank's share is what a pass costs), and the odd
    sequences are dealt round the ranks, carrying on from one micro-batch to the next, so the
    ranks' totals over the step differ by at most one too (the KV cache each keeps): 6
    sequences in micro-batches (3, 3) over 4 ranks are (1, 1, 1, 0), then, dealing on from
    rank 3, (1, 1, 0, 1); totals (2, 2, 1, 1)."""
    out, start = [], 0
    for size in sizes:
        base, odd = divmod(size, ranks)
        extra = {(start + i) % ranks for i in range(odd)}
        out.append(tuple(base + (r in extra) for r in range(ranks)))
        start = (start + odd) % ranks
    return out


def rank_totals(batch: int, stages: int, ranks: int) -> tuple[int, ...]:
    """Sequences each of ``ranks`` data-parallel ranks is home to over a step of ``batch``
    sequences in :func:`micro_batch_sizes` over ``stages`` (the sums of :func:`rank_shares`):
    the sequences whose KV cache each rank keeps."""
    shares = rank_shares(micro_batch_sizes(batch, stages), ranks)
    return tuple(sum(col) for col in zip(*shares, strict=True))
