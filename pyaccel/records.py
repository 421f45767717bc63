"""Typed records of emulated runs: the headline numbers of a trace, the ``run --json`` object
and the ``compare --json`` entry of a system that could not run (SPEC §7).

Each record is a dataclass whose fields follow the JSON object's keys in order; ``to_dict()``
gives that object (times in seconds, energies in joules, rates in tokens per second).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

SCHEMA_VERSION = 1
"""Version of the ``run --json`` / ``report --json`` objects."""


def pyaccel_version() -> str:
    """The package version (``pyaccel.__version__``, which the installed metadata is built
    from: asking importlib.metadata instead costs every run ~25 ms of imports)."""
    from ._version import __version__

    return __version__


def bound_ratio(summary: dict) -> float | None:
    """A summary's emulated / lower-bound step time; None where the bound is 0 s (a bound under
    one cycle floors to 0, e.g. tiny models on a wafer)."""
    bound = summary["lower_bound_step_time_s"]
    return summary["step_time_s"] / bound if bound else None


def _plain(record) -> dict:
    """A flat dataclass as a dict in field order (values as they are, not copied deep)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


@dataclass(frozen=True)
class RunSummary:
    """Headline numbers of one run (SPEC §6 names): the workload it ran and, averaged over its
    decode steps, tokens/s per user and in total, the step time and its lower bound (s) and
    the energy per generated token (J)."""

    system: str
    model: str
    units: int
    batch: int
    context: int
    tokens: int
    weights: str
    expert_weights: str | None
    kv: str
    tokens_per_s_per_user: float
    tokens_per_s: float
    step_time_s: float
    lower_bound_step_time_s: float
    joules_per_token: float

    @classmethod
    def from_trace(cls, trace) -> RunSummary:
        """The summary of a :class:`~pyaccel.trace.Trace` (its plain fields only)."""
        return cls(**trace.summary())

    def to_dict(self) -> dict:
        """The summary as the ``summary`` object of ``report --json``."""
        return _plain(self)


@dataclass(frozen=True)
class RunRecord:
    """The ``run --json`` object: the SPEC §7 keys plus the machine kind, the bound ratio
    (``None`` where the bound floors to 0 cycles), the layout, ``ttft_s`` and the ``prefill``
    it came from (:meth:`pyaccel.prefill.Prefill.as_dict`; ``None`` / empty when not emulated)
    and the numerics metrics of a ``--functional`` run (``functional``: name -> value,
    appended last, in the executor's order). ``units`` counts every unit the run occupies: with
    ``--spec-decode``, the target's (``spec_decode.target_units``) and the drafter's own
    (``spec_decode.drafter.own_units``), all of which ``joules_per_token`` (J) counts."""

    schema_version: int
    pyaccel_version: str
    kind: str
    system: str
    model: str
    units: int
    batch: int
    context: int
    tokens: int
    weights: str
    expert_weights: str | None
    kv: str
    tokens_per_s_per_user: float
    tokens_per_s: float
    step_time_s: float
    lower_bound_step_time_s: float
    joules_per_token: float
    ttft_s: float | None
    bottleneck: str
    busiest_resource: str
    emulated_over_lower_bound: float | None
    layout: dict
    placement_reason: str
    assumptions: list[str]
    left_out: list[str]
    formats_from: dict[str, str]
    warnings: list[str]
    prefill: dict = field(default_factory=dict)
    functional: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The ``run --json`` object (keys in the order of the fields, ``functional`` and then
        ``extra`` -- a speculative run's distribution and ``spec_decode`` -- spread at the
        end)."""
        out = _plain(self)
        out.update(out.pop("functional"))
        out.update(out.pop("extra"))
        return out


@dataclass(frozen=True)
class ErrorRecord:
    """A ``compare --json`` entry for a system that could not run the model: the machine kind
    and the workload it was tried at, under the keys a :class:`RunRecord` gives them (``units``
    as asked: ``"auto"`` in ``compare``; formats as resolved, with where they came from), and
    why it could not run (``error``) in place of the numbers."""

    schema_version: int
    pyaccel_version: str
    kind: str
    system: str
    model: str
    units: int | str
    batch: int
    context: int
    tokens: int
    weights: str
    expert_weights: str | None
    kv: str
    error: str
    formats_from: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The ``compare --json`` entry."""
        return _plain(self)


@dataclass(frozen=True)
class WhatIfRow:
    """The run re-emulated with one resource class twice as fast: its mean step time (s) and
    the gain (old step time / new step time, >= 1 when the class matters)."""

    resource: str
    step_time_s: float
    gain: float

    def to_dict(self) -> dict:
        """The row as an object of ``report --json``'s ``what_if``."""
        return _plain(self)
