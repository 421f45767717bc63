"""Wafer mesh building blocks: task lists, lines and grids of PEs, and the collectives of a
MeshGEMV decode (WaferLLM's two-level chain all-reduce, multicast broadcast; point-to-point
flows are :mod:`.flows`'), all simulated link by link by the ``mesh_run`` kernel.

Units: integer cycles, wavelets (one wavelet per link per cycle per direction). A *line* is one
row or column of a region: in a MeshGEMV every row (or column) runs the same collective on its
own links with the same tile sizes, so simulating the line with the largest tiles is exact for
the slowest line (XY routing keeps the flows of different lines on different links).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import pairwise
from types import MappingProxyType

import numpy as np

from ... import kernels

# Colours one WaferLLM two-level all-reduce needs per router (mechanisms.md C.4: 4 phase-1,
# 4 phase-2, 2 broadcast); a single-level chain all-reduce (one group) needs 6.
TWO_LEVEL_COLOURS = 10
ONE_LEVEL_COLOURS = 6


@dataclass(frozen=True)
class MeshResult:
    """Arrival cycles of every task's first and last wavelet and the cycles each link was
    reserved."""

    head: np.ndarray
    tail: np.ndarray
    link_busy: np.ndarray

    @property
    def cycles(self) -> int:
        """When the last wavelet of the whole task list has arrived (cycles)."""
        return int(self.tail.max()) if len(self.tail) else 0


class Tasks:
    """A task list for ``mesh_run`` (see :mod:`pyaccel.kernels.reference_mesh`): each task on a
    PE (or a router forward, ``pe=-1``), with its setup cycles, streaming flag, message length in
    wavelets, dependencies (earlier task ids) and path (link ids)."""

    def __init__(self) -> None:
        self.pe: list[int] = []
        self.setup: list[int] = []
        self.stream: list[int] = []
        self.nwav: list[int] = []
        self.deps: list[list[int]] = []
        self.paths: list[list[int]] = []
        self.ramp_only = 0  # tasks that only cross a ramp (not counted as messages)

    def __len__(self) -> int:
        return len(self.pe)

    def add(self, pe, setup=0, stream=False, nwav=0, deps=(), path=(), ramp_only=False) -> int:
        """Append one task; returns its id (``ramp_only``: its path is a ramp, a PE handing
        wavelets to its router or a router to its PE, which is not a message of its own)."""
        self.ramp_only += bool(ramp_only)
        if path and nwav < 1 and nwav != NWAV_SLOT:
            raise ValueError("a message needs at least one wavelet")
        # ints arrive as ints (arrays() makes them int64); lists are copied, as callers reuse
        self.pe.append(pe)
        self.setup.append(setup)
        self.stream.append(1 if stream else 0)
        self.nwav.append(nwav)
        self.deps.append(list(deps))
        self.paths.append(list(path))
        return len(self.pe) - 1

    @property
    def n_messages(self) -> int:
        """Tasks that move data over at least one mesh link (message hops, router forwards)."""
        return sum(1 for p in self.paths if p) - self.ramp_only

    def arrays(self) -> dict:
        """The list as the kernel's flat int64 arrays (CSR for dependencies and paths)."""
        return {
            "pe": np.array(self.pe, dtype=np.int64),
            "setup": np.array(self.setup, dtype=np.int64),
            "stream": np.array(self.stream, dtype=np.int64),
            "nwav": np.array(self.nwav, dtype=np.int64),
            "dep_ptr": np.cumsum([0] + [len(d) for d in self.deps], dtype=np.int64),
            "dep_idx": np.fromiter((d for ds in self.deps for d in ds), dtype=np.int64),
            "path_ptr": np.cumsum([0] + [len(p) for p in self.paths], dtype=np.int64),
            "path_link": np.fromiter((x for p in self.paths for x in p), dtype=np.int64),
        }

    def run(self, link_lat: np.ndarray, n_pes: int, pass_lat: int, backend=None) -> MeshResult:
        """Simulate the list with the fastest (or the named) kernel backend."""
        return _run_arrays(self.arrays(), link_lat, n_pes, pass_lat, backend)


