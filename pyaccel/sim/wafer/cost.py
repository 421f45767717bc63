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
from dataclasses import dataclass, field
from types import MappingProxyType

from ...errors import ConfigError
from ...hw.spec_wafer import MESH_TICKS_PER_CYCLE
from ...model.ops import ACT_BYTES
from ...place.kinds.wafer_tiles import PeTiles
from ...units import ceil_div as _ceil
from .flows import line_shift, shift_flows
from .mesh import ONE_LEVEL_COLOURS, TWO_LEVEL_COLOURS, line_allreduce, line_multicast

ACC_BYTES = 2  # partial sums kept as 16-bit in SRAM (WaferLLM's @fmach accumulates in FP16)
ARGMAX_PAIR_ELEMS = 2  # a (value, index) pair of 16-bit elements (arg-max reduction)


@dataclass(frozen=True)
class Costs:
    """The spec's wafer parameters as integer cycles and bytes. The mesh's latencies (``hop``,
    ``ramp``, ``pass_lat``) are in *ticks* of ``1 / tick`` cycle, so that a what-if that
    halves a 1-cycle latency runs it at half a cycle, not at zero (wafer.half_cycle_ticks);
    other fractional values are floored explicitly."""

    lanes: int
    rd_bw: int
    wr_bw: int
    link_bytes: int
    hop: int
    ramp: int
    overhead: int
    pass_lat: int
    tick: int
    issue: int
    elem_bytes: int
    exp_cycles: int
    norm_lane_ops: int
    norm_dsds: int
    elementwise_messages: int
    two_level: bool
    shifts_at_once: int

    @classmethod
    def of(cls, params) -> Costs:
        """Costs from a WaferParams: the colours the runtime leaves decide the all-reduce
        scheme; those and the fabric queues it leaves bound the shifts in flight at once."""

        def i(name: str) -> int:
            return int(math.floor(getattr(params, name)))

        colours = i("colours") - i("reserved_colours")
        if colours < ONE_LEVEL_COLOURS:
            raise ConfigError(
                f"colours - reserved_colours = {colours}: the mesh collectives need at least "
                f"{ONE_LEVEL_COLOURS} routable colours per router"
            )
        queues = i("fabric_queues") - i("reserved_queues")
        mesh = [float(getattr(params, n)) for n in MESH_LATENCIES]
        tick = next((t for t in TICKS_PER_CYCLE if all(_whole(v * t) for v in mesh)),
                    TICKS_PER_CYCLE[-1])  # fmt: skip
        hop, ramp, pass_lat = (int(math.floor(v * tick + WHOLE_SLACK)) for v in mesh)
        return cls(
            lanes=max(1, i("fmac_fp16_per_cycle")),
            rd_bw=max(1, i("sram_read_bytes_per_cycle")),
            wr_bw=max(1, i("sram_write_bytes_per_cycle")),
            link_bytes=max(1, i("link_bytes_per_cycle")),
            hop=hop,
            ramp=ramp,
            overhead=i("message_overhead_cycles"),
            pass_lat=pass_lat,
            tick=tick,
            issue=i("dsd_issue_cycles"),
            elem_bytes=max(1, i("fabric_bytes_per_elem")),
            exp_cycles=i("exp_cycles_per_elem"),
            norm_lane_ops=i("norm_scale_lane_ops_per_elem"),
            norm_dsds=i("norm_scale_dsds_per_token"),
            elementwise_messages=i("elementwise_task_messages"),
            two_level=colours >= TWO_LEVEL_COLOURS,
            # wafer.shift_rounds: each concurrent shift needs its own colour and a fabric queue
            # at every sender and receiver
            shifts_at_once=max(1, min(colours, queues)),
        )

    def wavelets(self, elems: int) -> int:
        """Wavelets (link cycles) to carry ``elems`` 16-bit elements over one link."""
        return max(1, _ceil(elems * self.elem_bytes, self.link_bytes))

    def cycles(self, ticks: int) -> int:
        """Whole cycles of a mesh simulation's ``ticks``. In ticks a wavelet is ``tick``
        one-tick pieces, so a message's last piece lands one tick after its last wavelet
        began to: rounding down gives the wavelet's arrival rounded up to a cycle."""
        return int(ticks) // self.tick

    def busy_cycles(self, busy):
        """A simulation's per-position busy ticks as cycles (whole wavelets: exact; the cached
        array itself when a tick is a cycle)."""
        return busy if self.tick == 1 else busy // self.tick


