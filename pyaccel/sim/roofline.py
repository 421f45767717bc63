"""Lower bound (SPEC §2): no op beats its work divided by its resources' peak rates, no step
beats its dependent chain of op bounds or any one resource's total work at its peak rate.

The bound is computed from the graph, the placement and the spec's *peak* rates only, so it is
independent of how an engine schedules: an op on ``n`` units is credited with a perfect ``1/n``
split (of its compute too, unless ``BoundRates.compute_splits`` is False: an ASIC's passes) and
activations are assumed to stay on chip but where the placement makes them cross
between units (the pass floor below). Fixed latencies count zero except the floor
an engine names for an op where it is placed (``BoundRates.latency_s``: on a wafer, the hops a
full-line all-reduce must cross; on a GPU, kernel launches and a collective's start-up; on an
LPU, each instruction's pipeline latency and stream transit; on an ASIC, each block's drain),
which bounds the op on the dependent chain only, never a resource's throughput. Likewise, where
only part of a unit's memory can serve a layer's KV or all its bytes (``BoundRates``'s
``kv_bytes_per_s``: an ASIC layer's own SRAM banks; ``region_bytes_per_s``: a wafer layer's
region of PEs), the op's bytes over that part bound the op, while the unit's total
work keeps the pooled rate (its layers' parts serve other sequences at the same time). Waits
between ops that no op holds (``BoundRates.pass_floor_s``: an ASIC's chip-link stages, an LPU's
hops between pipeline stages, the hand-offs between wafers, a GPU's stage sends) add to the
chain. Collectives an engine runs between a layer's ops that no graph op holds
(``BoundRates.exchanges``: a GPU's expert-parallel dispatch and combine, a wafer group's
expert combine) are bounds of their own, by the fewest bytes any routing leaves their busiest
unit to move (:func:`exchange_bound`): on the chain, in the report, and, the bytes every unit
must receive, in its link's total.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConfigError
from ..model.attention import attention_counts, attention_op
from ..model.ops import ACT_BYTES, shape_of
from ..units import MAX_CYCLES, CycleRangeError, as_int
from ..workload import Workload
from .contract import BoundRates
from .inputs import check_args, engine_module, run_graph


@dataclass(frozen=True)
class OpBound:
    """One op's bound: the resource that sets it and its time on the dependent chain (s);
    ``times`` its work at each resource's peak rate (s), ``floor`` its latency floor as
    ``(class, s)`` pairs."""

    op: str
    layer: object
    n_units: int
    resource: str
    seconds: float
    times: dict
    floor: tuple = ()


@dataclass(frozen=True)
class Roofline:
    """Per-op bounds for the full batch, and the step's bound with its two terms (s)."""

    ops: tuple[OpBound, ...]
    chain_s: float
    resource_s: dict
    step_s: float

    @property
    def bottleneck(self) -> str:
        """The resource class whose bound is largest summed over the step's ops."""
        totals: dict[str, float] = {}
        for b in self.ops:
            totals[b.resource] = totals.get(b.resource, 0.0) + b.seconds
        return max(totals, key=totals.get) if totals else ""

    def to_dataframe(self):
        """Per-op bounds as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "op": b.op,
                    "layer": str(b.layer),
                    "units": b.n_units,
                    "resource": b.resource,
                    "seconds": b.seconds,
                    **b.times,
                    **{f"floor_{res}": t for res, t in b.floor},
                }
                for b in self.ops
            ]
        )


# Relative slack when rounding a bound up to whole cycles: seconds x clock of a bound that is an
# exact number of cycles can come out a few ulps above it (1e-16 relative), which must not add a
# cycle; 1e-12 is far above that error and far below one cycle of any real bound.
CYCLE_ROUNDING_SLACK = 1e-12


def bound_cycles(seconds, clock_hz: float) -> np.ndarray:
    """Bounds (s) in whole cycles of ``clock_hz``, rounded *up*: a bound is never reported below
    the byte/FLOP time it stands for (with a slow clock, flooring made it 0 cycles)."""
    with np.errstate(over="ignore"):  # an overflow to inf is refused just below
        cycles = np.asarray(seconds, dtype=np.float64) * clock_hz
    if not (cycles < MAX_CYCLES).all():  # also inf and NaN; casting them gives garbage
        raise CycleRangeError(
            f"the step's lower bound is {float(np.max(cycles)):.4g} cycles at clock_hz="
            f"{clock_hz:.4g}, beyond the limit of 2**62 cycles (int64 timelines)"
        )
    return np.ceil(cycles * (1.0 - CYCLE_ROUNDING_SLACK)).astype(np.int64)


def chain_seconds(work_s, latency_s: float, serial: bool):
    """An op's time on the dependent chain from its largest work term and its latency floor
    (s; numbers or arrays): their sum when the floor is serial with the work, else the larger."""
    return work_s + latency_s if serial else np.maximum(work_s, latency_s)


def placed_seconds(weight_bytes, kv_bytes, n_units: int, placed: tuple):
    """The larger of ``kv_bytes`` over the layer's KV part of memory and all the bytes over its
    region (``placed``: their rates per unit, or None), on ``n_units`` (s; 0 without either;
    numbers or arrays)."""
    kv_rate, region_rate = placed
    out = 0.0
    if kv_rate:
        out = np.maximum(out, kv_bytes / (n_units * kv_rate))
    if region_rate:
        out = np.maximum(out, (weight_bytes + kv_bytes) / (n_units * region_rate))
    return out


def op_bound(op, n_units: int, rates: BoundRates, hidden: int, floor: tuple = (),
             tokens: int | None = None, placed: tuple = (None, None),
             own_s: float = 0.0, reduce_units: int | None = None) -> OpBound:  # fmt: skip
    """Bound of ``op`` spread perfectly over ``n_units``: memory, compute and, for ops whose
    output must be reduced across units (``op.reduces``; over ``reduce_units`` of them,
    default all, :meth:`~pyaccel.sim.contract.BoundRates.reduced_over`), the share each unit
    must receive over its link (a row-split matmul's output; the routed experts' combined
    ``hidden``-wide output of the step's ``tokens``, default ``op.m``); and
    the least latency it waits on where it is placed (``floor``: ``(class, s)`` pairs, the
    engine's :meth:`~pyaccel.sim.contract.BoundRates.latency_floor`), added to its largest
    work term when the engine's floor is serial with the work, else the larger of the two.

    ``placed``: the peak rates (bytes/s per unit, or None) of the parts of memory that serve
    the op's layer's KV, and all its bytes, where it is placed
    (:meth:`~pyaccel.sim.contract.BoundRates.placed_rates`): the op's bytes over them are
    more work terms of the op (class ``mem_resource``), not of ``times``, which the units'
    totals add up at the pooled rate; so is ``own_s``, the op's work on each unit that the
    pooled rates do not show (:meth:`~pyaccel.sim.contract.BoundRates.own_seconds`)."""
    times = {
        rates.mem_resource: (op.weight_bytes + op.kv_read_bytes + op.kv_write_bytes)
        / (n_units * rates.mem_bytes_per_s)
    }
    compute = rates.compute(op)
    if compute:
        split = n_units if rates.compute_splits else 1
        times[rates.compute_resource] = op.flops / (split * compute)
    summed = n_units if reduce_units is None else reduce_units
    if summed > 1 and op.reduces:
        experts = op.split == "experts"
        out = ACT_BYTES * ((tokens or op.m) * hidden if experts else op.m * op.n)
        times[rates.link_resource] = (summed - 1) / summed * out / rates.link_bytes_per_s
    resource = max(times, key=times.get)
    work_s = times[resource]
    placed_s = placed_seconds(op.weight_bytes, op.kv_read_bytes + op.kv_write_bytes, n_units,
                              placed)  # fmt: skip
    placed_s = max(placed_s, own_s)
    if placed_s > work_s:
        resource, work_s = rates.mem_resource, placed_s
    latency_s = sum(t for _, t in floor)
    if latency_s > work_s:  # named by its largest part
        resource = max(floor, key=lambda part: part[1])[0]
    seconds = float(chain_seconds(work_s, latency_s, rates.latency_serial))
    return OpBound(op.name, op.layer, n_units, resource, seconds, times, floor)


def exchange_bound(ex, rates: BoundRates) -> OpBound:
    """Bound of an :class:`~pyaccel.sim.contract.Exchange`: its busiest unit's bytes at the
    link's peak rate after its latency floor (a link's last byte arrives its latency after it
    leaves, so the two add up, whatever the engine's ``latency_serial``); named by the floor's
    largest part where the floor is the larger."""
    latency_s = sum(t for _, t in ex.floor)
    resource = rates.link_resource
    if latency_s > ex.busiest_s:
        resource = max(ex.floor, key=lambda part: part[1])[0]
    return OpBound(ex.name, ex.layer, len(ex.units), resource, ex.busiest_s + latency_s,
                   {rates.link_resource: ex.busiest_s}, ex.floor)  # fmt: skip


def _add_times(acc: dict, units, times: dict, count: int = 1) -> None:
    """Add ``times`` (an op's work terms; its latency floor is a term of the dependent chain
    only, not a throughput a unit's total can be held to) to each unit's totals."""
    for unit in units:
        for res, t in times.items():
            acc[(unit, res)] = acc.get((unit, res), 0.0) + count * t


def _fixed_totals(items: list) -> dict:
    """Each unit's work per resource from ``(units, times)`` of every op in order: what
    :func:`_add_times` of each gives, with the same keys in the same order and the same sums.
    When no unit is in two different unit sets (a stage's chips, a wafer), the sums run once
    per set and are copied to its units: each unit's sum is then its set's, term for term."""
    owner: dict = {}
    for units in dict.fromkeys(units for units, _ in items):
        for u in units:
            if owner.setdefault(u, units) != units:  # a unit in two sets: one unit at a time
                acc: dict = {}
                for us, times in items:
                    _add_times(acc, us, times)
                return acc
    sums: dict = {}
    inserted = []  # (units, resources first seen on them) in the order _add_times meets them
    for units, times in items:
        new = []
        for res, t in times.items():
            key = (units, res)
            if key in sums:
                sums[key] += t
            else:
                sums[key] = 0.0 + t
                new.append(res)
        if new:
            inserted.append((units, new))
    return {(u, res): sums[units, res] for units, new in inserted for u in units for res in new}


def _max_by_resource(per_unit: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for (_, res), t in per_unit.items():
        out[res] = max(out.get(res, 0.0), t)
    return out


class StepBounds:
    """Step lower bounds at any context. Only attention depends on the context, so the other
    ops are bounded once and each context re-bounds one attention op per (window, units) group.

    The chain term follows one sequence (batch 1: every op must still run for it); the resource
    term adds up each unit's work for the whole batch.
    """

    def __init__(self, graph, system, placement):
        self.graph = graph
        self.rates = engine_module(system.kind).rates(system.spec, graph.workload)
        self.unit_sets = {s.layer: s.units for s in placement.layers}
        self.slots = {s.layer: s for s in placement.layers}
        self.n_units = {k: len(v) for k, v in self.unit_sets.items()}
        self.placed = {s.layer: self.rates.placed_rates(s, placement) for s in placement.layers}
        self._memo: dict = {}  # (op shape, units, place key, floor, placed) -> OpBound
        self.one = graph.with_workload(replace(graph.workload, batch=1), graph.context)
        full = [(op, self._bound(op)) for op in graph.ops if op.kind != "attention"]
        self.fixed_ops = [b for _, b in full]
        exchanges = self.rates.exchanges_of(graph, placement)
        self.exchange_ops = [exchange_bound(ex, self.rates) for ex in exchanges]
        link = self.rates.link_resource  # what every unit of an exchange surely receives
        self.fixed_totals = _fixed_totals([(self.unit_sets[op.layer], b.times)
                                           for op, b in full]
                                          + [(ex.units, {link: ex.each_s})
                                             for ex in exchanges if ex.each_s])  # fmt: skip
        self.one_fixed = sum(
            self._bound(op).seconds for op in self.one.ops if op.kind != "attention"
        )
        self.one_fixed += sum(exchange_bound(ex, self.rates).seconds
                              for ex in self.rates.exchanges_of(self.one, placement))  # fmt: skip
        self.pass_s = 0.0  # waits between ops (die or stage hops), one sequence's
        if self.rates.pass_floor_s is not None:
            self.pass_s = self.rates.pass_floor_s(self.one, placement)
        self.one_fixed += self.pass_s
        self.groups: dict = {}  # (window, units, latency floor, placed) -> attention layers
        # an attention op's floor is taken at context 0 for every context (a floor that grows
        # with the context is still a lower bound there, and one floor per group keeps at()
        # and step_seconds() the same sums)
        for layer in range(graph.n_layers):
            floor = self.rates.latency_floor(graph.attention_op(layer, 0), self.slots[layer])
            key = (graph.attention_group(layer), self.unit_sets[layer], floor,
                   self.placed[layer])  # fmt: skip
            self.groups.setdefault(key, []).append(layer)

    def _bound(self, op, floor: tuple | None = None) -> OpBound:
        """:func:`op_bound` of ``op`` where its layer is placed, kept per op shape and place:
        the ops of alike layers differ only in their name and layer, and an engine's floor
        reads only :meth:`BoundRates.place_key` of its slot."""
        slot = self.slots[op.layer]
        placed = self.placed[op.layer]
        summed = self.rates.reduced_over(slot)
        key = (shape_of(op), len(slot.units), self.rates.place_key(slot), floor, placed, summed)
        hit = self._memo.get(key)
        if hit is None:
            if floor is None:
                floor = self.rates.latency_floor(op, slot)
            hit = self._memo[key] = op_bound(op, len(slot.units), self.rates, self.graph.hidden,
                                             floor, self.graph.workload.batch, placed,
                                             self.rates.own_seconds(op, slot), summed)  # fmt: skip
        return OpBound(op.name, op.layer, hit.n_units, hit.resource, hit.seconds,
                       dict(hit.times), hit.floor)  # fmt: skip

    def at(self, context: int, with_ops: bool = False) -> Roofline:
        """The roofline of the step whose caches hold ``context`` tokens (per-op bounds only
        when ``with_ops``)."""
        chain, totals, attn_ops = self.one_fixed, dict(self.fixed_totals), []
        for (_, units, floor, _), layers in self.groups.items():
            rep = layers[0]
            full = self._bound(self.graph.attention_op(rep, context), floor)
            one = self._bound(self.one.attention_op(rep, context), floor)
            chain += one.seconds * len(layers)
            _add_times(totals, units, full.times, len(layers))
            if with_ops:
                attn_ops += [replace(full, op=f"L{i}.attention", layer=i) for i in layers]
        by_res = _max_by_resource(totals)
        chain, by_res = self._with_host(chain, by_res)
        ops = (tuple(self.fixed_ops + self.exchange_ops + attn_ops + self._pass_ops())
               if with_ops else ())  # fmt: skip
        return Roofline(ops, chain, by_res, max([chain, *by_res.values()]))

    def _pass_ops(self) -> list[OpBound]:
        """The waits between ops as one bound named ``pass.<kind>`` (the kind of the engine's
        crossing events, so a report's row of that kind has a bound): one sequence's, which
        the crossings of a pass of any batch take at least."""
        if not self.pass_s:
            return []
        r = self.rates
        return [OpBound(f"pass.{r.pass_kind}", "pass", 1, r.pass_resource, self.pass_s, {})]

    def _with_host(self, chain, by_res: dict):
        """The host's per-step work: after the step on the chain when the machines wait for it,
        else a resource of its own (BoundRates.host_step_s)."""
        host = self.rates.host_step_s
        if not host:
            return chain, by_res
        if self.rates.host_serial:
            return chain + host, by_res
        return chain, {**by_res, "host": max(by_res.get("host", 0.0), host)}

    def step_seconds(self, contexts) -> np.ndarray:
        """``at(c).step_s`` for every context in ``contexts`` at once (s; one trace's steps).

        Attention's time terms are linear in its FLOPs and KV bytes, which
        :func:`attention_counts` gives for a whole array of contexts; everything else is the
        context-independent part bounded once in ``__init__``. Same sums in the same order as
        :meth:`at`, so the two agree to rounding (a test holds them to 1e-12)."""
        ctx = np.asarray(contexts, dtype=np.int64)
        att, rates = self.graph.attention, self.rates
        mem_res, comp_res = rates.mem_resource, rates.compute_resource
        chain = np.full(ctx.shape, self.one_fixed, dtype=np.float64)
        totals = _UnitTotals(self.fixed_totals, self.unit_sets.values(), ctx.shape)
        counts: dict = {}  # a layer's counts follow its window and chunk alone
        for (_, units, floor, placed), layers in self.groups.items():
            rep, n = layers[0], self.n_units[layers[0]]
            # the compute rate depends only on the op's class: ask it of one attention op
            rate = rates.compute(self.graph.attention_op(rep, int(ctx[0])))
            for work, is_full in ((self.graph.workload, True), (self.one.workload, False)):
                w = attention_op(att, work, rep, int(ctx[0])).weight_bytes
                key = (is_full, att.window(rep), att.chunk(rep))
                if key not in counts:
                    counts[key] = attention_counts(att, work, rep, ctx)
                _, flops, kv_read, kv_write = counts[key]
                times = {mem_res: (w + kv_read + kv_write) / (n * rates.mem_bytes_per_s)}
                if rate:
                    times[comp_res] = flops / ((n if rates.compute_splits else 1) * rate)
                if is_full:
                    totals.add(units, times, len(layers))
                else:
                    work_s = np.maximum.reduce(list(times.values()))
                    # as op_bound: the layer's own part of memory for its KV and bytes
                    work_s = np.maximum(work_s, placed_seconds(w, kv_read + kv_write, n, placed))
                    latency_s = sum(t for _, t in floor)
                    op_s = chain_seconds(work_s, latency_s, rates.latency_serial)
                    chain += op_s * len(layers)
        chain, host = self._with_host(chain, {})
        return np.maximum(np.maximum(chain, host.get("host", 0.0)), totals.busiest())


class _UnitTotals:
    """Each unit's work per resource over many steps (s): a rows x steps matrix per resource,
    starting from the context-independent totals; each addition goes to every unit of a set in
    one array operation, in the order of :meth:`StepBounds.at`'s sums. Units in the same sets
    with the same fixed totals get the same sums in the same order, so they share one row (a
    stage's chips: one row, not hundreds)."""

    def __init__(self, fixed: dict, unit_sets, shape: tuple):
        sets = list(dict.fromkeys(tuple(us) for us in unit_sets))
        units = sorted({u for us in sets for u in us} | {u for u, _ in fixed})
        member: dict = {u: [] for u in units}
        for k, us in enumerate(sets):
            for u in us:
                member[u].append(k)
        own: dict = {u: [] for u in units}
        for (unit, res), t in fixed.items():
            own[unit].append((res, t))
        rows: dict = {}
        row = {u: rows.setdefault((tuple(member[u]), tuple(sorted(own[u]))), len(rows))
               for u in units}  # fmt: skip
        # (sorted(set()) rather than numpy.unique, whose first call imports numpy.ma)
        self.rows_of = {us: np.array(sorted({row[u] for u in us}), dtype=np.int64)
                        for us in sets}  # fmt: skip
        self.shape = (len(rows), *shape)
        self.by_res: dict = {}
        for (_, own_totals), r in rows.items():  # a row's units all have these fixed totals
            for res, t in own_totals:
                self._of(res)[r] = t

    def _of(self, res: str) -> np.ndarray:
        if res not in self.by_res:
            self.by_res[res] = np.zeros(self.shape, dtype=np.float64)
        return self.by_res[res]

    def add(self, units, times: dict, count: int) -> None:
        """``count`` times ``times`` (per resource, one value a step) on each of ``units`` (one
        of the unit sets the totals were made for)."""
        rows = self.rows_of[tuple(units)]
        for res, t in times.items():
            self._of(res)[rows] += count * t

    def busiest(self) -> np.ndarray:
        """Per step, the largest total of any unit and resource (0 without any)."""
        out = np.zeros(self.shape[1:], dtype=np.float64)
        for m in self.by_res.values():
            if len(m):
                out = np.maximum(out, m.max(axis=0))
        return out


def roofline(
    model_or_graph, system, placement, workload=None, context: int | None = None
) -> Roofline:
    """The lower bound of one decode step (at ``context`` cached tokens, default the
    workload's): per-op bounds and the step's, in seconds."""
    work = workload or Workload()
    check_args("roofline()", model_or_graph, system, work, placement, placed=True)
    graph = run_graph(model_or_graph, system, work, "roofline()")
    ctx = graph.context if context is None else as_int(context)
    if ctx is None or ctx < 0:
        raise ConfigError(f"roofline(): context must be an integer >= 0, got {context!r}")
    return StepBounds(graph, system, placement).at(ctx, with_ops=True)


def first_step_op_bounds(bounds: StepBounds, system, placement, events, meta: dict):
    """Per-op bounds (s) of the first step that has events, as the columns of
    :attr:`pyaccel.trace.Trace.op_bounds` (empty columns when no step has events); ``bounds``
    are the run's own step bounds.

    Events lay out the pass of one micro-batch (``meta['micro_batch_size']`` sequences when the
    batch is split over pipeline stages), so each op is bounded for that micro-batch."""
    if not len(events["step"]):
        return _op_bound_columns(0, ())
    step = int(events["step"][0])
    work = bounds.graph.workload
    context = work.context + step
    size = int(meta.get("micro_batch_size", work.batch))
    if size == work.batch:  # the run's own graph: no second graph to build
        return _op_bound_columns(step, bounds.at(context, with_ops=True).ops)
    micro = bounds.graph.with_workload(replace(work, batch=size), context)
    roof = roofline(micro, system, placement, micro.workload, context)
    return _op_bound_columns(step, roof.ops)


def _op_bound_columns(step: int, ops) -> dict[str, np.ndarray]:
    return {
        "step": np.full(len(ops), step, dtype=np.int64),
        "op": np.array([b.op for b in ops], dtype=object),
        "resource": np.array([b.resource for b in ops], dtype=object),
        "seconds": np.array([b.seconds for b in ops], dtype=np.float64),
    }
