"""LPU op fragments: one op's plan compiled on its own, kept per process, ready to be joined
into a stage's program (:meth:`~pyaccel.sim.lpu.program.Program.join`)."""

from __future__ import annotations

import numpy as np

from ...kernels import get as get_kernel
from .net import Network
from .program import INPUT, ChipModel, Program
from .transfers import merged_columns

# Compiled op fragments, shared by every LpuSim of a process. A fragment is a pure function of
# the chip's timing constants, the TP width and the op's plan, and of the network's rates when
# the plan has a collective; keyed so, a what-if re-compiles only the ops its class touches
# (C2C rates: the collectives; a chip constant: the chip's ops) and reuses the rest.
_FRAGMENTS: dict = {}
_FRAGMENTS_MAX = 16384  # entries; a 70B model on 576 chips compiles a few hundred per system
_COLLECTIVE_STEPS = ("allreduce", "allgather", "broadcast", "seqreduce")
_LINK_ROW = ("instruction", "start", "end")  # a pool link row: a collective's link_busy window


def compiled_fragment(chip: ChipModel, net: Network, tp: int, steps: tuple, first: bool):
    """The fragment of one op's plan (:func:`_fragment`), from the process-wide cache."""
    key = (chip, net.key if any(st[0] in _COLLECTIVE_STEPS for st in steps) else None, tp,
           steps, first)  # fmt: skip
    hit = _FRAGMENTS.get(key)
    if hit is None:
        if len(_FRAGMENTS) >= _FRAGMENTS_MAX:
            _FRAGMENTS.clear()
        hit = _FRAGMENTS[key] = _fragment(chip, net, tp, steps, first)
    return hit


def _compile(chip: ChipModel, net: Network, tp: int, plans: tuple) -> Program:
    """A program from canonical op plans; each op's first pattern takes the previous op's
    output. (The plain reference of :func:`_fragment` + :meth:`Program.join`.)"""
    prog = Program(chip)
    cur = None
    for i, steps in enumerate(plans):
        prog.begin_op(None, str(i), "")
        for st in steps:
            cur = _emit(prog, chip, net, tp, st, cur)
    return prog


def _fragment(chip: ChipModel, net: Network, tp: int, steps: tuple, first: bool):
    """One op's plan compiled on its own: its first pattern depends on ``INPUT`` (the previous
    op's output), or on nothing for the stage's first op."""
    prog = Program(chip)
    prog.begin_op(None, "0", "")
    cur = None if first else INPUT
    for st in steps:
        cur = _emit(prog, chip, net, tp, st, cur)
    return prog.fragment(cur)


