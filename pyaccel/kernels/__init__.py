"""Kernel backends: ``c`` (cffi), ``numba`` and ``numpy`` (the reference); one place chooses.

``get(name)`` returns the fastest available backend's version; ``PYACCEL_BACKEND=c|numba|numpy``
or ``backend=`` asks for one by name, and a missing one raises :class:`KernelBuildError` (no silent
downgrade when a backend was named). When the C module was not built (no C compiler at install
time), the first automatic choice says so in one ``warning:`` line on stderr.

Numba's compiled-kernel cache goes to a per-user cache folder (``NUMBA_CACHE_DIR`` if set), never
inside the installed package. Every backend of a kernel checks its inputs the same way
(``checks.py``) before the compiled code indexes anything.

Kernels of one topic live in modules named by backend prefix: ``reference*.py`` (NumPy twins, the
specification), ``jit*.py`` (Numba, ``cache=True``) and ``ffi*.py`` (wrappers of the C module built
from ``csrc/*.c``; each ``csrc/*.h`` is a cdef fragment). E.g. ``reference_mesh.py``,
``jit_mesh.py``, ``ffi_mesh.py`` with ``csrc/mesh.c`` and ``csrc/mesh.h``.
"""

from __future__ import annotations

import os
from functools import cache
from importlib import import_module

BACKENDS = ("c", "numba", "numpy")
_PREFIX = {"c": "ffi", "numba": "jit", "numpy": "reference"}


class KernelBuildError(RuntimeError):
    """A kernel backend that was asked for by name is not available. Kernels import nothing of
    pyaccel, so this is not a :class:`~pyaccel.errors.PyaccelError`; the CLI reports it as one
    (an ``error:`` line)."""


def _use_user_cache_dir() -> None:
    """Point Numba's kernel cache (``cache=True``) at a per-user folder unless the user chose one
    with ``NUMBA_CACHE_DIR``: by default Numba writes next to the source, i.e. inside the installed
    package, where pip never removes the files and the leftover ``__pycache__`` later shadows a
    reinstall. Runs before any ``jit*`` module imports numba (they are submodules of this
    package); numba itself is not imported here."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    import sys
    import tempfile

    import platformdirs

    folder = os.path.join(platformdirs.user_cache_dir("pyaccel"), "numba")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:  # no writable home (e.g. a service account): a private temporary folder
        user = os.getuid() if hasattr(os, "getuid") else "user"
        folder = os.path.join(tempfile.gettempdir(), f"pyaccel-numba-{user}")
    os.environ["NUMBA_CACHE_DIR"] = folder
    if "numba" in sys.modules:  # imported before pyaccel: its config was read without ours
        sys.modules["numba"].core.config.reload_config()


_use_user_cache_dir()


@cache
def _modules(backend: str) -> tuple:
    """Every importable module of a backend (none when its toolchain or C build is missing);
    found once per process (the per-transfer engines ask for a kernel thousands of times)."""
    import pkgutil

    if backend == "c" and not import_module(".ffi", __name__).available:
        return ()
    prefix = _PREFIX[backend]
    mods = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == prefix or info.name.startswith(prefix + "_"):
            try:
                mods.append(import_module(f".{info.name}", __name__))
            except ImportError:
                return ()  # e.g. numba not installed: the whole backend is missing
    return tuple(mods)


def _find(backend: str, name: str):
    for mod in _modules(backend):
        if hasattr(mod, name):
            return getattr(mod, name)
    return None


def available_backends() -> list[str]:
    """Backends that import on this machine, fastest first."""
    return [b for b in BACKENDS if _modules(b)]


@cache
def _warn_no_c_module() -> None:
    """Say once per process (on stderr, never in JSON output) that the C kernels are missing and
    the slower Numba/NumPy kernels stand in (same results)."""
    import sys

    print(
        "warning: pyaccel's C kernels were not built at install time (no working C compiler?); "
        "using the Numba/NumPy kernels instead (same results, slower). Reinstall with a C "
        "compiler to get them.",
        file=sys.stderr,
    )


def get(name: str, backend: str | None = None):
    """The kernel ``name`` from ``backend`` (default: ``PYACCEL_BACKEND`` or the fastest)."""
    wanted = backend or os.environ.get("PYACCEL_BACKEND") or "auto"
    if wanted == "auto":
        if not _modules("c"):
            _warn_no_c_module()
        for b in BACKENDS:
            fn = _find(b, name)
            if fn is not None:
                return fn
        raise KernelBuildError(f"no backend provides kernel '{name}'")
    if wanted not in BACKENDS:
        raise KernelBuildError(f"unknown kernel backend '{wanted}'; known: {', '.join(BACKENDS)}")
    fn = _find(wanted, name)
    if fn is None:
        raise KernelBuildError(f"kernel '{name}' is not available from backend '{wanted}'")
    return fn


def compiled(name: str):
    """The C version of ``name``, whose readable twin lives outside this package (e.g. the
    task-list builders of ``sim.wafer.mesh``), when the C backend is in use (``PYACCEL_BACKEND``
    unset or ``c``) and built; otherwise None, and the caller runs its twin (same results)."""
    wanted = os.environ.get("PYACCEL_BACKEND") or "auto"
    if wanted not in ("auto", "c"):
        return None
    return _find("c", name)
