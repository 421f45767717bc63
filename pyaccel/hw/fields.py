"""Field helpers for parameter dataclasses: each field carries its one-line doc (with unit) and
the bound the loader enforces."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def _f(doc: str, minimum: float = 0.0, strict: bool = True) -> Any:
    """A real-valued parameter: its docstring and the bound it must respect (``> minimum`` when
    ``strict``, else ``>= minimum``)."""
    return field(metadata={"doc": doc, "min": minimum, "strict": strict})


def _i(doc: str, minimum: int = 0, strict: bool = True) -> Any:
    """A whole-number parameter (counts, bytes, cycles), bounded like :func:`_f`."""
    return field(metadata={"doc": doc, "min": minimum, "strict": strict, "integer": True})


def _s(doc: str, choices: tuple[str, ...] = ()) -> Any:
    """A text parameter (e.g. the model an ASIC was etched with); ``choices``, when given, are
    the only values the loader accepts."""
    return field(metadata={"doc": doc, "text": True, "choices": choices})
