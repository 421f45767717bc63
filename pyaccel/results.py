"""One emulated run end to end (load, place, emulate) and its ``run --json`` record (SPEC §7)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .emulation import emulate
from .errors import ConfigError
from .hw.io import load_system
from .model.config import load_model
from .place.kinds import as_dict
from .placing import place
from .records import SCHEMA_VERSION, ErrorRecord, RunRecord, bound_ratio, pyaccel_version
from .workload import Workload, resolve_workload


@dataclass(frozen=True)
class Prepared:
    """A case loaded and placed, not yet emulated: the model, the system of ``units``
    machines, the workload in resolved formats and its placement; ``formats_from`` and
    ``warnings`` as :func:`pyaccel.workload.resolve_workload` decided them."""

    model: object
    system: object
    workload: Workload
    placement: object
    formats_from: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run(Prepared):
    """Everything one run produced: the prepared case and its :class:`~pyaccel.trace.Trace`
    (with ``--spec-decode``: the target's verification steps, and ``spec`` the
    :class:`~pyaccel.speculate.SpecResult` of the drawn rounds) and ``prefill`` the
    :class:`~pyaccel.prefill.Prefill` of one sequence's prompt (None when not asked for)."""

    trace: object = None
    spec: object = None
    prefill: object = None


def prepare(
    model: str,
    system: str,
    units: int | str = "auto",
    workload: Workload | None = None,
    sets: list[str] | None = None,
    etch: bool = False,
) -> Prepared:
    """Load model and system (``units``: a positive integer or ``"auto"``), resolve the
    workload's formats, check flags, and place."""
    cfg = load_model(model)
    sysm = load_system(system, units, sets, etch)
    resolved = resolve_workload(workload or Workload(), cfg, sysm.spec)
    plc = place(cfg, sysm, resolved.workload)
    return Prepared(cfg, sysm, resolved.workload, plc, resolved.formats_from, resolved.warnings)


def prepare_run(model: str, system: str, units: int | str = "auto",
                workload: Workload | None = None, sets: list[str] | None = None,
                etch: bool = False) -> Prepared:  # fmt: skip
    """:func:`prepare` as :func:`run` places the case: with ``--spec-decode``, on the units
    that also hold the drafter (ConfigError/PlacementError where it does not fit)."""
    p = prepare(model, system, units, workload, sets, etch)
    if not p.workload.spec_decode:
        return p
    from .speculate import place_with_drafter

    system_, placement = place_with_drafter(p.model, p.system, p.placement, p.workload)
    return replace(p, system=system_, placement=placement)


def run(
    model: str,
    system: str,
    units: int | str = "auto",
    workload: Workload | None = None,
    sets: list[str] | None = None,
    etch: bool = False,
    progress=None,
    functional: bool = False,
    trace_steps: str = "ends",
    prefill: str | None = "ttft",
) -> Run:
    """Load, place and emulate one case (``functional``: also run the numerics; ``trace_steps``:
    which steps' events the trace records, as :func:`pyaccel.emulate` takes it; ``prefill``:
    ``"ttft"`` emulates the prompt's prefill for its time, ``"events"`` also says where it goes,
    None leaves it out)."""
    from .emulation import parse_trace_steps

    parse_trace_steps(trace_steps, (workload or Workload()).tokens)  # bad syntax: fail first
    p = prepare(model, system, units, workload, sets, etch)
    spec = None
    if p.workload.spec_decode:
        from .speculate import fit_with_drafter, speculate

        if functional:
            raise ConfigError("--functional with --spec-decode: run them separately")
        system, placement = fit_with_drafter(p.model, p.system, p.placement, p.workload)
        p = replace(p, system=system, placement=placement)
        trace, spec = speculate(p.model, p.system, p.placement, p.workload, progress,
                                trace_steps)  # fmt: skip
    else:
        trace = emulate(p.model, p.system, p.placement, p.workload, functional=functional,
                        progress=progress, trace_steps=trace_steps)  # fmt: skip
    first = None
    if prefill is not None:
        from .prefill import prefill as run_prefill

        first = run_prefill(p.model, p.system, p.placement, p.workload, prefill == "events")
        if spec is not None:  # the drafter prefills the prompt too (pyaccel.spec_prefill)
            from .spec_prefill import with_drafter

            first = with_drafter(first, spec, p.system, prefill == "events")
    return Run(**{f.name: getattr(p, f.name) for f in fields(p)}, trace=trace, spec=spec,
               prefill=first)  # fmt: skip


def measured_record(result: Run) -> RunRecord:
    """:func:`run_record` of ``result`` with its bottleneck measured: each resource class
    re-emulated twice as fast (what ``pyaccel run`` prints)."""
    from .report import Report
    from .what_if import run_what_if

    return run_record(result, Report.from_trace(result.trace, run_what_if(result)))


