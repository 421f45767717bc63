"""C2C transfer lists and their schedule: what every LPU collective and stage hop is built
from (:mod:`pyaccel.sim.lpu.net` inside a node, :mod:`pyaccel.sim.lpu.wide` across nodes)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...kernels import get as get_kernel
from ...units import MAX_CYCLES, CycleRangeError


@dataclass(frozen=True)
class Transfers:
    """A transfer list in the compiler's order: link ids, bytes, dependencies (CSR), cut-through
    flags, the sending chip of each transfer (within the schedule's chips) and per-link rates."""

    link: np.ndarray
    n_bytes: np.ndarray
    cut: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    sender: np.ndarray
    link_bpc: np.ndarray
    link_lat: np.ndarray


@dataclass(frozen=True)
class Collective:
    """A scheduled collective: total cycles, and per sending chip the cycles it starts and stops
    sending and the bytes it sends (for the trace's c2c_link events); ``latency_cycles`` is what
    the links' hop latency adds to the total (the schedule re-run with zero latency is that
    much shorter: the trace's c2c_latency); ``link_busy``: the (start, end) cycles in which
    some link of the collective carries bytes, merged (what an incoming stage hop's relay must
    leave free: lpu.relay_gap_fill); ``vxm_busy``: the (start, end) cycles the busiest chip's
    VXM sums partials, and ``send_vectors`` the most vectors one chip sends (what the
    collective occupies on a chip: lpu.collective_on_chip)."""

    kind: str
    cycles: int
    n_bytes: int
    send_start: tuple[int, ...]
    send_end: tuple[int, ...]
    send_bytes: tuple[int, ...]
    n_transfers: int
    slot_bytes: tuple = ()  # (sending chip, link slot, bytes) of every real transfer
    latency_cycles: int = 0
    link_busy: tuple[tuple[int, int], ...] = ()
    vxm_busy: tuple[tuple[int, int], ...] = ()
    send_vectors: int = 0


def peer_slot(i: int, j: int) -> int:
    """Link slot of chip ``i`` toward node peer ``j`` (slots 0..6 for the 7 other chips)."""
    return j if j < i else j - 1


class Builder:
    def __init__(self):
        self.link, self.n_bytes, self.cut, self.deps, self.sender = [], [], [], [], []
        self.slot: list[int] = []
        self.bpc, self.lat = [], []

    def new_link(self, bpc: float, lat: int) -> int:
        self.bpc.append(bpc)
        self.lat.append(lat)
        return len(self.bpc) - 1

    def send(self, link: int, n_bytes: int, sender: int, deps=(), cut=False, slot=-1) -> int:
        """Append a transfer; ``slot`` is the sender's physical link (0..6 node peers, 7.. global
        ports; -1 for the chip's own VXM)."""
        self.link.append(link)
        self.n_bytes.append(int(n_bytes))
        self.cut.append(bool(cut))
        self.deps.append(list(deps))
        self.sender.append(sender)
        self.slot.append(slot)
        return len(self.link) - 1

    def build(self) -> Transfers:
        ptr = np.zeros(len(self.deps) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(d) for d in self.deps])
        idx = np.array([j for d in self.deps for j in d], dtype=np.int64)
        return Transfers(
            np.array(self.link, dtype=np.int64),
            np.array(self.n_bytes, dtype=np.int64),
            np.array(self.cut, dtype=np.bool_),
            ptr,
            idx,
            np.array(self.sender, dtype=np.int64),
            np.array(self.bpc, dtype=np.float64),
            np.array(self.lat, dtype=np.int64),
        )


def schedule(tr: Transfers, vector_bytes: int, backend: str | None = None):
    """(start, end, arrive) of every transfer (the hot loop; NumPy twin in reference_lpu).
    Raises :class:`CycleRangeError` when a transfer alone would take more than ``MAX_CYCLES``
    (a link rate set far outside physical ranges), before the kernel's integer times could
    overflow."""
    if len(tr.link):
        with np.errstate(over="ignore"):  # a rate near 0 gives inf: refused just below
            longest = float(np.max(tr.n_bytes / tr.link_bpc[tr.link]))
        if not longest < MAX_CYCLES:
            raise CycleRangeError(
                f"a C2C transfer of up to {int(tr.n_bytes.max()):,} B: a time of {longest:.4g} "
                "cycles at the links' rates, beyond the limit of 2**62 cycles (int64 "
                "timelines); check --set values"
            )
    fn = get_kernel("lpu_link_schedule", backend)
    return fn(
        tr.link, tr.n_bytes, tr.cut, tr.dep_ptr, tr.dep_idx, tr.link_bpc, tr.link_lat, vector_bytes
    )


