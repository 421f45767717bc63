"""The engine contract: what the step driver asks of an engine and what an engine returns.

An engine is the package ``pyaccel.sim.<kind>`` and provides

- ``RESOURCES``: the resource classes its spans use (SPEC §5 names);
- ``WHAT_IF``: for each resource class, the spec parameters that double its rate (or halve its
  latency) and the factor (one for all, or a tuple of one per parameter), so the report can
  re-emulate "twice as fast"; every preset assumption that is a rate or a latency is a knob of
  one class (tests/test_what_if_knobs.py);
- ``ASSUMPTIONS``: the engine's own named assumptions (strings ``name: reasoning``);
- ``PIPELINE``: how a batch shares the engine's pipeline stages (:data:`MICRO_BATCHES` or
  :data:`SEQUENCES`, see :mod:`pyaccel.sim.driver`);
- ``rates(spec, workload) -> BoundRates``: its peak rates for the lower bound;
- ``n_stages(placement) -> int``: the pipeline stages a batch can be split over;
- ``pass_model(graph, system, placement) -> PassModel``: the timing of one pass of ``graph``'s
  batch through the placement (for ``MICRO_BATCHES``) or of one sequence through the stages
  (for ``SEQUENCES``, see :class:`SequenceModel`).

Optionally (``MICRO_BATCHES`` engines), ``host_step(system, placement) -> HostStep | None``:
the host's own work every step (scheduling, input preparation, output processing), which the
driver adds to a step where the machines wait for it (:meth:`HostStep.exposed`); and
``data_parallel(placement) -> int``: ranks of a stage that split a micro-batch's sequences
between them (attention data-parallel), whose pass models then get the graph of the busiest
rank's share while routing still covers the whole micro-batch's rows, and each rank's
sequences (``StepShape.ranks``, ``RoutedSteps.ranks``: :func:`pyaccel.batches.rank_shares`,
the split the placement's KV follows); and a pass model class
attribute ``PREFILL_STREAMS = True`` when a prompt's prefill chunks stream through the stages
(:mod:`pyaccel.prefill`), and ``PREFILL_EXPANDS_MLA = True`` when a chunk's MLA attention runs
in the expanded form (``Workload.expand_mla``; else it stays absorbed, as in decode).

Engines never build graphs, loop over steps, split batches or group attention layers: the
driver gives them a :class:`StepShape` whose attention ops are already grouped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .rows import unique_rows

if TYPE_CHECKING:
    from ..trace import SpanColumns

MICRO_BATCHES = "micro_batches"
"""The batch is split into micro-batches that follow each other through the stages."""
SEQUENCES = "sequences"
"""Every sequence flows through the stages on its own, a stage taking the next as it frees."""


@dataclass(frozen=True)
class HostStep:
    """The host's work between two decode steps (cycles of the machine's clock): ``cycles`` of
    it a step; ``overlapped``: it prepares step ``t + 1`` while the machines run step ``t`` (so
    they wait only when the host is slower), else they wait for all of it after every step.
    The wait shows on ``units`` as class ``host``, under ``layer``'s op ``op`` (``kind``)."""

    cycles: int
    overlapped: bool
    units: tuple[int, ...]
    layer: Any
    op: str
    kind: str

    def exposed(self, step_cycles):
        """Cycles the machines wait for the host after a step of ``step_cycles`` (an int, or
        an int64 array of steps)."""
        if self.overlapped:
            wait = self.cycles - step_cycles
            return wait * (wait > 0)  # max(0, wait) of an int or of each element
        return self.cycles

    def spans(self, start: int, wait: int) -> list:
        """The wait as spans on every unit, from ``start`` (cycles from the step's start)."""
        return [Span(self.layer, self.op, self.kind, u, "host", start, wait) for u in self.units]