def run_record(result: Run, report) -> RunRecord:
    """The ``run --json`` record of a run: SPEC §7 keys plus layout details; the bottleneck
    (what-if winner) and busiest resource are ``report``'s (a :class:`~pyaccel.report.Report`)."""
    tr = result.trace
    summary, extra, assumptions = tr.summary(), {}, list(tr.assumptions)
    if result.spec is not None:
        summary, extra = speculative_summary(summary, result.spec)
        assumptions += _spec_assumptions()
    ttft, first = None, {}
    if result.prefill is not None:
        ttft, first = result.prefill.ttft_s, result.prefill.as_dict()
        assumptions += prefill_assumptions(result)
    return RunRecord(
        schema_version=SCHEMA_VERSION,
        pyaccel_version=pyaccel_version(),
        kind=tr.kind,
        **summary,
        ttft_s=ttft,
        bottleneck=report.bottleneck,
        busiest_resource=report.busiest_resource,
        emulated_over_lower_bound=bound_ratio(summary),
        layout=as_dict(result.placement.layout),
        placement_reason=result.placement.reason,
        assumptions=assumptions,
        left_out=tr.left_out,
        formats_from=dict(result.formats_from),
        warnings=list(result.warnings),
        prefill=first,
        functional=dict(tr.functional),
        extra=extra,
    )


def prefill_assumptions(result: Run) -> list[str]:
    """The named assumptions a run's ``ttft_s`` adds to the trace's (which already lists the
    preset's chunk size where it is an assumption); none without a prefill."""
    if result.prefill is None:
        return []
    from .prefill import (
        ASSUMPTIONS,
        MLA_ABSORBED,
        MLA_EXPANDED,
        STREAMED,
        WHOLE_PROMPT,
        chunk_tokens,
        expands_mla,
    )

    extra = [] if chunk_tokens(result.system) else [WHOLE_PROMPT]
    if result.model.attention == "mla":
        extra.append(MLA_EXPANDED if expands_mla(result.system) else MLA_ABSORBED)
    if result.prefill.drafter is not None:
        from .spec_prefill import assumption

        extra.append(assumption(result.prefill))
    return [*ASSUMPTIONS, *extra, *((STREAMED,) if result.prefill.streamed else ())]


def speculative_summary(summary: dict, spec) -> tuple[dict, dict]:
    """The summary of a speculative run: ``units`` every unit the run occupies (the target's,
    ``summary``'s, and the drafter's own: an ASIC's etched dies, an LPU's chips), tokens/s per
    user the mean over the drawn sequences, the step time the mean time per token (the rounds'
    seconds over the tokens they delivered, s), its lower bound a round's least drafting bound
    plus the verification step's, over the k + 1 tokens a round yields at most, energy per
    token (J) all those units' power over that time (scaled from the verification step's,
    which counts the target's units); and its distribution and ``spec_decode`` object."""
    r = spec.rounds
    per_user = float(r.tokens_per_s.mean())
    per_token_s = r.time_per_token_s  # the last round's surplus tokens are not delivered
    # the drafter's own units draw the same power a unit as the target's (same kind of chip)
    all_units = summary["units"] + spec.drafter_units
    out = dict(summary)
    out.update(
        units=all_units,
        tokens_per_s_per_user=per_user,
        tokens_per_s=per_user * summary["batch"],
        step_time_s=per_token_s,
        # a round drafts (at least its least bound), verifies once, yields at most k + 1 tokens
        lower_bound_step_time_s=(spec.draft_bound_s + summary["lower_bound_step_time_s"])
        / (spec.request.k + 1),
        joules_per_token=summary["joules_per_token"] * (all_units / summary["units"])
        * per_token_s / summary["step_time_s"],
    )  # fmt: skip
    return out, spec.record()


def summary_step_time_s(result: Run) -> float:
    """The step time ``result``'s summary gives (s): its trace's mean step, or of a speculative
    run the time per generated token over its rounds (drafting and verifying)."""
    if result.spec is None:
        return result.trace.step_time_s
    return result.spec.rounds.time_per_token_s


def _spec_assumptions() -> list[str]:
    from .speculate import ASSUMPTIONS

    return list(ASSUMPTIONS)


def run_and_record(model: str, system: str, units, workload, sets=None, etch=False,
                   progress=None, functional=False, trace_steps="ends",
                   prefill="ttft"):  # fmt: skip
    """(run, its report with the what-if ranking, its ``run --json`` record): the bottleneck
    is measured by re-emulating each resource class twice as fast; ``prefill`` as
    :func:`run` takes it."""
    from .report import Report
    from .what_if import run_what_if

    result = run(model, system, units, workload, sets, etch, progress, functional, trace_steps,
                 prefill)  # fmt: skip
    rep = Report.from_trace(result.trace, run_what_if(result))
    return result, rep, run_record(result, rep)


def error_record(
    model: str, system: str, kind: str, units, work, message: str, formats_from=None, warnings=()
) -> ErrorRecord:
    """A ``compare --json`` entry for a ``kind`` system that could not run the model on
    ``units`` (a count or ``"auto"``) for the workload ``work`` (its formats resolved, as
    ``formats_from`` says they were, with the ``warnings`` their resolution gave)."""
    return ErrorRecord(SCHEMA_VERSION, pyaccel_version(), kind, system, model, units,
                       work.batch, work.context, work.tokens, work.weights,
                       work.expert_weights, work.kv, message, dict(formats_from or {}),
                       list(warnings))  # fmt: skip
