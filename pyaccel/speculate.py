"""Speculative decoding end to end (SPEC §7 ``--spec-decode``): the drafter (:mod:`.drafters`)
placed on the same units as the target (their weights and caches sharing each unit's memory;
on an ASIC, dies etched for it), the drafter's steps and the target's verification steps
emulated by the engines, and the rounds drawn per sequence (:mod:`pyaccel.spec_decode`).

A round at context offset ``c`` costs the drafter's work for ``k`` tokens (a chain drafter's
catch-up step over ``k + 1`` tokens, then ``k - 1`` one-token steps; a block drafter's one pass
over ``k + 1`` positions) and the target's one step over ``k + 1`` tokens of each sequence at
``c`` (``Workload.step_tokens``), one after the other (``spec.serial_round``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from importlib import resources

import numpy as np

from .drafters import BLOCK, Drafter, drafter_for
from .emulation import emulate
from .errors import CapacityError, ConfigError, PlacementError, option
from .placing import place
from .spec_decode import Profile, Rounds, SpecDecode, draw_rounds, parse
from .units import fmt_bytes
from .workload import resolve_workload

ASSUMPTIONS = (
    "spec.serial_round: a round runs the drafter's k steps, then the target's verification, "
    "on the same machines one after the other (no overlap of drafting and verifying)",
    "spec.acceptance_per_position: draft token i is kept when tokens 1..i-1 were and a draw "
    "under its position's published (or given) conditional acceptance succeeds; each of the "
    "drawn sequences follows one published profile (a task category where the source splits "
    "them), picked uniformly with --seed; the target's own rows are used when they publish all "
    "k positions, else rows of other targets that do; positions beyond every published one keep "
    "the last published rate",
    "spec.kv_rollback: rejected drafts' K/V rows are dropped at no cost (paged caches free "
    "them by bookkeeping); the context grows by the tokens kept; the target's cache is placed "
    "for context + tokens + k positions a sequence, as the last verification writes k drafted "
    "rows before their acceptance is known",
    "spec.draft_catchup: a chain drafter's first step of a round feeds the tokens the target "
    "kept to its own cache while drafting; costed over k + 1 tokens a sequence (the most a "
    "round keeps), the other k - 1 steps over one",
    "spec.host_per_round: a round is one step of the serving engine: its per-step host work "
    "(a GPU's step_host_s) is paid once, by the verification; the drafter's steps run inside it",
    "spec.batch_rounds: with --batch B each drawn sequence's round is timed as a draft and a "
    "verification step of the whole batch at that sequence's own context offset (a batch's "
    "sequences do not wait for one another's rounds)",
    "spec.chain_drafts: drafts form one chain (no token tree); the target verifies k + 1 "
    "tokens a sequence",
    "spec.own_drafter_units: on an ASIC the drafter runs on dies of the same kind etched for "
    "it (--etch rules), on an LPU on a chain of chips of its own (the fewest that hold it); a "
    "sequence's drafting and verifying still alternate, each timed with all sequences in that "
    "phase; the run's units and energy count those units with the target's; on a GPU or "
    "wafer the drafter shares the target's units",
)


@dataclass(frozen=True)
class SpecResult:
    """A speculative run: the request, the acceptance it used per position (mean over the
    profiles) and where it came from, the drawn rounds, the drafter and the units of its own
    it runs on (an ASIC's etched dies, an LPU's chips; 0 when it shares the target's), and
    ``target_units``, the units the target is placed on."""

    request: SpecDecode
    acceptance: tuple[float, ...]
    acceptance_source: str
    rounds: Rounds
    drafter: Drafter | None = None
    drafter_units: int = 0
    target_units: int = 0
    draft_bound_s: float = 0.0  # the least lower bound of one round's drafting (s)
    # (system, placement, workload) the drafter was emulated on and its mean draft time over
    # the round offsets (s), for the round's what-if
    drafter_run: tuple = field(default=(), repr=False, compare=False)

    def record(self) -> dict:
        """The ``run --json`` fields of the run (SPEC §7); ``target_units``: the units the
        target is placed on (the run's ``units`` adds ``drafter.own_units`` to them)."""
        r = self.rounds
        return {
            "tokens_per_s_per_user_p10": r.percentile(10),
            "tokens_per_s_per_user_p50": r.percentile(50),
            "tokens_per_s_per_user_p90": r.percentile(90),
            "spec_decode": {
                "kind": self.request.kind,
                "draft": self.request.draft,
                "k": self.request.k,
                "acceptance": list(self.acceptance),
                "acceptance_source": self.acceptance_source,
                "tokens_per_round_mean": r.tokens_per_round_mean,
                "draft_s_per_round": r.draft_s_mean,
                "verify_s_per_round": r.verify_s_mean,
                "sequences": len(r.tokens_per_s),
                "target_units": self.target_units,
                "drafter": self._drafter_record(),
            },
        }

    def _drafter_record(self) -> dict | None:
        d = self.drafter
        if d is None:
            return None
        cfg = d.config
        return {"model": cfg.name, "layers": cfg.n_layers, "hidden": cfg.hidden,
                "vocab": cfg.vocab, "mode": d.mode, "source": d.source,
                "shapes_assumed": d.assumed, "own_units": self.drafter_units}  # fmt: skip


# what a speculative run's trace holds (its meta, and a Perfetto file's metadata)
TIMELINE = ("speculative run: the target's {n} verification steps of {k1} tokens (k + 1), "
            "back to back; the drafting between them (on the drafter's units) and the rounds' "
            "accepted tokens are not on this timeline (the run's summary has them)")  # fmt: skip


def speculate(model, system, placement, workload, progress=None, trace_steps="ends"):
    """(the target's verification trace over ``workload.tokens`` steps, the
    :class:`SpecResult`) of ``workload.spec_decode`` on the placed target."""
    req = parse(workload.spec_decode)
    n, k = workload.tokens, req.k
    drafter = drafter_for(req.kind, req.draft, model)
    profiles, source = acceptance_profiles(req, model, drafter.config)
    d_system, d_work, d_plc = _placed_drafter(model, drafter, req, system, placement, workload)
    draft_s, draft_lb = _draft_times(drafter, d_system, d_plc, d_work, k, n, bound=True)
    verify = replace(workload, step_tokens=k + 1)
    trace = emulate(model, system, placement, verify, progress=progress,
                    trace_steps=trace_steps)  # fmt: skip
    verify_s = trace.step_cycles / system.spec.clock_hz
    trace.meta["timeline"] = TIMELINE.format(n=n, k1=k + 1)
    rounds = draw_rounds(profiles, draft_s, verify_s, n, workload.seed)
    mean = tuple(float(x) for x in np.mean([p.rates for p in profiles], axis=0))
    own = d_plc.n_units if system.kind in OWN_UNITS else 0
    return trace, SpecResult(
        req, mean, source, rounds, drafter, drafter_units=own,
        target_units=placement.n_units, draft_bound_s=float(np.min(draft_lb)),
        drafter_run=(d_system, d_plc, d_work, float(np.mean(draft_s))),
    )  # fmt: skip


# --units auto with a drafter beside the target: at most this many units more than the
# target alone needs are tried before the drafter's shortfall is reported
MAX_EXTRA_UNITS = 64
# what may still fit when no unit count holds the target and its drafter together
SHRINK_HINT = "a smaller context or batch, or a smaller drafter, may fit"


def fit_with_drafter(model, system, placement, workload):
    """(system, placement) of the target that leaves room for ``workload.spec_decode``'s
    drafter on every unit. With ``--units auto`` the fewest units that hold both (the target
    re-placed on one more unit at a time, from the fewest that hold it alone, and the drafter
    placed beside it as the run places it); with a fixed count, or where the drafter gets
    units of its own (ASIC, LPU), the placement as given (a drafter that does not fit is
    reported when the run places it, with the count that holds both)."""
    if system.units != "auto" or system.kind in OWN_UNITS:
        return system, placement
    req = parse(workload.spec_decode)
    drafter = drafter_for(req.kind, req.draft, model)
    first = placement.n_units
    plc, last = _fewest_shared(model, system, workload, drafter, req, first, placement)
    if plc is not None:
        return system, plc
    top = first + MAX_EXTRA_UNITS
    raise type(last)(
        f"{option('units', 'auto')}: the target {model.name} and "
        f"{_the_drafter(req, drafter.config.name)} "
        f"do not fit together on {first} to {top} units of {system.name} (at {top}: {last}); "
        f"{SHRINK_HINT}"
    )


def place_with_drafter(model, system, placement, workload):
    """(system, placement) of the target as a run with ``workload.spec_decode`` lays it out
    (:func:`fit_with_drafter`), its drafter placed as that run places it, so that what does not
    fit fails here as it would there (``place --spec-decode``)."""
    system, placement = fit_with_drafter(model, system, placement, workload)
    req = parse(workload.spec_decode)
    drafter = drafter_for(req.kind, req.draft, model)
    _placed_drafter(model, drafter, req, system, placement, workload)
    return system, placement


def _fewest_shared(model, system, workload, drafter, req, first: int, placement=None):
    """(the target's placement on the fewest units from ``first`` on, at most
    :data:`MAX_EXTRA_UNITS` more, where the drafter fits beside it, or None; the error of the
    last count that did not fit, or None). ``placement``: the target's on its own count."""
    last = None
    for n in range(first, first + MAX_EXTRA_UNITS + 1):
        fixed = replace(system, units=n)
        try:
            same = placement is not None and placement.n_units == n
            plc = placement if same else place(model, fixed, workload)
            _place_drafter(drafter, req, fixed, plc, workload)
        except PlacementError as exc:  # the target's layout on n units, or the drafter's fit
            last = exc
            continue
        return plc, last
    return None, last


def _placed_drafter(model, drafter, req, system, placement, workload):
    """:func:`_place_drafter`; where the drafter does not fit on the target's units, the error
    also says which ``--units`` holds both (searched as ``--units auto`` searches)."""
    try:
        return _place_drafter(drafter, req, system, placement, workload)
    except PlacementError as exc:
        if system.kind in OWN_UNITS:
            raise
        first = placement.n_units + 1
        plc, _ = _fewest_shared(model, system, workload, drafter, req, first)
        last = first + MAX_EXTRA_UNITS
        advice = (
            f"{option('units', plc.n_units)} holds the target and the drafter "
            f"({option('units', 'auto')} finds the fewest)"
            if plc is not None
            else f"no count of {first} to {last} units holds both; {SHRINK_HINT}"
        )
        raise type(exc)(f"{exc}; {advice}") from None


def round_what_if(result) -> list:
    """What-if rows of a speculative run over its whole round (SPEC §5): each resource class
    twice as fast on the target's and the drafter's machines, the drafting and verifying
    shares of the mean round rescaled by their re-emulated times; ``step_time_s`` is the new
    time per generated token (s). Largest gain first."""
    from .emulation import engine_module, step_time_s, what_if_system
    from .records import WhatIfRow
    from .sim.inputs import run_graph

    spec, tr = result.spec, result.trace
    model, system, placement, work = tr.inputs
    d_system, d_plc, d_work, base_draft = spec.drafter_run
    r, k, n = spec.rounds, spec.request.k, work.tokens
    graph = run_graph(model, system, work)
    round_s_base = r.draft_s_mean + r.verify_s_mean
    per_token = r.time_per_token_s  # what the run's summary gives as its step time
    rows = []
    for resource in engine_module(system.kind).WHAT_IF:
        verify = step_time_s(graph, what_if_system(system, resource), placement)
        draft = _draft_times(spec.drafter, what_if_system(d_system, resource), d_plc, d_work,
                             k, n)  # fmt: skip
        round_s = (r.draft_s_mean * float(np.mean(draft)) / base_draft
                   + r.verify_s_mean * verify / tr.step_time_s)  # fmt: skip
        new = per_token * round_s / round_s_base
        rows.append(WhatIfRow(resource, new, per_token / new))
    return sorted(rows, key=lambda row: -row.gain)


def _draft_times(drafter: Drafter, system, placement, work, k: int, n: int,
                 bound: bool = False):  # fmt: skip
    """Seconds each round's drafting takes, by the context offset it starts at (``n`` of them);
    with ``bound``, also the lower bound of each (s, the drafter's steps' bounds summed alike).

    A chain drafter's round is a catch-up step over ``k + 1`` tokens of each sequence (it feeds
    the tokens the target kept to its own cache and drafts the first token; spec.draft_catchup)
    and ``k - 1`` one-token steps; a block drafter's is one pass over ``k + 1`` positions."""
    clock = system.spec.clock_hz
    wide = replace(work, step_tokens=k + 1, tokens=n)
    traces = [emulate(drafter.config, system, placement, wide, event_steps=())]
    if drafter.mode != BLOCK and k > 1:
        # one-token steps at offsets 1 .. n + k - 2: the rest of every round's chain
        one = replace(work, step_tokens=1, tokens=n + k - 2, context=work.context + 1)
        traces.append(emulate(drafter.config, system, placement, one, event_steps=()))

    def per_round(name: str) -> np.ndarray:
        first = getattr(traces[0], name)[:n] / clock
        if len(traces) == 1:
            return first
        rest = getattr(traces[1], name) / clock
        return first + np.convolve(rest, np.ones(k - 1), mode="valid")[:n]

    times = per_round("step_cycles")
    return (times, per_round("lower_bound_cycles")) if bound else times


# machine kinds whose drafter runs on units of its own: an ASIC's dies etched for it, an LPU's
# chips of its own chain (their SRAM holds the target's layers to the byte)
OWN_UNITS = ("asic", "lpu")


def _place_drafter(drafter: Drafter, req: SpecDecode, system, placement, workload):
    """(system, workload, placement) of the drafter: on the target's units, checked to fit
    beside the target, or on units of its own (:data:`OWN_UNITS`: an ASIC's dies etched for it,
    spec.own_drafter_units). Its formats are the target's."""
    cfg = drafter.config
    one = replace(workload, spec_decode=None, step_tokens=1, expert_weights=None,
                  tokens=workload.tokens + req.k)  # fmt: skip
    own = system.kind in OWN_UNITS
    if own:
        system = replace(system, units="auto", etch=system.kind == "asic")
    else:  # a GPU's drafter spreads over the target's GPUs (the same TP group); a wafer's
        # takes the fewest of the target's wafers that hold it
        units = placement.n_units if system.kind == "gpu" else "auto"
        system = _one_host_step_per_round(replace(system, units=units))
    work = resolve_workload(one, cfg, system.spec).workload
    try:
        plc = place(cfg, system, work)
    except PlacementError as exc:  # its placer names the drafter as if it ran alone: say so
        raise type(exc)(_drafter_short(req, cfg.name, system, placement, exc)) from None
    if not own:
        _check_shared(placement, plc, cfg.name)
    return system, work, plc


def _drafter_short(req: SpecDecode, name: str, system, placement, exc) -> str:
    """Why the drafter ``name`` could not be placed on ``system`` (the drafter's), naming it
    the model short; ``exc`` is its placer's error, which speaks of it placed alone."""
    if system.kind in OWN_UNITS:
        where = f"on any count of {system.name} units of its own"
    elif system.units == "auto":
        where = f"on any count of {system.name} units, even alone"
    else:
        where = (f"on the {system.units} {system.name} unit(s) it shares with the target "
                 f"{placement.model}, even alone")  # fmt: skip
    return f"{_the_drafter(req, name)} does not fit {where} (its placer, of it alone: {exc})"


def _the_drafter(req: SpecDecode, name: str) -> str:
    """``the drafter NAME``, with its kind where it is not a ``draft:`` model."""
    kind = "" if req.kind == "draft" else f"{req.kind} "
    return f"the {kind}drafter {name}"


# Per-step host work a serving engine does once per engine step: a speculative round is one
# engine step (its verification pays it), its drafter's steps run inside it (spec.host_per_round)
ROUND_HOST_PARAMS = ("step_host_s",)


def _one_host_step_per_round(system):
    """``system`` for the drafter's steps: the per-step host work left to the verification."""
    params = system.spec.params
    zero = {n: 0.0 for n in ROUND_HOST_PARAMS if getattr(params, n, 0)}
    if not zero:
        return system
    note = "drafter steps: the round's host step is paid once, by the verification"
    return replace(system, spec=system.spec.with_params(note, **zero))


def _check_shared(target, drafter, name: str) -> None:
    """Every unit holds the target's and the drafter's bytes at each memory level, and the
    drafter is on no unit the target does not have; else a CapacityError naming the drafter
    as the model short and by how much."""
    where = f"the {target.n_units} {target.system} unit(s) it shares with the target {target.model}"
    if drafter.n_units > target.n_units:
        raise CapacityError(
            f"the drafter {name} needs {drafter.n_units} {target.system} units even alone, "
            f"more than {where} (short {drafter.n_units - target.n_units} unit(s))"
        )
    for unit in range(target.n_units):
        use = target.level_use(unit)
        mine: dict[str, int] = {}
        for cat, n_bytes in drafter.unit_bytes(unit).items():
            level = drafter.level_of[cat]
            mine[level] = mine.get(level, 0) + n_bytes
            use[level] = use.get(level, 0) + n_bytes
        for level, used in use.items():
            cap = target.capacity_bytes.get(level, 0)
            if used > cap:
                raise CapacityError(
                    f"the drafter {name} does not fit beside the target on unit {unit} of "
                    f"{where}: its {fmt_bytes(cap)} of {level} hold the target's "
                    f"{fmt_bytes(used - mine.get(level, 0))} (runtime reserve included), and "
                    f"the drafter's {fmt_bytes(mine.get(level, 0))} are short "
                    f"{used - cap:,} B ({fmt_bytes(used - cap)})"
                )


ACCEPTANCE_FILE = "acceptance.csv"


def acceptance_profiles(req: SpecDecode, target, drafter) -> tuple[list[Profile], str]:
    """The per-position acceptance profiles of ``req`` for the ``target`` and ``drafter``
    configs and their source: the user's ``accept=``, measured with the functional path
    (``accept=measured``), else the published ones of the data file (``pyaccel/data``)."""
    if isinstance(req.accept, tuple):
        return [Profile("given", req.accept)], "given (accept=)"
    if req.accept == "measured":
        from .spec_measure import measure_acceptance

        return measure_acceptance(req, target, drafter)
    rows = _published(req.kind, req.draft or "", target.name, req.k)
    if not rows:
        raise ConfigError(
            f"--spec-decode {req.text}: no published acceptance for {req.kind} "
            f"{req.draft or ''} on {target.name} in pyaccel/data/{ACCEPTANCE_FILE}; give "
            "accept=R or R1/R2/..., or accept=measured on a model with weights"
        )
    profiles = [Profile(r["category"], _extend(r["rates"], req.k)) for r in rows]
    cats = ", ".join(p.name for p in profiles)
    return profiles, f"{rows[0]['source']} [{rows[0]['quality']}; profiles: {cats}]"


def _published(kind: str, draft: str, target: str, k: int) -> list[dict]:
    text = resources.files("pyaccel.data").joinpath(ACCEPTANCE_FILE).read_text("utf-8")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    out = []
    for row in csv.DictReader(lines):
        if row["kind"] != kind or row["draft"] not in (draft, "*"):
            continue
        if row["target"] not in (target, "*"):
            continue
        rates = tuple(float(x) for x in row["rates"].split("/"))
        out.append({**row, "rates": rates})
    # the target's own rows first, then any target's; within each, the rows that publish all
    # k positions (a k = 1 measurement says nothing of a fourth draft)
    exact = [r for r in out if r["target"] == target]
    generic = [r for r in out if r["target"] == "*"]
    for group in (exact, generic):
        covering = [r for r in group if len(r["rates"]) >= k]
        if covering:
            return covering
    return exact or generic


def _extend(rates: tuple[float, ...], k: int) -> tuple[float, ...]:
    """``k`` per-position rates: the published ones, the last repeated beyond them."""
    return tuple(rates[min(i, len(rates) - 1)] for i in range(k))
