"""The step driver: the one loop over a run's decode steps that every engine shares (SPEC §2).

It owns what is common to engines: the steps over a context range, the split of the batch over
pipeline stages and the micro-batch graphs (made from the run's graph), the attention groups of
each step (:class:`~pyaccel.sim.contract.StepShape`), laying each kept step's spans on the run's
timeline, progress, and the micro-batch notes of the trace. Engines only time a pass
(:mod:`pyaccel.sim.contract`). Techniques plug in here: speculative decoding runs the driver at
k+1 tokens a step, prefill at a prompt's length.

Two pipeline disciplines:

- ``MICRO_BATCHES`` (wafer, LPU, GPU): the batch is split into micro-batches over the stages
  (:func:`~pyaccel.batches.micro_batch_sizes`), each over a stage's data-parallel ranks where
  the engine has them (:func:`~pyaccel.batches.rank_shares`); a step's time is the pipeline
  interval (:func:`pipeline_cycles`), or, for an engine whose stages hand over on links of
  their own (the wafer's system I/O), the interval of the micro-batches' simulated schedule
  over stages and links (:func:`pipeline_schedule`).
- ``SEQUENCES`` (ASIC): every sequence flows through the stages on its own, one token at a
  time; a stage serves the next sequence as soon as it is free (the ``asic_pipeline`` kernel);
  a step's time is the mean over sequences of the time between their consecutive tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ..batches import micro_batch_sizes, rank_shares
from ..routing import CHUNK_PICKS, counts_of, parse, router_for, summarise
from ..trace import EventLog, SpanColumns
from .contract import (
    MICRO_BATCHES,
    SEQUENCES,
    PassTiming,
    RoutedSteps,
    StepShape,
    StepsTiming,
    attention_layout,
)
from .pipeline import (
    one_micro_batch_over,
    one_row_pipeline,
    pipeline_cycles,
    pipeline_cycles_over,
    pipeline_schedule,
)
from .rows import unique_rows


@dataclass
class Stepped:
    """What the driver gives back: the event log, each step's cycles, the trace's meta notes
    and heatmap arrays."""

    log: EventLog
    steps: list[int]
    meta: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    fewest_experts: np.ndarray | None = None  # per MoE layer, over the run's steps


def run_steps(engine, graph, system, placement, kept: frozenset[int], progress=None) -> Stepped:
    """Time ``graph.workload.tokens`` decode steps of ``graph`` on ``engine``; events for the
    steps in ``kept``; ``progress(step)`` after each step."""
    if engine.PIPELINE == MICRO_BATCHES:
        return _micro_batch_steps(engine, graph, system, placement, kept, progress)
    if engine.PIPELINE == SEQUENCES:
        return _sequence_steps(engine, graph, system, placement, kept, progress)
    raise ValueError(f"unknown pipeline discipline {engine.PIPELINE!r}")


def micro_graphs(graph, sizes, data_parallel: int = 1) -> dict:
    """The graph of each micro-batch size (the run's own graph for the full batch); with
    ``data_parallel`` ranks sharing a micro-batch's sequences, the graph of the busiest rank's
    share (``ceil(size / data_parallel)`` sequences)."""
    work = graph.workload
    out = {}
    for s in sorted(set(sizes), reverse=True):
        b = -(-s // data_parallel)
        out[s] = graph if b == work.batch else graph.with_workload(replace(work, batch=b),
                                                                   graph.context)  # fmt: skip
    return out


class MicroBatchPasses:
    """The passes of a run's micro-batches and their step time at any context."""

    def __init__(self, engine, graph, system, placement):
        self.sizes = micro_batch_sizes(graph.workload.batch, engine.n_stages(placement))
        share = getattr(engine, "data_parallel", None)  # ranks a micro-batch's sequences split over
        dp = share(placement) if share else 1
        # each micro-batch's sequences on each rank: the split the placer laid the KV out by
        self.ranks = rank_shares(self.sizes, dp) if dp > 1 else [None] * len(self.sizes)
        self.models = {
            s: engine.pass_model(g, system, placement)
            for s, g in micro_graphs(graph, self.sizes, dp).items()
        }
        self.layouts = {s: attention_layout(m.graph, m.group_key) for s, m in self.models.items()}
        self.first = self.sizes[0]  # events lay out the first (largest) micro-batch's pass
        self._last_schedule: tuple = (None, 0)
        host_step = getattr(engine, "host_step", None)
        self.host = host_step(system, placement) if host_step else None
        self.router = router_of(graph)
        # per MoE layer, the fewest distinct experts any step's whole batch routed to (the
        # lower bound's expert reads: bound.routed_fewest)
        self.fewest: np.ndarray | None = None

    def step(
        self, context: int, events: bool = False, index: int = 0, arrays: bool = True
    ) -> tuple[int, PassTiming]:
        """(cycles of the step at ``context``, the first micro-batch's timing); ``index`` is
        the step's place in the run; ``arrays``: with events, the heatmap arrays too. The host's
        per-step work adds where the machines wait for it
        (:class:`~pyaccel.sim.contract.HostStep`)."""
        cycles, first = self._machines(context, events, index, arrays)
        wait = self.host.exposed(cycles) if self.host else 0
        if wait and events:
            first = replace(first, spans=_with_rows(first.spans, self.host.spans(cycles, wait)))
        return cycles + wait, first

    def steps_over(
        self, contexts: np.ndarray, indices: np.ndarray | None = None
    ) -> np.ndarray | None:
        """Cycles of the steps at each of ``contexts`` (no events), all at once, as :meth:`step`
        gives them one by one; ``indices``: the steps' places in the run (which routing each
        draws). None when a pass model cannot time steps so (it has no ``stage_cycles_over``,
        or its stage_cycles_over says so) or the steps route experts and ``indices`` is not
        given."""
        if self.router is not None:
            return self._routed_over(contexts, indices)
        per = {}
        for size, model in self.models.items():
            over = getattr(model, "stage_cycles_over", None)
            per[size] = over(contexts, self.layouts[size]) if over else None
            if per[size] is None:
                return None
        return self._cycles_over(per, list(self.sizes), self.first)

    def _routed_over(self, contexts: np.ndarray, indices: np.ndarray | None) -> np.ndarray | None:
        """:meth:`steps_over` for steps that route experts: every step's routing drawn at once
        (:meth:`~pyaccel.routing.Router.summary`), each micro-batch timed over all steps with
        its own rows' routing (:class:`~pyaccel.sim.contract.RoutedSteps`); for pass models
        that read the rows' expert ids (``routes_by_rows``: expert parallelism), those ids too,
        drawn and timed a chunk of steps at a time."""
        if indices is None:
            return None
        spans = self._spans()
        hot, distinct, whole = self.router.summary(indices, spans[-1][1], spans)
        by_rows = any(getattr(m, "routes_by_rows", False) for m in self.models.values())
        # the rows' expert ids, drawn a chunk of steps at a time (a run's may not fit)
        picks_a_step = spans[-1][1] * hot.shape[2] * self.router.top_k
        per_chunk = max(1, CHUNK_PICKS // max(1, picks_a_step) if by_rows else len(indices))
        parts: dict = {i: [] for i in range(len(self.sizes))}
        for t0 in range(0, len(indices), per_chunk):
            t1 = min(t0 + per_chunk, len(indices))
            picks = self.router.choices_over(indices[t0:t1], spans[-1][1]) if by_rows else None
            for i, (size, (lo, hi)) in enumerate(zip(self.sizes, spans, strict=True)):
                over = getattr(self.models[size], "stage_cycles_over", None)
                routed = RoutedSteps(hot[t0:t1, i], distinct[t0:t1, i],
                                     None if picks is None else picks[:, lo:hi],
                                     self.ranks[i])  # fmt: skip
                part = over(contexts[t0:t1], self.layouts[size], routed) if over else None
                if part is None:
                    return None
                parts[i].append(part)
        per = {i: StepsTiming.concat(p) for i, p in parts.items()}
        fewest = whole.min(axis=0)
        self.fewest = fewest if self.fewest is None else np.minimum(self.fewest, fewest)
        return self._cycles_over(per, list(range(len(self.sizes))), 0)

    def _cycles_over(self, per: dict, order: list, first) -> np.ndarray:
        """Every step's cycles from each pass's :class:`StepsTiming` (by key, in pipeline
        ``order``; ``first``: the key of the pass events lay out), with the host's wait."""
        if per[first].links is None:
            cycles = pipeline_cycles_over({k: t.stage_cycles for k, t in per.items()}, order)
        else:
            cycles = self._schedules_over(per, order, first)
        return cycles + self.host.exposed(cycles) if self.host else cycles

    def _spans(self) -> list[tuple[int, int]]:
        """The token rows of each micro-batch, in pipeline order, as ``(start, stop)``."""
        q = self.models[self.first].graph.workload.step_tokens  # rows a sequence
        bounds = np.cumsum([0, *self.sizes]) * q
        return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))

    def _schedules_over(self, per: dict, order: list, first) -> np.ndarray:
        """The simulated schedule's interval of every step of ``per`` (key -> StepsTiming),
        simulated once per distinct set of stage cycles and links (with one micro-batch, a
        round's cycles: :func:`~.pipeline.one_micro_batch_over`)."""
        if len(per) == 1 and len(order) == 1:
            one = per[order[0]]
            cycles, valid = one_micro_batch_over(one.stage_cycles, one.links, one.which)
            if valid.all():
                return cycles
        keys = sorted(per)
        rows = np.hstack([np.column_stack([per[s].stage_cycles, per[s].which]) for s in keys])
        distinct, which = unique_rows(rows)
        out = np.zeros(len(distinct), dtype=np.int64)
        for u, row in enumerate(distinct.tolist()):
            stage_c, links, windows, at = {}, {}, {}, 0
            for s in keys:
                n = per[s].stage_cycles.shape[1]
                stage_c[s], pick = row[at : at + n], row[at + n]
                links[s] = per[s].links[pick]
                windows[s] = per[s].link_windows[pick] if per[s].link_windows else None
                at += n + 1
            if windows[first] is None:  # as one step's timing: the first pass's say
                windows = None
            out[u] = self._schedule(stage_c, links, windows, order)
        return out[which]

    def pass_timing(self, context: int) -> PassTiming:
        """The first micro-batch's pass at ``context``: its stage cycles and the crossings into
        each stage (a prefill chunk streaming through the stages, :mod:`pyaccel.prefill`)."""
        return self._machines(context, False, 0)[1]

    def _jobs(self, index: int) -> tuple[list, list]:
        """The passes step ``index`` times, as ``(key, size, routed ops, picks, ranks)``, and
        the keys of the micro-batches in pipeline order. Without routed experts one pass per
        distinct size stands for its micro-batches; with them each micro-batch routes its own
        rows, from its own sequences on each data-parallel rank (``ranks``)."""
        if self.router is None:
            return [(s, s, None, None, None) for s in self.models], list(self.sizes)
        spans = self._spans()
        picks = self.router.choices(index, spans[-1][1])
        distinct = (counts_of(picks, self.router.n_experts) > 0).sum(axis=1)
        self.fewest = distinct if self.fewest is None else np.minimum(self.fewest, distinct)
        jobs = [(i, s, self.models[s].graph.routed_ops(counts_of(picks[lo:hi],
                                                                 self.router.n_experts)),
                 picks[lo:hi], self.ranks[i])
                for i, (s, (lo, hi)) in enumerate(zip(self.sizes, spans, strict=True))]  # fmt: skip
        return jobs, list(range(len(self.sizes)))

    def _machines(
        self, context: int, events: bool, index: int, arrays: bool = True
    ) -> tuple[int, PassTiming]:
        """The machines' own cycles of the step (the pipeline's interval) and the first
        micro-batch's timing."""
        stage_c, links, windows, first = {}, {}, {}, None
        jobs, order = self._jobs(index)
        for key, size, routed, picks, ranks in jobs:
            model = self.models[size]
            shape = StepShape(model.graph, context, model.group_key, index,
                              self.layouts[size], routed, picks, arrays, ranks)  # fmt: skip
            timing = model.time(shape, events and first is None)
            stage_c[key], links[key] = timing.stage_cycles, timing.links
            windows[key] = timing.link_windows
            first = first or timing
        if first.links is None:
            return int(pipeline_cycles(stage_c, order)), first
        if first.link_windows is None:
            windows = None
        return self._schedule(stage_c, links, windows, order), first

    def _schedule(self, stage_c: dict, links: dict, windows: dict | None, order: list) -> int:
        """The simulated schedule's interval, kept per distinct set of stage and link cycles
        and link windows (most steps repeat the last one's: only attention changes with the
        context)."""
        key = tuple((s, tuple(stage_c[s]), tuple(links[s]), windows and windows[s])
                    for s in sorted(stage_c))  # fmt: skip
        if key != self._last_schedule[0]:
            interval = pipeline_schedule(stage_c, links, order, windows_of=windows)
            self._last_schedule = (key, interval)
        return self._last_schedule[1]

    def notes(self) -> dict:
        """The micro-batch split, as the trace's meta reports it."""
        sizes = self.sizes
        return {"micro_batches": len(sizes), "micro_batch_size": sizes[0],
                "micro_batch_sizes": sizes}  # fmt: skip


