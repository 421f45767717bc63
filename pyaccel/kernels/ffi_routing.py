"""C twin of :mod:`pyaccel.kernels.reference_routing` (cffi module built from csrc/routing.c).
A MoE run draws every step's routing; generating each step's NumPy generator alone costs
~15 us, so the C module reproduces the same streams itself."""

from __future__ import annotations

import numpy as np

from . import checks
from .ffi import available, ffi, lib
from .reference_routing import REJECTION_ROUNDS

# Without the symbols (an older C build) this module offers nothing, so ``kernels.get`` falls
# through to the NumPy twin instead of losing the whole C backend.
HAS_ROUTING = available and hasattr(lib, "pyaccel_route_draws")
MAX_ENTROPY_WORDS = 60  # csrc/routing.c keeps the words of a step's seed on its stack


def _ptr(arr: np.ndarray, kind: str):
    return ffi.cast(kind, ffi.from_buffer(arr))


def entropy_words(entropy) -> np.ndarray:
    """The uint32 words NumPy's SeedSequence makes of a list of integers >= 0: each integer
    32 bits at a time from the lowest, 0 as one word."""
    words = []
    for value in entropy:
        value = int(value)
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        while value:
            words.append(value & 0xFFFFFFFF)
            value >>= 32
    return np.array(words, dtype=np.uint32)


def _route_draws(entropy, steps, weights, n, k):
    """C twin of :func:`pyaccel.kernels.reference_routing.route_draws`."""
    checks.route_draws(entropy, steps, weights, n, k)
    words = entropy_words(entropy)
    if len(words) > MAX_ENTROPY_WORDS:
        raise ValueError(f"entropy takes {len(words)} 32-bit words; at most "
                         f"{MAX_ENTROPY_WORDS}")  # fmt: skip
    steps = np.ascontiguousarray(steps, dtype=np.int64)
    w = np.ascontiguousarray(weights, dtype=np.float64)
    cdf = np.cumsum(w)
    ranks = np.zeros((len(steps), int(n), int(k)), dtype=np.int32)
    if ranks.size == 0:
        return ranks
    scratch = np.zeros(2 * int(n) + 4 * len(w) + 1, dtype=np.int64)  # + the guide table
    lib.pyaccel_route_draws(_ptr(ranks, "int32_t *"), _ptr(scratch, "int64_t *"),
                            _ptr(words, "uint32_t *"), len(words), _ptr(steps, "int64_t *"),
                            len(steps), _ptr(w, "double *"), _ptr(cdf, "double *"), len(w),
                            int(n), int(k), REJECTION_ROUNDS)  # fmt: skip
    return ranks


def _route_counts(picks, spans, n_experts):
    """C twin of :func:`pyaccel.kernels.reference_routing.route_counts`."""
    checks.route_counts(picks, spans, n_experts)
    p = np.ascontiguousarray(picks, dtype=np.int32)
    sp = np.ascontiguousarray(spans, dtype=np.int64).reshape(-1, 2)
    n_steps, rows, n_layers, top_k = p.shape
    hot = np.zeros((n_steps, len(sp), n_layers), dtype=np.int64)
    distinct = np.zeros_like(hot)
    whole = np.zeros((n_steps, n_layers), dtype=np.int64)
    if p.size == 0 or n_experts <= 0:
        return hot, distinct, whole
    scratch = [np.zeros(int(n_experts), dtype=np.int64) for _ in range(3)]
    lib.pyaccel_route_counts(*(_ptr(a, "int64_t *") for a in (hot, distinct, whole, *scratch)),
                             _ptr(p, "int32_t *"), n_steps, rows, n_layers, top_k,
                             _ptr(sp, "int64_t *"), len(sp), int(n_experts))  # fmt: skip
    return hot, distinct, whole


if HAS_ROUTING:
    route_draws = _route_draws
    route_counts = _route_counts