# The mesh latencies kept exact in ticks (wafer.half_cycle_ticks), the ticks per cycle tried,
# and the float slack under which a value counts as whole.
MESH_LATENCIES = ("hop_latency_cycles", "ramp_latency_cycles", "stream_add_latency_cycles")
TICKS_PER_CYCLE = (1, 2, MESH_TICKS_PER_CYCLE)
WHOLE_SLACK = 1e-9


def _whole(x: float) -> bool:
    return abs(x - round(x)) < WHOLE_SLACK


@dataclass
class Local:
    """One PE task: cycles by resource (FMAC lanes, SRAM ports, DSD issue)."""

    compute: int = 0
    sram: int = 0
    issue: int = 0

    @property
    def body(self) -> int:
        """Cycles of the task's vector work (lanes and ports overlap)."""
        return max(self.compute, self.sram)

    @property
    def cycles(self) -> int:
        """Whole task: DSD issue plus vector work."""
        return self.body + self.issue

    @property
    def resource(self) -> str:
        """The resource class that bounds the vector work."""
        return "pe_sram" if self.sram > self.compute else "pe_compute"

    def __add__(self, other: Local) -> Local:
        return Local(self.compute + other.compute, self.sram + other.sram,
                     self.issue + other.issue)  # fmt: skip


def local(c: Costs, fmacs=0, lane_ops=0, rd=0, wr=0, issues=0) -> Local:
    """A PE task doing ``fmacs`` fused multiply-adds and ``lane_ops`` other lane operations,
    reading ``rd`` and writing ``wr`` SRAM bytes, issuing ``issues`` DSD instructions."""
    return Local(
        _ceil(fmacs, c.lanes) + _ceil(lane_ops, c.lanes),
        max(_ceil(rd, c.rd_bw), _ceil(wr, c.wr_bw)),
        issues * c.issue,
    )


@dataclass(frozen=True)
class LineAllReduce:
    """What an op's all-reduce simulated: every line along ``axis`` (``n`` PEs in segments of
    ``seg``) reducing ``nwav`` wavelets per PE, two-level or one-level, with or without the
    broadcast back (the whole-grid simulation rebuilds it from this, tests/test_wafer_grid.py)."""

    axis: int
    n: int
    seg: int
    nwav: int
    two_level: bool
    broadcast: bool


@dataclass
class OpCost:
    """An op on one region: cycles per resource class in the order they happen, the collectives
    it simulated, and per-line link use for the heatmap (``busy[axis]`` per position)."""

    parts: list = field(default_factory=list)  # [(resource, cycles)]
    transfers: int = 0
    messages: int = 0
    busy: dict = field(default_factory=dict)  # (axis, length) -> busy cycles per position
    # per simulated collective: (index of its first part, its line all-reduce or None)
    collectives: list = field(default_factory=list)

    @property
    def cycles(self) -> int:
        """Total cycles of the op."""
        return sum(n for _, n in self.parts)

    def frozen(self) -> OpCost:
        """This cost made read-only for a memo that hands it to every op of the same shape:
        parts a tuple, the busy map a read-only view of read-only arrays."""
        for vec in self.busy.values():
            vec.setflags(write=False)
        self.parts, self.busy = tuple(self.parts), MappingProxyType(self.busy)
        self.collectives = tuple(self.collectives)
        return self

    def add_local(self, task: Local) -> None:
        """Append a PE task (vector work, then its DSD issue as fixed latency)."""
        if task.body:
            self.parts.append((task.resource, task.body))
        if task.issue:
            self.parts.append(("fixed_latency", task.issue))

    def add_comm(self, total: int, no_overhead: int, setup: int, busy=None, axis=None,
                 messages=0, no_hops: int | None = None, line=None) -> None:  # fmt: skip
        """Append a simulated collective whose run took ``total`` cycles after PE work of
        ``setup`` cycles already counted. Its time is attributed by re-simulating it: what
        zero message start costs save (``no_overhead``: the run without them) is
        ``mesh_message``; what zero per-hop latency (router hops and stream adds) saves on top
        (``no_hops``: without either) is ``mesh_hop``; the rest, wavelets serialised on the
        links, is ``mesh_link``. ``line``: the :class:`LineAllReduce` it was, if one."""
        link = max(0, no_overhead - setup)
        serial = link if no_hops is None else min(link, max(0, no_hops - setup))
        message = max(0, total - max(no_overhead, setup))
        self.collectives.append((len(self.parts), line))
        if message:
            self.parts.append(("mesh_message", message))
        if link - serial:
            self.parts.append(("mesh_hop", link - serial))
        self.parts.append(("mesh_link", serial))
        self.transfers += 1
        self.messages += messages
        if busy is not None:  # keyed by (axis, line length): expert bands are shorter lines
            key = (axis, len(busy))
            prev = self.busy.get(key)
            self.busy[key] = busy if prev is None else prev + busy


