"""Engines: one per machine kind, behind :func:`emulate`."""

from .engine import emulate

__all__ = ["emulate"]
