"""Field helpers for parameter dataclasses: each field carries its one-line doc (with unit) and
the bound the loader enforces; :func:`at_most` states a relation between fields (cross-field
checks, run by the loader after every preset, TOML file and ``--set``)."""

from __future__ import annotations

import math
from dataclasses import field, fields
from typing import Any

# Whole-number parameters must stay exactly representable as floats (and far inside int64, so
# cycle and byte arithmetic cannot overflow): 2**53.
MAX_INTEGER = 2**53
# How far from a whole number of ticks a tick-multiple parameter (:func:`_ticks`) may lie and
# still count as one (float noise of a decimal like 0.25 read from TOML).
TICK_SLACK = 1e-9


def _f(doc: str, minimum: float = 0.0, strict: bool = True) -> Any:
    """A real-valued parameter: its docstring and the bound it must respect (``> minimum`` when
    ``strict``, else ``>= minimum``)."""
    return field(metadata={"doc": doc, "min": minimum, "strict": strict})


def _i(doc: str, minimum: int = 0, strict: bool = True, informational: bool = False) -> Any:
    """A whole-number parameter (counts, bytes, cycles), bounded like :func:`_f`.

    ``informational``: documents the machine (and takes part in cross-field checks) but no
    engine reads it, so ``--set`` refuses it rather than change nothing."""
    meta = {"doc": doc, "min": minimum, "strict": strict, "integer": True}
    return field(metadata={**meta, "informational": informational})


def _ticks(doc: str, per_cycle: int, minimum: float = 0.0, strict: bool = True) -> Any:
    """A cycle count an engine simulates in ``1/per_cycle``-cycle ticks (a mesh latency): a
    multiple of ``1 / per_cycle`` (so a what-if's half of a 1-cycle hop can be set as it runs),
    bounded like :func:`_f`."""
    doc = f"{doc}; a multiple of 1/{per_cycle} cycle"
    return field(metadata={"doc": doc, "min": minimum, "strict": strict, "per_cycle": per_cycle})


def _s(doc: str, choices: tuple[str, ...] = (), moe_only: bool = False) -> Any:
    """A text parameter (e.g. the model an ASIC was etched with); ``choices``, when given, are
    the only values the loader accepts; ``moe_only``: it changes nothing for a model without
    routed experts (``report --sensitivity`` re-emulates its other choices only with them)."""
    return field(metadata={"doc": doc, "text": True, "choices": choices, "moe_only": moe_only})


def relation(
    fields: tuple[str, ...],
    left: float,
    left_text: str,
    right: float,
    right_text: str,
    why: str,
    strict: bool = False,
) -> tuple[tuple[str, ...], str] | None:
    """A cross-field relation ``left <= right`` (``<`` when ``strict``) between values computed
    from ``fields``: ``None`` when it holds, else (the fields, a message with both sides)."""
    if left < right or (left == right and not strict):
        return None
    op = "<" if strict else "<="
    return fields, f"{left_text} must be {op} {right_text}: {why}"


def at_most(
    params: Any, lhs: tuple[str, ...], rhs: str, why: str, strict: bool = False
) -> tuple[tuple[str, ...], str] | None:
    """``sum(lhs) <= rhs`` between fields of ``params`` (``<`` when ``strict``), see
    :func:`relation`."""
    left = sum(getattr(params, n) for n in lhs)
    text = " + ".join(f"{n} ({getattr(params, n):,.6g})" for n in lhs)
    if len(lhs) > 1:
        text += f" = {left:,.6g}"
    right = getattr(params, rhs)
    return relation(lhs + (rhs,), left, text, right, f"{rhs} ({right:,.6g})", why, strict)


def in_range(
    params: Any, name: str, why: str, low: float = -math.inf, high: float = math.inf
) -> tuple[tuple[str, ...], str] | None:
    """A bound that depends on the machine, not on the field's type (a 16-bit element needs 2
    link bytes, a share is at most 1): ``None`` when ``low <= name <= high``, else (the field,
    a message naming its value and the limit)."""
    value = getattr(params, name)
    if value < low:
        return (name,), f"{name} ({value:,.6g}) must be >= {low:,.6g}: {why}"
    if value > high:
        return (name,), f"{name} ({value:,.6g}) must be <= {high:,.6g}: {why}"
    return None


def time_ranges(params: Any) -> list[tuple[tuple[str, ...], str] | None]:
    """Every time parameter (``*_s`` seconds, ``*_cycles``) within :data:`MAX_INTEGER` cycles of
    the clock: larger ones overflow the engines' integer cycle counts."""
    out = []
    for f in fields(params):
        value = getattr(params, f.name)
        if f.name.endswith("_s") and not f.name.endswith("_per_s"):
            cycles = value * params.clock_hz
            text = f"{f.name} ({value:.6g}) x clock_hz ({params.clock_hz:.6g}) = {cycles:.6g}"
        elif f.name.endswith("_cycles"):
            cycles, text = value, f"{f.name} ({value:.6g})"
        else:
            continue
        out.append(relation((f.name, "clock_hz"), cycles, text, MAX_INTEGER, "2**53 cycles",
                            "longer times overflow the integer cycle counts"))  # fmt: skip
    return out
