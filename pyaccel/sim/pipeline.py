"""Pipeline arithmetic shared by engines whose layers run as stages on different units."""

from __future__ import annotations

from typing import Sequence


def pipeline_step_cycles(stage_cycles: Sequence[int], n_micro: int) -> int:
    """Time between two tokens of one sequence when ``n_micro`` micro-batches share a pipeline.

    One micro-batch's pass takes the sum of its stages; with ``n_micro`` in flight every stage
    must also serve all of them before the first comes round again, so the interval is the larger
    of the pass and ``n_micro`` times the slowest stage (SPEC §6 ``step_time_s``).
    """
    if not stage_cycles:
        return 0
    return max(int(sum(stage_cycles)), n_micro * int(max(stage_cycles)))


def micro_batches(batch: int, stages: int) -> tuple[int, int]:
    """(micro-batches in flight, sequences per micro-batch) for ``batch`` over ``stages``: the
    batch is split so that each stage has a micro-batch to work on when it can."""
    n_micro = max(1, min(batch, stages))
    return n_micro, -(-batch // n_micro)
