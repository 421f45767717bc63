"""Placement of a model's layers on the units of a system: the spine types (:class:`Placement`,
:class:`LayerSlot`, the file format, each kind's records in :mod:`pyaccel.place.kinds`) and one
placer per machine kind, ``pyaccel.place.<kind>``, found by :func:`placer_module` (imported only
when asked for: engines and executors import the spine types without any placer).
:func:`pyaccel.placing.place` places a model."""

from __future__ import annotations

from ..hw.kinds import kind_module
from .placement import LayerSlot, Placement

__all__ = ["LayerSlot", "Placement", "placer_module"]


def placer_module(kind: str):
    """The placer of machine ``kind`` (``pyaccel.place.<kind>`` for the built-in kinds, from the
    kind registry); kinds without one raise EngineNotBuiltError."""
    return kind_module(kind, "placer")