def _with_rows(spans, rows: list) -> object:
    """``spans`` (tuples or :class:`~pyaccel.trace.SpanColumns`) followed by the span tuples
    ``rows``, in the form ``spans`` came in."""
    if isinstance(spans, SpanColumns):
        return SpanColumns.concat([spans, SpanColumns.of_rows(rows)])
    return [*spans, *rows]


def router_of(graph):
    """The :class:`~pyaccel.routing.Router` of ``graph``'s run (``None`` without routed
    experts)."""
    if not graph.moe_layers:
        return None
    work = graph.workload
    return router_for(parse(work.router), graph.n_experts, graph.top_k, len(graph.moe_layers),
                      work.seed)  # fmt: skip


def fewest_experts_graph(graph, fewest) -> object:
    """``graph`` with each MoE layer reading the weights of ``fewest[i]`` experts (the fewest
    distinct experts any step of the run routed its batch to), for the lower bound; ``graph``
    itself when ``fewest`` is ``None``."""
    if fewest is None:
        return graph
    counts = np.zeros((len(graph.moe_layers), graph.n_experts), dtype=np.int64)
    for i, d in enumerate(fewest):
        counts[i, : int(d)] = 1
    routed = graph.routed_ops(counts)
    return replace(graph, ops=tuple(routed.get(op.name, op) for op in graph.ops))