def _run_arrays(a: dict, link_lat, n_pes: int, pass_lat: int, backend=None) -> MeshResult:
    fn = kernels.get("mesh_run", backend)
    head, tail, busy = fn(
        a["pe"], a["setup"], a["stream"], a["nwav"], a["dep_ptr"], a["dep_idx"], a["path_ptr"],
        a["path_link"], np.ascontiguousarray(link_lat, dtype=np.int64), int(n_pes), int(pass_lat),
    )  # fmt: skip
    return MeshResult(head, tail, busy)


# Slots a collective's task-list template holds where one call's numbers go. The shape of the
# list (tasks, dependencies, paths) depends only on the line, its segments and the scheme, so it
# is built once and filled per call; the slots are negative, unlike every real value in a list.
SETUP_SLOT, OVERHEAD_SLOT, NWAV_SLOT = -1, -2, -3


def frozen(arr: np.ndarray) -> np.ndarray:
    """``arr`` made read-only (in place) and returned: what a cache hands out is shared by every
    caller, so writing into it raises instead of changing later callers' results."""
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class Template:
    """A task list whose setup cycles and message lengths are slots, filled by :meth:`run`
    (cached and shared: its arrays are read-only and its mapping a read-only view)."""

    arrays: Mapping[str, np.ndarray]
    link_lat: np.ndarray
    n_pes: int
    n_messages: int
    arrive: np.ndarray | None = None  # per PE: the task after which it holds the result

    @classmethod
    def of(cls, tk: Tasks, link_lat: np.ndarray, n_pes: int, arrive=None) -> Template:
        """Freeze a task list built with the slot values (``arrive``: per PE, the id of the
        task whose tail is when that PE holds the collective's result)."""
        return cls.from_arrays(tk.arrays(), link_lat, n_pes, tk.n_messages, arrive)

    @classmethod
    def from_arrays(cls, arrays: dict, link_lat, n_pes: int, n_messages: int, arrive=None):
        """Freeze a task list given as the kernel's arrays (as :meth:`of`)."""
        frozen_arrays = MappingProxyType({k: frozen(v) for k, v in arrays.items()})
        done = None if arrive is None else frozen(np.array(arrive, dtype=np.int64))
        lat = frozen(np.array(link_lat, dtype=np.int64))
        return cls(frozen_arrays, lat, n_pes, n_messages, done)

    def filled(self, setup: int, overhead: int, nwav: int) -> dict:
        """The kernel arrays with the slots filled (new arrays; the template is unchanged)."""
        a = dict(self.arrays)
        st = a["setup"]
        a["setup"] = np.where(st == SETUP_SLOT, setup, np.where(st == OVERHEAD_SLOT, overhead, st))
        a["nwav"] = np.where(a["nwav"] == NWAV_SLOT, nwav, a["nwav"])
        return a

    @cached_property
    def setup_shifts(self) -> bool:
        """Whether ``setup`` cycles more delay the whole schedule by exactly that much, links'
        busy cycles unchanged (``run(s + d)`` is ``run(s)`` moved by ``d``; see
        :mod:`pyaccel.kernels.reference_mesh`). By induction over the tasks in order, it holds
        when every task starts from something that moves: a setup-slot task is its PE's first
        and streams if it has dependencies (it starts at ``max(setup, deps' head +
        pass_lat)``); any other PE's first task waits for data (store and forward); a router
        forward has dependencies; later tasks on a PE follow its (moved) earlier ones."""
        a = self.arrays
        pe, stream = a["pe"], a["stream"] != 0
        has_deps = np.diff(a["dep_ptr"]) > 0
        slot = a["setup"] == SETUP_SLOT
        on_pe = np.flatnonzero(pe >= 0)
        _, first_at = np.unique(pe[on_pe], return_index=True)
        first = np.zeros(len(pe), dtype=bool)
        first[on_pe[first_at]] = True
        ok_slot = first & ~(has_deps & ~stream)  # on a PE, its first, streaming if it waits
        ok_first = has_deps & ~stream  # another first task: store and forward
        ok_forward = has_deps
        ok = np.where(slot, ok_slot, np.where(pe < 0, ok_forward, ~first | ok_first))
        return bool(ok.all())

    def run(self, setup: int, overhead: int, nwav: int, pass_lat: int, backend=None):
        """Simulate the list with its slots filled (cycles as in :meth:`Tasks.run`)."""
        a = self.filled(setup, overhead, nwav)
        return _run_arrays(a, self.link_lat, self.n_pes, pass_lat, backend)


