"""The speed search inside a placer's layout families (orchestration, for :mod:`pyaccel.placing`).

Some layouts a placer offers are the two ends of a family that differs in one whole number: the
LPU's TP width over its fewest and its most pipeline stages, the wafer's interleave on the
smallest grid that holds each block and on the whole wafer. A middle member can be faster (at
batch > 1 more stages overlap more micro-batches until their hops cost more; a tiny model's
lines are shortest on a small grid, its work spread widest on a large one), so the members
between are searched too. A placer opts in with:

- ``family(placement)``: what a member keeps (a hashable key), None for a layout of no family;
- ``position(placement)``: the whole number that varies (stage count, grid side), named by
  the placer's ``FAMILY_POSITION`` (``"stages"``: members differ in pipeline stages);
- ``member(graph, system, base, position, costs=None)``: the member at ``position`` of the
  family of ``base`` (the member with the least position), or None where it does not fit;
- optionally ``keywise(graph, system, placement)``: a layout with every layer key on a stage
  of its own, whose stages' cycles (the step driver's :func:`~.sim.driver.stage_cycles_of`)
  are the ``costs`` a member balances its stages by instead of bytes.

Members are timed by the caller's ``time`` (which keeps every layout it timed); the search
itself never keeps one.
"""

from __future__ import annotations

from dataclasses import replace

from .batches import micro_batch_sizes
from .sim.driver import stage_cycles_of

NEVER = 2**62  # the cycles of a member that cannot run: slower than any that can


def search_families(graph, system, layouts, placer, engine, time, known: dict) -> None:
    """Time (with ``time``) the members :func:`golden_positions` visits between the least and
    the greatest position of each family among ``layouts`` (``known``: their cycles by id),
    and, where the placer gives ``keywise`` costs, the members with stages balanced by them."""
    families: dict = {}
    for plc in layouts:
        key = placer.family(plc)
        if key is not None:
            families.setdefault(key, []).append(plc)
    for members in families.values():
        low, high = min(members, key=placer.position), max(members, key=placer.position)
        if _one_pass(graph, placer, engine, high):
            continue
        lo, hi = placer.position(low), placer.position(high)
        ends = {lo: known[id(low)], hi: known[id(high)]}
        golden_positions(_member_cycles(graph, system, placer, low, None, time), lo, hi, ends)
        costs = _key_cycles(graph, system, placer, engine, low)
        if costs is not None:
            golden_positions(_member_cycles(graph, system, placer, low, costs, time), lo, hi, {})


def _one_pass(graph, placer, engine, high) -> bool:
    """Whether the family's position is a pipeline stage count (the placer's
    ``FAMILY_POSITION`` is ``"stages"``) while the batch makes one micro-batch: then a step is
    one pass through every stage, more stages only add hops and stages balanced by cost change
    nothing, so the fewest stages as offered are fastest and no member needs timing."""
    if getattr(placer, "FAMILY_POSITION", None) != "stages":
        return False
    return len(micro_batch_sizes(graph.workload.batch, engine.n_stages(high))) < 2


def _key_cycles(graph, system, placer, engine, plc) -> tuple[int, ...] | None:
    """Each layer key's cycles on a stage of its own of ``plc``'s family (the placer's
    ``keywise`` layout, timed by the step driver at the workload's context), or None where the
    placer or engine has no such layout or times."""
    keywise = getattr(placer, "keywise", None)
    if keywise is None:
        return None
    one = keywise(graph, system, plc)
    wide = replace(system, units=one.n_units)  # as many units as one key a stage takes
    costs = stage_cycles_of(engine, graph, wide, one, graph.context)
    return None if costs is None else tuple(costs)


def _member_cycles(graph, system, placer, base, costs, time):
    """``cycles(position)`` of ``base``'s family member there (stages balanced by ``costs``
    where given), timed with ``time``; a member that does not fit is never the fastest."""

    def cycles(position: int) -> int:
        plc = placer.member(graph, system, base, position, costs)
        return NEVER if plc is None else time(plc)

    return cycles


def golden_positions(cycles, lo: int, hi: int, memo: dict[int, int]) -> dict[int, int]:
    """``memo`` (position -> cycles, holding ``lo`` and ``hi`` or empty) grown with the
    positions a search between ``lo`` and ``hi`` visits for the fewest ``cycles(position)``,
    each asked once. The step is searched as unimodal over the positions: where it rises
    strictly from ``lo`` to ``lo + 1``, ``lo`` is taken as its least; else a golden-section
    search (about 1.44 log2(hi - lo) + 2 positions), ties keeping the lesser position (a
    plateau that falls further on can hide a better one), the last window of at most four
    timed whole."""

    def f(x: int) -> int:
        if x not in memo:
            memo[x] = cycles(x)
        return memo[x]

    inv_phi = (5**0.5 - 1) / 2
    a, b = lo, hi
    if b - a > 3 and f(a + 1) > f(a):
        b = a + 1
    while b - a > 3:
        c, d = b - round((b - a) * inv_phi), a + round((b - a) * inv_phi)
        if c >= d:  # rounding met in the middle: two neighbours tell which side falls
            c, d = (a + b) // 2, (a + b) // 2 + 1
        if f(c) <= f(d):
            b = d
        else:
            a = c
    for x in sorted({lo, hi, *range(a, b + 1)}):
        f(x)
    return memo
