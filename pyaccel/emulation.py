"""``emulate()``: one entry point for every machine kind, one Trace out (SPEC §2).

``emulate`` builds the run's graph (formats resolved for the system), checks the placement,
runs the step driver (:mod:`pyaccel.sim.driver`) on the kind's engine -- the package
``pyaccel.sim.<kind>`` behind the contract in :mod:`pyaccel.sim.contract` -- adds each step's
lower bound (:mod:`pyaccel.sim.roofline`) and assembles the :class:`~pyaccel.trace.Trace`. Its
placer (``pyaccel.place.<kind>``) and functional executor are named in its entry in the kind
registry (:mod:`pyaccel.hw.kinds`); where a placer offers several layouts,
:func:`pyaccel.placing.place` times each with the same driver and keeps the fastest.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .errors import ConfigError, EngineNotBuiltError
from .hw.spec import System
from .model.config import ModelConfig
from .sim.driver import fewest_experts_graph, run_steps
from .sim.inputs import check_args, engine_module, run_graph
from .sim.roofline import StepBounds, bound_cycles, first_step_op_bounds
from .trace import Trace
from .units import CycleRangeError, as_int
from .workload import Workload


def default_event_steps(tokens: int) -> frozenset[int]:
    """Steps whose events a trace keeps by default: the first and the last."""
    return frozenset({0, tokens - 1})


# Events of one step run from ~10^2 (a tiny model on one GPU) to ~10^5 (a 70B model over hundreds
# of LPU chips); past this many recorded steps a trace would not fit in memory.
MAX_TRACE_STEPS = 1024


def _check_trace_size(text: str, n_steps: int) -> None:
    if n_steps > MAX_TRACE_STEPS:
        raise ConfigError(
            f"--trace-steps '{text}': records {n_steps:,} steps, more than the "
            f"{MAX_TRACE_STEPS:,} a trace can hold; choose fewer with START:STOP:STEP "
            "(e.g. a STEP that samples the run)"
        )


def parse_trace_steps(text: str, tokens: int) -> frozenset[int]:
    """The steps of a ``tokens``-step run that ``--trace-steps text`` selects: ``ends`` (first and
    last), ``all``, or ``START:STOP:STEP`` (0-based, STOP exclusive, as a Python slice; parts may
    be left empty), at most :data:`MAX_TRACE_STEPS`. A bad value raises :class:`ConfigError`
    naming it."""
    spec = str(text).strip().lower()
    if spec == "ends":
        return default_event_steps(tokens)
    if spec == "all":
        _check_trace_size(text, tokens)
        return frozenset(range(tokens))
    parts = spec.split(":")
    expected = (
        f"--trace-steps '{text}': expected 'ends', 'all' or START:STOP:STEP with integers "
        "START >= 0, STOP >= 0, STEP >= 1 (each may be left empty)"
    )
    if len(parts) not in (2, 3):
        raise ConfigError(expected)
    try:
        nums = [int(x) if x.strip() else None for x in parts]
    except ValueError:
        raise ConfigError(expected) from None
    start, stop, step = (nums + [None])[:3]
    if any(n is not None and n < 0 for n in (start, stop)) or (step is not None and step < 1):
        raise ConfigError(expected)
    steps = frozenset(range(tokens)[slice(start, stop, step)])
    _check_trace_size(text, len(steps))
    if not steps:
        raise ConfigError(
            f"--trace-steps '{text}': selects none of the run's steps 0..{tokens - 1} "
            f"(--tokens {tokens})"
        )
    return steps


def emulate(
    model_or_graph,
    system: System,
    placement,
    workload: Workload | None = None,
    functional: bool = False,
    event_steps=None,
    progress=None,
    trace_steps: str | None = None,
) -> Trace:
    """Emulate ``workload.tokens`` decode steps of a model on ``system`` as ``placement`` lays it
    out; returns the :class:`Trace` (times for every step, events for some).

    Which steps' events are recorded: ``trace_steps`` as the CLI's ``--trace-steps`` spells it
    (``"ends"``, the default: first and last; ``"all"``; or ``"START:STOP:STEP"``), or an explicit
    set of 0-based step indices as ``event_steps`` (not both)."""
    if workload is None:
        workload = Workload()
    _check_run_inputs(model_or_graph, system, placement, workload)
    graph = run_graph(model_or_graph, system, workload)
    if functional:
        _check_functional_input(model_or_graph)
    engine = engine_module(system.kind)
    steps_kept = _steps_kept(graph.workload.tokens, event_steps, trace_steps)
    # a hand-made or edited placement that overfills a unit, PE or slice is refused, not
    # emulated; one made for more users or a longer context than this workload is fine
    placement.check(graph, system, exact=False)
    try:
        run = run_steps(engine, graph, system, placement, steps_kept, progress)
    except (OverflowError, CycleRangeError):  # a time beyond int64 cycles (a rate of 1e-300)
        raise ConfigError(_overflow_message(system)) from None
    _check_cycles(run.steps, system)
    work = graph.workload  # the bound's MoE layers: bound.routed_fewest
    bound = StepBounds(fewest_experts_graph(graph, run.fewest_experts), system, placement)
    bounds = _bound_cycles_per_step(bound, work, system)
    trace = Trace(
        system=system.name,
        kind=system.kind,
        model=graph.model_name,
        units=placement.n_units,
        clock_hz=system.spec.clock_hz,
        power_w=system.spec.power_w,
        workload=work,
        events=run.log.columns(),
        step_cycles=np.array(run.steps, dtype=np.int64),
        lower_bound_cycles=np.array(bounds, dtype=np.int64),
        step_context=np.arange(work.context, work.context + work.tokens, dtype=np.int64),
        tokens_per_step=work.batch,
        assumptions=_assumptions(graph, engine, system),
        # fmt: skip
        left_out=list(graph.left_out),
        resource_classes=engine.RESOURCES,
        meta={**run.meta, "placement_reason": placement.reason},
        arrays=run.arrays,
        inputs=(model_or_graph, system, placement, work),
    )
    trace.op_bounds = first_step_op_bounds(bound, system, placement, trace.events, run.meta)
    if functional:
        trace.functional = _functional(model_or_graph, graph, system, placement)
    return trace


def _check_run_inputs(model, system: System, placement, workload: Workload) -> None:
    """Arguments of the wrong type (:func:`check_args`), a system loaded for another unit
    count than the placement's, and a speculative workload (which ``emulate`` alone does not
    run: its drafter needs placing and its rounds drawing) are refused rather than run as
    something else."""
    check_args("emulate()", model, system, workload, placement, placed=True)
    if system.units != "auto" and system.units != placement.n_units:
        raise ConfigError(
            f"emulate(): the placement is on {placement.n_units} {placement.unit_noun}(s) but "
            f"system {system.name} was loaded with units={system.units}; load it with "
            f"units={placement.n_units} (or 'auto') to run this placement, or place again "
            f"with units={system.units}"
        )
    if workload.spec_decode and workload.step_tokens == 1:
        raise ConfigError(
            f"emulate(): Workload(spec_decode='{workload.spec_decode}') is not run by emulate(), "
            "which times the target's plain decode steps; speculative decoding (its drafter "
            "placed, its rounds drawn) runs in `pyaccel run --spec-decode` or "
            "pyaccel.results.run(MODEL, SYSTEM, units, workload); or drop spec_decode"
        )


def _assumptions(graph, engine, system: System) -> list[str]:
    """The named assumptions a run rests on: the graph's, the router's, the engine's and the
    system's."""
    return [*graph.assumptions, *routing_notes(graph), *engine.ASSUMPTIONS,
            *system.spec.assumption_list()]  # fmt: skip


