"""Helpers shared by the placers: even integer splits and contiguous layer partitions."""

from __future__ import annotations

from typing import Callable, Sequence


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


def kv_capacity_message(fits: Callable[[int, int], bool], batch: int, max_len: int) -> str | None:
    """When the weights fit but the KV cache does not: how many users fit at this length, and how
    many tokens per user at this batch. ``fits(batch, tokens_per_user)``; None if even one user of
    one token does not fit (then the weights are what does not fit)."""
    if not fits(1, 1):
        return None
    users = largest_fitting(lambda b: fits(b, max_len), batch)
    tokens = largest_fitting(lambda n: fits(batch, n), max_len)
    return (
        f"the KV cache of {batch} user(s) x {max_len} tokens does not fit: at "
        f"{max_len} tokens per user {users} user(s) fit; at batch {batch} each user fits "
        f"{tokens} tokens (context + generated)"
    )