class Line:
    """``n`` PEs in a row: link ``2i`` goes i -> i+1, ``2i+1`` goes i+1 -> i (``hop`` cycles
    each); link ``2n + i`` is the ramp from the router into PE i, ``3n + i`` the ramp from PE i
    out to its router (``ramp`` cycles each: wafer.ramp_latency). Every link carries one
    wavelet per cycle, so a PE takes in one wavelet and sends one per cycle
    (wafer.ramp_rate)."""

    def __init__(self, n: int, hop: int, ramp: int = 0):
        self.n = n
        self.link_lat = np.array([hop] * (2 * n) + [ramp] * (2 * n), dtype=np.int64)

    def ramp_in(self, i: int) -> int:
        """The ramp from PE i's router into the PE."""
        return 2 * self.n + i

    def ramp_out(self, i: int) -> int:
        """The ramp from PE i out to its router."""
        return 3 * self.n + i

    def route(self, a: int, b: int) -> list[int]:
        """Mesh links from PE a's router to PE b's (no ramps)."""
        if b >= a:
            return [2 * i for i in range(a, b)]
        return [2 * i + 1 for i in range(a - 1, b - 1, -1)]

    def path(self, a: int, b: int) -> list[int]:
        """Links from PE a into PE b: out of a, across the mesh, into b."""
        return [self.ramp_out(a)] + self.route(a, b) + [self.ramp_in(b)]


class Grid:
    """A ``w x h`` mesh with XY routing: each PE's router has links east, west, north, south
    (to its neighbour, ``hop`` cycles), a ramp into the PE and one out of it (``ramp`` cycles
    each); PE id = y * w + x, link id = PE id * LINKS + port."""

    E, W, N, S, RAMP, RAMP_OUT = range(6)
    LINKS = RAMP_OUT + 1

    def __init__(self, w: int, h: int, hop: int, ramp: int = 0):
        self.w, self.h = w, h
        lat = np.full(self.LINKS * w * h, hop, dtype=np.int64)
        lat[self.RAMP :: self.LINKS] = ramp
        lat[self.RAMP_OUT :: self.LINKS] = ramp
        self.link_lat = lat

    def link(self, x: int, y: int, d: int) -> int:
        """The link leaving PE (x, y)'s router in direction ``d`` (or one of its ramps)."""
        return (y * self.w + x) * self.LINKS + d

    def pe(self, x: int, y: int) -> int:
        """PE id of (x, y)."""
        return y * self.w + x

    def route(self, src: tuple[int, int], dst: tuple[int, int]) -> list[int]:
        """XY route: along x first, then y (no ramp)."""
        (x, y), (x1, y1) = src, dst
        out = []
        while x != x1:
            out.append(self.link(x, y, self.E if x1 > x else self.W))
            x += 1 if x1 > x else -1
        while y != y1:
            out.append(self.link(x, y, self.S if y1 > y else self.N))
            y += 1 if y1 > y else -1
        return out

    def path(self, src, dst) -> list[int]:
        """From the PE at ``src`` (its ramp out), the XY route, into the PE at ``dst``."""
        out = [self.link(src[0], src[1], self.RAMP_OUT)]
        return out + self.route(src, dst) + [self.link(dst[0], dst[1], self.RAMP)]


