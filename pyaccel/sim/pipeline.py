"""Pipeline arithmetic shared by engines whose layers run as stages on different units."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def micro_batch_sizes(batch: int, stages: int) -> list[int]:
    """Sequences in each micro-batch for ``batch`` over ``stages``, largest first.

    The batch is split into ``min(batch, stages)`` micro-batches, so that each stage has one to
    work on when it can, as evenly as whole sequences allow: the sizes differ by at most one and
    add up to ``batch`` (16 over 5 stages: 4, 3, 3, 3, 3).
    """
    n_micro = max(1, min(batch, stages))
    q, r = divmod(batch, n_micro)
    return [q + 1] * r + [q] * (n_micro - r)


def pipeline_cycles(stage_cycles_of: Mapping[int, Sequence[int]], sizes: Sequence[int]) -> int:
    """Time between two tokens of one sequence when micro-batches of ``sizes`` share a pipeline.

    ``stage_cycles_of[size]`` is the cycles each stage spends on one micro-batch of ``size``
    sequences. A sequence waits for its micro-batch's whole pass, and every stage must serve all
    micro-batches before the first comes round again: the interval is the larger of the longest
    pass and the busiest stage's total. With ``n`` equal micro-batches this is the larger of one
    pass and ``n`` times the slowest stage.
    """
    if not sizes:
        return 0
    distinct = set(sizes)
    longest_pass = max(int(sum(stage_cycles_of[s])) for s in distinct)
    n_stages = len(stage_cycles_of[sizes[0]])
    busiest = max(
        (sum(int(stage_cycles_of[s][i]) for s in sizes) for i in range(n_stages)), default=0
    )
    return max(longest_pass, busiest)
