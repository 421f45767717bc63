"""One functional executor per machine kind; the kind registry (``hw/kinds.py``) names each.

A new machine kind adds a module here (an :class:`~pyaccel.numerics.executor.Executor` subclass)
and names it in its registry entry; the shared executor (``numerics/execute.py``) is not edited.
"""

from __future__ import annotations

from ...hw.kinds import kind_executor
from ..executor import Executor


def executor_for(kind: str) -> type[Executor]:
    """The executor class of machine ``kind``; a kind with none raises
    :class:`EngineNotBuiltError`, as an engine that does not exist does."""
    return kind_executor(kind)


__all__ = ["Executor", "executor_for"]
