"""MoE routing: which experts each token of a decode step goes to (SPEC §7 ``--router``).

A step's token rows each pick ``top_k`` distinct experts in every MoE layer. Three routers:

- ``uniform`` (default): every expert equally likely;
- ``zipf:S``: the expert of popularity rank ``r`` (1 = hottest) is picked with weight
  ``r ** -S``; which expert holds which rank is a seeded permutation per layer (a real model's
  hot experts differ from layer to layer);
- ``FILE.npy``: a recorded routing trace, an integer array ``[tokens, moe_layers, top_k]`` of
  expert ids; step ``t``'s row ``i`` of a ``rows``-row step takes trace token
  ``(t * rows + i) mod tokens`` (a short trace repeats: router.trace_cycles).

Drawing ``top_k`` distinct experts under weights is successive sampling (pick one by weight,
remove it, renormalise, repeat), done here as its equivalent: draw i.i.d. by weight and skip
an expert the token already has. Draws are seeded by ``(seed, step)``, so a step's routing does
not depend on which other steps a run times, and the same inputs give the same routing.

From a step's choices engines need, per MoE layer, how many rows each expert serves
(:meth:`Router.counts`): the experts with at least one row are the ones whose weights the step
reads (GPU, LPU) or whose PEs and blocks work (wafer, ASIC); the busiest one's rows set how
long its share takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .errors import ConfigError

# The router's own stream of the run's --seed (speculative rounds draw from another).
ROUTER_STREAM = 0x524F5554
# Zipf exponents accepted: beyond 8 the hottest expert holds all but ~1e-3 of the weight of 8
# experts and the skew says nothing more.
MAX_SKEW = 8.0
# Steps' draws a router keeps (a run's what-if re-emulations ask for them again; bounded so that a
# long trace of a big MoE batch does not hold them all).
KEPT_STEPS = 1024
# Rounds of draw-and-skip before the rows still short draw from the renormalised weights
# directly (cost per row ~ experts instead of ~ 1 a round).
REJECTION_ROUNDS = 32
ASSUMPTIONS = {
    "uniform": "router.uniform: each token picks its top_k experts uniformly at random, distinct, "
    "drawn afresh every step from --seed (no correlation between layers or steps)",
    "zipf": "router.zipf: each token picks its top_k distinct experts with weight rank**-S by "
    "popularity rank; the ranks are a seeded permutation of the experts per layer",
    "trace": "router.trace_cycles: a recorded routing trace is read token by token in step "
    "order and starts over when a run needs more tokens than it holds",
}


@dataclass(frozen=True)
class RouterSpec:
    """A parsed ``--router``: ``kind`` (``uniform``, ``zipf`` or ``trace``), the zipf ``skew``
    and the trace's ``path``."""

    kind: str
    skew: float = 0.0
    path: str = ""

    @property
    def text(self) -> str:
        """The request in its canonical spelling."""
        if self.kind == "zipf":
            return f"zipf:{self.skew:g}"
        return self.path if self.kind == "trace" else self.kind

    @property
    def assumption(self) -> str:
        """The named assumption a run with this router rests on, with the request."""
        name, _, why = ASSUMPTIONS[self.kind].partition(": ")
        return f"{name}: (--router {self.text}) {why}"


def parse(text: str) -> RouterSpec:
    """The :class:`RouterSpec` of ``text``; ConfigError naming what is wrong."""
    where = f"--router '{text}'"
    if text == "uniform":
        return RouterSpec("uniform")
    if text.startswith("zipf"):
        _, sep, value = text.partition(":")
        try:
            skew = float(value) if sep else float("nan")
        except ValueError:
            skew = float("nan")
        if not (0.0 <= skew <= MAX_SKEW):
            raise ConfigError(f"{where}: zipf needs its exponent S in 0..{MAX_SKEW:g}, "
                              "e.g. zipf:1.2")  # fmt: skip
        return RouterSpec("zipf", skew)
    if text.endswith(".npy"):
        if not Path(text).is_file():
            raise ConfigError(f"{where}: no such routing trace file")
        return RouterSpec("trace", path=text)
    raise ConfigError(f"{where}: expected uniform, zipf:S or a routing trace FILE.npy")