def step_cycles(engine, graph, system, placement, context: int) -> int:
    """Cycles of one step at ``context`` on ``engine`` (a placement search times candidates
    with it)."""
    if engine.PIPELINE == SEQUENCES:
        one = replace(graph.workload, tokens=1, context=context)
        run = _sequence_steps(engine, graph.with_workload(one), system, placement, frozenset())
        return run.steps[0]
    return MicroBatchPasses(engine, graph, system, placement).step(context)[0]


def stage_cycles_of(engine, graph, system, placement, context: int) -> list[int] | None:
    """Each pipeline stage's own cycles (its work, without the hop after it) in the first
    micro-batch's pass of a step at ``context``; None for an engine that runs sequences one
    after another (a speed search balances stages with it)."""
    if engine.PIPELINE == SEQUENCES:
        return None
    timing = MicroBatchPasses(engine, graph, system, placement).pass_timing(context)
    return [int(c) for c in timing.stage_cycles]


def _micro_batch_steps(engine, graph, system, placement, kept, progress) -> Stepped:
    work = graph.workload
    passes = MicroBatchPasses(engine, graph, system, placement)
    out = Stepped(EventLog(), [])
    # the steps whose events are not kept, timed at once (None: one by one, as the others)
    rest_mask = np.ones(work.tokens, dtype=bool)
    rest_mask[[t for t in kept if 0 <= t < work.tokens]] = False
    rest = np.flatnonzero(rest_mask)
    cycles_of = passes.steps_over(work.context + rest, rest) if len(rest) else None
    steps = np.zeros(work.tokens, dtype=np.int64)
    if cycles_of is not None:
        steps[rest] = cycles_of
    one_by_one = np.flatnonzero(~rest_mask) if cycles_of is not None else range(work.tokens)
    first_kept, t0, upto = None, 0, 0
    for step in map(int, one_by_one):
        t0 += sum(steps[upto:step].tolist())  # the steps before it (Python ints: no overflow)
        upto = step
        keep = step in kept
        cycles, timing = passes.step(work.context + step, keep, step, first_kept is None)
        steps[step] = cycles
        if keep:
            _lay(out.log, step, t0, timing.spans)
            first_kept = first_kept or timing  # heatmaps and notes of the first kept step
        if progress and cycles_of is None:
            progress(step)
    if cycles_of is not None:
        _progress_all(progress, work.tokens)
    out.steps = steps.tolist()
    step_notes = first_kept.notes if first_kept else {}
    out.arrays = first_kept.arrays if first_kept else {}  # as given (perhaps not made yet)
    out.meta = {**step_notes, **passes.models[passes.first].notes(), **passes.notes()}
    out.fewest_experts = passes.fewest
    return out


