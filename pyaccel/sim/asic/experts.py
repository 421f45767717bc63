"""Routed experts on hardwired dies: which hardware unit each routed stage takes for each expert.

A MoE layer's experts are whole blocks, one per expert (``asic.experts_parallel``). A layer too
large for one die keeps its experts whole over its dies (``LayerSlot.expert_units``): the dies
are expert-parallel units. Its attention output is already on every die (gathered after the
split GEMVs), so a token needs no dispatch; after the down projections each die holding one of
the token's experts sends its partial sum over its own chip link (the combine), and the die
holding the hot experts sends for most tokens (its link queues them).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...place.experts import spread

ASSUMPTIONS = (
    "asic.routed_combine: in a MoE layer spanning dies, each die holding at least one of a "
    "token's routed experts sends its partial sum (the hidden activations, once) over its own "
    "chip link to the layer's other dies in one hop, as the split GEMVs' gathers do; dies "
    "holding none of them send nothing; receiving is not a queue of its own",
)


def combine_stage(cost, op, dies: tuple[int, ...], n_bytes: int):
    """The combine after a spanning MoE layer's expert down projection: ``n_bytes`` (one
    token's partial sum) over the chip link of every die holding one of its experts."""
    return replace(cost.link(f"{op.name}.combine", op.layer, dies, n_bytes), routed=True)


def homes(placement, n_experts: int) -> dict:
    """The die of each routed expert of every layer: the placement's ``expert_units``, or the
    experts spread over the layer's dies in contiguous blocks where it records none (a layer
    on one die, or a hand-written placement)."""
    out = {}
    for slot in placement.layers:
        units = tuple(slot.units)
        out[slot.layer] = tuple(slot.expert_units) or spread(n_experts, units)
    return out


def hardware_ids(stages, homes_of: dict, n_experts: int) -> tuple[np.ndarray, np.ndarray]:
    """``(res, ex_unit)``: the hardware units of every stage (a row each, ``-1`` padding), and
    ``ex_unit[s, e]`` the unit a routed stage ``s`` takes for expert ``e`` (rows of other
    stages repeat ``res``'s first).

    Every block is a unit of its own, except that all chip-link stages leaving a die share its
    one link: a hop takes its sending die's, a gather of a layer over several dies takes all of
    theirs at once (each die sends its part, ``asic.one_link_per_die``). A routed block is
    ``n_experts`` units, one per expert; a routed combine takes the link of each expert's die."""
    width = max([len(st.units) for st in stages if st.resource == "chip_link"], default=1)
    res = np.full((len(stages), width), -1, dtype=np.int64)
    ex_unit = np.zeros((len(stages), n_experts), dtype=np.int64)
    counter = _Counter()
    for i, st in enumerate(stages):
        if st.resource == "chip_link" and st.routed:
            ex_unit[i] = [counter.take(("link", d)) for d in homes_of[st.layer]]
            res[i, 0] = ex_unit[i, 0]
        elif st.resource == "chip_link":
            links = [counter.take(("link", d)) for d in st.units]
            res[i, : len(links)] = links
        elif st.routed:
            res[i, 0] = counter.take(("block", i), n_experts)
            ex_unit[i] = res[i, 0] + np.arange(n_experts)
        else:
            res[i, 0] = counter.take(("block", i))
        if not st.routed:
            ex_unit[i] = res[i, 0]
    return res, ex_unit


class _Counter:
    """Hands out consecutive unit ids, ``width`` at a time, the same ones for the same key."""

    def __init__(self):
        self.ids: dict = {}
        self.n = 0

    def take(self, key, width: int = 1) -> int:
        if key not in self.ids:
            self.ids[key] = self.n
            self.n += width
        return self.ids[key]