class Span(NamedTuple):
    """One event of a pass: ``op`` (``kind``) of ``layer`` busy on ``unit``'s ``resource`` from
    ``start`` for ``duration`` cycles (``start`` counts from the pass's start), moving
    ``n_bytes`` and doing ``flops``. A named tuple: passes make tens of thousands."""

    layer: Any
    op: str
    kind: str
    unit: int
    resource: str
    start: int
    duration: int
    n_bytes: int = 0
    flops: int = 0


@dataclass(frozen=True)
class PassTiming:
    """One pass at one context: the cycles each pipeline stage spends on it, its spans (when
    the driver asked for events), per-unit heatmap ``arrays`` and layout ``notes`` for the
    trace's meta (with the spans). An engine whose stages hand over on links of their own
    gives ``links``: per stage, ``(busy, latency)`` cycles of the crossing into it (into stage
    0: the loop back from the last), which ``stage_cycles`` then leave out; the driver then
    simulates the micro-batches' schedule (:func:`~.pipeline.pipeline_schedule`). A crossing
    that ends on the receiving stage's own links is ``(busy, latency, relay_offset,
    relay_busy)``, and ``link_windows`` gives per stage the ``(start, end)`` cycles (from the
    stage's start) its own work holds those links, so that the crossing's relay waits for a
    gap."""

    stage_cycles: tuple[int, ...] | list[int]
    spans: tuple[Span, ...] | list[Span] | SpanColumns = ()
    arrays: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    links: tuple[tuple[int, ...], ...] | None = None
    link_windows: tuple[tuple[tuple[int, int], ...], ...] | None = None


@dataclass
class StepsTiming:
    """A pass at many steps at once, none with events (a pass model's optional
    ``stage_cycles_over(contexts, layout, routed=None)``, ``routed`` the steps'
    :class:`RoutedSteps` when the graph routes experts; it may return None where it cannot):
    ``stage_cycles`` holds one row of stage cycles a step (int64). An
    engine whose stages hand over on links of their own gives the distinct ``links`` (and
    ``link_windows``) of :class:`PassTiming` its steps take, and ``which[i]``: the index of
    step ``i``'s."""

    stage_cycles: Any
    links: list | None = None
    link_windows: list | None = None
    which: Any = None

    @staticmethod
    def concat(parts: list) -> StepsTiming:
        """The timings of consecutive runs of steps as one (``parts`` in step order)."""
        import numpy as np

        if len(parts) == 1:
            return parts[0]
        cycles = np.vstack([p.stage_cycles for p in parts])
        if parts[0].links is None:
            return StepsTiming(cycles)
        links, windows, which = [], [], []
        for p in parts:
            which.append(np.asarray(p.which) + len(links))
            links.extend(p.links)
            windows.extend(p.link_windows or [None] * len(p.links))
        return StepsTiming(cycles, links, windows, np.concatenate(which))


