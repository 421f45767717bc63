"""Placement of a model's layers on the units of a system: the spine types (:class:`Placement`,
:class:`LayerSlot`, the file format, each kind's records in :mod:`pyaccel.place.kinds`) and one
placer per machine kind, ``pyaccel.place.<kind>``, found by :func:`placer_module` (imported only
when asked for: engines and executors import the spine types without any placer).
:func:`pyaccel.placing.place` places a model."""

from __future__ import annotations

from ..errors import EngineNotBuiltError
from .placement import LayerSlot, Placement

__all__ = ["LayerSlot", "Placement", "placer_module"]


def placer_module(kind: str):
    """The placer module ``pyaccel.place.<kind>``; kinds without one raise EngineNotBuiltError."""
    from importlib import import_module
    from importlib.util import find_spec

    name = f"pyaccel.place.{kind}"
    if find_spec(name) is None:
        raise EngineNotBuiltError(f"the {kind} placer and engine are not built yet")
    return import_module(name)