def finish(kind, b: Builder, n_chips: int, n_bytes: int, vector_bytes: int, skip_links=(),
           vxm_links=None):  # fmt: skip
    """The :class:`Collective` of builder ``b``'s transfers over ``n_chips`` chips: its
    schedule, each chip's send window and bytes, and what the links' hop latency adds.
    ``skip_links`` are a chip's own pseudo-links (no bytes cross a C2C link on them), of which
    ``vxm_links`` (by default all) are its VXM summing partials."""
    tr = b.build()
    start, end, arrive = schedule(tr, vector_bytes)
    cycles = int(arrive.max()) if len(arrive) else 0
    s0, s1, sb = [cycles] * n_chips, [0] * n_chips, [0] * n_chips
    for i in range(len(tr.link)):
        if int(tr.link[i]) in skip_links:
            continue
        c = int(tr.sender[i])
        s0[c] = min(s0[c], int(start[i]))
        s1[c] = max(s1[c], int(end[i]))
        sb[c] += int(tr.n_bytes[i])
    s0 = [a if bb else 0 for a, bb in zip(s0, sb, strict=True)]
    on_links = [i for i in range(len(tr.link)) if int(tr.link[i]) not in skip_links]
    busy = merged((int(start[i]), int(end[i])) for i in on_links)
    sums = set(skip_links if vxm_links is None else vxm_links)
    vxm, sends = _chip_work(tr, start, end, on_links, sums, n_chips, vector_bytes)
    slots = tuple(
        (c, k, nb) for c, k, nb in zip(b.sender, b.slot, b.n_bytes, strict=True) if k >= 0
    )
    n = len(tr.link)
    # the links' hop latency: the schedule again with none on the C2C links (a chip's own
    # pseudo-links keep theirs: the VXM pass latency is not the links')
    own = np.zeros(len(tr.link_lat), dtype=np.bool_)
    own[list(skip_links)] = True
    no_latency = replace(tr, link_lat=np.where(own, tr.link_lat, 0))
    arrive0 = schedule(no_latency, vector_bytes)[2]
    latency = cycles - (int(arrive0.max()) if len(arrive0) else 0)
    return Collective(kind, cycles, n_bytes, tuple(s0), tuple(s1), tuple(sb), n, slots,
                      max(0, latency), busy, vxm, sends)  # fmt: skip


def _chip_work(tr: Transfers, start, end, on_links, vxm_links, n_chips: int, vector_bytes: int):
    """(the VXM intervals of the chip whose VXM sums longest, the most vectors a chip sends):
    transfers on ``vxm_links`` are partial sums, those at ``on_links`` (indices) sends."""
    sums: list[list[tuple[int, int]]] = [[] for _ in range(n_chips)]
    vectors = [0] * n_chips
    for i in on_links:
        vectors[int(tr.sender[i])] += -(-int(tr.n_bytes[i]) // vector_bytes)
    for i in range(len(tr.link)):
        if int(tr.link[i]) in vxm_links:
            sums[int(tr.sender[i])].append((int(start[i]), int(end[i])))
    busiest = max(range(n_chips), key=lambda c: (sum(b - a for a, b in sums[c]), -c))
    return merged(sums[busiest]), max(vectors)


def merged_arrays(starts, ends) -> tuple[tuple[int, int], ...]:
    """:func:`merged` of the intervals ``[starts[i], ends[i])`` given as int64 arrays (one
    sort instead of a Python loop over them)."""
    lo, hi = merged_columns(starts, ends)
    return tuple(zip(lo.tolist(), hi.tolist(), strict=True))


def merged_columns(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """:func:`merged_arrays` as two arrays (the sorted, disjoint intervals' starts and ends)."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.lexsort((ends, starts))
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.r_[True, starts[1:] > reach[:-1]]  # an interval past all before it opens a group
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(starts)] - 1
    return starts[first], reach[last]


def merged(intervals) -> tuple[tuple[int, int], ...]:
    """The union of (start, end) intervals as sorted, disjoint intervals (empty ones left
    out)."""
    out: list[list[int]] = []
    for a, b in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)