def _emit(prog: Program, chip: ChipModel, net: Network, tp: int, st: tuple, cur):
    kind = st[0]
    if kind == "gemv":
        return prog.gemv(st[1], st[2], cur)
    if kind == "vector":
        return prog.vector(st[1], cur)
    if kind == "reduce":
        return prog.reduce(st[1], cur)
    if kind == "memio":
        return prog.memio(st[1], cur)
    vecs = -(-st[1] // chip.vector_bytes)
    if kind == "allreduce":
        red = max(1, -(-vecs // tp // chip.alus))
        return prog.collective(net.allreduce(tp, st[1], red), cur)
    if kind == "seqreduce":  # among the st[2] chips of one KV head (lpu.attention_sequence_split)
        red = max(1, -(-vecs // st[2] // chip.alus))
        return prog.collective(net.allreduce(st[2], st[1], red), cur)
    if kind == "allgather":
        return prog.collective(net.allgather(tp, st[1]), cur)
    if kind == "broadcast":
        return prog.collective(net.broadcast(tp, st[1]), cur)
    raise AssertionError(f"unknown plan step {kind}")


class FragmentPool:
    """Fragments laid end to end in flat arrays, so that a stage's program is the list of its
    ops' fragment ids: the fragment scheduler (``lpu_fragment_schedule``) runs the joined
    program without it ever being joined (:meth:`Program.join` is its plain equivalent)."""

    def __init__(self, chip: ChipModel):
        self.chip = chip
        self._ids: dict[int, int] = {}  # id(fragment) -> its place; the pool holds the fragment
        self._frags: list = []
        self._arrays: tuple | None = None  # made again when fragments were added

    def id_of(self, frag) -> int:
        """The fragment's place in the pool (added on first sight)."""
        i = self._ids.get(id(frag))
        if i is None:
            i = self._ids[id(frag)] = len(self._frags)
            self._frags.append(frag)
            self._arrays = None
        return i

    def _pool(self) -> tuple:
        """(resource, duration, latency, dep_ptr, dep_idx, frag_ptr, frag_out, link rows): the
        link rows are every fragment's collectives' ``link_busy`` windows as (fragment ptr,
        instruction, start, end), in :meth:`Program.link_busy`'s order."""
        if self._arrays is None:
            fr = self._frags
            frag_ptr = np.r_[0, np.cumsum([len(f.res) for f in fr])].astype(np.int64)
            dep_base = np.r_[0, np.cumsum([len(f.idx) for f in fr])].astype(np.int64)
            ptrs = [f.ptr[1:] + b for f, b in zip(fr, dep_base[:-1], strict=True)]
            dep_ptr = np.concatenate([[0], *ptrs])
            rows = [[(j, a, b) for j, coll in f.collectives.items() for a, b in coll.link_busy]
                    for f in fr]  # fmt: skip
            link_ptr = np.r_[0, np.cumsum([len(r) for r in rows])].astype(np.int64)
            flat = np.array([r for rs in rows for r in rs], dtype=np.int64)
            flat = flat.reshape(-1, len(_LINK_ROW))
            self._arrays = (
                np.concatenate([f.res for f in fr]), np.concatenate([f.dur for f in fr]),
                np.concatenate([f.lat for f in fr]), dep_ptr.astype(np.int64),
                np.concatenate([f.idx for f in fr]).astype(np.int64), frag_ptr,
                np.array([f.out for f in fr], dtype=np.int64), (link_ptr, *flat.T),
            )  # fmt: skip
        return self._arrays

    def schedule(self, programs: list, backend: str | None = None) -> list[tuple[int, tuple]]:
        """(cycles, link windows) of each program (an int64 array of fragment ids): its length
        and the (start, end) cycles in which its collectives hold the stage's C2C links,
        merged, as :class:`~.program.Scheduled` gives them for the joined program. All
        programs go to the kernel in one call."""
        res, dur, lat, dep_ptr, dep_idx, frag_ptr, frag_out, links = self._pool()
        seq_ptr = np.r_[0, np.cumsum([len(p) for p in programs])].astype(np.int64)
        seq = np.concatenate(programs).astype(np.int64)
        start, cycles = get_kernel("lpu_fragment_schedule", backend)(
            res, dur, lat, dep_ptr, dep_idx, frag_ptr, frag_out, seq_ptr, seq,
            self.chip.n_resources,
        )  # fmt: skip
        length = np.diff(frag_ptr)[seq]
        base = np.cumsum(length) - length  # each fragment's first instruction in ``start``
        windows = self._windows(seq, seq_ptr, base, start, links)
        return list(zip(cycles.tolist(), windows, strict=True))

    def _windows(self, seq, seq_ptr, base, start, links) -> list[tuple]:
        """Every program's merged link windows (see :meth:`Scheduled.link_windows`), found for
        all programs at once."""
        link_ptr, instr, a, b = links
        n_progs = len(seq_ptr) - 1
        count = link_ptr[seq + 1] - link_ptr[seq]
        total = int(count.sum())
        if not total:
            return [()] * n_progs
        which = np.repeat(np.arange(len(seq)), count)  # each row's place in ``seq``
        rows = link_ptr[seq][which] + np.arange(total) - np.repeat(np.cumsum(count) - count, count)
        at = start[base[which] + instr[rows]] + self.chip.transit
        prog = np.searchsorted(seq_ptr, which, side="right") - 1
        starts, ends = at + a[rows], at + b[rows]
        keep = ends > starts
        prog, starts, ends = prog[keep], starts[keep], ends[keep]
        if not len(starts):
            return [()] * n_progs
        # each program's cycles moved past the one before's: one union over all keeps them apart
        low = min(0, int(starts.min()))
        span = int(ends.max()) - low + 1
        apart = prog * span - low
        lo, hi = merged_columns(starts + apart, ends + apart)
        owner = lo // span
        lo, hi = lo - owner * span + low, hi - owner * span + low
        cut = np.searchsorted(owner, np.arange(n_progs + 1))
        pairs = list(zip(lo.tolist(), hi.tolist(), strict=True))
        return [tuple(pairs[cut[p] : cut[p + 1]]) for p in range(n_progs)]
