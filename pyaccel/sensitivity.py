"""How much a run's step time moves when each named assumption of its preset moves by ±x %.

A published speed can only check a model whose unknowns are named; this says which of them the
answer rests on. Each numeric parameter that the preset marks as an *assumption* (not a sourced
number) is set to both ends of the range its preset gives (``low``/``high``: what its sources
allow) or, without one, scaled by ``1 - frac`` and ``1 + frac`` in turn; the case is placed
again on the same number of units and re-emulated (no interpolation, nothing fitted), and the
mean step times are compared with the unchanged run. ``power_w`` (energy only) and parameters
that are not numbers, or whose preset value is 0 ("derive it") and that give no range, are
skipped; scaled whole-number parameters are rounded (at least 1), and a mesh latency to its
quarter-cycle tick (at least one tick), so a small integer may not move on one side (its change
is then 0).

A text assumption with a fixed set of choices (the wafer's ``placement_strategy``) cannot be
scaled; :func:`choice_alternatives` re-emulates the case with each of its other choices instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from .errors import PyaccelError
from .hw.spec import PARAMS_BY_KIND
from .results import run, summary_step_time_s
from .workload import Workload


@dataclass(frozen=True)
class Sensitivity:
    """Step time (s) of one run with one assumption scaled down and up (``None``: cannot run,
    ``error`` says why)."""

    param: str
    value: float
    low_value: float
    high_value: float
    base_step_s: float
    low_step_s: float | None
    high_step_s: float | None
    error: str = ""
    ranged: bool = False  # low/high are the preset's sourced range, not -/+ a percentage

    @property
    def low_change(self) -> float | None:
        """Relative step-time change with the parameter scaled down (+0.10 = 10 % slower)."""
        return None if self.low_step_s is None else self.low_step_s / self.base_step_s - 1.0

    @property
    def high_change(self) -> float | None:
        """Relative step-time change with the parameter scaled up."""
        return None if self.high_step_s is None else self.high_step_s / self.base_step_s - 1.0

    @property
    def spread(self) -> float:
        """Largest |relative change| of the two (what the ranking sorts by)."""
        return max(abs(c) for c in (self.low_change, self.high_change, 0.0) if c is not None)

    def to_dict(self, percent: float) -> dict:
        """The row as ``report --sensitivity PCT --json`` prints it (``percent``: PCT)."""
        return {
            "param": self.param,
            "value": self.value,
            "percent": None if self.ranged else percent,
            "ranged": self.ranged,
            "low_value": self.low_value,
            "high_value": self.high_value,
            "low_step_time_s": self.low_step_s,
            "high_step_time_s": self.high_step_s,
            "low_change": self.low_change,
            "high_change": self.high_change,
            "error": self.error,
        }


def _scaled(value, frac: float, sign: int, step: float | None):
    """``value`` moved by ``frac`` (down for ``sign`` -1): to the nearest multiple of ``step``
    (at least one) when the parameter takes only those (whole numbers, ticks of a cycle)."""
    new = value * (1.0 + sign * frac)
    return new if step is None else max(1, round(new / step)) * step


def _step(meta: dict, kind) -> float | int | None:
    """The grid a parameter's values lie on: 1 for a whole number, a tick for a mesh latency
    (:func:`~pyaccel.hw.fields._ticks`), ``None`` for a real number."""
    if meta.get("per_cycle"):
        return 1 / meta["per_cycle"]
    return 1 if kind in (int, "int") else None


def _ends(value, span, frac: float, step: float | None) -> list | None:
    """The two values an assumption is re-emulated at: its preset's range, else -/+ ``frac``;
    ``None`` for what cannot be varied (not a number, or 0 = "derive it" with no range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if span is not None:
        return list(span)
    if value == 0:
        return None
    return [_scaled(value, frac, sign, step) for sign in (-1, 1)]


# parameters that set energy (power) or the time to first token (the prompt's chunks), never a
# decode step's time
NOT_STEP = ("power_w", "prefill_chunk_tokens")


def assumption_sensitivity(
    model: str,
    system: str,
    units="auto",
    workload: Workload | None = None,
    sets: list[str] | None = None,
    etch: bool = False,
    frac: float = 0.5,
    params: list[str] | None = None,
    base=None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Sensitivity]:
    """Sensitivity of the step time to each named assumption of ``system`` (or to ``params``)
    at the ends of its preset's range, else at -/+ ``frac``, largest first. The unit count is
    the one the unchanged case places on; ``base`` is that case's
    :class:`~pyaccel.results.Run` when the caller already has it; ``progress(done, total)`` is
    called after each assumption."""
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac must be in (0, 1), got {frac}")
    if base is None:
        base = run(model, system, units, workload, sets, etch, prefill=None)
    spec, n_units = base.system.spec, base.placement.n_units
    base_s = summary_step_time_s(base)  # of a speculative run, per token over its rounds
    steps_of = {f.name: _step(f.metadata, f.type) for f in fields(PARAMS_BY_KIND[spec.kind])}
    names = params if params is not None else list(spec.assumptions)
    out = []
    for i, name in enumerate(names):
        if progress is not None:
            progress(i, len(names))
        value = getattr(spec.params, name)
        if name in NOT_STEP:  # the step time cannot depend on it
            continue
        span = spec.ranges.get(name)
        values = _ends(value, span, frac, steps_of[name])
        if values is None:
            continue
        steps, error = [], ""
        for new in values:
            if new == value:  # an integer too small to move by this fraction
                steps.append(base_s)
                continue
            try:
                new_sets = [*(sets or []), f"{name}={new}"]
                steps.append(summary_step_time_s(run(model, system, n_units, workload,
                                                     new_sets, etch, prefill=None)))  # fmt: skip
            except PyaccelError as exc:  # e.g. fewer bytes per PE: the model no longer fits
                steps.append(None)
                error = str(exc).splitlines()[0]
        ends = (float(value), float(values[0]), float(values[1]), base_s)
        out.append(Sensitivity(name, *ends, steps[0], steps[1], error, span is not None))
    return sorted(out, key=lambda s: -s.spread)


@dataclass(frozen=True)
class Alternative:
    """Step time (s) of one run with a text assumption set to another of its choices, on
    ``units`` units (``None``: cannot run, ``error`` says why)."""

    param: str
    value: str
    choice: str
    base_step_s: float
    step_s: float | None
    units: int
    base_units: int
    error: str = ""

    @property
    def change(self) -> float | None:
        """Relative step-time change with the other choice (-0.25 = 25 % faster)."""
        return None if self.step_s is None else self.step_s / self.base_step_s - 1.0

    def to_dict(self) -> dict:
        """The row as ``report --sensitivity PCT --json`` prints it under ``alternatives``."""
        return {
            "param": self.param,
            "value": self.value,
            "choice": self.choice,
            "units": self.units,
            "step_time_s": self.step_s,
            "change": self.change,
            "error": self.error,
        }

    @property
    def note(self) -> str:
        """What a table should say beside the change: a different unit count, or the error."""
        if self.error:
            return self.error
        return "" if self.units == self.base_units else f"needs {self.units} units"


def choice_alternatives(
    model: str,
    system: str,
    units="auto",
    workload: Workload | None = None,
    sets: list[str] | None = None,
    etch: bool = False,
    base=None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Alternative]:
    """Each other choice of each text assumption of ``system`` that has a fixed set of choices,
    re-placed on the unchanged case's unit count and re-emulated, in the order of the choices.
    When ``units`` is ``"auto"`` and a choice does not fit on that count, it is placed again
    with ``"auto"`` (the fewest units it needs). ``progress(done, total)`` is called per
    assumption."""
    if base is None:
        base = run(model, system, units, workload, sets, etch, prefill=None)
    spec, n_units = base.system.spec, base.placement.n_units
    meta = {f.name: f.metadata for f in fields(PARAMS_BY_KIND[spec.kind])}
    out = []
    for i, name in enumerate(spec.assumptions):
        if progress is not None:
            progress(i, len(spec.assumptions))
        choices = meta[name].get("choices") or ()
        if meta[name].get("moe_only") and not base.model.is_moe:
            choices = ()
        value = getattr(spec.params, name)
        for choice in (c for c in choices if c != value):
            step, used, error = None, n_units, ""
            tries = [n_units] + (["auto"] if units == "auto" else [])
            for count in tries:
                try:
                    r = run(model, system, count, workload, [*(sets or []), f"{name}={choice}"],
                            etch, prefill=None)  # fmt: skip
                    step, used, error = summary_step_time_s(r), r.placement.n_units, ""
                    break
                except PyaccelError as exc:  # e.g. no layout of that strategy fits
                    error = str(exc).splitlines()[0]
            out.append(
                Alternative(name, value, choice, summary_step_time_s(base), step, used, n_units,
                            error)
            )  # fmt: skip
    return out
