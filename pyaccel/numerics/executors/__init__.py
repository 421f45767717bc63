"""One functional executor per machine kind, and the registry that maps a kind to it.

A new machine kind adds a module here (an :class:`~pyaccel.numerics.executor.Executor` subclass)
and one line in :data:`EXECUTORS`; the shared executor (``numerics/execute.py``) is not edited.
"""

from __future__ import annotations

from ...errors import EngineNotBuiltError
from ..executor import Executor
from .asic import AsicExecutor
from .gpu import GpuExecutor
from .lpu import LpuExecutor
from .wafer import WaferExecutor

# placement.kind -> the class of that kind's arithmetic (public: register a kind by adding to it)
EXECUTORS: dict[str, type[Executor]] = {
    "gpu": GpuExecutor,
    "asic": AsicExecutor,
    "wafer": WaferExecutor,
    "lpu": LpuExecutor,
}


def executor_for(kind: str) -> type[Executor]:
    """The registered executor class of machine ``kind``; an unknown kind raises
    :class:`EngineNotBuiltError`, as an engine that does not exist does."""
    try:
        return EXECUTORS[kind]
    except KeyError:
        raise EngineNotBuiltError(f"the {kind} functional executor is not built yet") from None


__all__ = ["EXECUTORS", "Executor", "executor_for"]
