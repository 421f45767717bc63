"""The only importer of the cffi-built C module ``pyaccel._ckernels``; whole arrays cross, never
single elements."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import checks

try:
    from pyaccel._ckernels import ffi, lib  # type: ignore[import-not-found]

    available = True
except ImportError:  # no compiler at install time: the NumPy and Numba tiers still work
    ffi = lib = None
    available = False


def built_hash() -> str | None:
    """The csrc/ source hash the C module was built from, or None when it is not built."""
    return ffi.string(lib.pyaccel_src_hash()).decode() if available else None


def is_stale() -> bool:
    """True when a csrc/ folder sits next to the package (a checkout) and its sources differ
    from those the C module was built from. Installed packages have no csrc/: never stale."""
    csrc = Path(__file__).resolve().parents[2] / "csrc"
    if not available or not csrc.is_dir():
        return False
    import hashlib

    digest = hashlib.sha256()  # as csrc/build_ffi.py's source_hash: every .c and .h under csrc/
    for path in sorted(csrc.rglob("*.[ch]")):
        digest.update(path.relative_to(csrc).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16] != built_hash()


def _i64(arr: np.ndarray):
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    return arr, ffi.cast("int64_t *", ffi.from_buffer(arr))


def interval_union(starts: np.ndarray, ends: np.ndarray) -> int:
    """C twin of :func:`pyaccel.kernels.reference.interval_union`."""
    checks.interval_union(starts, ends)
    s, ps = _i64(starts)
    e, pe = _i64(ends)
    return int(lib.pyaccel_interval_union(ps, pe, len(s)))
