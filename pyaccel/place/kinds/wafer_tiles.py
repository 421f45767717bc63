"""How a wafer region's PEs hold graph ops (spine geometry of the wafer kind): the 2-D weight
tiles and KV-cache share each PE of a ``w x h`` rectangle keeps, and the expert bands of an MoE
layer. The wafer placer fits layers with it, the placement's per-PE check tests it, and the wafer
engine costs the same tiles; none of them keeps a copy.

A region is a ``w x h`` PE rectangle; axis A runs along x (w PEs), axis B along y (h PEs). The
hidden vector enters every layer distributed along A and replicated along B; a weight matmul
(MeshGEMV) leaves its output along the other axis. Units: bytes per PE, sides in PEs.
"""

from __future__ import annotations

import math

from ...units import ceil_div


def axis_after(ops, axis: int = 0) -> int:
    """The axis (0 = A, 1 = B) the hidden vector lies along after ``ops`` starting on ``axis``:
    every matmul but the router's leaves its output along the other axis."""
    for op in ops:
        if op.op_class in ("matmul", "router") and op.kind != "router":
            axis = 1 - axis
    return axis


class PeTiles:
    """Per-PE bytes of graph ops on regions of any size, for one graph (its workload's batch and
    KV format, its routed experts and KV width). ``experts_here``: the routed experts of a MoE
    layer one region holds (all of them, unless its experts are spread over several wafers)."""

    def __init__(self, graph, experts_here: int | None = None):
        self.graph, self.att = graph, graph.attention
        self.experts_here = experts_here or graph.n_experts
        self.work = graph.workload
        self.kv_bytes = self.work.kv_format.tensor_bytes(1, 4096, "kv") / 4096

    def pe_bytes(self, ops, w: int, h: int, axis: int = 0) -> tuple[int, int]:
        """(weight bytes, KV bytes) the fullest PE of a ``w x h`` region keeps for ``ops`` whose
        first input lies along ``axis`` (0 = A; see :func:`axis_after`).

        The sum of one term per op, each the op's bytes on its own fullest PE, so the bytes of
        a list are the sums of its parts' (each part starting at the axis the previous part left).
        Every term is non-increasing in ``w`` and in ``h`` (tile sides ``ceil(n / side)``, expert
        bands ``w // cols`` and ``h // rows`` that never shrink as the region grows, the axis
        sequence independent of the region), so once a region holds the ops, any region at least
        as wide and as tall holds them too: the placer's searches rely on it."""
        weights = kv = 0
        lens = (w, h)
        for op in ops:
            la = lens[axis]
            if op.op_class in ("matmul", "router"):
                red, out = lens[axis], lens[1 - axis]
                if op.expert:
                    sw, sh, _ = self.expert_regions(w, h)
                    red, out = (sw, sh)[axis], (sw, sh)[1 - axis]
                    tile = ceil_div(op.n, out) * ceil_div(op.k, red)
                    one = op.resident_weight_bytes / max(1, self.graph.n_experts)
                    weights += math.ceil(one * tile / max(1, op.n * op.k))
                    axis = 1 - axis
                    continue
                tile = ceil_div(op.n, out) * ceil_div(op.k, red)
                weights += ceil_div(op.resident_weight_bytes * tile, max(1, op.n * op.k))
                if op.kind != "router":
                    axis = 1 - axis
            elif op.op_class == "embedding":
                weights += ceil_div(op.k, h) * ceil_div(op.n, w) * 2
            elif op.kind == "attention":
                kv += self.kv_pe_bytes(op, w, h)
                weights += self.attention_weight_pe_bytes(op, w, h)
            elif op.resident_weight_bytes:
                weights += ceil_div(op.resident_weight_bytes, la)
        return weights, kv

    def absorbed_tiles(self, w: int, h: int) -> tuple[tuple[int, int], ...]:
        """(inputs, outputs) a PE of a ``w x h`` region holds of each of MLA's absorbed GEMVs
        (the graph's ``attention.absorbed``: ``w_uk`` then ``w_uv``; empty for GQA), laid out
        as the latent cache is (tokens along A, latent features along B). ``w_uk``: its heads'
        query inputs along A, its latent outputs along B; ``w_uv``: its latent inputs along B,
        its heads' outputs along A. A PE keeps inputs x outputs weights of each."""
        if not self.att.absorbed:
            return ()
        uk, uv = self.att.absorbed
        return ((ceil_div(uk.heads * uk.k, w), ceil_div(uk.n, h)),
                (ceil_div(uv.k, h), ceil_div(uv.heads * uv.n, w)))  # fmt: skip

    def attention_weight_pe_bytes(self, op, w: int, h: int) -> int:
        """Weight bytes of one attention op on its fullest PE: MLA's absorbed weights in their
        tiles (:meth:`absorbed_tiles`, at the op's bytes per weight), else (GQA's per-head
        sinks) the op's weights spread evenly over the region."""
        absorbed = self.att.absorbed
        if not absorbed:
            return ceil_div(op.resident_weight_bytes, w * h)
        per_pe = sum(k * n for k, n in self.absorbed_tiles(w, h))
        return ceil_div(op.resident_weight_bytes * per_pe, sum(g.macs for g in absorbed))

    def kv_pe_bytes(self, op, w: int, h: int) -> int:
        """KV-cache bytes of one attention op on the fullest PE: tokens along A, features along
        B, for every sequence of the batch."""
        elems = self.att.kv_elems_per_token
        b = self.work.batch
        length = round(op.resident_kv_bytes / max(1e-9, b * elems * self.kv_bytes))
        return math.ceil(ceil_div(length, w) * ceil_div(elems, h) * b * self.kv_bytes)

    def expert_regions(self, w: int, h: int) -> tuple[int, int, int]:
        """(sub-region width, height, columns of sub-regions): each routed expert the region
        holds (``E``) owns a band of it, ``min(h, E)`` bands along B, more columns when E > h."""
        e = max(1, self.experts_here)
        rows = min(h, e)
        cols = -(-e // rows)
        return max(1, w // cols), max(1, h // rows), cols