def _lay(log: EventLog, step: int, t0: int, spans) -> None:
    """Spans of one step on the run's timeline (their starts count from the step's start)."""
    log.add_spans(step, t0, spans)


def _sequence_steps(engine, graph, system, placement, kept, progress=None) -> Stepped:
    """``SEQUENCES``: all steps' stage occupancies at once, then the pipeline kernel."""
    from ..kernels import get

    work = graph.workload
    model = engine.pass_model(graph, system, placement)
    # a verify step's or prompt chunk's q tokens of one sequence are rows that enter one after
    # another, each one token further on (its own context); the step ends when its last leaves
    q = work.step_tokens
    first = StepShape(graph, work.context, model.group_key)
    occ = model.occupancy(first, work.tokens + q - 1)  # a position a step, and one a later row
    lat, hw = model.latencies(), model.hardware()
    order = sorted(t for t in kept if 0 <= t < work.tokens)
    record = np.zeros(work.tokens, dtype=np.bool_)
    record[order] = True
    if work.rows == 1:  # one row: nothing to wait for (one_row_pipeline), routes or not
        finish, starts = one_row_pipeline(occ, lat, record)
        fewest = _one_row_fewest(graph)
    else:
        routes, fewest = _sequence_routes(graph, model)
        tail = model.sampled_from() if hasattr(model, "sampled_from") else None
        finish, starts = get("asic_pipeline")(occ, lat, hw, work.rows, record, q, routes, tail)
    done = finish.reshape(work.tokens, work.batch, q).max(axis=2)
    prev = np.vstack([np.zeros((1, work.batch), dtype=np.int64), done[:-1]])
    gaps = (done - prev).sum(axis=1)
    steps = [int(-(-int(g) // work.batch)) for g in gaps]
    out = Stepped(EventLog(), steps, fewest_experts=fewest)
    for r, t in enumerate(order):  # span starts are already on the run's timeline
        _lay(out.log, t, 0, model.spans(StepShape(graph, work.context + t, model.group_key, t),
                                        starts[r]))  # fmt: skip
    _progress_all(progress, work.tokens)
    extras = model.extras(occ, steps[-1], work.rows)
    out.meta, out.arrays = dict(extras.notes), dict(extras.arrays)
    return out


def _one_row_fewest(graph):
    """Per MoE layer, the distinct experts a one-row step reads: its ``top_k`` (None without
    routed experts)."""
    router = router_of(graph)
    if router is None:
        return None
    return np.full(len(graph.moe_layers), graph.top_k, dtype=np.int64)


def _sequence_routes(graph, model) -> tuple:
    """``(routes, fewest)``: the pipeline kernel's ``(ex_layer, picks, ex_unit)`` (each stage's
    MoE layer or -1; the experts every row of every step picks; the unit each routed stage
    takes for each expert) and, per MoE layer, the fewest
    distinct experts a step's rows picked; ``(None, None)`` without routed experts."""
    router = router_of(graph)
    if router is None:
        return None, None
    work = graph.workload
    steps = np.arange(work.tokens, dtype=np.int64)
    picks = router.choices_over(steps, work.rows)
    if work.rows <= 1:  # one row: its top_k distinct experts (the router's summary, no counts)
        whole = router.summary(steps, work.rows, [(0, work.rows)])[2]
    else:
        whole = summarise(picks, [(0, work.rows)], graph.n_experts)[2]
    routes = (model.expert_stages(), picks, model.expert_hardware())
    return routes, whole.min(axis=0)


def _progress_all(progress: Callable | None, n: int) -> None:
    if progress:
        for t in range(n):
            progress(t)