def routing_notes(graph) -> list[str]:
    """The router's named assumption and the bound's, for a graph with routed experts."""
    if not graph.moe_layers:
        return []
    from .routing import parse

    return [parse(graph.workload.router).assumption,
            "bound.routed_fewest: the lower bound's MoE layers read the weights of the fewest "
            "distinct experts any step of the run routed its batch to"]  # fmt: skip


def step_time_s(graph, system: System, placement) -> float:
    """Mean step time (s) of ``graph``'s run on ``system`` as ``placement`` lays it out: the
    step driver alone, with no events, lower bound or trace (what a what-if needs). Equal to
    :attr:`Trace.step_time_s` of :func:`emulate` with the same inputs; the placement is taken as
    checked (a what-if changes rates and latencies, never a capacity)."""
    steps = _driver_steps(graph, system, placement)
    return float(np.array(steps, dtype=np.int64).mean()) / system.spec.clock_hz


def one_step_cycles(graph, system: System, placement) -> int:
    """Cycles of the first step of ``graph``'s workload as :func:`emulate` times it, with its
    placement check, but no events, lower bound or trace (what a prefill chunk needs)."""
    placement.check(graph, system, exact=False)
    return int(_driver_steps(graph, system, placement)[0])


def _driver_steps(graph, system: System, placement) -> list[int]:
    """Every step's cycles from the step driver alone (no events), checked for range."""
    engine = engine_module(system.kind)
    try:
        run = run_steps(engine, graph, system, placement, frozenset())
    except (OverflowError, CycleRangeError):
        raise ConfigError(_overflow_message(system)) from None
    _check_cycles(run.steps, system)
    return run.steps


