"""``pyaccel validate --ranges``: how far each named unknown can move a published row's emulated
speed, and whether one of them alone reaches the published figure.

A published speed is a check, never an input (SPEC §9). When a row misses, the question a user
asks next is whether the miss lies inside what the model leaves open: for every named assumption
of the row's system that has a sourced range (``low``/``high`` in its preset) or a fixed set of
choices (the wafer's ``placement_strategy``), the row's case is re-emulated at each end of the
range, or with each other choice, on the unchanged unit count (:mod:`pyaccel.sensitivity`), and
the speeds it spans are set beside the published one. Assumptions without a sourced range are
not varied: scaling them by a percentage would say nothing about what their sources allow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from .validate import ValidationRow, judge, load_table


@dataclass(frozen=True)
class Reach:
    """Tokens/s per user of a published row's case as one named assumption moves over its
    sourced range (``low`` and ``high``: the speeds at its two ends ``low_value`` and
    ``high_value``, or at the slowest and fastest of its other choices; ``None`` where the case
    cannot run, ``error`` says why); ``base`` is the unchanged case's, at ``value``."""

    param: str
    value: float | str
    low_value: float | str
    high_value: float | str
    base: float
    low: float | None
    high: float | None
    error: str = ""

    @property
    def span(self) -> tuple[float, float]:
        """(slowest, fastest) tokens/s per user over the range, the unchanged case included."""
        got = [s for s in (self.base, self.low, self.high) if s is not None]
        return min(got), max(got)

    def reaches(self, published_low: float, published_high: float) -> bool:
        """Whether the published speed (a value, or a range ``low``..``high``) lies within the
        speeds this assumption's range spans."""
        slow, fast = self.span
        return slow <= published_high and published_low <= fast

    def to_dict(self) -> dict:
        """The row's ``ranges`` entry in ``validate --ranges --json``."""
        return {"param": self.param, "value": self.value, "low_value": self.low_value,
                "high_value": self.high_value, "tokens_per_s_low": self.low,
                "tokens_per_s_high": self.high, "error": self.error}  # fmt: skip


def validate_ranges(
    path: str | Path | None = None, progress: Callable[[int, int], None] | None = None
) -> list[ValidationRow]:
    """Every row of the published-speed table at ``path`` (default: the shipped one) judged as
    :func:`~pyaccel.validate.validate` does, each that ran with its ``reach`` (:func:`row_reach`;
    ``()`` for a row that could not run); ``progress(done, total)`` after each row."""
    rows, out = load_table(path), []
    for row in rows:
        judged, base = judge(row)
        reach = tuple(row_reach(row, base)) if base is not None else ()
        out.append(replace(judged, reach=reach))
        if progress:
            progress(len(out), len(rows))
    return out


def row_reach(row, base, progress: Callable[[int, int], None] | None = None) -> list[Reach]:
    """Each ranged or multiple-choice named assumption of ``row``'s system that the row's own
    ``sets`` leave free (``row``: a :class:`~pyaccel.validate.PublishedRow`; ``base``: its
    case's :class:`~pyaccel.results.Run`), the widest span of speeds first."""
    from .sensitivity import assumption_sensitivity, choice_alternatives

    spec = base.system.spec
    pinned = {s.split("=", 1)[0] for s in row.sets}  # the row's own settings stay as it gives
    ranged = [name for name in spec.assumptions if name in spec.ranges and name not in pinned]
    case = (row.model, row.system, base.placement.n_units, row.workload(), list(row.sets))
    out = [
        Reach(s.param, s.value, s.low_value, s.high_value, 1.0 / s.base_step_s,
              _speed(s.low_step_s), _speed(s.high_step_s), s.error)
        for s in assumption_sensitivity(*case, base=base, params=ranged, progress=progress)
    ]  # fmt: skip
    by_param: dict[str, list] = {}
    for alt in choice_alternatives(*case, base=base):
        if alt.param not in pinned:
            by_param.setdefault(alt.param, []).append(alt)
    for name, alts in by_param.items():
        ran = sorted((a for a in alts if a.step_s is not None), key=lambda a: a.step_s)
        errors = "; ".join(f"{a.choice}: {a.error}" for a in alts if a.error)
        fast, slow = (ran[0], ran[-1]) if ran else (None, None)
        out.append(Reach(name, str(alts[0].value), slow.choice if slow else "-",
                         fast.choice if fast else "-", 1.0 / alts[0].base_step_s,
                         _speed(slow.step_s) if slow else None,
                         _speed(fast.step_s) if fast else None, errors))  # fmt: skip
    return sorted(out, key=lambda r: -(r.span[1] / r.span[0]))


def _speed(step_s: float | None) -> float | None:
    """Tokens/s per user of a step time (s), or None."""
    return None if step_s is None else 1.0 / step_s
