"""LPU op fragments: one op's (or one plan step's) instructions compiled on its own, kept per
process, ready to be joined into a stage's program (:meth:`~pyaccel.sim.lpu.program.Program.join`)
or laid end to end in a :class:`FragmentPool`, from which the per-step path schedules whole
stage programs without joining them."""

from __future__ import annotations

import numpy as np

from ...kernels import get as get_kernel
from ..pipeline import Windows
from .kinds import _EVENT_KINDS, _GEMV_BLOCK
from .net import Network
from .program import INPUT, ChipModel, Fragment, Program
from .transfers import merged_columns

# Compiled op fragments, shared by every LpuSim of a process. A fragment is a pure function of
# the chip's timing constants, the TP width and the op's plan, and of the network's rates when
# the plan has a collective; keyed so, a what-if re-compiles only the ops its class touches
# (C2C rates: the collectives; a chip constant: the chip's ops) and reuses the rest.
_FRAGMENTS: dict = {}
_FRAGMENTS_MAX = 16384  # entries; a 70B model on 576 chips compiles a few hundred per system
_COLLECTIVE_STEPS = ("allreduce", "allgather", "broadcast", "seqreduce")
_NONE = Windows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # no collectives
_LINK_ROW = ("instruction", "start", "end")  # a pool link row: a collective's link_busy window
_GEMV_BLOCKS: dict = {}  # (chip, vectors, first) -> the longest GEMV's block arrays made so far
_GEMV_BLOCKS_FIRST = 64  # blocks the cached GEMV arrays are first made for
_GEMV_GROWTH = 2  # the factor they grow by when a longer GEMV asks


def compiled_fragment(chip: ChipModel, net: Network, tp: int, steps: tuple, first: bool):
    """The fragment of one op's plan (:func:`_fragment`), from the process-wide cache."""
    key = (chip, net.key if any(st[0] in _COLLECTIVE_STEPS for st in steps) else None, tp,
           steps, first)  # fmt: skip
    hit = _FRAGMENTS.get(key)
    if hit is None:
        if len(_FRAGMENTS) >= _FRAGMENTS_MAX:
            _FRAGMENTS.clear()
        if len(steps) == 1 and steps[0][0] == "gemv":
            hit = _gemv_fragment(chip, int(steps[0][1]), int(steps[0][2]), first)
        else:
            hit = _fragment(chip, net, tp, steps, first)
        _FRAGMENTS[key] = hit
    return hit