def _steps_kept(tokens: int, event_steps, trace_steps: str | None) -> frozenset[int]:
    """The 0-based steps whose events the trace records: ``event_steps`` as given, or
    ``trace_steps`` parsed (default ``ends``); giving both is an error."""
    if event_steps is not None and trace_steps is not None:
        raise ConfigError("emulate(): give trace_steps or event_steps, not both")
    if event_steps is not None:
        steps = list(event_steps)
        bad = [x for x in steps if as_int(x) is None or not 0 <= x < tokens]
        if bad:
            raise ConfigError(
                f"emulate(): event_steps names step {bad[0]!r}, not one of the run's steps "
                f"0..{tokens - 1} (0-based, workload tokens={tokens})"
            )
        return frozenset(int(x) for x in steps)
    return parse_trace_steps(trace_steps or "ends", tokens)


def _bound_cycles_per_step(bound: StepBounds, work: Workload, system: System) -> np.ndarray:
    """Each step's lower bound in whole cycles, rounded up: never below the byte/FLOP bound
    (emulated steps, whole cycles at least as long as that bound, are then still >= it)."""
    contexts = np.arange(work.context, work.context + work.tokens, dtype=np.int64)
    try:
        return bound_cycles(bound.step_seconds(contexts), system.spec.clock_hz)
    except CycleRangeError:
        raise ConfigError(_overflow_message(system)) from None


def _functional(model, graph, system, placement) -> dict:
    """Numerics of the same graph through the placement (``pyaccel.numerics.execute``); the
    reference forward pass needs the model config (its weights), not only the graph."""
    from importlib.util import find_spec

    if find_spec("pyaccel.numerics.execute") is None:
        raise EngineNotBuiltError("functional emulation (numerics) is not built yet")
    from .numerics import execute

    return execute.functional_metrics(model, graph, system, placement)


def _check_functional_input(model) -> None:
    """The numerics run the model's weights, which a graph does not carry."""
    if not isinstance(model, ModelConfig):
        raise ConfigError(
            "emulate(functional=True) runs the model's weights: pass its ModelConfig, not a "
            "DecodeGraph"
        )


def _overflow_message(system: System) -> str:
    """Why a step time left the integer cycle range: the clock and the ``--set`` values."""
    sets = "; ".join(system.spec.overrides) or "the preset's values"
    return (
        f"{system.name}: an op's time is beyond the limit of 2**62 cycles (int64 timelines) at "
        f"clock_hz={system.spec.clock_hz:g} with {sets}; check --set values"
    )


def _check_cycles(steps: list[int], system: System) -> None:
    """Step times must be positive and fit int64 cycles; parameters set far outside physical
    ranges (e.g. ``--set clock_hz=1e-3``) can break either, and say so here."""
    clock = system.spec.clock_hz
    if min(steps) <= 0:
        raise ConfigError(
            f"{system.name}: a decode step rounds to 0 cycles at clock_hz={clock:g}; the clock "
            "is too slow to resolve the step (check --set values)"
        )
    if sum(steps) >= 2**62:  # the run's timeline (event start cycles) must fit int64
        raise ConfigError(
            f"{system.name}: the run takes {sum(steps):.3g} cycles at clock_hz={clock:g}, "
            "beyond the int64 cycle range (check --set values)"
        )


def what_if_system(system: System, resource: str) -> System:
    """``system`` with one resource class twice as fast (rates doubled, latencies halved). An
    engine's ``WHAT_IF`` entry is ``(names, factor)``, ``factor`` one number for every name or
    a tuple of one per name (a class made of a rate and a cycle cost moves both ways)."""
    engine = engine_module(system.kind)
    names, factor = engine.WHAT_IF[resource]
    factors = factor if isinstance(factor, tuple) else (factor,) * len(names)
    params = system.spec.params
    changes = {n: getattr(params, n) * f for n, f in zip(names, factors, strict=True)}
    spec = system.spec.with_params(f"what-if: {resource} x2", **changes)
    return replace(system, spec=spec)