def tree_groups(n: int) -> int:
    """Groups of WaferLLM's two-level all-reduce over a line of ``n`` PEs: about sqrt(n) (its
    shipped configs use 15 for P=240 ... 24 for P=720; named assumption wafer.tree_groups)."""
    return max(1, min(n, round(math.sqrt(n))))


def allreduce(tk: Tasks, line: Line, lo: int, hi: int, nwav: int, setup: int, overhead: int,
              groups: int, broadcast: bool = True) -> dict[int, int]:  # fmt: skip
    """WaferLLM's ``two_tree_allreduce`` over PEs ``lo..hi-1`` of ``line``: ``groups`` groups,
    two streaming chains into each group's middle PE, two chains of group roots into the middle
    root, then (``broadcast``) a multicast of the sum back over the segment. Every PE first runs
    ``setup`` cycles (its local compute and the task start). Returns, per PE, the id of the task
    after which it is done: holding the sum (broadcast) or having sent its share (reduce)."""
    size = hi - lo
    if size == 1:
        return {lo: tk.add(lo, setup)}
    done: dict[int, int] = {}
    g = max(1, min(groups, size))
    bounds = [lo + (size * k) // g for k in range(g + 1)]
    roots, into = [], []
    for g0, g1 in pairwise(bounds):
        r = g0 + (g1 - g0) // 2
        deps = []
        for chain in (range(g0, r), range(g1 - 1, r, -1)):
            prev = None
            for j in chain:
                step = 1 if j < r else -1
                prev = tk.add(j, setup, True, nwav, [] if prev is None else [prev],
                              line.path(j, j + step))  # fmt: skip
                done[j] = prev
            if prev is not None:
                deps.append(prev)
        roots.append(r)
        into.append(deps)
    c = len(roots) // 2
    final_deps = list(into[c])
    for order in (range(0, c), range(len(roots) - 1, c, -1)):
        prev = None
        for k in order:
            nxt = k + 1 if k < c else k - 1
            deps = into[k] + ([] if prev is None else [prev])
            prev = tk.add(roots[k], setup, True, nwav, deps, line.path(roots[k], roots[nxt]))
            done[roots[k]] = prev
        if prev is not None:
            final_deps.append(prev)
    final = tk.add(roots[c], setup, True, 0, final_deps)
    done[roots[c]] = final
    if broadcast:
        done.update(multicast(tk, line, roots[c], lo, hi, nwav, overhead, [final]))
    return done


def multicast(tk: Tasks, line: Line, root: int, lo: int, hi: int, nwav: int, setup: int,
              deps=()) -> dict[int, int]:  # fmt: skip
    """``root`` sends ``nwav`` wavelets once, out to its router; routers copy them into their
    PE and onward in both directions until ``lo`` and ``hi - 1`` (a multicast route: tx =
    {RAMP, onward}). Returns, per PE, the id of the task whose tail is when the PE holds the
    data and is free for its next task (the root: once it has started the send)."""
    send = tk.add(root, setup, True, nwav, deps, [line.ramp_out(root)], ramp_only=True)
    done = {root: tk.add(root)}  # starts when the root's PE is free again: at the send's start
    for stop, step in ((lo, -1), (hi - 1, 1)):
        prev, j = send, root
        while j != stop:
            prev = tk.add(-1, 0, False, nwav, [prev], line.route(j, j + step))
            j += step
            done[j] = tk.add(-1, 0, False, nwav, [prev], [line.ramp_in(j)], ramp_only=True)
    return done


@lru_cache(maxsize=512)
def _allreduce_template(n: int, seg: int, hop: int, two_level: bool, broadcast: bool,
                        ramp: int = 0):  # fmt: skip
    """:func:`line_allreduce`'s task list with its numbers as slots, built once per shape: by
    the C builder when in use (a line of hundreds of PEs has thousands of tasks), else by
    :func:`allreduce` (its readable twin; the tests hold the two equal)."""
    line = Line(n, hop, ramp)
    build = kernels.compiled("allreduce_tasks")
    if build is not None:
        arrays, arrive, messages = build(n, seg, two_level, broadcast)
        return Template.from_arrays(arrays, line.link_lat, n, messages, arrive)
    tk, done = Tasks(), {}
    for lo in range(0, n, seg):
        hi = min(n, lo + seg)
        g = tree_groups(hi - lo) if two_level else 1
        done.update(allreduce(tk, line, lo, hi, NWAV_SLOT, SETUP_SLOT, OVERHEAD_SLOT, g, broadcast))
    return Template.of(tk, line.link_lat, n, [done[j] for j in range(n)])


@lru_cache(maxsize=4096)
def line_allreduce(n: int, seg: int, nwav: int, setup: int, overhead: int, hop: int,
                   pass_lat: int, two_level: bool, broadcast: bool = True,
                   ramp: int = 0):  # fmt: skip
    """Cycles and per-link busy cycles of an all-reduce (or reduce) over a line of ``n`` PEs cut
    into independent segments of ``seg`` PEs (heads of an attention op, or one segment); the
    busy cycles are read-only (cached and shared)."""
    tpl = _allreduce_template(n, seg, hop, two_level, broadcast, ramp)
    if setup and tpl.setup_shifts:  # one simulation for every setup: the schedule only shifts
        cycles, busy, msgs = line_allreduce(n, seg, nwav, 0, overhead, hop, pass_lat, two_level,
                                            broadcast, ramp)  # fmt: skip
        return cycles + setup, busy, msgs
    res = tpl.run(setup, overhead, nwav, pass_lat)
    return res.cycles, frozen(_line_busy(res.link_busy, n)), tpl.n_messages


@lru_cache(maxsize=4096)
def line_multicast(n: int, root: int, nwav: int, setup: int, overhead: int, hop: int,
                   lead: int = 0, ramp: int = 0):  # fmt: skip
    """Cycles of a multicast from PE ``root`` over a line of ``n`` PEs. With ``lead`` > 0 the
    data first comes from a sender ``lead`` hops before PE 0 of the line (a hand-off from a
    neighbouring region or the wafer edge) into the root, which then multicasts it. Busy
    cycles per position are read-only (cached and shared)."""
    tpl = _multicast_template(n, root, hop, lead, ramp)
    res = tpl.run(setup, overhead, nwav, 0)
    return res.cycles, frozen(_line_busy(res.link_busy, n + lead)[lead:]), tpl.n_messages


@lru_cache(maxsize=512)
def _multicast_template(n: int, root: int, hop: int, lead: int, ramp: int) -> Template:
    """:func:`line_multicast`'s task list with its numbers as slots (its shape depends only on
    the line, the root and the lead): built once, filled per call (by the C builder when in
    use, as :func:`_allreduce_template`)."""
    line = Line(n + lead, hop, ramp)
    build = kernels.compiled("multicast_tasks")
    if build is not None:
        arrays, messages = build(n, root, lead)
        return Template.from_arrays(arrays, line.link_lat, n + lead, messages)
    tk = Tasks()
    deps, first = [], SETUP_SLOT
    if lead:
        deps = [tk.add(0, SETUP_SLOT, False, NWAV_SLOT, [], line.path(0, lead + root))]
        first = OVERHEAD_SLOT
    multicast(tk, line, lead + root, lead, lead + n, NWAV_SLOT, first, deps)
    return Template.of(tk, line.link_lat, n + lead)


def _line_busy(busy: np.ndarray, n: int) -> np.ndarray:
    """Busy cycles per PE position of a line: both directions of the link leaving it, plus its
    ramps in and out."""
    out = np.zeros(n, dtype=np.int64)
    out += busy[0 : 2 * n : 2][:n]
    out += busy[1 : 2 * n : 2][:n]
    out += busy[2 * n : 3 * n]
    out += busy[3 * n : 4 * n]
    return out
