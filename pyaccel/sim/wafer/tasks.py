"""The wafer's building blocks of an op's cost: the spec's parameters as integer cycles and
bytes (:class:`Costs`), a PE task (:class:`Local`: FMAC lanes, SRAM ports, DSD issue), an op's
cost by resource class (:class:`OpCost`), and the mesh collectives an op runs after its task
(:func:`allreduce`, :func:`multicast`), each simulated link by link (``mesh``). Units: cycles
(mesh latencies in ticks of ``1 / Costs.tick`` cycle), bytes, 16-bit elements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType

from ...errors import ConfigError
from ...hw.spec_wafer import MESH_TICKS_PER_CYCLE
from ...units import ceil_div as _ceil
from .mesh import ONE_LEVEL_COLOURS, TWO_LEVEL_COLOURS, line_allreduce, line_multicast

ACC_BYTES = 2  # partial sums kept as 16-bit in SRAM (WaferLLM's @fmach accumulates in FP16)


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


def tile_gemv(cost: OpCost, c: Costs, m: int, tile: tuple[int, int], wbytes: int, n: int,
              elems: int, axis: int) -> None:  # fmt: skip
    """A MeshGEMV on each PE: ``m`` rows through its ``tile`` (``(inputs, outputs)``) of
    weights, each row reading the tile's ``wbytes`` and the 16-bit partial sums and writing
    those back (wafer.accumulate_fp16), one DSD a row and input; then the all-reduce of the
    PE's ``elems`` partial sums along ``axis``'s line of ``n`` PEs."""
    k_pe, n_pe = tile
    fmacs = m * k_pe * n_pe
    task = local(c, fmacs=fmacs, rd=wbytes * m + ACC_BYTES * fmacs, wr=ACC_BYTES * fmacs,
                 issues=m * k_pe)  # fmt: skip
    allreduce(cost, c, n, n, elems, task, axis)


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
