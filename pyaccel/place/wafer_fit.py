"""Fitting layer blocks on wafer PE rectangles: the bytes each layer keeps on the fullest PE of a
region (``PeTiles.pe_bytes``, the tiling the wafer engine costs), kept per layer, and the search
for the smallest interleave grid that holds a block.

Units: bytes per PE, grid sides in PEs. Fitting is monotone: a region at least as wide and as
tall as one that holds a block holds it too (every per-op term of ``pe_bytes`` is
non-increasing in the width and in the height), so the grid search bisects.
"""

from __future__ import annotations

import math

from .kinds.wafer_tiles import PeTiles, axis_after


def pe_budget(p) -> int:
    """Bytes per PE left for weights and KV cache after code and buffers."""
    return int(p.pe_sram_bytes) - int(p.pe_code_bytes) - int(p.pe_buffer_bytes)


def usable(p) -> tuple[int, int]:
    """(width, height) in PEs of the grid placements may use."""
    return int(p.usable_width_pes), int(p.usable_height_pes)


class Fitter:
    """Per-PE fit of a set of layer keys on a ``w x h`` region; each key's bytes on its fullest
    PE are kept per (key, input axis, region), so a search over grid sizes and wafer counts
    costs each key once per region it tries. ``experts_here``: routed experts per region of a
    MoE layer (:class:`PeTiles`)."""

    def __init__(self, graph, system, experts_here: int | None = None):
        self.graph, self.p = graph, system.spec.params
        self.tiles = PeTiles(graph, experts_here)
        self.budget = pe_budget(self.p)
        self._use: dict = {}  # (key, input axis, w, h) -> bytes on the key's fullest PEs

    def _key_use(self, key, axis: int, w: int, h: int) -> int:
        memo = (key, axis, w, h)
        use = self._use.get(memo)
        if use is None:
            wb, kv = self.tiles.pe_bytes(self.graph.ops_of(key), w, h, axis)
            use = self._use[memo] = wb + kv
        return use

    def _parts(self, keys, w: int, h: int):
        """Each key's bytes, in order: a block's bytes are the sum of its keys' (pe_bytes is a
        sum over ops), each key starting on the axis the keys before it left."""
        axis = 0
        for k in keys:
            yield self._key_use(k, axis, w, h)
            axis = axis_after(self.graph.ops_of(k), axis)

    def pe_use(self, keys, w: int, h: int) -> int:
        """Bytes on the fullest PE of the region (weights + KV)."""
        return sum(self._parts(keys, w, h))

    def fits(self, keys, w: int, h: int) -> bool:
        """Whether the region's PEs hold every key (stops at the first key past the budget)."""
        total = 0
        for use in self._parts(keys, w, h):
            total += use
            if total > self.budget:
                return False
        return True

    def min_pes(self, keys) -> int:
        """The fewest PEs whose budgets add up to the keys' resident bytes (a lower bound)."""
        need = sum(sum(self.graph.resident_bytes(k)) for k in keys)
        return max(1, math.ceil(need / max(1, self.budget)))


def grid_path(fit: Fitter, keys) -> tuple[int, int, bool, int]:
    """The grids ``smallest_grid`` considers, in order, as (first square side, squares, wide,
    rectangles): squares from ``isqrt(fewest PEs)`` up to the short side, then rectangles of
    the short side growing along the long side. Each grid is at least as wide and as tall as
    the one before, so fitting along the path is monotone (PeTiles.pe_bytes)."""
    wid, hgt = usable(fit.p)
    side = min(wid, hgt)
    start = max(1, math.isqrt(fit.min_pes(keys)))
    return start, max(0, side + 1 - start), wid >= hgt, max(wid, hgt) - side


def grid_at(fit: Fitter, path, i: int) -> tuple[int, int]:
    """(w, h) of the ``i``-th grid of ``path`` (a :func:`grid_path`)."""
    start, squares, wide, _ = path
    if i < squares:
        return start + i, start + i
    side = min(usable(fit.p))
    n = side + 1 + i - squares
    return (n, side) if wide else (side, n)


def smallest_grid(fit: Fitter, keys) -> tuple[int, int] | None:
    """The smallest grid (square first, then full-width rectangles) whose PEs hold every key:
    a bisection over :func:`grid_path` (the first grid that fits, as
    :func:`smallest_grid_scan` finds it trying each in turn)."""
    path = grid_path(fit, keys)
    lo, hi = 0, path[1] + path[3]
    while lo < hi:
        mid = (lo + hi) // 2
        if fit.fits(keys, *grid_at(fit, path, mid)):
            hi = mid
        else:
            lo = mid + 1
    return grid_at(fit, path, lo) if lo < path[1] + path[3] else None


def smallest_grid_scan(fit: Fitter, keys) -> tuple[int, int] | None:
    """The exhaustive reference of :func:`smallest_grid` (every grid in turn, as the placer did
    before it bisected); only the tests call it, to hold the bisection to it."""
    wid, hgt = usable(fit.p)
    side = min(wid, hgt)
    start = max(1, math.isqrt(fit.min_pes(keys)))
    for n in range(start, side + 1):
        if fit.fits(keys, n, n):
            return n, n
    wide = wid >= hgt
    for n in range(side + 1, max(wid, hgt) + 1):
        w, h = (n, side) if wide else (side, n)
        if fit.fits(keys, w, h):
            return w, h
    return None