def allreduce(cost: OpCost, c: Costs, n: int, seg: int, elems: int, task: Local, axis: int,
              broadcast: bool = True) -> None:  # fmt: skip
    """Local task then an all-reduce (or reduce) of ``elems`` per PE along a line of ``n``: every
    PE starts its send after its task plus the message start overhead. With colours for both,
    the faster of the two-level and the one-level chain scheme is used (as a compiler picks)."""
    cost.add_local(task)
    t, seg = c.tick, max(1, seg)  # the simulations run in ticks
    nwav, work, over = t * c.wavelets(elems), t * task.cycles, t * c.overhead
    best = None
    for two_level in (True, False) if c.two_level else (False,):
        tail = (c.hop, c.pass_lat, two_level, broadcast, c.ramp)
        total, busy, msgs = line_allreduce(n, seg, nwav, work + over, over, *tail)
        if best is None or total < best[0]:
            bare = line_allreduce(n, seg, nwav, work, 0, *tail)[0]
            no_hops = line_allreduce(n, seg, nwav, work, 0, 0, 0, two_level, broadcast, 0)[0]
            best = (total, bare, busy, msgs, no_hops, two_level)
    total, bare, busy, msgs, no_hops, two_level = best
    line = LineAllReduce(axis, n, seg, c.wavelets(elems), two_level, broadcast)
    cost.add_comm(c.cycles(total), c.cycles(bare), task.cycles, c.busy_cycles(busy), axis, msgs,
                  c.cycles(no_hops), line)  # fmt: skip


def multicast(cost: OpCost, c: Costs, n: int, root: int, elems: int, setup: int, axis: int,
              lead: int = 0) -> None:  # fmt: skip
    """A multicast of ``elems`` per PE from ``root`` over a line of ``n`` (after ``lead`` hops
    from a neighbouring region or the wafer edge)."""
    t = c.tick  # the simulations run in ticks
    nwav, work, over = t * c.wavelets(elems), t * setup, t * c.overhead
    total, busy, msgs = line_multicast(n, root, nwav, work + over, over, c.hop, lead, c.ramp)
    bare = line_multicast(n, root, nwav, work, 0, c.hop, lead, c.ramp)[0]
    no_hops = line_multicast(n, root, nwav, work, 0, 0, lead, 0)[0]
    cost.add_comm(c.cycles(total), c.cycles(bare), setup, c.busy_cycles(busy), axis, msgs,
                  c.cycles(no_hops))  # fmt: skip


class RegionCoster(PeTiles):
    """Costs of graph ops on regions of one spec, memoised by (op shape, region shape, axis);
    the per-PE tiles they cost are :class:`PeTiles`' (``pe_bytes``, ``expert_regions``)."""

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
            key = ("attention", op.m, op.n, _ceil(op.k, w), w, h, axis)
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
        fmacs = m * k_pe * n_pe
        wbytes = _ceil(op.weight_bytes * k_pe * n_pe, max(1, op.n * op.k)) * m
        task = local(c, fmacs=fmacs, rd=wbytes + ACC_BYTES * fmacs, wr=ACC_BYTES * fmacs,
                     issues=m * k_pe)  # fmt: skip
        cost = OpCost()
        allreduce(cost, c, red, red, m * n_pe, task, axis)
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
        fmacs = m_e * k_pe * n_pe
        wbytes = math.ceil(one * k_pe * n_pe / max(1, op.n * op.k)) * m_e
        task = local(c, fmacs=fmacs, rd=wbytes + ACC_BYTES * fmacs, wr=ACC_BYTES * fmacs,
                     issues=m_e * k_pe)  # fmt: skip
        cost = OpCost()
        batch = max(1, op.m // max(1, cfg.top_k))
        if op.kind.endswith("gate_up_proj") and cols > 1:
            multicast(cost, c, lens[0], 0, batch * _ceil(cfg.hidden, sw), 0, 0)
        allreduce(cost, c, red, red, m_e * n_pe, task, axis)
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
        inside the segment); (1) partial scores, all-reduced along B per segment; (2) max and
        (3) exp-sum all-reduced along A; (4) P.V partials all-reduced along A."""
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
        return cost


def _add_rounds(a: tuple, b: tuple) -> tuple:
    """Two rounds of shifts one after the other: cycles (total, bare, no-hops) and busy cycles
    and messages add up."""
    total, bare, _, busy, axis, msgs, no_hops = a
    return (total + b[0], bare + b[1], 0, busy + b[3], axis, msgs + b[5], no_hops + b[6])