@dataclass(frozen=True)
class RoutedSteps:
    """The routing of many steps of one micro-batch, all at once (a pass model's
    ``stage_cycles_over`` with routed experts): at step ``t``, MoE layer ``i``'s busiest expert
    serves ``hot[t, i]`` token rows and ``distinct[t, i]`` experts have rows, which is all a
    step's routed-expert ops depend on (:meth:`~pyaccel.model.graph.DecodeGraph.routed_ops_of`);
    int64 arrays ``[steps, moe_layers]``. Engines that time a step from the rows' expert ids
    themselves (expert parallelism; their pass model's ``routes_by_rows`` is true) read
    ``picks``: the expert ids ``[steps, rows, moe_layers, top_k]`` of the micro-batch's rows,
    and ``ranks``: the micro-batch's sequences on each data-parallel rank, in rank order
    (:func:`~pyaccel.batches.rank_shares`; None without data-parallel ranks)."""

    hot: Any
    distinct: Any
    picks: Any = None
    ranks: tuple[int, ...] | None = None

    def op_versions(self, graph) -> Iterator[tuple[int, Any, list, Any]]:
        """For each routed-expert op of ``graph`` (in ``graph.expert_ops`` order): ``(index,
        the graph's own op, the distinct routed versions the steps run, which version each step
        runs)``, the last an int64 index a step."""
        import numpy as np

        if not len(self.hot):
            return
        span = int(self.distinct.max()) + 1
        keys = self.hot * span + self.distinct  # one integer per (hot, distinct)
        same = (keys == keys[0]).all(axis=0)  # layers whose routing no step changes
        layers: dict = {}
        for j, (i, op) in enumerate(graph.expert_ops):
            if i not in layers:
                if same[i]:
                    uniq, which = keys[:1, i], np.zeros(len(keys), dtype=np.int64)
                else:
                    uniq, which = np.unique(keys[:, i], return_inverse=True)
                layers[i] = ([divmod(int(u), span) for u in uniq], which.ravel())
            uniq, which = layers[i]
            yield j, op, [graph.routed_op(j, h, d) for h, d in uniq], which

    def groups(self) -> tuple[Any, Any]:
        """Steps of equal routing: ``(first, which)``, the first step of each distinct routing
        and, per step, the index of its routing among them."""
        import numpy as np

        distinct, which = unique_rows(np.hstack([self.hot, self.distinct]))
        first = np.full(len(distinct), len(which), dtype=np.int64)
        np.minimum.at(first, which, np.arange(len(which)))
        return first, which

    def ops(self, graph, t: int) -> dict:
        """Step ``t``'s routed-expert ops by name (what :class:`StepShape` ``routed`` holds)."""
        return graph.routed_ops_of(self.hot[t], self.distinct[t])


@dataclass(frozen=True)
class Exchange:
    """A collective an engine runs between a layer's graph ops, held by none of them (an
    expert-parallel dispatch or combine), as the lower bound takes it: ``name`` as the engine
    names its events, on ``units``; ``floor`` the ``(class, s)`` latencies its messages wait
    on before their last byte arrives (serial with the bytes); ``busiest_s`` the link time
    (s, at the link's peak rate) of the unit that must move the most in one pass of the
    graph's batch, ``each_s`` the link time every one of ``units`` surely spends receiving
    over the step (its passes together; 0 where none is sure), which a unit's link total
    counts as it counts the receives of the ops' reductions."""

    name: str
    layer: Any
    units: tuple[int, ...]
    floor: tuple[tuple[str, float], ...]
    busiest_s: float
    each_s: float


