"""Helpers shared by the placers: even integer splits and contiguous layer partitions."""

from __future__ import annotations

from typing import Sequence


def split_even(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one and sum to ``total``."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def contiguous_partition(weights: Sequence[int], parts: int) -> list[int]:
    """Stage index of each item so that ``parts`` contiguous blocks have the smallest possible
    largest block sum (every stage gets at least one item when there are enough items)."""
    if parts <= 1 or len(weights) <= 1:
        return [0] * len(weights)
    parts = min(parts, len(weights))

    def stages_needed(cap: int) -> int:
        count, acc = 1, 0
        for w in weights:
            if acc + w > cap:
                count, acc = count + 1, w
            else:
                acc += w
        return count

    lo, hi = max(weights), sum(weights)
    while lo < hi:  # smallest cap that needs no more than ``parts`` stages
        mid = (lo + hi) // 2
        if stages_needed(mid) <= parts:
            hi = mid
        else:
            lo = mid + 1
    return _assign(weights, lo, parts)


def _assign(weights: Sequence[int], cap: int, parts: int) -> list[int]:
    """Greedy fill under ``cap``, opening a new stage early when the items left would otherwise
    leave a stage empty."""
    out, stage, acc, n = [], 0, 0, len(weights)
    for i, w in enumerate(weights):
        left_items, left_stages = n - i, parts - stage
        if out and (acc + w > cap or left_items < left_stages):
            stage, acc = stage + 1, 0
        out.append(stage)
        acc += w
    return out
