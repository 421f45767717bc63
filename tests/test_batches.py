"""The batch splits the step driver and the placers share: micro-batches over stages, and each
micro-batch's sequences over a stage's data-parallel ranks."""

from __future__ import annotations

import pytest

from pyaccel.batches import micro_batch_sizes, rank_shares, rank_totals


def test_six_sequences_in_two_micro_batches_over_four_ranks_by_hand():
    # (3, 3): the first micro-batch's odd 3 on ranks 0-2, the second's dealt on from rank 3
    assert rank_shares([3, 3], 4) == [(1, 1, 1, 0), (1, 1, 0, 1)]
    assert rank_totals(6, 2, 4) == (2, 2, 1, 1)


@pytest.mark.parametrize("batch", [1, 2, 5, 6, 7, 16, 33])
@pytest.mark.parametrize("stages", [1, 2, 3, 5])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 8])
def test_every_split_is_even_per_micro_batch_and_over_the_step(batch, stages, ranks):
    sizes = micro_batch_sizes(batch, stages)
    shares = rank_shares(sizes, ranks)
    for size, share in zip(sizes, shares, strict=True):
        assert sum(share) == size and len(share) == ranks
        assert max(share) == -(-size // ranks)  # the busiest rank's share: a pass's graph
    totals = rank_totals(batch, stages, ranks)
    assert sum(totals) == batch and max(totals) - min(totals) <= 1