def _gemv_fragment(chip: ChipModel, blocks: int, m: int, first: bool) -> Fragment:
    """The fragment of one ``("gemv", blocks, m)`` step, built from arrays: the same
    instructions, dependencies and output as :meth:`Program.gemv` compiled on its own. A run's
    attention steps need one for every KV block count, so the blocks' instructions are cut
    from those of the longest GEMV made so far (a block's instructions do not depend on how
    many follow it); only the result's delay, which waits for each plane's last block, is
    made afresh."""
    c = chip
    per = len(_GEMV_BLOCK)  # instructions a block: its install, then its compute
    key = (c, m, first)
    made = _GEMV_BLOCKS.get(key)
    if made is None or made[0] < blocks:
        longest = max(blocks, made[0] * _GEMV_GROWTH if made else _GEMV_BLOCKS_FIRST)
        made = _GEMV_BLOCKS[key] = (longest, *_gemv_blocks(c, longest, m, first))
    _, res, dur, nbytes, kind, ptr, idx = made
    n = per * blocks
    last = [per * (q + c.planes * ((blocks - 1 - q) // c.planes)) + 1
            for q in range(min(blocks, c.planes))]  # fmt: skip
    lat = np.zeros(n + 1, dtype=np.int64)
    lat[-1] = c.mxm_latency + c.transit
    deps = np.empty(ptr[n] + len(last), dtype=np.int64)
    deps[: ptr[n]], deps[ptr[n] :] = idx[: ptr[n]], last
    return Fragment(
        _then(res, n, -1), _then(dur, n, 0), lat, _then(nbytes, n, 0),
        _then(kind, n, len(_EVENT_KINDS)), _then(ptr, n + 1, ptr[n] + len(last)), deps, n, {},
        not first,
    )  # fmt: skip


def _then(arr: np.ndarray, n: int, value: int) -> np.ndarray:
    """``arr``'s first ``n`` entries, then ``value``."""
    out = np.empty(n + 1, dtype=np.int64)
    out[:n], out[n] = arr[:n], value
    return out


def _gemv_blocks(c: ChipModel, blocks: int, m: int, first: bool) -> tuple:
    """(resource, duration, bytes, kind, dep_ptr, dep_idx) of a GEMV's ``blocks`` blocks
    (:meth:`Program.gemv`: block ``b`` installs on plane ``b % planes`` once block
    ``b - held``'s compute freed its buffer, then computes on it after the input)."""
    b = np.arange(blocks, dtype=np.int64)
    held = c.weight_buffers * c.planes  # blocks installed before one must be freed
    p = b % c.planes
    per = len(_GEMV_BLOCK)
    res = np.stack([p, c.planes + p], 1).ravel()
    dur = np.tile(np.array([c.install_cycles, max(1, m)], dtype=np.int64), blocks)
    nbytes = np.tile(np.array([c.block_weights * c.operand_bytes, 0], dtype=np.int64), blocks)
    kind = np.tile(np.array([_EVENT_KINDS.index(k) for k in _GEMV_BLOCK], dtype=np.int64), blocks)
    deps = np.stack([per * (b - held) + 1, per * b, np.full(blocks, INPUT)], 1)
    keep = np.stack([b >= held, np.ones(blocks, bool), np.full(blocks, not first)], 1)
    n_deps = np.stack([keep[:, 0], keep[:, 1:].sum(1)], 1).ravel()
    ptr = np.concatenate([[0], np.cumsum(n_deps)]).astype(np.int64)
    return res, dur, nbytes, kind, ptr, deps[keep].astype(np.int64)


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
    if kind == "xgemv":
        return prog.xgemv(st[1], st[2], cur)
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
        link rows are every fragment's collectives' ``link_busy`` windows as (row ptr by
        fragment, instruction in the fragment, start, end), in :meth:`Program.link_busy`'s
        order."""
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

    def schedule(self, programs: list, backend: str | None = None) -> list[tuple[int, Windows]]:
        """(cycles, link windows) of each program (an int64 array of fragment ids): its length
        and the (start, end) cycles in which its collectives hold the stage's C2C links,
        merged, as :class:`~.program.Scheduled` gives them for the joined program. All
        programs go to the kernel in one call; it gives back the starts of the collectives'
        instructions only (a link row's instruction, once per row)."""
        res, dur, lat, dep_ptr, dep_idx, frag_ptr, frag_out, links = self._pool()
        link_ptr, instr, _, _ = links
        seq_ptr = np.r_[0, np.cumsum([len(p) for p in programs])].astype(np.int64)
        seq = np.concatenate(programs).astype(np.int64)
        cycles, marked = get_kernel("lpu_fragment_schedule", backend)(
            res, dur, lat, dep_ptr, dep_idx, frag_ptr, frag_out, link_ptr, instr, seq_ptr, seq,
            self.chip.n_resources,
        )  # fmt: skip
        windows = self._windows(seq, seq_ptr, marked, links)
        return list(zip(cycles.tolist(), windows, strict=True))

    def _windows(self, seq, seq_ptr, marked, links) -> list[Windows]:
        """Every program's merged link windows (see :meth:`Scheduled.link_windows`) from the
        starts of its link rows' instructions (``marked``), for all programs at once."""
        link_ptr, _, a, b = links
        n_progs = len(seq_ptr) - 1
        count = link_ptr[seq + 1] - link_ptr[seq]
        total = len(marked)
        if not total:
            return [_NONE] * n_progs
        # each row's place in the pool, and its program
        rows = np.repeat(link_ptr[seq] - (np.cumsum(count) - count), count) + np.arange(total)
        per_prog = np.add.reduceat(np.r_[count, 0], seq_ptr[:-1])
        per_prog[np.diff(seq_ptr) == 0] = 0
        prog = np.repeat(np.arange(n_progs), per_prog)
        at = marked + self.chip.transit
        starts, ends = at + a[rows], at + b[rows]
        keep = ends > starts
        prog, starts, ends = prog[keep], starts[keep], ends[keep]
        if not len(starts):
            return [_NONE] * n_progs
        # each program's cycles moved past the one before's: one union over all keeps them apart
        low = min(0, int(starts.min()))
        span = int(ends.max()) - low + 1
        apart = prog * span - low
        lo, hi = merged_columns(starts + apart, ends + apart)
        owner = lo // span
        lo, hi = lo - owner * span + low, hi - owner * span + low
        cut = np.searchsorted(owner, np.arange(n_progs + 1)).tolist()
        return [Windows(lo[a:b], hi[a:b]) for a, b in zip(cut[:-1], cut[1:], strict=True)]