@dataclass(frozen=True)
class BoundRates:
    """Peak rates an engine's lower bound uses: memory (bytes/s), each op's compute (a function
    of the op, ops/s, 0 for none) and the link that carries reductions between units (bytes/s),
    each with the resource class it stands for; and optionally the least latency an op must
    wait on its placement (``latency_s(op, slot)``: s, or ``{class: s}`` when its parts are of
    several classes; a bare number is of class ``latency_resource``).

    ``latency_serial``: the floor cannot overlap the op's own work on its unit (a kernel's
    launch precedes its body; a pipeline block drains after its busy cycles), so the dependent
    chain adds it to the op's largest work term; otherwise the chain takes the larger of the
    two (a wafer all-reduce's hops overlap its reads).

    ``host_step_s``: the host's own work every step (see :class:`HostStep`); ``host_serial``:
    the machines wait for all of it after each step (added to the chain), else the host works
    during the step and is a resource busy ``host_step_s`` a step.

    ``floor_place(slot)``: all of a slot that ``latency_s`` reads, as a hashable key (the
    bound keeps one floor per op shape and key); by default the slot's unit count and region.

    ``kv_bytes_per_s(slot, placement)``: where the KV of a layer can be served only by part of
    its units' memory (an ASIC layer's K/V is striped over its own SRAM banks), that part's
    peak rate per unit (bytes/s), else None. It bounds an op's KV reads and writes on the
    dependent chain and in the op's own bound; the units' totals keep ``mem_bytes_per_s``
    (every layer's part works at once, on other sequences). It may read of the slot only what
    :meth:`place_key` gives (and the placement, fixed for a bound).

    ``region_bytes_per_s(slot, placement)``: likewise for all of an op's memory bytes
    (weights and KV), where a layer's weights and KV sit only on part of its units (a wafer
    layer's region of PEs), else None.

    ``own_work_s(op, slot)``: work (s) an op does on each of its units that the pooled rates do
    not show, of class ``mem_resource`` (an LPU plane's weight installs: its blocks one after
    another through the plane's streams); it bounds the op and the chain, not the units'
    totals (other ops' work may overlap it there).

    ``pass_floor_s(graph, placement)``: the least time (s) one sequence's pass waits between
    its ops, outside any of them, where the placement puts them (an ASIC's die-to-die hops:
    each hop's link latency and its activations over the link); added to the dependent chain,
    and the bound of the events of kind ``pass_kind`` (the engine's crossings) in reports, named
    by ``pass_resource`` (the class most of the wait is: the links' latency).

    ``compute_splits``: whether an op's compute work divides over its units (False on an
    ASIC: a GEMV split over dies by output channels keeps each lane's row reads, so its pass
    does not shorten).

    ``reduce_units(slot)``: how many of a slot's units sum a reducing op's partial outputs
    (by default all of them): fewer where some of them each run the whole op instead (a GPU
    layer's data-parallel ranks, a wafer layer's copies on an expert-parallel group).

    ``exchanges(graph, placement)``: the collectives the engine runs between a layer's graph
    ops that no graph op holds (:class:`Exchange`: an expert-parallel dispatch or combine),
    for ``graph``'s batch; each bounds itself and the dependent chain, and adds to its units'
    link totals."""

    mem_bytes_per_s: float
    mem_resource: str
    compute: Callable[[Any], float]
    compute_resource: str
    link_bytes_per_s: float
    link_resource: str
    latency_s: Callable[[Any, Any], float | dict] | None = None
    latency_resource: str = "fixed_latency"
    latency_serial: bool = False
    host_step_s: float = 0.0
    host_serial: bool = False
    floor_place: Callable[[Any], Any] | None = None
    kv_bytes_per_s: Callable[[Any, Any], float | None] | None = None
    region_bytes_per_s: Callable[[Any, Any], float | None] | None = None
    own_work_s: Callable[[Any, Any], float] | None = None
    pass_floor_s: Callable[[Any, Any], float] | None = None
    pass_kind: str = "crossing"
    pass_resource: str = "fixed_latency"
    compute_splits: bool = True
    reduce_units: Callable[[Any], int] | None = None
    exchanges: Callable[[Any, Any], tuple[Exchange, ...]] | None = None

    def latency_floor(self, op, slot) -> tuple[tuple[str, float], ...]:
        """The least time ``op`` waits on fixed latencies where ``slot`` (its layer's
        :class:`~pyaccel.place.slot.LayerSlot`) places it, e.g. the hops its collective must
        cross, as sorted ``(class, s)`` pairs with positive times (hashable; empty where the
        engine names none). It bounds one op on the dependent chain, not a resource's
        throughput. ``latency_s`` reads of the slot only what :meth:`place_key` gives."""
        if self.latency_s is None:
            return ()
        got = self.latency_s(op, slot)
        parts = got if isinstance(got, dict) else {self.latency_resource: got}
        return tuple(sorted((res, float(t)) for res, t in parts.items() if t > 0))

    def placed_rates(self, slot, placement) -> tuple[float | None, float | None]:
        """(:attr:`kv_bytes_per_s`, :attr:`region_bytes_per_s`) of ``slot`` in ``placement``
        (bytes/s per unit), None where the engine names none (the pooled ``mem_bytes_per_s``
        then bounds those bytes alone)."""
        kv, region = self.kv_bytes_per_s, self.region_bytes_per_s
        return (None if kv is None else kv(slot, placement),
                None if region is None else region(slot, placement))  # fmt: skip

    def own_seconds(self, op, slot) -> float:
        """:attr:`own_work_s` of ``op`` where ``slot`` places it (s; 0 where the engine names
        none)."""
        return 0.0 if self.own_work_s is None else float(self.own_work_s(op, slot))

    def reduced_over(self, slot) -> int:
        """:attr:`reduce_units` of ``slot`` (all its units where the engine names none)."""
        return len(slot.units) if self.reduce_units is None else int(self.reduce_units(slot))

    def exchanges_of(self, graph, placement) -> tuple[Exchange, ...]:
        """:attr:`exchanges` of ``graph`` on ``placement`` (none where the engine names none)."""
        return () if self.exchanges is None else tuple(self.exchanges(graph, placement))

    def place_key(self, slot):
        """What of ``slot`` (a layer's :class:`~pyaccel.place.slot.LayerSlot`) an op's floor
        depends on: ``floor_place(slot)``, by default its unit count and region."""
        if self.floor_place is not None:
            return self.floor_place(slot)
        return len(slot.units), slot.region


