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
remove it, renormalise, repeat), done as its equivalent: draw i.i.d. by weight and skip
an expert the token already has (the ``route_draws`` kernel,
:mod:`pyaccel.kernels.reference_routing`). Draws are seeded by ``(seed, step)``, so a step's
routing does not depend on which other steps a run times, and the same inputs give the same
routing.

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

from .errors import ConfigError, option

# The router's own stream of the run's --seed (speculative rounds draw from another).
ROUTER_STREAM = 0x524F5554
# Zipf exponents accepted: beyond 8 the hottest expert holds all but ~1e-3 of the weight of 8
# experts and the skew says nothing more.
MAX_SKEW = 8.0
# Steps' draws a router keeps (a run's what-if re-emulations ask for them again; bounded so that a
# long trace of a big MoE batch does not hold them all).
KEPT_STEPS = 1024
# Picks a router draws at once for many steps (int32 each): bounds the memory of a long run's
# routing at a big batch, which is summarised chunk by chunk.
CHUNK_PICKS = 1 << 22
# Routing summaries of step ranges a router keeps (a run's what-if re-emulations ask again).
KEPT_SUMMARIES = 8
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
    where = option("router", text)
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
        self._summaries: dict = {}

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
        return self.choices_over(np.array([step], dtype=np.int64), rows)[0]

    def choices_over(self, steps: np.ndarray, rows: int) -> np.ndarray:
        """Expert ids ``[len(steps), rows, moe_layers, top_k]`` of ``steps``' rows: each step
        from its own stream ``[seed, ROUTER_STREAM, step]`` (the ``route_draws`` kernel), or the
        trace file's tokens."""
        if self.trace is not None:
            idx = (steps[:, None] * rows + np.arange(rows)[None, :]) % len(self.trace)
            return self.trace[idx]
        layer = np.arange(self.n_layers)[None, None, :, None]
        return self.perm[layer, self._ranks(steps, rows)]

    def _ranks(self, steps: np.ndarray, rows: int) -> np.ndarray:
        """Popularity ranks ``[len(steps), rows, moe_layers, top_k]`` (int32) of the experts
        ``steps``' rows draw (the ``route_draws`` kernel)."""
        from .kernels import get

        ranks = get("route_draws")((self.seed, ROUTER_STREAM), steps, self.weights,
                                   rows * self.n_layers, self.top_k)  # fmt: skip
        return ranks.reshape(len(steps), rows, self.n_layers, self.top_k)

    def summary(self, steps: np.ndarray, rows: int, spans: list[tuple[int, int]]) -> tuple:
        """For each step of ``steps`` (``rows`` token rows a step) at once, as :meth:`counts`
        gives them one by one: ``hot[t, s, i]`` (the busiest expert's rows) and
        ``distinct[t, s, i]`` (experts with rows) of span ``s`` in MoE layer ``i``, and
        ``whole[t, i]``, the distinct experts of all the step's rows (int64 arrays). Kept:
        a run's what-if re-emulations ask for the same steps again."""
        steps = np.ascontiguousarray(steps, dtype=np.int64)
        key = (steps.tobytes(), rows, tuple(spans))
        hit = self._summaries.get(key)
        if hit is None:
            if len(self._summaries) >= KEPT_SUMMARIES:
                self._summaries.clear()
            hit = self._summaries[key] = self._summarise(steps, rows, spans)
        return hit

    def _summarise(self, steps: np.ndarray, rows: int, spans: list) -> tuple:
        if rows <= 1:  # one row picks top_k distinct experts, one row each: nothing to draw
            sizes = np.array([hi - lo for lo, hi in spans], dtype=np.int64)
            shape = (len(steps), len(spans), self.n_layers)
            out = (
                np.broadcast_to(sizes[None, :, None], shape).copy(),
                np.broadcast_to(sizes[None, :, None] * self.top_k, shape).copy(),
                np.full((len(steps), self.n_layers), rows * self.top_k, dtype=np.int64),
            )
        else:  # counts per expert are the same up to the layer's permutation: ranks suffice
            per = max(1, CHUNK_PICKS // max(1, rows * self.n_layers * self.top_k))
            draw = self.choices_over if self.trace is not None else self._ranks
            parts = [summarise(draw(steps[i : i + per], rows), spans, self.n_experts)
                     for i in range(0, len(steps), per)]  # fmt: skip
            out = tuple(np.concatenate([p[j] for p in parts]) for j in range(3))
        for a in out:
            a.flags.writeable = False
        return out

    def counts(self, step: int, rows: int, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """For each ``(start, stop)`` span of step ``step``'s rows (a micro-batch's), the rows
        each expert serves: int64 ``[moe_layers, n_experts]``."""
        picks = self.choices(step, rows)
        return [counts_of(picks[lo:hi], self.n_experts) for lo, hi in spans]


def summarise(picks: np.ndarray, spans: list[tuple[int, int]], n_experts: int) -> tuple:
    """``(hot, distinct, whole)`` of the choices ``picks`` ``[steps, rows, moe_layers, top_k]``
    as :meth:`Router.summary` gives them (the ``route_counts`` kernel)."""
    from .kernels import get

    return get("route_counts")(picks, np.array(spans, dtype=np.int64), n_experts)


def counts_of(picks: np.ndarray, n_experts: int) -> np.ndarray:
    """Rows each expert serves, int64 ``[moe_layers, n_experts]``, of the choices ``picks``
    ``[rows, moe_layers, top_k]``."""
    n_layers = picks.shape[1]
    flat = picks + (np.arange(n_layers) * n_experts)[None, :, None]
    n = np.bincount(flat.ravel(), minlength=n_layers * n_experts)
    return n.reshape(n_layers, n_experts).astype(np.int64)


def _load_trace(path: str, n_experts: int, top_k: int, moe_layers: int) -> np.ndarray:
    """A routing trace file, checked against the model: ``[tokens, moe_layers, top_k]``
    integer expert ids below ``n_experts``, distinct within a token's layer."""
    where = option("router", str(path))
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