class Router:
    """The experts each token row of each step picks, for a graph's ``moe_layers`` MoE layers
    of ``n_experts`` experts, ``top_k`` a token."""

    def __init__(self, spec: RouterSpec, n_experts: int, top_k: int, moe_layers: int,
                 seed: int):  # fmt: skip
        self.spec, self.n_experts, self.top_k = spec, n_experts, top_k
        self.n_layers, self.seed = moe_layers, seed
        self.trace = _load_trace(spec.path, n_experts, top_k, moe_layers) if spec.path else None
        rng = np.random.default_rng([seed, ROUTER_STREAM])
        # rank -> expert, one permutation per layer
        self.perm = np.stack([rng.permutation(n_experts) for _ in range(moe_layers)])
        weights = np.arange(1, n_experts + 1, dtype=np.float64) ** -spec.skew
        self.weights = weights / weights.sum()
        self._kept: dict = {}

    def choices(self, step: int, rows: int) -> np.ndarray:
        """Expert ids ``[rows, moe_layers, top_k]`` of step ``step``'s ``rows`` token rows (kept:
        the what-if and sensitivity runs of a case ask for the same steps again)."""
        key = (step, rows)
        hit = self._kept.get(key)
        if hit is None:
            if len(self._kept) >= KEPT_STEPS:
                self._kept.clear()
            hit = self._kept[key] = self._draw(step, rows)
            hit.flags.writeable = False
        return hit

    def _draw(self, step: int, rows: int) -> np.ndarray:
        if self.trace is not None:
            idx = (step * rows + np.arange(rows)) % len(self.trace)
            return self.trace[idx]
        rng = np.random.default_rng([self.seed, ROUTER_STREAM, step])
        ranks = _distinct_draws(rng, self.weights, rows * self.n_layers, self.top_k)
        ranks = ranks.reshape(rows, self.n_layers, self.top_k)
        layer = np.arange(self.n_layers)[None, :, None]
        return self.perm[layer, ranks]

    def counts(self, step: int, rows: int, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """For each ``(start, stop)`` span of step ``step``'s rows (a micro-batch's), the rows
        each expert serves: int64 ``[moe_layers, n_experts]``."""
        picks = self.choices(step, rows)
        return [counts_of(picks[lo:hi], self.n_experts) for lo, hi in spans]


def counts_of(picks: np.ndarray, n_experts: int) -> np.ndarray:
    """Rows each expert serves, int64 ``[moe_layers, n_experts]``, of the choices ``picks``
    ``[rows, moe_layers, top_k]``."""
    n_layers = picks.shape[1]
    flat = picks + (np.arange(n_layers) * n_experts)[None, :, None]
    n = np.bincount(flat.ravel(), minlength=n_layers * n_experts)
    return n.reshape(n_layers, n_experts).astype(np.int64)


def _distinct_draws(rng, weights: np.ndarray, n: int, k: int) -> np.ndarray:
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


def _load_trace(path: str, n_experts: int, top_k: int, moe_layers: int) -> np.ndarray:
    """A routing trace file, checked against the model: ``[tokens, moe_layers, top_k]``
    integer expert ids below ``n_experts``, distinct within a token's layer."""
    where = f"--router {path}"
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot read ({exc.__class__.__name__}: {exc})") from None
    if arr.ndim != 3 or arr.shape[1:] != (moe_layers, top_k) or not len(arr):
        raise ConfigError(f"{where}: shape {arr.shape}; the model needs [tokens, {moe_layers} MoE "
                          f"layers, top_k {top_k}] with at least one token")  # fmt: skip
    if not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"{where}: dtype {arr.dtype}; expert ids must be integers")
    if arr.min() < 0 or arr.max() >= n_experts:
        raise ConfigError(f"{where}: expert ids {arr.min()}..{arr.max()} outside 0.."
                          f"{n_experts - 1}")  # fmt: skip
    ordered = np.sort(arr, axis=2)
    if (ordered[:, :, 1:] == ordered[:, :, :-1]).any():
        tok, lay = np.argwhere((ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=2))[0]
        raise ConfigError(f"{where}: token {tok} picks one expert twice in MoE layer {lay}")
    return arr.astype(np.int64)


def router_for(spec: RouterSpec, n_experts: int, top_k: int, moe_layers: int, seed: int) -> Router:
    """The :class:`Router` of these inputs, one per process (its draws are kept and shared by
    every run of the case); a trace file is read again when its size or time changes."""
    stamp = ()
    if spec.path:
        st = Path(spec.path).stat()
        stamp = (st.st_size, st.st_mtime_ns)
    return _router(spec, n_experts, top_k, moe_layers, seed, stamp)


@lru_cache(maxsize=8)
def _router(spec, n_experts, top_k, moe_layers, seed, stamp) -> Router:
    return Router(spec, n_experts, top_k, moe_layers, seed)