@dataclass
class AttentionGroup:
    """Attention layers that cost the same at every context on an engine: same window (graph
    attention group) and same engine key (e.g. stage and width). ``op`` is the group's op at the
    step's context, built once from its first layer."""

    key: Any
    layers: tuple[int, ...]
    op: Any


def attention_layout(graph, group_key: Callable[[int], Any]) -> tuple:
    """((key, layers), ...): the graph's attention layers grouped by (window, engine key), in
    the order of each group's first layer. Fixed for a pass: the driver computes it once."""
    layers: dict = {}
    for op in graph.ops:
        if op.kind == "attention":
            key = (graph.attention_group(op.layer), group_key(op.layer))
            layers.setdefault(key, []).append(op.layer)
    return tuple((key, tuple(ls)) for key, ls in layers.items())


@dataclass
class StepShape:
    """A step the driver asks a pass model to time: the pass's graph at ``context`` cached
    tokens. :meth:`groups` gives the attention ops of the step, one per group of layers that
    cost the same (the engine names its key for a layer: ``group_key``; ``layout`` is the
    grouping when the driver has it already). ``routed``: this step's routed-expert ops by name
    (the experts its router drew, :meth:`~pyaccel.model.graph.DecodeGraph.routed_ops`), which
    replace the graph's own, and ``picks`` the expert ids ``[rows, moe_layers, top_k]`` each of
    the pass's token rows picked; ``None`` for a model without routed experts. ``ranks``: the
    micro-batch's sequences on each of a stage's data-parallel ranks, in rank order, its rows
    in that order (:func:`~pyaccel.batches.rank_shares`; None without data-parallel ranks,
    or for a pass that stands for several micro-batches). ``arrays``: a
    step timed with events also gives its heatmap arrays (only the first recorded step's are
    kept, so the driver asks later ones not to)."""

    graph: Any
    context: int
    group_key: Callable[[int], Any]
    index: int = 0  # the step's place in the run (0 = first)
    layout: tuple | None = None
    routed: dict | None = None
    picks: Any = None
    arrays: bool = True  # with events: also the heatmap arrays (the driver keeps the first's)
    ranks: tuple[int, ...] | None = None
    _groups: list | None = field(default=None, init=False, repr=False)

    def op(self, op):
        """``op`` as this step runs it (its routed version for a routed-expert op)."""
        return self.routed.get(op.name, op) if self.routed else op

    def groups(self) -> list[AttentionGroup]:
        """Attention groups of the step, in the order of their first layer."""
        if self._groups is None:
            layout = self.layout
            if layout is None:
                layout = attention_layout(self.graph, self.group_key)
            self._groups = [
                AttentionGroup(key, layers, self.graph.attention_op(layers[0], self.context))
                for key, layers in layout
            ]
        return self._groups

    def attention(self) -> Iterator[tuple[int, Any, AttentionGroup]]:
        """(layer, its attention op at the context, its group) for every attention layer."""
        from dataclasses import replace

        for g in self.groups():
            for layer in g.layers:
                yield layer, replace(g.op, name=f"L{layer}.attention", layer=layer), g


