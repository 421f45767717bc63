"""Attention's cost on a wafer region (mixed into :class:`~.cost.RegionCoster`): the latent or
K/V cache spread over the region's PEs, tokens along A and features along B, its scores,
softmax and weighted sum with their reductions; GQA's query shift inside each KV head's
segment; MLA's absorbed up-projections (``w_uk`` before the scores, ``w_uv`` after the weighted
sum) as MeshGEMVs over the tiles the placement keeps (``PeTiles.absorbed_tiles``). Units:
cycles, bytes, 16-bit elements.
"""

from __future__ import annotations

from ...model.ops import ACT_BYTES
from ...units import ceil_div as _ceil
from .flows import line_shift, shift_flows
from .tasks import ACC_BYTES, OpCost, allreduce, local, tile_gemv


class AttentionCosts:
    """The attention costs of a :class:`~.cost.RegionCoster`, which supplies ``c`` (its
    :class:`~.tasks.Costs`), ``att`` (the graph's attention shape), ``kv_bytes`` and
    ``absorbed_tiles`` (:class:`~pyaccel.place.kinds.wafer_tiles.PeTiles`) and ``_memo``."""

    def _gqa_shift(self, h: int, seg: int, group: int, nwav: int):
        """(cycles, bare cycles, 0, link busy, 1, messages, cycles without start costs or hop
        latency) of the GQA query shift inside each KV head's segment of a ``h``-long B line,
        or None when no slice moves. Each PE sends its slice to the ``group - 1`` other heads'
        PEs, one shift distance at a time per colour and queue: at most ``shifts_at_once``
        distances are in flight, in rounds one after another (wafer.shift_rounds). It does not
        depend on the context, so it is simulated once per shape and kept."""
        key = ("gqa_shift", h, seg, group, nwav)
        if key not in self._memo:
            c = self.c
            step = max(1, seg // group)
            shifts = list(range(1, group))
            rounds = [shifts[i : i + c.shifts_at_once]
                      for i in range(0, len(shifts), c.shifts_at_once)]  # fmt: skip
            out = None
            for part in rounds:
                part = tuple(part)
                if not len(shift_flows(h, seg, step, part)):
                    continue
                t = c.tick  # the simulations run in ticks
                shape = (h, seg, step, part, t * nwav)
                total, busy, msgs = line_shift(*shape, t * c.overhead, c.hop, c.ramp)
                bare = line_shift(*shape, 0, c.hop, c.ramp)[0]
                no_hops = line_shift(*shape, 0, 0, 0)[0]
                one = (c.cycles(total), c.cycles(bare), 0, c.busy_cycles(busy), 1, msgs,
                       c.cycles(no_hops))  # fmt: skip
                out = one if out is None else _add_rounds(out, one)
            self._memo[key] = out
        return self._memo[key]

    def _attention(self, op, lens) -> OpCost:
        """Attention over the KV cache of one layer on a ``w x h`` region: tokens along A
        (``ceil(context / w)`` per PE), K/V features along B, each KV head on its own segment of
        B with its group's query heads (q/k/v rows of the QKV output are ordered by KV group).

        Phases: (0) GQA: each PE gets the query slices of the other heads of its group (a shift
        inside the segment); MLA: the query is absorbed into the latent (``w_uk``); (1) partial
        scores, all-reduced along B per segment; (2) max and (3) exp-sum all-reduced along A;
        (4) P.V partials all-reduced along A; MLA: the latent output up-projected (``w_uv``)."""
        c, m, cfg = self.c, op.m, self.att
        w, h = lens
        mla = cfg.latent
        kvh = 1 if mla else cfg.n_kv_heads
        group = cfg.n_heads // kvh
        k_width = cfg.kv_elems_per_token if mla else cfg.kv_elems_per_token // 2
        tok_pe = _ceil(op.k, w)
        d_pe = _ceil(k_width, h)
        seg = max(1, h // kvh)
        cost = OpCost()
        if group > 1 and not mla and seg > 1:
            shift = self._gqa_shift(h, seg, group, c.wavelets(m * _ceil(op.n, h)))
            if shift is not None:
                cost.add_comm(*shift)
        self._absorbed(cost, op, lens, 0)
        kvb = self.kv_bytes
        fm = m * group * tok_pe * d_pe
        score = local(c, fmacs=fm, rd=round(fm * (kvb + ACC_BYTES)), wr=ACC_BYTES * fm,
                      issues=m * group * d_pe)  # fmt: skip
        allreduce(cost, c, h, seg, m * group * tok_pe, score, 1)
        scores = ACT_BYTES * m * group * tok_pe  # bytes of the PE's scores
        soft_max = local(c, lane_ops=m * group * tok_pe, rd=scores, issues=m)
        allreduce(cost, c, w, w, m * group, soft_max, 0)
        expo = local(c, lane_ops=m * group * tok_pe * (c.exp_cycles * c.lanes),
                     rd=scores, wr=scores, issues=m)  # fmt: skip
        allreduce(cost, c, w, w, m * group, expo, 0)
        pv = local(c, fmacs=fm, rd=round(fm * (kvb + ACC_BYTES)), wr=ACC_BYTES * fm,
                   issues=m * group * tok_pe)  # fmt: skip
        allreduce(cost, c, w, w, m * group * d_pe, pv, 0)
        self._absorbed(cost, op, lens, 1)
        return cost

    def _absorbed(self, cost: OpCost, op, lens, which: int) -> None:
        """MLA's absorbed GEMV ``which`` of the graph's ``attention.absorbed`` (0: ``w_uk``,
        1: ``w_uv``) as a MeshGEMV over its tiles on the region (wafer.mla_absorbed): each PE
        multiplies its tile for every row, reading its share of the op's weight bytes, then
        ``w_uk``'s partials (every head's slice of the PE's latent features) are all-reduced
        along A, which leaves each token's PEs the absorbed query they score with, and
        ``w_uv``'s (its heads' outputs) along B. Nothing for GQA."""
        tiles = self.absorbed_tiles(*lens)
        if not tiles:
            return
        g, (k_pe, n_pe) = self.att.absorbed[which], tiles[which]
        weights = sum(x.macs for x in self.att.absorbed)
        wbytes = _ceil(op.weight_bytes * k_pe * n_pe, max(1, weights))
        axis, elems = (0, g.heads * n_pe) if which == 0 else (1, n_pe)
        tile_gemv(cost, self.c, op.m, (k_pe, n_pe), wbytes, lens[axis], op.m * elems, axis)


def _add_rounds(a: tuple, b: tuple) -> tuple:
    """Two rounds of shifts one after the other: cycles (total, bare, no-hops) and busy cycles
    and messages add up."""
    total, bare, _, busy, axis, msgs, no_hops = a
    return (total + b[0], bare + b[1], 0, busy + b[3], axis, msgs + b[5], no_hops + b[6])
