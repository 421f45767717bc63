"""NumPy/Python twin of the micro-batch pipeline schedule over stages and links (the executable
specification of ``jit_pipeline.micro_batch_rounds``). Units: integer cycles."""

from __future__ import annotations

import numpy as np

from . import checks


def micro_batch_rounds(occ: np.ndarray, busy: np.ndarray, lat: np.ndarray, rounds: int):
    """Micro-batches flowing round after round through stages and the links into them.

    ``occ[m, s]``: cycles stage ``s`` works on micro-batch ``m``; ``busy[m, s]`` and
    ``lat[m, s]``: cycles the link *into* stage ``s`` carries it and its latency after that
    (into stage 0: the loop back from the last stage, crossed from the second round on). Stages
    and links serve micro-batches first come first served in (round, micro-batch) order, a
    stage taking the next micro-batch while a link carries the last; a micro-batch's next round
    starts when its last one has come back. Returns ``finish[r, m]``: when micro-batch ``m``
    left the last stage in round ``r`` (int64).
    """
    checks.micro_batch_rounds(occ, busy, lat, rounds)
    n_micro, n_stages = np.shape(occ)
    stage_free, link_free = [0] * n_stages, [0] * n_stages
    ready = [0] * n_micro
    finish = np.zeros((int(rounds), n_micro), dtype=np.int64)
    for r in range(int(rounds)):
        for m in range(n_micro):
            t = ready[m]
            for s in range(n_stages):
                if s or r:  # into stage 0 only when looping back (from the second round on)
                    start = max(t, link_free[s])
                    link_free[s] = start + int(busy[m, s])
                    t = link_free[s] + int(lat[m, s])
                start = max(t, stage_free[s])
                stage_free[s] = start + int(occ[m, s])
                t = stage_free[s]
            finish[r, m] = ready[m] = t
    return finish
