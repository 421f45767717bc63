"""LPU engine (Groq TSP): per-chip compiler-fixed schedules over MEM/MXM/VXM/SXM slices and
explicit C2C transfer schedules, for layers tensor-parallel inside a node or across the whole
nodes of a rack (:mod:`pyaccel.sim.lpu.wide`) and pipelined across nodes; micro-batches flow
through the stages and the hops between them as the driver's simulated schedule.

Each pipeline stage's chips run the same program (the stage's ops on a 1/tp shard). The program
is compiled from the graph's ops into instructions (:mod:`pyaccel.sim.lpu.program`) and list-
scheduled with resource reservation; its length is the stage's time. Collectives and the hop to
the next stage are transfer schedules on the C2C links (:mod:`pyaccel.sim.lpu.net`). Programs are
cached by what they depend on (the shard shapes, and for attention the numbers of KV blocks and
score vectors), so a step re-schedules only when the context crosses a block boundary.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import chain

import numpy as np

from ..contract import (
    MICRO_BATCHES,
    PassTiming,
    RoutedSteps,
    StepShape,
    StepsTiming,
)
from ..rows import unique_rows
from .assumptions import ASSUMPTIONS  # noqa: F401  (the engine's named assumptions)
from .bounds import rates  # noqa: F401  (the engine's lower-bound rates)
from .experts import EpRouting
from .fragments import FragmentPool, compiled_fragment
from .hops import StageHops
from .net import Network
from .numbers import PlanNumbers
from .plans import (
    attention_plan,
    attention_plans_over,
    canonical,
    filled,
    op_plan,
    plan_at,
    plan_key,
)
from .program import ChipModel, Program
from .spans import pass_spans
from .stages import n_stages, stages_of  # noqa: F401  (n_stages: the engine's contract)

RESOURCES = ("lpu_mem", "lpu_mxm", "lpu_vxm", "lpu_sxm", "c2c_link", "c2c_latency", "fixed_latency")
# What-if knobs: the parameters whose rate doubles (or latency halves) for each class. Integer
# fields become floats here; the engine floors counts and rounds latencies up.
WHAT_IF = {
    "lpu_mem": (("weight_install_streams", "streams_per_direction"), 2.0),
    "lpu_mxm": (("mxm_planes",), 2.0),
    "lpu_vxm": (("vxm_alus_per_lane",), 2.0),
    # a one-cycle pass cannot halve in whole cycles: the SXM what-if then gains nothing
    "lpu_sxm": (("sxm_pass_cycles",), 0.5),
    "c2c_link": (("c2c_bytes_per_s",), 2.0),
    "c2c_latency": (("c2c_latency_s",), 0.5),
    "fixed_latency": (
        (
            "mxm_latency_cycles",
            "vxm_latency_cycles",
            "sxm_latency_cycles",
            "stream_hop_cycles",
            "deskew_cycles",
        ),
        0.5,
    ),
}


class LpuSim:
    """Caches of compiled and scheduled stage programs for one system and graph."""

    PREFILL_STREAMS = True  # a prompt's chunks stream through the stages (pyaccel.prefill)

    def __init__(self, graph, system, placement, backend: str | None = None):
        p = system.spec.params
        self.graph, self.p, self.backend = graph, p, backend
        self.chip = ChipModel.from_params(p)
        self.net = Network(p, system.spec.clock_hz)
        self.stages = stages_of(placement)
        self.tp = (placement.layout.tp if placement.layout else None) or 1
        self.node_size = int(p.chips_per_node)
        self.n_link_slots = self.node_size - 1 + int(p.global_links)
        self._sched: dict = {}
        self.c2c_bytes_of: dict = {}  # id(scheduled program) -> its C2C bytes (spans.py)
        self.coll_bytes_of: dict = {}  # (id(collective), ranks) -> its bytes as arrays
        self.hop_spans_of: dict = {}  # stage -> its outgoing hop's spans and bytes (spans.py)
        self._pool = FragmentPool(self.chip)  # the per-step path's programs (_program)
        self._shape_of: dict[int, int] = {}  # stage -> its fixed program's place in _shapes
        self._shapes: dict[tuple, int] = {}  # fixed step ids -> their place in _shape_list
        self._shape_list: list[tuple] = []  # (a stage of the shape, its ops' fixed step ids)
        self._step_memo: dict = {}  # (tp, plan, first) -> its steps' pool ids
        self._one_step_ids: dict = {}  # (tp, step, first) -> its pool id
        self.numbers = PlanNumbers()  # program keys hold plans' numbers, not plans
        self._ids_of_plan: dict[tuple, tuple] = {}  # (number, tp, first) -> its steps' pool ids
        self._fixed_numbers: dict[int, tuple] = {}  # shape -> its stage's fixed plans' numbers
        self._frags_by_plan: dict = {}  # (tp, id(plan), first) -> (plan, its fragment)
        self._hops = StageHops(graph, self.net, self.chip, self.stages, self.node_size)
        self.hops = self._hops.hops  # the transfer after each stage (spans.py reads them)
        # The fast per-step path (time() without events): every plan but attention's is fixed,
        # so each stage keeps its fixed plans with a hole per attention op, and a step only
        # re-plans one attention op per group the driver gives and looks the stage's cycles up.
        self._fixed, self._holes, self._stage_memo = [], [], {}
        self._expert_holes: list[tuple] = []  # routed-expert ops, re-planned for each step's
        self._tp_of: dict = {}
        for i, (chips, layers) in enumerate(self.stages):
            plans, ops = self.stage_plans(graph, i)
            holes = tuple((j, op.layer) for j, op in enumerate(ops) if op.kind == "attention")
            self._fixed.append(plans)
            self._holes.append(holes)
            self._expert_holes.append(tuple((j, op.name) for j, op in enumerate(ops) if op.expert))
            self._tp_of.update(dict.fromkeys(layers, len(chips)))
        # split experts: a stage's routed plans follow its MoE layers' distinct experts alone
        moe = {layer: n for n, layer in enumerate(graph.moe_layers)}
        self._moe_cols = [[moe[k] for k in layers if k in moe] for _, layers in self.stages]
        at = {op.name: (j, n) for j, (n, op) in enumerate(graph.expert_ops)}
        self._routed_at = [[(name, at[name]) for _, name in holes] for holes in self._expert_holes]
        self._split_memo: dict = {}  # (stage, its layers' distinct experts) -> routed plans
        self._last_attn, self._last_cycles = None, ()
        # expert parallel (lpu.expert_layout ep): each MoE layer's experts whole on its chips
        self.ep = bool(placement.layout and placement.layout.ep)
        self.routes_by_rows = self.ep  # stage_cycles_over reads the rows' ids (RoutedSteps)
        self._plans_of: dict = {}  # routed ops' plans (split experts)
        owner = {s.layer: np.array(s.expert_units, dtype=np.int64) - s.units[0]
                 for s in placement.layers if s.expert_units}  # fmt: skip
        self._ep = EpRouting(graph, self.chip, owner, self._tp_of) if self.ep else None

    def stage_plans(self, graph, i: int) -> tuple[tuple, list]:
        """(plans, ops) of stage ``i`` in ``graph`` (the step's context)."""
        chips, layers = self.stages[i]
        ops = [op for key in layers for op in graph.ops_of(key)]
        tp = len(chips)
        # an op's plan depends on the op, the graph, the chip's plan_key and the TP width:
        # kept with the graph (its candidate layouts and what-ifs ask again), by the op's
        # identity (the memo holds the op, so its id stays its own); a step's graph (events)
        # holds the run graph's ops but its attention, so their plans are found there first
        key = ("lpu.plans", plan_key(self.chip), tp)
        memo, own = graph.placer_memo.setdefault(key, {}), self.graph.placer_memo.get(key, {})
        plans = []
        for op in ops:
            hit = own.get(id(op)) or memo.get(id(op))
            if hit is None:
                plan = tuple(canonical(self.chip, tp, st) for st in op_plan(op, graph, tp))
                hit = memo[id(op)] = (op, plan)
            plans.append(hit[1])
        return tuple(plans), ops

    def scheduled(self, plans: tuple, tp: int):
        """The scheduled program of a stage's plans (cached). Each op's instructions are
        compiled once per (plan, tp) and joined: a step whose attention plan changed re-joins
        and re-schedules, but does not re-emit the stage's weight GEMVs."""
        key = (tp, plans)
        hit = self._sched.get(key)
        if hit is None:
            frags = [self._frag(tp, steps, i == 0) for i, steps in enumerate(plans)]
            hit = Program.join(self.chip, frags).schedule(self.backend)
            self._sched[key] = hit
        return hit

    def _frag(self, tp: int, steps: tuple, first: bool):
        """The compiled fragment of one op's plan, looked up by the plan's identity first: a
        stage's fixed ops keep their plan objects from one attention plan to the next, and
        hashing a plan (and the chip model) for every op of every re-joined stage costs more
        than the join. The memo holds the plan, so its id stays its own."""
        mine = self._frags_by_plan.get((tp, id(steps), first))
        if mine is not None:
            return mine[1]
        hit = compiled_fragment(self.chip, self.net, tp, steps, first)
        self._frags_by_plan[tp, id(steps), first] = (steps, hit)
        return hit

    def _stage_total(self, i: int, sch) -> int:
        return sch.cycles + self._hops.total(i)

    def group_key(self, layer: int) -> int:
        """A layer's attention plan depends on its stage's TP width."""
        return self._tp_of[layer]

    def stage_cycles_at(self, step: StepShape) -> list[int]:
        """Cycles of every stage at ``step``, as :meth:`stage_cycles` gives for the graph at
        that context, without re-planning fixed ops: only attention plans are re-made, one per
        group, and a stage's cycles are kept per attention plan (a step whose attention plans
        all equal the previous step's returns the previous cycles)."""
        return [total for total, _ in self._stages_at(step)]

    def _stages_at(self, step: StepShape) -> tuple:
        """(cycles, link windows) of every stage at ``step`` (see :meth:`stage_cycles_at`)."""
        key_all, stage_keys = self._stage_keys(step)
        if key_all != self._last_attn:
            keys = stage_keys()
            self._time_stages([keys])
            self._last_attn = key_all
            got = (self._stage_memo[k] for k in keys)
            self._last_cycles = tuple((c + self._hops.total(i), w) for i, (c, w) in enumerate(got))
        return self._last_cycles

    def _stage_keys(self, step: StepShape) -> tuple:
        """(the step's key, a function giving each stage's program key): the attention plans
        of its groups and its routed plans; the program keys are only made when asked for.
        Stages whose fixed ops compile alike (:meth:`_shape`) share a program key."""
        attn = {}
        for g in step.groups():
            tp = g.key[1]
            plan = attention_plan(g.op, self.graph.attention, tp, self.graph.workload.step_tokens)
            attn[g.key] = self.numbers.of(tuple(canonical(self.chip, tp, st) for st in plan))
        # split experts: a step's routed ops are the graph's memoised ops, so equal routings
        # are the same objects; expert parallel plans follow the picks, so they are the key
        same = not self.ep and step.routed
        routed = None if same else [self._routed_ids(step, i) for i in range(len(self.stages))]
        key_all = (tuple(attn.values()), tuple(map(id, step.routed.values())) if same else
                   tuple(routed))  # fmt: skip

        def keys() -> list[tuple]:
            per_stage = routed or [self._routed_ids(step, i) for i in range(len(self.stages))]
            group_of = {layer: g.key for g in step.groups() for layer in g.layers}
            return self._program_keys(attn, group_of, per_stage)

        return key_all, keys

    def _program_keys(self, attn: dict, group_of: dict, routed: list) -> list[tuple]:
        """Each stage's program key (:meth:`_program_key`)."""
        return [self._program_key(i, attn, group_of, routed[i]) for i in range(len(self.stages))]

    def _program_key(self, i: int, attn: dict, group_of: dict, routed: tuple) -> tuple:
        """Stage ``i``'s program key: its fixed program (:meth:`_shape`), the numbers
        (:class:`PlanNumbers`) of the attention plans ``attn`` (by group key, ``group_of`` a
        layer's) at its attention ops and of its ``routed`` plans."""
        return (self._shape(i), tuple(attn[group_of[layer]] for _, layer in self._holes[i]),
                routed)  # fmt: skip

    def _routed_ids(self, step: StepShape, i: int) -> tuple:
        """The numbers of stage ``i``'s routed plans at ``step`` (:meth:`_routed_plans`)."""
        return tuple(map(self.numbers.of, self._routed_plans(step, i)))

    def _time_stages(self, key_lists: list) -> None:
        """Schedule every program of ``key_lists`` (lists of program keys) not yet in the
        memo, all in one call of the fragment scheduler; the memo keeps (cycles, link
        windows) of each, without the hop after the stage."""
        missing = list(dict.fromkeys(k for keys in key_lists for k in keys
                                     if k not in self._stage_memo))  # fmt: skip
        if missing:
            got = self._pool.schedule([self._program(*k) for k in missing], self.backend)
            self._stage_memo.update(zip(missing, got, strict=True))

    def _shape(self, i: int) -> int:
        """Stage ``i``'s fixed program: the pool ids of its fixed ops' steps (-1 for each step
        of its attention ops), numbered in order of first sight, so stages alike share
        programs."""
        hit = self._shape_of.get(i)
        if hit is None:
            tp = len(self.stages[i][0])
            attention = {j for j, _ in self._holes[i]}
            ids = tuple((-1,) * len(plan) if j in attention else self._step_ids(tp, plan, j == 0)
                        for j, plan in enumerate(self._fixed[i]))  # fmt: skip
            hit = self._shapes.get(ids)
            if hit is None:
                hit = self._shapes[ids] = len(self._shape_list)
                at = np.zeros(len(ids) + 1, dtype=np.int64)
                np.cumsum([len(op) for op in ids], out=at[1:])
                flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64)
                self._shape_list.append((i, flat, at.tolist()))
            self._shape_of[i] = hit
        return hit

    def _step_ids(self, tp: int, plan: tuple, first: bool) -> tuple[int, ...]:
        """Pool ids of a plan's steps, each compiled on its own and taking the previous step's
        output, as the steps of one op's fragment do: equal steps are compiled once for the
        run (an attention op's K and V products, a segment's unchanged GEMVs)."""
        key = (tp, plan, first)
        hit = self._step_memo.get(key)
        if hit is None:
            hit = self._step_memo[key] = tuple(self._one_step_id(tp, st, first and k == 0)
                                               for k, st in enumerate(plan))  # fmt: skip
        return hit

    def _one_step_id(self, tp: int, st: tuple, first: bool) -> int:
        """The pool id of one plan step compiled on its own (plans share many steps: an
        attention plan's differ from the next segment's in a count or two)."""
        key = (tp, st, first)
        hit = self._one_step_ids.get(key)
        if hit is None:
            frag = compiled_fragment(self.chip, self.net, tp, (st,), first)
            hit = self._one_step_ids[key] = self._pool.id_of(frag)
        return hit

    def _program(self, shape: int, attn: tuple, routed: tuple) -> np.ndarray:
        """A program as pool fragment ids: the fixed ops of stages of ``shape``, the attention
        plans numbered ``attn`` at their attention ops and the ``routed`` plans (if any) at
        their routed-expert ops; the same program as joining ``filled`` plans."""
        i, flat, at = self._shape_list[shape]
        tp = len(self.stages[i][0])
        new = {}
        for holes, plans in ((self._holes[i], attn), (self._expert_holes[i], routed)):
            for (j, _), plan in zip(holes, plans, strict=True) if plans else ():
                key = (plan, tp, j == 0)
                ids = self._ids_of_plan.get(key)
                if ids is None:
                    ids = self._ids_of_plan[key] = self._step_ids(tp, self.numbers.plans[plan],
                                                                  j == 0)  # fmt: skip
                new[j] = ids
        if all(len(ids) == at[j + 1] - at[j] for j, ids in new.items()):
            out = flat.copy()  # each new plan in its op's place
            for j, ids in new.items():
                out[at[j] : at[j + 1]] = ids
            return out
        parts = [new.get(j, flat[at[j] : at[j + 1]]) for j in range(len(at) - 1)]
        return np.fromiter(chain.from_iterable(parts), dtype=np.int64)

    def _key_numbered(self, key: tuple) -> tuple:
        """A program key as (TP width, the numbers of the plans it stands for): its stage's
        fixed plans' numbers, with the key's own at its holes (attention, routed experts)."""
        shape, attn, routed = key
        i = self._shape_list[shape][0]
        tp = len(self.stages[i][0])
        fixed = self._fixed_numbers.get(shape)
        if fixed is None:
            fixed = self._fixed_numbers[shape] = self.numbers.of_all(self._fixed[i])
        full = list(fixed)
        for holes, numbers in ((self._holes[i], attn), (self._expert_holes[i], routed)):
            for (j, _), number in zip(holes, numbers, strict=True) if numbers else ():
                full[j] = number
        return tp, tuple(full)

    def stage_cycles_over(self, contexts: np.ndarray, layout,
                          routed: RoutedSteps | None = None) -> StepsTiming | None:  # fmt: skip
        """Stage cycles, crossings and link windows of the pass at each of ``contexts``, as
        :meth:`time` gives them: a run's steps split into segments of equal attention plans
        (block and vector counts of every group, computed for all steps at once) and equal
        routing (``routed``: each step's; with expert parallelism, each MoE layer's busiest
        chip, from ``routed.picks``). A stage's program follows its attention plans and its
        own routed plans alone, so each stage is timed once per distinct pair of them, and
        segments alike on every stage share one timing."""
        if routed is not None and self.ep and routed.picks is None:
            return None
        busiest = self._ep.busiest_over(routed.picks) if routed is not None and self.ep else None
        plans = attention_plans_over(self.graph, self.chip, contexts, layout)
        attn_cols = [v for plan in plans.values() for st in plan for v in st
                     if isinstance(v, np.ndarray)]  # fmt: skip
        cols = list(attn_cols)
        if routed is not None:
            cols.append(routed.groups()[1] if busiest is None else busiest)
        keys = np.column_stack(cols) if cols else np.zeros((len(contexts), 0), np.int64)
        starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]).any(axis=1)])
        attn_of = np.zeros(len(starts), dtype=np.int64)
        if attn_cols:  # each segment's distinct attention plans, and a step that has them
            attn_of = unique_rows(np.column_stack(attn_cols)[starts])[1]
        attn_at = np.zeros(attn_of.max() + 1, dtype=np.int64)
        attn_at[attn_of] = starts
        attns = [{key: self.numbers.of(plan_at(plan, i)) for key, plan in plans.items()}
                 for i in attn_at]  # fmt: skip
        routed_of, routed_plans = self._routed_over(routed, busiest, starts, contexts, layout)
        group_of = {layer: key for key, layers in layout for layer in layers}
        # each stage's program per distinct (attention, routing) pair of its segments
        pair_of, stage_keys = np.zeros_like(routed_of), []
        for s, options in enumerate(routed_plans):
            pairs = attn_of * len(options) + routed_of[:, s]
            distinct, pair_of[:, s] = np.unique(pairs, return_inverse=True)
            option_ids = [tuple(map(self.numbers.of, plans)) for plans in options]
            stage_keys.append(
                [
                    self._program_key(s, attns[a], group_of, option_ids[r])
                    for a, r in (divmod(d, len(options)) for d in distinct.tolist())
                ]
            )
        self._time_stages(stage_keys)
        timed = [[self._stage_memo[k] for k in ks] for ks in stage_keys]
        hops = self._hops.totals
        combos, combo_of = unique_rows(pair_of)
        rows, links, windows = [], [], []
        for combo in combos.tolist():
            stages = [timed[s][p] for s, p in enumerate(combo)]
            totals = [c + h for (c, _), h in zip(stages, hops, strict=True)]
            own, crossing = self._hops.crossings(totals)
            rows.append(own)
            links.append(crossing)
            windows.append(_windows(crossing, stages))
        which = combo_of[np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(contexts)]))]
        stage_c = np.asarray(rows, dtype=np.int64)[which]
        return StepsTiming(stage_c) if links[0] is None else StepsTiming(stage_c, links, windows,
                                                                         which)  # fmt: skip

    def _routed_over(self, routed, busiest, starts, contexts, layout) -> tuple:
        """Each segment's routed plans per stage, as ``(index [segments, stages] into
        plans[stage], plans)``: from each MoE layer's busiest chip with expert parallelism,
        else from the experts split over the chips (:meth:`_split_plans`); none without
        routing."""
        n = len(self.stages)
        if routed is None:
            return np.zeros((len(starts), n), dtype=np.int64), [[()]] * n
        if busiest is not None:
            widths = [len(chips) for chips, _ in self.stages]
            return self._ep.stage_plans_over(self._expert_holes, widths, busiest[starts])
        index = np.zeros((len(starts), n), dtype=np.int64)
        plans, seen = [[] for _ in range(n)], [{} for _ in range(n)]
        for row, i in enumerate(starts.tolist()):
            for s, got in enumerate(self._split_plans(routed, i, int(contexts[i]), layout)):
                at = seen[s].setdefault(id(got), len(plans[s]))  # kept by the split memo
                if at == len(plans[s]):
                    plans[s].append(got)
                index[row, s] = at
        return index, plans

    def _split_plans(self, routed: RoutedSteps, i: int, context: int, layout) -> list:
        """Every stage's routed plans at step ``i`` of ``routed`` (experts split over the
        chips), as :meth:`_routed_plans` makes them: kept per stage and the distinct experts
        and busiest expert's rows of its MoE layers, all of a step's routing its plans
        depend on."""
        row, hot, out = routed.distinct[i].tolist(), routed.hot[i].tolist(), []
        for s, cols in enumerate(self._moe_cols):
            key = (s, *(row[c] for c in cols), *(hot[c] for c in cols))
            hit = self._split_memo.get(key)
            if hit is None:  # the stage's own routed ops at this step, then their plans
                ops = {name: self.graph.routed_op(j, hot[n], row[n])
                       for name, (j, n) in self._routed_at[s]}  # fmt: skip
                step = StepShape(self.graph, context, self.group_key, layout=layout, routed=ops)
                hit = self._split_memo[key] = self._routed_plans(step, s)
            out.append(hit)
        return out

    def _routed_plans(self, step: StepShape, i: int) -> tuple:
        """The plans of stage ``i``'s routed-expert ops at ``step`` (empty without routing):
        with expert parallelism, those of the chip with the most routed experts (then pairs)."""
        if not step.routed:
            return ()
        tp = len(self.stages[i][0])
        if self.ep and step.picks is not None:
            return self._ep.stage_plans(self._expert_holes[i], tp, self._ep.busiest_at(step.picks))
        out = []
        for _, name in self._expert_holes[i]:
            op = step.routed[name]
            key = (name, op.weight_bytes, op.m, op.hot_rows, tp)
            if key not in self._plans_of:
                self._plans_of[key] = self._plan(op, tp)
            out.append(self._plans_of[key])
        return tuple(out)

    def _plan(self, op, tp: int) -> tuple:
        """The canonical plan of ``op`` on one chip of a ``tp``-wide group."""
        return tuple(canonical(self.chip, tp, st) for st in op_plan(op, self.graph, tp))

    def stage_cycles(self, graph, step: StepShape | None = None) -> tuple[list[int], list]:
        """Cycles of every stage (its program plus its outgoing hop) and the schedules (with
        ``step``, its routed experts as :meth:`_routed_plans` plans them)."""
        cycles, scheds = [], []
        for i, (chips, _) in enumerate(self.stages):
            plans, ops = self.stage_plans(graph, i)
            routed = self._routed_plans(step, i) if step is not None else ()
            if routed:
                plans = filled(plans, self._expert_holes[i], routed)
            sch = self.scheduled(plans, len(chips))
            cycles.append(self._stage_total(i, sch))
            scheds.append((sch, ops))
        return cycles, scheds

    def time(self, step: StepShape, events: bool) -> PassTiming:
        """Stage cycles at ``step``; with ``events`` the full schedules' spans and the bytes
        each chip sends over each C2C link slot."""
        if not events:
            stages = self._stages_at(step)
            own, links = self._hops.crossings([total for total, _ in stages])
            return PassTiming(own, links=links, link_windows=_windows(links, stages))
        at = {layer: op for layer, op, _ in step.attention()}
        ops = tuple(at.get(op.layer, op) if op.kind == "attention" else step.op(op)
                    for op in self.graph.ops)  # fmt: skip
        stage_c, scheds = self.stage_cycles(replace(self.graph, ops=ops, context=step.context),
                                            step)  # fmt: skip
        spans, sent, links = pass_spans(self, scheds, stage_c)
        arrays = {"c2c_bytes_sent_per_chip": sent, "c2c_bytes_per_chip_link": links}
        own, links_in = self._hops.crossings(stage_c)
        windows = _windows(links_in, [(c, sch.link_windows()) for c, (sch, _) in
                                      zip(stage_c, scheds, strict=True)])  # fmt: skip
        return PassTiming(own, spans, arrays, links=links_in, link_windows=windows)

    def notes(self) -> dict:
        """The layout and the program cache (distinct stage programs scheduled over the run,
        by either path)."""
        programs = {(tp, self.numbers.of_all(plans)) for tp, plans in self._sched}
        programs |= {self._key_numbered(k) for k in self._stage_memo}
        return dict(tp=self.tp, stages=len(self.stages), programs_compiled=len(programs),
                    install_cycles_per_block=self.chip.install_cycles,
                    stream_transit_cycles=self.chip.transit, c2c_hop_cycles=self.net.latency,
                    stage_hop_ports=self.net.hop_ports)  # fmt: skip


PIPELINE = MICRO_BATCHES
pass_model = LpuSim


def _windows(links, stages) -> tuple | None:
    """Each stage's link windows (from ``(cycles, windows)`` per stage), when its stages hand
    over on links (none for one stage)."""
    return None if links is None else tuple(w for _, w in stages)
