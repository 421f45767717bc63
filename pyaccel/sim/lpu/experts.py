"""Expert parallelism on LPU stages (``lpu.expert_layout = ep``): each MoE layer's experts sit
whole on the chips of its stage's tensor-parallel group, and every token row reaches every chip
(no dispatch). A step's routed-expert ops take the plans of the group's busiest chip: the one
with the most routed experts (whose weights it installs), then the most (row, expert) pairs;
the down projection's all-reduce makes every chip wait for it (:func:`.plans.expert_plan`).

What a step's routing changes is therefore one pair of integers per MoE layer, the busiest
chip's (experts, pairs): :meth:`EpRouting.busiest_over` gives it for many steps at once, as one
integer ``experts * span + pairs``, and :meth:`EpRouting.stage_plans` the plans it implies.
"""

from __future__ import annotations

import hashlib
from itertools import chain

import numpy as np

from ..experts import experts_and_pairs_over
from .plans import canonical, expert_plan

# Each micro-batch's busiest chips, kept for the process by what they depend on (where the
# experts live and the picks' contents): a run's what-ifs re-time the same steps' routing on
# other chip parameters. Each entry is one int64 a (step, MoE layer).
KEPT_BUSIEST = 32
_busiest: dict = {}


class EpRouting:
    """The busiest chip of every expert-parallel MoE layer of ``graph`` and the plans it sets;
    ``owner[layer]``: the chip (index in its group) holding each expert, ``tp_of[layer]``: the
    width of the layer's group."""

    def __init__(self, graph, chip, owner: dict, tp_of: dict):
        self.graph, self.chip, self.owner, self.tp_of = graph, chip, owner, tp_of
        self.layers = graph.moe_layers
        # more than any chip's (row, expert) pairs: the key orders by experts, then pairs
        self.span = graph.workload.rows * graph.top_k + 1
        self._ops = {op.name: op for op in graph.ops if op.expert}
        self._index = {layer: n for n, layer in enumerate(self.layers)}
        self._plans: dict = {}  # (op name, width, key) -> canonical plan
        self._last: tuple = (None, None)  # the last step's picks and their busiest chips
        self._where = (self.span, tuple((layer, tp_of[layer], owner[layer].tobytes())
                                        for layer in self.layers if layer in owner))  # fmt: skip

    def busiest_at(self, picks: np.ndarray) -> np.ndarray:
        """:meth:`busiest_over` of one step's ``picks`` (``[rows, moe_layers, top_k]``), kept
        for the last picks asked (a step asks once for each of its stages; the memo holds
        them, so the object asked about stays the one seen)."""
        if self._last[0] is not picks:
            self._last = (picks, self.busiest_over(picks[None])[0])
        return self._last[1]

    def busiest_over(self, picks: np.ndarray) -> np.ndarray:
        """Each step's busiest chip per MoE layer, ``experts * span + pairs`` (int64
        ``[steps, moe_layers]``), from the expert ids ``picks`` ``[steps, rows, moe_layers,
        top_k]`` of the micro-batch's rows; ties go to either chip (the key is the same)."""
        steps, rows = picks.shape[:2]
        if rows * picks.shape[3] >= self.span:
            raise ValueError(f"{rows} rows of picks: this graph's micro-batch has fewer")
        if steps == 1:  # one step is cheap: not worth a place among the kept
            return self._busiest_over(picks)
        digest = hashlib.blake2b(np.ascontiguousarray(picks, dtype=np.int64).data)
        key = (self._where, picks.shape, digest.digest())
        hit = _busiest.pop(key, None)  # least recently used first: re-inserted at the end
        if hit is None:
            if len(_busiest) >= KEPT_BUSIEST:
                del _busiest[next(iter(_busiest))]
            hit = self._busiest_over(picks)
            hit.flags.writeable = False
        _busiest[key] = hit
        return hit

    def _busiest_over(self, picks: np.ndarray) -> np.ndarray:
        """:meth:`busiest_over`, computed."""
        steps, rows = picks.shape[:2]
        out = np.zeros((steps, len(self.layers)), dtype=np.int64)
        cols = [n for n, layer in enumerate(self.layers) if layer in self.owner]
        if not cols:
            return out
        # all layers at once, in one space of units: layer c's chips from c * width, its
        # experts' ids from c * n_experts
        width, n_exp = max(self.tp_of[self.layers[n]] for n in cols), self.graph.n_experts
        owner = np.concatenate([self.owner[self.layers[n]] + c * width
                                for c, n in enumerate(cols)])  # fmt: skip
        ids = picks[:, :, cols, :] + (np.arange(len(cols)) * n_exp)[None, None, :, None]
        experts, pairs = experts_and_pairs_over(ids.reshape(steps, rows, -1), owner,
                                                len(cols) * width)  # fmt: skip
        keys = (experts * self.span + pairs).reshape(steps, len(cols), width)
        out[:, cols] = keys.max(axis=-1)
        return out

    def stage_plans(self, holes: tuple, tp: int, busiest) -> tuple:
        """The plans of a stage's routed-expert ops ``holes`` (``(index, op name)``, in the
        stage's order) on its ``tp`` chips, for one step's ``busiest`` row of
        :meth:`busiest_over` (kept per op, width and key)."""
        return tuple(self._plan(name, tp, int(busiest[self._index[self._ops[name].layer]]))
                     for _, name in holes)  # fmt: skip

    def _plan(self, name: str, tp: int, key: int) -> tuple:
        """The canonical plan of routed-expert op ``name`` on one of ``tp`` chips when its
        layer's busiest chip is ``key`` (``experts * span + pairs``), kept."""
        hit = self._plans.get((name, tp, key))
        if hit is None:
            experts, pairs = divmod(key, self.span)
            plan = expert_plan(self._ops[name], self.graph, tp, experts, pairs)
            hit = self._plans[name, tp, key] = tuple(canonical(self.chip, tp, st) for st in plan)
        return hit

    def stage_plans_over(self, holes_of: list, widths: list, busiest: np.ndarray) -> tuple:
        """:meth:`stage_plans` of every stage at each row of ``busiest`` (rows of
        :meth:`busiest_over`), ``holes_of[s]`` and ``widths[s]`` stage ``s``'s routed-expert
        ops and chips: ``(index, plans)``, ``plans[s]`` the stage's distinct plans and
        ``index[row, s]`` the row's among them (int64). A stage's plans follow its own MoE
        layers' busiest chips alone, so each distinct set of those is planned once, as the
        plans of its layers' ops in turn (each layer's kept per its key)."""
        index = np.zeros((len(busiest), len(holes_of)), dtype=np.int64)
        plans = []
        for s, holes in enumerate(holes_of):
            layers = list(dict.fromkeys(self._ops[name].layer for _, name in holes))
            runs = [tuple(name for _, name in holes if self._ops[name].layer == layer)
                    for layer in layers]  # fmt: skip
            if not layers:
                plans.append([()])
                continue
            if [name for _, name in holes] != [name for run in runs for name in run]:
                raise ValueError(f"stage {s}: its routed-expert ops are not layer by layer")
            cols = [self._index[layer] for layer in layers]
            distinct, index[:, s] = np.unique(busiest[:, cols], axis=0, return_inverse=True)
            kept: list[dict] = [{} for _ in layers]
            out = []
            for keys in distinct.tolist():
                parts = []
                for run, memo, key in zip(runs, kept, keys, strict=True):
                    hit = memo.get(key)
                    if hit is None:
                        hit = memo[key] = tuple(self._plan(name, widths[s], key) for name in run)
                    parts.append(hit)
                out.append(tuple(chain.from_iterable(parts)))
            plans.append(out)
        return index, plans
