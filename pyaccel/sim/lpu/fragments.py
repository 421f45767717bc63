"""LPU op fragments: one op's plan compiled on its own, kept per process, ready to be joined
into a stage's program (:meth:`~pyaccel.sim.lpu.program.Program.join`)."""

from __future__ import annotations

from .net import Network
from .program import INPUT, ChipModel, Program

# Compiled op fragments, shared by every LpuSim of a process. A fragment is a pure function of
# the chip's timing constants, the TP width and the op's plan, and of the network's rates when
# the plan has a collective; keyed so, a what-if re-compiles only the ops its class touches
# (C2C rates: the collectives; a chip constant: the chip's ops) and reuses the rest.
_FRAGMENTS: dict = {}
_FRAGMENTS_MAX = 16384  # entries; a 70B model on 576 chips compiles a few hundred per system
_COLLECTIVE_STEPS = ("allreduce", "allgather", "broadcast", "seqreduce")


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
