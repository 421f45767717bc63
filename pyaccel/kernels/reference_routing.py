"""NumPy twins of the MoE router's kernels (the executable specification of
``ffi_routing``): every step's distinct expert draws from its own seeded stream, and the rows
each expert serves per micro-batch. Units: expert ranks and ids, token rows."""

from __future__ import annotations

import numpy as np

from . import checks

# Rounds of draw-and-skip before the rows still short draw from the renormalised weights
# directly (cost per row ~ experts instead of ~ 1 a round).
REJECTION_ROUNDS = 32


def route_draws(entropy: tuple[int, ...], steps: np.ndarray, weights: np.ndarray, n: int,
                k: int) -> np.ndarray:  # fmt: skip
    """Ranks ``[len(steps), n, k]`` (int32): for each step ``t`` of ``steps``, ``n`` draws of
    ``k`` distinct indices by successive sampling under ``weights`` (summing to 1), from the
    generator ``numpy.random.default_rng([*entropy, t])`` (so a step's draws do not depend on
    which other steps are drawn)."""
    checks.route_draws(entropy, steps, weights, n, k)
    out = np.zeros((len(steps), n, k), dtype=np.int32)
    for i, t in enumerate(np.asarray(steps).tolist()):
        out[i] = distinct_draws(np.random.default_rng([*entropy, t]), weights, n, k)
    return out


def distinct_draws(rng, weights: np.ndarray, n: int, k: int) -> np.ndarray:
    """``n`` draws of ``k`` distinct indices each, by successive sampling under ``weights``
    (summing to 1): int64 ``[n, k]``.

    Each pick is drawn i.i.d. and skipped when the row has it already, which draws it from the
    weights renormalised over the rest; rows still short after :data:`REJECTION_ROUNDS`
    (a steep zipf's cold tail) take their remaining picks from that renormalised distribution
    directly. Either way each pick has the same conditional law, so the result is exact."""
    cdf = np.cumsum(weights)
    out = np.full((n, k), -1, dtype=np.int64)
    filled = np.zeros(n, dtype=np.int64)
    pending = np.arange(n)
    for _ in range(REJECTION_ROUNDS):
        if not len(pending):
            return out
        pick = np.minimum(np.searchsorted(cdf, rng.random(len(pending)), side="right"),
                          len(cdf) - 1)  # fmt: skip
        fresh = ~(out[pending] == pick[:, None]).any(axis=1)
        rows = pending[fresh]
        out[rows, filled[rows]] = pick[fresh]
        filled[rows] += 1
        pending = pending[filled[pending] < k]
    left = np.tile(weights, (len(pending), 1))
    have = out[pending]
    j, col = np.nonzero(have >= 0)
    left[j, have[j, col]] = 0.0
    while len(pending):
        c = np.cumsum(left, axis=1)
        u = rng.random(len(pending)) * c[:, -1]
        pick = np.minimum((c <= u[:, None]).sum(axis=1), len(weights) - 1)
        out[pending, filled[pending]] = pick
        filled[pending] += 1
        left[np.arange(len(pending)), pick] = 0.0
        keep = filled[pending] < k
        pending, left = pending[keep], left[keep]
    return out


def route_counts(picks: np.ndarray, spans: np.ndarray, n_experts: int) -> tuple:
    """Per step and MoE layer of ``picks`` (expert ids ``[steps, rows, layers, top_k]``), for
    each ``(start, stop)`` row span of ``spans`` (a micro-batch's rows): ``hot[t, s, i]``, the
    rows of the busiest expert, and ``distinct[t, s, i]``, the experts with at least one row;
    and ``whole[t, i]``, the distinct experts of all the step's rows. All int64."""
    checks.route_counts(picks, spans, n_experts)
    n_steps, _, n_layers, _ = picks.shape
    hot = np.zeros((n_steps, len(spans), n_layers), dtype=np.int64)
    distinct = np.zeros_like(hot)
    whole = np.zeros((n_steps, n_layers), dtype=np.int64)
    for t in range(n_steps):
        for s, (lo, hi) in enumerate(np.asarray(spans).tolist()):
            counts = _counts(picks[t, lo:hi], n_experts)
            hot[t, s], distinct[t, s] = counts.max(axis=1), (counts > 0).sum(axis=1)
        whole[t] = (_counts(picks[t], n_experts) > 0).sum(axis=1)
    return hot, distinct, whole


def _counts(picks: np.ndarray, n_experts: int) -> np.ndarray:
    """Rows each expert serves, ``[layers, n_experts]``, of ``picks`` ``[rows, layers, k]``."""
    n_layers = picks.shape[1]
    flat = picks + (np.arange(n_layers) * n_experts)[None, :, None]
    n = np.bincount(flat.ravel(), minlength=n_layers * n_experts)
    return n.reshape(n_layers, n_experts)
