"""Kernel backends: ``c`` (cffi), ``numba`` and ``numpy`` (the reference); one place chooses.

``get(name)`` returns the fastest available backend's version; ``PYACCEL_BACKEND=c|numba|numpy``
or ``backend=`` asks for one by name, and a missing one raises :class:`KernelBuildError` (no silent
downgrade when a backend was named).
"""

from __future__ import annotations

import os
from importlib import import_module

from ..errors import PyaccelError

BACKENDS = ("c", "numba", "numpy")
_MODULES = {"c": "ffi", "numba": "jit", "numpy": "reference"}


class KernelBuildError(PyaccelError):
    """A kernel backend that was asked for by name is not available."""


def _module(backend: str):
    if backend == "c":
        mod = import_module(".ffi", __name__)
        return mod if mod.available else None
    try:
        return import_module(f".{_MODULES[backend]}", __name__)
    except ImportError:
        return None


def available_backends() -> list[str]:
    """Backends that import on this machine, fastest first."""
    return [b for b in BACKENDS if _module(b) is not None]


def get(name: str, backend: str | None = None):
    """The kernel ``name`` from ``backend`` (default: ``PYACCEL_BACKEND`` or the fastest)."""
    wanted = backend or os.environ.get("PYACCEL_BACKEND") or "auto"
    if wanted == "auto":
        for b in BACKENDS:
            mod = _module(b)
            if mod is not None and hasattr(mod, name):
                return getattr(mod, name)
        raise KernelBuildError(f"no backend provides kernel '{name}'")
    if wanted not in BACKENDS:
        raise KernelBuildError(f"unknown kernel backend '{wanted}'; known: {', '.join(BACKENDS)}")
    mod = _module(wanted)
    if mod is None or not hasattr(mod, name):
        raise KernelBuildError(f"kernel '{name}' is not available from backend '{wanted}'")
    return getattr(mod, name)