class PassModel(Protocol):
    """One micro-batch's pass through an engine's stages (``MICRO_BATCHES`` engines)."""

    graph: Any

    def group_key(self, layer: int) -> Any:
        """What, besides its window, makes a layer's attention cost differ on this engine
        (e.g. its stage or region); layers with equal keys form one attention group."""

    def time(self, step: StepShape, events: bool) -> PassTiming:
        """Stage cycles of the pass at ``step``; spans, arrays and step notes when ``events``."""

    def notes(self) -> dict:
        """Layout notes of the run for the trace's meta (asked once the run is over)."""


class StageOccupancy(NamedTuple):
    """Busy cycles of every stage at every position of a run (``SEQUENCES`` engines), kept as
    what changes: stage ``s`` is busy ``base[s]`` cycles at every position, except stage
    ``col_stage[a]``, busy ``cols[i, a]`` at position ``i`` (attention, which grows with the
    context, one token a position). Step ``t``'s row is at position ``t``; with ``q`` rows a
    sequence (a verify step, a prompt chunk) its ``j``-th row is at ``t + j``. The
    ``asic_pipeline`` kernel takes it as it is (a tuple of int64 arrays)."""

    base: Any
    cols: Any
    col_stage: Any

    def row(self, i: int):
        """Every stage's busy cycles at position ``i`` (negative: from the end)."""
        out = self.base.copy()
        out[self.col_stage] = self.cols[i]
        return out

    def totals(self, rows: int = 1):
        """Every stage's busy cycles summed over the run's steps and a sequence's ``rows`` rows
        of each (its positions ``t .. t + rows - 1``)."""
        import numpy as np

        steps = len(self.cols) - rows + 1
        taken = np.convolve(np.ones(steps, np.int64), np.ones(rows, np.int64))  # rows at each
        out = self.base * steps * rows
        out[self.col_stage] = taken @ self.cols
        return out


class SequenceModel(Protocol):
    """One sequence's pass through the stages, which every sequence of the batch takes in turn
    (``SEQUENCES`` engines): per-stage busy and latency cycles, and which hardware unit each
    stage occupies (stages on one unit cannot overlap)."""

    graph: Any

    def group_key(self, layer: int) -> Any:
        """As :meth:`PassModel.group_key`."""

    def occupancy(self, first: StepShape, n_positions: int) -> StageOccupancy:
        """Busy cycles of every stage at each of ``n_positions`` positions (the context grows
        by one a position from ``first``'s: a run's steps and their rows)."""

    def latencies(self) -> Any:
        """Cycles after each stage's busy time before its output is ready (int64 array)."""

    def hardware(self) -> Any:
        """The hardware unit of every stage (int64 array; 2-D: the units a stage takes all at
        once, a row each, -1 padding)."""

    def expert_stages(self) -> Any:
        """Each stage's MoE layer index (into ``graph.moe_layers``) when it is routed: a row
        takes the units of the experts its router picked, else -1 (int64 array)."""

    def expert_hardware(self) -> Any:
        """``[stage, expert]``: the unit a routed stage takes for each expert (int64 array;
        experts sharing a unit take it once)."""

    def spans(self, step: StepShape, starts) -> list[Span] | SpanColumns:
        """Every sequence's spans at ``step`` (tuples or columns); ``starts[q, s]`` is stage
        ``s``'s start cycle for sequence ``q`` on the run's timeline."""

    def extras(self, occ, last_step_cycles: int, n_sequences: int) -> PassTiming:
        """Arrays and notes of the run (stage cycles left empty)."""

    # Optional: ``sampled_from() -> int | None``, the first stage only a sequence's sampled
    # row takes (a prompt chunk samples its last row only, ``Workload.logit_rows``), or None
    # when every row takes every stage; the driver passes it to the pipeline kernel.
