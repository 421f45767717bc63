"""Cost of each decode-graph op on one wafer region, from simulated PE tasks and mesh collectives.

A region is a ``w x h`` PE rectangle; axis A runs along x (w PEs), axis B along y (h PEs). The
hidden vector enters every layer distributed along A and replicated along B. A weight matmul is
a MeshGEMV: each PE multiplies its 2-D weight tile by its slice of the input, then the partial
sums are all-reduced along the input's axis, which leaves the output distributed along the other
axis (so consecutive matmuls alternate axes, as WaferLLM does, with no transposes).

Each op's time is its PEs' local task (FMAC lanes, SRAM ports, DSD issue) followed by its mesh
collective, simulated link by link on the line with the largest tiles (all lines run the same
collective on their own links, so that line is the slowest one exactly). The split into
resource classes comes from re-simulating with the per-message overhead set to zero.
"""

from __future__ import annotations

import math

from ...model.ops import ACT_BYTES
from ...place.kinds.wafer_tiles import PeTiles
from ...units import ceil_div as _ceil
from .attention import AttentionCosts
from .tasks import Costs, OpCost, allreduce, local, multicast, tile_gemv

ARGMAX_PAIR_ELEMS = 2  # a (value, index) pair of 16-bit elements (arg-max reduction)


class RegionCoster(PeTiles, AttentionCosts):
    """Costs of graph ops on regions of one spec, memoised by (op shape, region shape, axis);
    the per-PE tiles they cost are :class:`PeTiles`' (``pe_bytes``, ``expert_regions``,
    ``absorbed_tiles``), attention's are :class:`AttentionCosts`'."""

    def __init__(self, spec, graph, experts_here: int | None = None):
        self.c = Costs.of(spec.params)
        super().__init__(graph, experts_here)
        # costs depend on the graph, the experts here and Costs alone: every coster of the
        # graph with equal Costs (candidate layouts, what-ifs that move no wafer cost) shares
        # one memo, which lives as long as the graph (its values are frozen)
        self._memo: dict = graph.placer_memo.setdefault(
            ("wafer.region_costs", self.c, self.experts_here), {}
        )

    # -- op costs -------------------------------------------------------------------------
    def op_cost(self, op, w: int, h: int, axis: int) -> tuple[OpCost, int]:
        """(cost, axis after the op) of ``op`` on a ``w x h`` region whose input lies along
        ``axis`` (0 = A/x, 1 = B/y)."""
        if op.kind == "attention":  # depends on the context only through tokens per PE
            key = ("attention", op.m, op.n, _ceil(op.k, w), op.weight_bytes, w, h, axis)
        else:
            key = (op.kind, op.op_class, op.split, op.m, op.n, op.k, op.flops, op.weight_bytes,
                   op.act_bytes, op.hot_rows, w, h, axis)  # fmt: skip
        hit = self._memo.get(key)
        if hit is None:
            cost, after = self._cost(op, w, h, axis)
            hit = self._memo[key] = (cost.frozen(), after)
        return hit

    def _cost(self, op, w, h, axis):
        lens = (w, h)
        if op.op_class in ("matmul", "router"):
            return self._gemv(op, lens, axis), axis if op.kind == "router" else 1 - axis
        if op.kind == "attention":
            return self._attention(op, lens), axis
        if op.op_class == "norm":
            return self._norm(op, lens, axis), axis
        if op.op_class == "embedding":
            return self._embed(op, lens), 0
        if op.op_class == "sampling":
            return self._sampling(op, lens, axis), axis
        return self._elementwise(op, lens, axis), axis

    def _gemv(self, op, lens, axis) -> OpCost:
        c, m = self.c, op.m
        red, out = lens[axis], lens[1 - axis]
        if op.expert:
            return self._experts_gemv(op, lens, axis)
        k_pe, n_pe = _ceil(op.k, red), _ceil(op.n, out)
        wbytes = _ceil(op.weight_bytes * k_pe * n_pe, max(1, op.n * op.k))
        cost = OpCost()
        tile_gemv(cost, c, m, (k_pe, n_pe), wbytes, red, m * n_pe, axis)
        return cost

    def _experts_gemv(self, op, lens, axis) -> OpCost:
        """A routed-expert matmul: the step's active experts run at once, each on its own
        sub-region with the tokens routed to it, the busiest one's (``hot_rows``) setting the
        time (the graph's own op: its expected distinct count, tokens spread evenly); the
        gate/up projection first multicasts the input to sub-regions narrower than the region,
        the down projection is followed by the top-k combine (an all-reduce along B of the
        region, where the experts' bands lie)."""
        c, cfg = self.c, self.graph
        sw, sh, cols = self.expert_regions(*lens)
        red, out = (sw, sh)[axis], (sw, sh)[1 - axis]
        one = op.resident_weight_bytes / max(1, cfg.n_experts)
        active = max(1.0, op.weight_bytes / max(1e-9, one))
        m_e = op.hot_rows or max(1, math.ceil(op.m / active))  # tokens of the busiest expert
        k_pe, n_pe = _ceil(op.k, red), _ceil(op.n, out)
        wbytes = math.ceil(one * k_pe * n_pe / max(1, op.n * op.k))
        cost = OpCost()
        batch = max(1, op.m // max(1, cfg.top_k))
        if op.kind.endswith("gate_up_proj") and cols > 1:
            multicast(cost, c, lens[0], 0, batch * _ceil(cfg.hidden, sw), 0, 0)
        tile_gemv(cost, c, m_e, (k_pe, n_pe), wbytes, red, m_e * n_pe, axis)
        if op.kind.endswith("down_proj"):
            scale = local(c, lane_ops=batch * _ceil(cfg.hidden, sw), rd=ACT_BYTES * batch * sw)
            allreduce(cost, c, lens[1], lens[1], batch * _ceil(cfg.hidden, sw), scale, 1)
        return cost

    def _norm(self, op, lens, axis) -> OpCost:
        c, m, n = self.c, op.m, lens[axis]
        w_pe = _ceil(op.n, n)
        act = ACT_BYTES * m * w_pe  # bytes of the PE's slice of the activations
        pre = local(c, fmacs=m * w_pe, rd=act, issues=m)
        cost = OpCost()
        segs = 1
        if op.split == "heads":  # per-head norms (qk_norm): one segment per head
            segs = self.att.n_heads + self.att.n_kv_heads
        allreduce(cost, c, n, max(1, n // segs), m, pre, axis)
        # the scaling pass (wafer.norm_scale_pass): reads each element and its weight
        cost.add_local(local(c, lane_ops=c.norm_lane_ops * m * w_pe, rd=act + act, wr=act,
                             issues=c.norm_dsds * m))  # fmt: skip
        return cost

    def _elementwise(self, op, lens, axis) -> OpCost:
        c, m, n = self.c, op.m, lens[axis]
        if op.expert:  # on each active expert's band, its tokens only
            sw, sh, _ = self.expert_regions(*lens)
            n = (sw, sh)[axis]
            active = min(self.graph.n_experts, max(1, op.m))
            m = op.hot_rows or max(1, math.ceil(op.m / active))
        w_pe = _ceil(op.n, n)
        reads = max(1, op.act_bytes // max(1, ACT_BYTES * op.m * op.n) - 1)
        flops_per = op.flops // max(1, op.m * op.n)  # per element (op.m tokens in the graph)
        cost = OpCost()
        act = ACT_BYTES * m * w_pe
        cost.add_local(local(c, lane_ops=m * w_pe * flops_per, rd=reads * act, wr=act,
                             issues=reads))  # fmt: skip
        # activating the task: message start costs (wafer.elementwise_activation)
        cost.parts.append(("mesh_message", c.elementwise_messages * c.overhead))
        return cost

    def _embed(self, op, lens) -> OpCost:
        """Row lookup: the token's row is spread along A on one line of B (taken at the middle
        of B, the mean distance: wafer.embed_row_middle); it is multicast along B."""
        c, m = self.c, op.m
        w, h = lens
        chunk = m * _ceil(op.n, w)
        cost = OpCost()
        task = local(c, rd=ACT_BYTES * chunk, wr=ACT_BYTES * chunk, issues=m)
        cost.add_local(task)
        multicast(cost, c, h, h // 2, chunk, 0, 1)
        return cost

    def _sampling(self, op, lens, axis) -> OpCost:
        """Arg-max: each PE scans its logits, then (value, index) pairs are reduced to one PE
        along the logits' axis (no broadcast back)."""
        c, m, n = self.c, op.m, lens[axis]
        v_pe = _ceil(op.k, n)
        task = local(c, lane_ops=m * v_pe, rd=ACT_BYTES * m * v_pe, issues=m)
        cost = OpCost()
        allreduce(cost, c, n, n, ARGMAX_PAIR_ELEMS * m, task, axis, broadcast=False)
        return cost
