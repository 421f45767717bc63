"""Speculative decoding end to end (SPEC §7 ``--spec-decode``): the drafter placed on the same
units as the target (their weights and caches sharing each unit's memory), the drafter's steps
and the target's verification steps emulated by the engines, and the rounds drawn per sequence
(:mod:`pyaccel.spec_decode`).

A round at context offset ``c`` costs the drafter's ``k`` steps at ``c .. c + k - 1`` and the
target's one step over ``k + 1`` tokens of each sequence at ``c`` (``Workload.step_tokens``),
one after the other on the same machines (``spec.serial_round``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from importlib import resources

import numpy as np

from .emulation import emulate
from .errors import CapacityError, ConfigError
from .model.config import load_model
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
    "them), picked uniformly with --seed; positions beyond the published ones keep the last "
    "published rate",
    "spec.kv_rollback: rejected drafts' K/V rows are dropped at no cost (paged caches free "
    "them by bookkeeping); the context grows by the tokens kept",
)


@dataclass(frozen=True)
class SpecResult:
    """A speculative run: the request, the acceptance it used per position (mean over the
    profiles) and where it came from, and the drawn rounds."""

    request: SpecDecode
    acceptance: tuple[float, ...]
    acceptance_source: str
    rounds: Rounds

    def record(self) -> dict:
        """The ``run --json`` fields of the run (SPEC §7)."""
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
            },
        }


def speculate(model, system, placement, workload, progress=None, trace_steps="ends"):
    """(the target's verification trace over ``workload.tokens`` steps, the
    :class:`SpecResult`) of ``workload.spec_decode`` on the placed target."""
    req = parse(workload.spec_decode)
    _check_supported(req, system)
    n, k = workload.tokens, req.k
    draft_cfg, draft_work, draft_plc = _place_drafter(req, model, system, placement, workload)
    clock = system.spec.clock_hz
    # the drafter's steps at every context the rounds can start from, k at a time
    steps = emulate(draft_cfg, system, draft_plc, draft_work, event_steps=()).step_cycles / clock
    draft_s = np.convolve(steps, np.ones(k), mode="valid")[:n]
    verify = replace(workload, step_tokens=k + 1)
    trace = emulate(model, system, placement, verify, progress=progress,
                    trace_steps=trace_steps)  # fmt: skip
    verify_s = trace.step_cycles / clock
    profiles, source = acceptance_profiles(req, model.name)
    rounds = draw_rounds(profiles, draft_s, verify_s, n, workload.seed)
    mean = tuple(float(x) for x in np.mean([p.rates for p in profiles], axis=0))
    return trace, SpecResult(req, mean, source, rounds)


def _check_supported(req: SpecDecode, system) -> None:
    if req.kind != "draft":
        raise ConfigError(
            f"--spec-decode {req.kind}: not modelled yet (draft is; {req.kind} drafts from the "
            "target's own layers or hidden states, which the next part of this work adds)"
        )
    if req.accept == "measured":
        raise ConfigError(
            "--spec-decode accept=measured: measuring acceptance with the functional path is "
            "not built yet; give accept=R or leave it out for the published profile"
        )
    if system.kind == "asic":
        raise ConfigError(
            f"--spec-decode on {system.name}: an ASIC's drafter runs on dies etched for it, "
            "which is not modelled yet"
        )


def _place_drafter(req: SpecDecode, model, system, placement, workload):
    """(config, workload, placement) of the drafter on the target's units, checked to fit
    beside the target. Its formats are the target's."""
    cfg = load_model(req.draft)
    if cfg.vocab != model.vocab:
        raise ConfigError(
            f"--spec-decode draft:{req.draft}: its vocabulary ({cfg.vocab:,}) is not the "
            f"target's ({model.vocab:,}); a drafter must propose the target's tokens"
        )
    # its steps cover every context a round can start from, k at a time
    one = replace(workload, spec_decode=None, step_tokens=1, expert_weights=None,
                  tokens=workload.tokens + req.k - 1)  # fmt: skip
    work = resolve_workload(one, cfg, system.spec).workload
    plc = place(cfg, system, work)
    if plc.n_units > placement.n_units:
        raise CapacityError(
            f"draft model {req.draft} needs {plc.n_units} units of {system.name} on its own; "
            f"the target runs on {placement.n_units}"
        )
    _check_shared(placement, plc, req.draft)
    return cfg, work, plc


def _check_shared(target, drafter, name: str) -> None:
    """Every unit holds the target's and the drafter's bytes at each memory level."""
    for unit in range(target.n_units):
        use = target.level_use(unit)
        for cat, n_bytes in drafter.unit_bytes(unit).items():
            level = drafter.level_of[cat]
            use[level] = use.get(level, 0) + n_bytes
        for level, used in use.items():
            cap = target.capacity_bytes.get(level, 0)
            if used > cap:
                raise CapacityError(
                    f"unit {unit} of {target.system} holds the target and draft model {name} "
                    f"only with {fmt_bytes(used)} of {level}, more than its {fmt_bytes(cap)} "
                    f"(short {fmt_bytes(used - cap)}); try more --units or a smaller --context"
                )


ACCEPTANCE_FILE = "acceptance.csv"


def acceptance_profiles(req: SpecDecode, target: str) -> tuple[list[Profile], str]:
    """The per-position acceptance profiles of ``req`` on ``target`` and their source: the
    user's ``accept=``, else the published ones of the data file (``pyaccel/data``)."""
    if isinstance(req.accept, tuple):
        return [Profile("given", req.accept)], "given (accept=)"
    rows = _published(req.kind, req.draft or "", target)
    if not rows:
        raise ConfigError(
            f"--spec-decode {req.text}: no published acceptance for {req.kind} "
            f"{req.draft or ''} on {target} in pyaccel/data/{ACCEPTANCE_FILE}; give accept=R "
            "or R1/R2/..."
        )
    profiles = [Profile(r["category"], _extend(r["rates"], req.k)) for r in rows]
    cats = ", ".join(p.name for p in profiles)
    return profiles, f"{rows[0]['source']} [{rows[0]['quality']}; profiles: {cats}]"


def _published(kind: str, draft: str, target: str) -> list[dict]:
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
    exact = [r for r in out if r["target"] == target]
    return exact or out


def _extend(rates: tuple[float, ...], k: int) -> tuple[float, ...]:
    """``k`` per-position rates: the published ones, the last repeated beyond them."""
    return tuple(rates[min(i, len(rates) - 1)] for i in range(k))
